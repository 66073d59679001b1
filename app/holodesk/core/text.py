"""Showing untrusted text (model replies, typed text, window names) safely (field cases F10, F24).

Text from a model may hold anything a Python ``str`` can: control characters and escape sequences
(which restyle a terminal or fake a prompt line), bidi overrides and zero-width characters (which make
text read differently from what it is), NUL and lone surrogates (which many encoders refuse). Records
keep such text losslessly (``holodesk.session.episode`` writes JSON with ``\\u`` escapes); every place
that *shows* it to a person calls :func:`display_safe` first.
"""

from __future__ import annotations


def display_safe(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every character that is not printable shown as a Python escape.

    Printable means :meth:`str.isprintable`: letters, marks, numbers, punctuation, symbols and the plain
    space, in any script. Everything else (C0/C1 controls such as ESC and NUL, line and paragraph
    separators, format characters such as U+202E RIGHT-TO-LEFT OVERRIDE and U+200B ZERO WIDTH SPACE,
    lone surrogates, private-use and unassigned code points, spaces other than U+0020) becomes
    ``\\x1b`` / ``\\u202e`` / ``\\ud83d`` / ``\\U000f0000``. ``keep_newlines`` keeps ``\\n`` as a
    line break (for multi-line answers).

    Returns:
        A string that is safe to print to a terminal, put in a plain-text label or write as UTF-8.
    """
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or (keep_newlines and ch == "\n"):
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return "".join(out)
