"""Risk classification of actions, used by the approval policy (field cases F11, F23).

The rules are an allowlist: an action is LOW risk only when it is positively known to be harmless, and
everything else is HIGH (the autopilot asks the user). LOW risk is:

* ``wait``, ``plan`` (the model's ``update_plan``), ``answer`` and ``done`` (they touch nothing);
* a pointer action (click, double click, right click, move, drag, scroll) on windows that are known and
  are not terminal emulators: the windows under each of its points when those were probed (a drag of
  text onto a terminal pastes it there), else the focused window; and, except for a plain move, none of
  its points on a window's frame (the window manager's title bar and its close/minimise/maximise
  buttons, when the probe knows the client area), and for a click, double click, right click or drag
  a target (the model's ``element``) whose words name no action from :data:`RISKY_TARGET_WORDS`
  (delete, submit, close, pay, install, ...). A reply without ``element`` (holo-v1) is judged by the
  windows alone: its target cannot be known in words, and asking for every such click would make the
  autopilot ask for all of them;
* typed text that is one line of printable characters (:meth:`str.isprintable`: no line break, tab,
  NUL, escape sequence, bidi override or other control/format character), into a known, non-terminal
  focused window;
* a key chord from :data:`LOW_RISK_CHORDS` (navigation: arrows, Tab, Home/End, PageUp/PageDown alone
  or with Shift and/or Ctrl, and Ctrl+A), into a known, non-terminal focused window.

Everything else asks, with a plain-words reason: any action that touches the screen or keyboard while the
focused window is unknown (the focus probe returned nothing: no window manager, a Wayland session) or is
a terminal; a middle click (it pastes the X11 selection); any other key or chord, among them every name of
Enter (Enter/Return, Ctrl+M and Ctrl+J in terminals, Ctrl+Enter, Shift+Enter), paste (Ctrl+V,
Ctrl+Shift+V, Shift+Insert), close and quit (Ctrl+W, Alt+F4, Cmd+Q), delete (Delete, Backspace), Escape
(it discards an open draft in many web editors and dialogs) and Space (it presses the focused button).
Single characters are typed with ``type``, not pressed as keys, so a key press of a character asks too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from holodesk.core.actions import (
    Action,
    Answer,
    Click,
    Done,
    DoubleClick,
    Drag,
    Key,
    MiddleClick,
    Move,
    Plan,
    RightClick,
    Type,
    Wait,
)
from holodesk.core.text import display_safe

TERMINAL_WINDOW_CLASSES = frozenset(
    {
        "xterm", "uxterm", "gnome-terminal", "gnome-terminal-server", "konsole", "xfce4-terminal",
        "terminator", "tilix", "alacritty", "kitty", "wezterm", "foot", "footclient", "urxvt", "rxvt",
        "st", "lxterminal", "mate-terminal", "terminal", "iterm2", "windowsterminal", "cmd", "powershell",
        "pwsh", "conhost", "tabby", "hyper", "ghostty", "guake", "yakuake", "tilda", "termite",
        "terminology", "sakura", "qterminal", "deepin-terminal", "cool-retro-term", "contour", "rio",
        "warp", "blackbox", "ptyxis", "console", "kgx", "terminus", "extraterm", "mintty", "putty",
    }
)
"""Window classes / app ids of terminal emulators, lower case. A WM_CLASS names a terminal when one of
its words (split at spaces and dots) is in this set, is in it before a ``-`` suffix (``st-256color``,
``rxvt-unicode``), ends in ``term`` (``xterm``, ``mlterm``, ``wezterm``), or contains ``terminal``.
This one classifier decides both the risk of keyboard actions (F11) and the paste chord (F15)."""

NAVIGATION_KEYS = frozenset({"up", "down", "left", "right", "home", "end", "pageup", "pagedown", "tab"})
"""Keys that move the caret, the selection, the focus or the view, and nothing else."""
_NAVIGATION_MODIFIER_SETS: tuple[frozenset[str], ...] = (
    frozenset(), frozenset({"shift"}), frozenset({"ctrl"}), frozenset({"ctrl", "shift"}))
"""Modifiers allowed with a navigation key: Shift extends the selection, Ctrl moves by word/page/tab."""

LOW_RISK_CHORDS: frozenset[frozenset[str]] = frozenset(
    {mods | {key} for key in NAVIGATION_KEYS for mods in _NAVIGATION_MODIFIER_SETS} | {frozenset({"ctrl", "a"})}
)
"""The key chords (as sets of normalised key names) the autopilot may press without asking: a navigation
key alone or with Shift, Ctrl or Ctrl+Shift, and Ctrl+A (select all). Every other chord asks."""

_ENTER_CHORDS = (frozenset({"enter"}), frozenset({"ctrl", "m"}), frozenset({"ctrl", "j"}))
"""Enter, and the control characters terminals read as Enter (Ctrl+M = CR, Ctrl+J = LF)."""
_PASTE_CHORDS = (frozenset({"ctrl", "v"}), frozenset({"cmd", "v"}), frozenset({"shift", "insert"}))
_CLOSE_KEYS = frozenset({"w", "q", "f4"})
_DELETE_KEYS = frozenset({"delete", "backspace"})
_COMMAND_MODIFIERS = frozenset({"ctrl", "cmd", "super", "win", "alt", "altgr", "option"})


RISKY_TARGET_WORDS: dict[str, tuple[str, ...]] = {
    "delete something": (
        "delete", "remove", "erase", "trash", "bin", "wipe", "destroy", "purge", "clear", "empty", "discard",
        "drop", "format", "reset", "overwrite", "replace", "uninstall", "revert", "undo", "cut", "unsubscribe"),
    "submit or send something": (
        "submit", "send", "post", "publish", "reply", "forward", "share", "upload", "ok", "okay", "confirm",
        "accept", "agree", "allow", "grant", "apply", "save", "yes", "continue", "proceed", "next", "finish",
        "commit", "merge", "push", "approve", "sign", "login", "log in", "sign in", "register", "enter"),
    "close or quit something": (
        "close", "quit", "exit", "cancel", "dismiss", "x", "\u00d7", "\u2715", "\u2716", "log out", "logout",
        "log off", "sign out", "signout", "shut down", "shutdown", "power off", "restart", "reboot", "lock",
        "suspend", "hibernate", "kill", "terminate", "end task", "stop", "leave", "disconnect"),
    "pay or buy something": (
        "pay", "payment", "buy", "purchase", "order", "checkout", "check out", "subscribe", "donate", "bid",
        "book", "transfer", "place order", "add to cart"),
    "install or run something": (
        "install", "update", "upgrade", "download", "run", "execute", "launch", "open terminal", "grant access",
        "enable", "disable", "authorize", "authorise", "trust"),
}
"""What a click target's words may do, and the words (whole words or phrases, any case, each in its
inflected forms: ``delete``, ``deletes``, ``deleted``, ``deleting``) that say it. A click, double click,
right click or drag whose ``element`` holds one of them asks, even in a known window: buttons and links
that submit, send, delete, close, quit, pay, confirm, install or run are where one click does harm that
cannot be undone. The list is deliberately broad (``OK``, ``Yes``, ``Next`` and ``Continue`` may submit
a form or a wizard page; ``X`` and ``×`` label close buttons): a target that merely mentions such a word
asks too, which costs a keypress, while a missed one costs the user's data."""


