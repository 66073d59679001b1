"""Risk classification of actions, used by the approval policy.

High-risk actions always need an explicit approval, even in autopilot (field case F11): typing into a
terminal, chords that submit, close, quit or delete, and typed text that ends a line (it submits forms
and runs shell commands). Chords are judged by the keys they contain, not matched against a list of
exact chords, so Ctrl+Shift+Enter is as risky as Ctrl+Enter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from holodesk.core.actions import Action, Answer, Done, Key, MiddleClick, Type, Wait

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

_SUBMIT_OR_DELETE_KEYS = frozenset({"enter", "delete", "backspace"})
"""Any chord containing one of these may submit a form, run a command or delete something."""
_COMMAND_MODIFIERS = frozenset({"ctrl", "cmd", "super", "win", "alt", "altgr", "option"})
_CLOSE_QUIT_KEYS = frozenset({"w", "q", "f4"})
"""With any command modifier: close a tab or window, quit an application (Ctrl+W, Alt+F4, Cmd+Q, ...)."""
_EDIT_DESTRUCTIVE_KEYS = frozenset({"s", "d", "z", "x", "c"})
"""With Ctrl or Cmd: save over a file, delete/log out, undo, cut, interrupt a terminal command."""
_DESTRUCTIVE_SINGLE = frozenset({"f5"})
"""Alone: reload (drops what was typed into a page)."""


class Risk(StrEnum):
    """Approval class of an action."""

    LOW = "low"
    HIGH = "high"


@dataclass(frozen=True)
class RiskAssessment:
    """Risk level and the plain-words reason shown on the approval card."""

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


def assess(action: Action, *, focused_window: str | None = None) -> RiskAssessment:
    """Classify one action.

    Args:
        action: the proposed action.
        focused_window: WM_CLASS (or app id) of the window that has keyboard focus, when known.
    Returns:
        HIGH with a reason for typing into a terminal, line-ending text, and submit/close/quit/delete
        chords; LOW otherwise.
    """
    if isinstance(action, Type):
        if is_terminal(focused_window):
            return RiskAssessment(Risk.HIGH, f"types into a terminal ({focused_window})")
        if "\n" in action.text or "\r" in action.text:
            return RiskAssessment(Risk.HIGH, "typed text contains a line break, which may submit or run it")
        return RiskAssessment(Risk.LOW, "types text")
    if isinstance(action, Key):
        keys = set(action.keys)
        chord = "+".join(action.keys)
        if keys & _SUBMIT_OR_DELETE_KEYS:
            return RiskAssessment(Risk.HIGH, f"{chord} may submit, run or delete")
        if keys & _CLOSE_QUIT_KEYS and keys & _COMMAND_MODIFIERS:
            return RiskAssessment(Risk.HIGH, f"{chord} may close or quit")
        if keys & _EDIT_DESTRUCTIVE_KEYS and keys & {"ctrl", "cmd"}:
            return RiskAssessment(Risk.HIGH, f"{chord} may save, delete, undo, cut or interrupt")
        if len(action.keys) == 1 and action.keys[0] in _DESTRUCTIVE_SINGLE:
            return RiskAssessment(Risk.HIGH, f"{chord} may reload and lose what was typed")
        if is_terminal(focused_window):
            return RiskAssessment(Risk.HIGH, f"presses keys in a terminal ({focused_window})")
        return RiskAssessment(Risk.LOW, "presses keys")
    if isinstance(action, (Wait, Done, Answer)):
        return RiskAssessment(Risk.LOW, "does not touch the screen")
    if isinstance(action, MiddleClick):
        # On X11 a middle click pastes the selected text where the pointer is: into a terminal that runs
        # it, whatever window has the focus. Selecting text and middle-clicking must not route around
        # the typing rule above.
        return RiskAssessment(Risk.HIGH, "a middle click pastes the selected text (Linux) where the pointer is")
    return RiskAssessment(Risk.LOW, "pointer action")
