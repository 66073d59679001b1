"""docs/troubleshooting.md quotes Holodesk's messages; each quote must still be what the code says.

Every string literal and f-string of ``app/holodesk`` becomes a template (an f-string's values match any
text; a value at either end matches the docs' "…" or, at the start, one word, at the end, the text up to
the end of the sentence). A blockquote (``> ...``) is a whole message: every character of it that is not
punctuation must lie in a stretch some template matches. A quote in a heading (``### "..."``) is an
excerpt: each part between "…" must be made of pieces of the code's literals, with values of at most 32
characters between them. Short generic templates (``f"monitor {n}"``) can cover a reworded sentence, so
the check finds changed wording in the distinctive parts of a message, not every changed word.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "troubleshooting.md"


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _templates() -> tuple[list[tuple[str, re.Pattern[str]]], str]:
    """(longest literal part, regex) of each message-like literal (8+ characters with a space), and
    every literal part joined by NULs (for excerpts)."""
    templates: list[tuple[str, re.Pattern[str]]] = []
    literals: list[str] = []
    for path in sorted((ROOT / "app" / "holodesk").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_fstring = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                parts = [_norm(v.value) if isinstance(v, ast.Constant) else None for v in node.values]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in in_fstring:
                parts = [_norm(node.value)]
            else:
                continue
            texts = [p for p in parts if p]
            if sum(map(len, texts)) < 8 or " " not in "".join(texts):
                continue
            literals.extend(texts)
            pattern = ""
            for i, part in enumerate(parts):
                if part is not None:
                    pattern += re.escape(part)
                elif i == 0:
                    pattern += r"(?:…|\S+)"
                elif i == len(parts) - 1:
                    pattern += r"(?:…|.+?(?=\. |\.?$))"
                else:
                    pattern += ".+?"
            templates.append((max(texts, key=len), re.compile(pattern)))
    return templates, "\0".join(literals)


def _quotes() -> list[tuple[int, str, bool]]:
    """(line, text, whole message?) of each blockquote and each double-quoted text in a heading."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    quotes: list[tuple[int, str, bool]] = []
    block: list[tuple[int, str]] = []
    for number, line in enumerate([*lines, ""], start=1):
        if line.startswith(">"):
            block.append((number, line[1:].strip()))
        elif block:
            quotes.append((block[0][0], _norm(" ".join(text for _n, text in block)).strip(), True))
            block = []
    for number, line in enumerate(lines, start=1):
        if line.startswith("#"):
            quotes.extend((number, _norm(m.group(1)), False) for m in re.finditer(r'"([^"]+)"', line))
    return quotes


def _unmatched(text: str, templates: list[tuple[str, re.Pattern[str]]]) -> list[str]:
    """The stretches of ``text`` no template matches, punctuation-only ones left out."""
    covered = [False] * len(text)
    for key, pattern in templates:
        if key in text:
            for m in pattern.finditer(text):
                covered[m.start():m.end()] = [True] * (m.end() - m.start())
    for m in re.finditer("…", text):
        covered[m.start()] = True
    mask = "".join("1" if c else "0" for c in covered)
    gaps = [text[m.start():m.end()] for m in re.finditer("0+", mask)]
    return [gap for gap in gaps if gap.strip(" .,;:()'\"`")]


def _excerpt_gaps(part: str, literals: str, shortest: int = 8, longest_value: int = 32) -> list[str]:
    """The stretches of ``part`` (an excerpt of a message) that are not the code's words: walked from the
    start, each longest piece found in ``literals`` (``shortest`` characters or more, or the rest of the
    part) is the code's; what lies between is a value, at most ``longest_value`` characters long. A part
    with no piece of the code's at all is returned whole."""
    stretches: list[str] = []
    value = ""
    i = 0
    while i < len(part):
        length = min(shortest, len(part) - i)
        if part[i:i + length] in literals:
            while i + length < len(part) and part[i:i + length + 1] in literals:
                length += 1
            stretches.append(value)
            value = ""
            i += length
        else:
            value += part[i]
            i += 1
    stretches.append(value)
    gaps = [gap for gap in stretches if len(gap) > longest_value or gap == part]
    return [gap for gap in gaps if gap.strip(" .,;:()'\"`")]


def test_every_message_troubleshooting_quotes_is_one_the_code_says() -> None:
    templates, literals = _templates()
    quotes = _quotes()
    assert len(quotes) >= 40, "the quotes of docs/troubleshooting.md were not found"
    wrong = []
    for line, text, whole in quotes:
        if whole:
            gaps = _unmatched(text, templates)
        else:
            gaps = [gap for part in text.split("…") for gap in _excerpt_gaps(part.strip(), literals)]
        if gaps:
            wrong.append(f"docs/troubleshooting.md:{line}: {text!r}: not in the code: {gaps}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("quote", "reworded"), [
    ("… Mutter's remote-desktop API is not available either: org.gnome.Mutter.ScreenCast not on the session bus; "
     "nor the desktop portal: ….",
     # what the docs quoted before the portal backend existed
     "… Mutter's remote-desktop API is not available either: org.gnome.Mutter.ScreenCast not on the session bus."),
    ("there is no monitor 4; valid monitor indices are 1, 2, 3.", "there is no monitor 4; valid indices are 1, 2, 3."),
])
def test_a_reworded_quote_is_found(quote: str, reworded: str) -> None:
    """The check itself: a quote as the code says it passes, the same quote with words changed does not."""
    templates, _literals = _templates()
    assert _unmatched(quote, templates) == []
    assert _unmatched(reworded, templates) != []