def _forms(word: str) -> set[str]:
    """``word`` and its inflections (-s, -es, -d, -ed, -ing, e-dropping and consonant doubling); a
    phrase is matched as written, with any spaces, hyphens or underscores between its words."""
    if " " in word or not word.isalpha() or len(word) < 3:
        return {word}
    forms = {word, word + "s", word + "es", word + "d", word + "ed", word + "ing", word + "er"}
    if word.endswith("e"):
        forms.add(word[:-1] + "ing")
    if word[-1] not in "aeiouwxy":
        forms |= {word + word[-1] + "ing", word + word[-1] + "ed"}
    return forms


def _phrase_pattern(phrase: str) -> str:
    return r"[\s_-]+".join(re.escape(part) for part in phrase.split())


_RISKY_TARGET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (what, re.compile(r"(?<![^\W_])(?:" + "|".join(sorted((_phrase_pattern(f) for w in words for f in _forms(w)),
                                                          key=len, reverse=True)) + r")(?![^\W_])",
                      re.IGNORECASE))
    for what, words in RISKY_TARGET_WORDS.items()
)
""":data:`RISKY_TARGET_WORDS` compiled: one whole-word, case-insensitive pattern per kind of effect."""

_PRESSING_ACTIONS = (Click, DoubleClick, RightClick, Drag)
"""Pointer actions that press a button over their target (the ``element`` rule applies to them)."""


