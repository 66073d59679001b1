"""Risk classification of actions, used by the approval policy (field cases F11, F23).

The rules are an allowlist: an action is LOW risk only when it is positively known to be harmless, and
everything else is HIGH (the autopilot asks the user). LOW risk is:

* ``wait``, ``plan`` (the model's ``update_plan``), ``answer`` and ``done`` (they touch nothing);
* a pointer action (click, double click, right click, move, drag, scroll) on windows that are known and
  are not terminal emulators: the windows under each of its points when those were probed (a drag of
  text onto a terminal pastes it there), else the focused window;
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

from holodesk.core.actions import Action, Answer, Done, Key, MiddleClick, Plan, Type, Wait
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
           pointer_windows: Sequence[str | None] | None = None) -> RiskAssessment:
    """Classify one action by the allowlist in this module's docstring.

    Args:
        action: the proposed action.
        focused_window: WM_CLASS (or app id) of the window that has keyboard focus; None or "" when it
            is unknown, which makes every action that touches the screen or keyboard HIGH.
        pointer_windows: for an action with points, the WM_CLASS of the window under each point, in
            the order of :meth:`Action.points` (None for a point where it is unknown, which makes the
            action HIGH); None when not probed, and then the focused window decides.
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
        window = _window_reason(focused_window, "types text")
        if window is not None:
            return RiskAssessment(Risk.HIGH, window)
        if any(ch in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029" for ch in action.text):
            return RiskAssessment(Risk.HIGH, "the text contains a line break, which may submit or run it")
        if not action.text.isprintable():
            return RiskAssessment(Risk.HIGH, "the text contains control or invisible characters "
                                  "(shown as escapes), which may act as keys")
        return RiskAssessment(Risk.LOW, "types one line of text")
    if isinstance(action, Key):
        if frozenset(action.keys) not in LOW_RISK_CHORDS:
            return RiskAssessment(Risk.HIGH, _chord_reason(action.keys))
        window = _window_reason(focused_window, f"presses {chord_name(action.keys)}")
        if window is not None:
            return RiskAssessment(Risk.HIGH, window)
        return RiskAssessment(Risk.LOW, "navigation key")
    if pointer_windows is not None and action.points():
        for under in pointer_windows:
            if not under:
                return RiskAssessment(Risk.HIGH, "acts with the pointer where no known window is (Holodesk cannot "
                                      "tell whether it is a terminal)")
            if is_terminal(under):
                return RiskAssessment(Risk.HIGH, f"acts with the pointer in a terminal ({display_safe(under)})")
        return RiskAssessment(Risk.LOW, "pointer action in a known window")
    window = _window_reason(focused_window, "acts with the pointer")
    if window is not None:
        return RiskAssessment(Risk.HIGH, window)
    return RiskAssessment(Risk.LOW, "pointer action in a known window")