def target_risk(element: str | None) -> str | None:
    """Why a click on ``element`` (the model's words for its target) asks, or None when its words name
    nothing from :data:`RISKY_TARGET_WORDS`; e.g. ``"the target ‘Delete all files button’ may delete
    something (it says ‘Delete’)"``."""
    if not element:
        return None
    hits = [(found.start(), -len(found.group(0)), found.group(0), what)
            for what, pattern in _RISKY_TARGET_PATTERNS if (found := pattern.search(element))]
    if not hits:
        return None
    _, _, word, what = min(hits)  # the first word in the target; at one place, the longest phrase
    return f"the target \u2018{display_safe(element)}\u2019 may {what} (it says \u2018{display_safe(word)}\u2019)"


class Risk(StrEnum):
    """Approval class of an action."""

    LOW = "low"
    HIGH = "high"


@dataclass(frozen=True)
class RiskAssessment:
    """Risk level and the plain-words reason shown on the approval card and the terminal prompt.

    Attributes:
        level: LOW (the autopilot may approve it) or HIGH (the user is always asked).
        reason: why, in plain words; for HIGH it says why the step asks (e.g. "Ctrl+M acts as Enter:
            it may submit a form or run a command").
    """

    level: Risk
    reason: str


def is_terminal(window_class: str | None) -> bool:
    """True when the focused window's class/name looks like a terminal emulator
    (rules at :data:`TERMINAL_WINDOW_CLASSES`)."""
    if not window_class:
        return False
    low = window_class.lower()
    if "terminal" in low:
        return True
    for word in re.split(r"[\s.]+", low):
        if not word:
            continue
        if word in TERMINAL_WINDOW_CLASSES or word.split("-", 1)[0] in TERMINAL_WINDOW_CLASSES:
            return True
        if word.endswith("term"):
            return True
    return False


def chord_name(keys: tuple[str, ...]) -> str:
    """A chord as people write it: ``("ctrl", "shift", "v")`` -> ``"Ctrl+Shift+V"``."""
    return "+".join(k.upper() if len(k) == 1 else k.capitalize() for k in keys)


def _chord_reason(keys: tuple[str, ...]) -> str:
    """Why a chord that is not on :data:`LOW_RISK_CHORDS` asks."""
    name = chord_name(keys)
    chord = frozenset(keys)
    if "enter" in chord or chord in _ENTER_CHORDS:
        extra = " (terminals read it as Enter)" if "enter" not in chord else ""
        return f"{name} may submit a form or run a command{extra}"
    if chord in _PASTE_CHORDS or ("v" in chord and chord & {"ctrl", "cmd"}):
        return f"{name} pastes the clipboard, which may run a command in a terminal"
    if chord & _CLOSE_KEYS and chord & _COMMAND_MODIFIERS:
        return f"{name} may close a window or tab, or quit an application"
    if chord & _DELETE_KEYS:
        return f"{name} may delete something"
    if chord == {"esc"}:
        return "Escape may cancel a dialog or discard a draft"
    return f"{name} is not on the list of keys known to be harmless (arrows, Tab, Home/End, Page Up/Down, Ctrl+A)"


def _window_reason(focused_window: str | None, doing: str) -> str | None:
    """The reason to ask because of the focused window, or None when it is known and not a terminal."""
    if not focused_window:
        return f"{doing}, and the focused window is unknown (Holodesk cannot tell whether it is a terminal)"
    if is_terminal(focused_window):
        return f"{doing} in a terminal ({display_safe(focused_window)})"
    return None


def assess(action: Action, *, focused_window: str | None = None,
           pointer_windows: Sequence[str | None] | None = None, on_window_frame: bool = False) -> RiskAssessment:
    """Classify one action by the allowlist in this module's docstring.

    Args:
        action: the proposed action.
        focused_window: WM_CLASS (or app id) of the window that has keyboard focus; None or "" when it
            is unknown, which makes every action that touches the screen or keyboard HIGH.
        pointer_windows: for an action with points, the WM_CLASS of the window under each point, in
            the order of :meth:`Action.points` (None for a point where it is unknown, which makes the
            action HIGH); None when not probed, and then the focused window decides.
        on_window_frame: True when one of the action's points lies on a window's frame (title bar,
            border, the window manager's close/minimise/maximise buttons) rather than in its client area.
    Returns:
        LOW only for actions known to be harmless; HIGH, with the reason the user is asked, for all else.
    """
    if isinstance(action, (Wait, Plan, Done, Answer)):
        return RiskAssessment(Risk.LOW, "does not touch the screen")
    if isinstance(action, MiddleClick):
        # On X11 a middle click pastes the selected text where the pointer is: into a terminal that runs
        # it, whatever window has the focus.
        return RiskAssessment(Risk.HIGH, "a middle click pastes the selected text (Linux) where the pointer is")
    if isinstance(action, Type):
        return _assess_typing(action, focused_window)
    if isinstance(action, Key):
        return _assess_keys(action, focused_window)
    return _assess_pointer(action, focused_window, pointer_windows, on_window_frame)


def _assess_typing(action: Type, focused_window: str | None) -> RiskAssessment:
    """:func:`assess` for a type action: LOW only for one line of printable text typed into a known window
    that is not a terminal."""
    window = _window_reason(focused_window, "types text")
    if window is not None:
        return RiskAssessment(Risk.HIGH, window)
    if any(ch in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029" for ch in action.text):
        return RiskAssessment(Risk.HIGH, "the text contains a line break, which may submit or run it")
    if not action.text.isprintable():
        return RiskAssessment(Risk.HIGH, "the text contains control or invisible characters "
                              "(shown as escapes), which may act as keys")
    return RiskAssessment(Risk.LOW, "types one line of text")


def _assess_keys(action: Key, focused_window: str | None) -> RiskAssessment:
    """:func:`assess` for a key action: LOW only for a chord on :data:`LOW_RISK_CHORDS` pressed in a known
    window that is not a terminal."""
    if frozenset(action.keys) not in LOW_RISK_CHORDS:
        return RiskAssessment(Risk.HIGH, _chord_reason(action.keys))
    window = _window_reason(focused_window, f"presses {chord_name(action.keys)}")
    if window is not None:
        return RiskAssessment(Risk.HIGH, window)
    return RiskAssessment(Risk.LOW, "navigation key")


def _assess_pointer(action: Action, focused_window: str | None, pointer_windows: Sequence[str | None] | None,
                    on_window_frame: bool) -> RiskAssessment:
    """:func:`assess` for a pointer action (click, double/right click, move, drag, scroll): HIGH for a
    pressing action on a risky element, on a window's frame, or where the window under a point (else the
    focused window) is unknown or a terminal; LOW otherwise."""
    if isinstance(action, _PRESSING_ACTIONS):
        target = target_risk(action.element)
        if target is not None:
            return RiskAssessment(Risk.HIGH, target)
    if on_window_frame and not isinstance(action, Move):
        return RiskAssessment(Risk.HIGH, "acts on a window's title bar or frame (its buttons close, minimise or "
                              "resize the window)")
    harmless = RiskAssessment(Risk.LOW, f"a {action.kind.replace('_', ' ')} in a known window that is not a terminal")
    if pointer_windows is not None and action.points():
        for under in pointer_windows:
            if not under:
                return RiskAssessment(Risk.HIGH, "acts with the pointer where no known window is (Holodesk cannot "
                                      "tell whether it is a terminal)")
            if is_terminal(under):
                return RiskAssessment(Risk.HIGH, f"acts with the pointer in a terminal ({display_safe(under)})")
        return harmless
    window = _window_reason(focused_window, "acts with the pointer")
    if window is not None:
        return RiskAssessment(Risk.HIGH, window)
    return harmless
    window = _window_reason(focused_window, "acts with the pointer")
    if window is not None:
        return RiskAssessment(Risk.HIGH, window)
    return RiskAssessment(Risk.LOW, f"a {action.kind.replace('_', ' ')} in a known window that is not a terminal")
