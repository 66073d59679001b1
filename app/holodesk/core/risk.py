"""Risk classification of actions, used by the approval policy.

High-risk actions always need an explicit approval, even in autopilot (field case F11): typing into a
terminal, chords that submit, close, quit or delete, and typed text that ends a line (it submits forms
and runs shell commands).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from holodesk.core.actions import Action, Answer, Done, Key, Type, Wait

TERMINAL_WINDOW_CLASSES = frozenset(
    {
        "xterm", "uxterm", "gnome-terminal", "gnome-terminal-server", "konsole", "xfce4-terminal",
        "terminator", "tilix", "alacritty", "kitty", "wezterm", "foot", "urxvt", "rxvt", "st",
        "lxterminal", "mate-terminal", "terminal", "iterm2", "windowsterminal", "cmd", "powershell",
        "conhost", "tabby", "hyper", "ghostty",
    }
)

_DESTRUCTIVE_CHORDS = frozenset(
    {
        ("alt", "f4"), ("ctrl", "w"), ("ctrl", "q"), ("cmd", "w"), ("cmd", "q"), ("ctrl", "shift", "w"),
        ("ctrl", "shift", "q"), ("shift", "delete"), ("ctrl", "delete"), ("cmd", "backspace"),
        ("ctrl", "enter"), ("cmd", "enter"), ("ctrl", "s"), ("cmd", "s"), ("ctrl", "alt", "delete"),
        ("ctrl", "d"), ("ctrl", "c"), ("ctrl", "z"), ("ctrl", "x"),
    }
)
_DESTRUCTIVE_SINGLE = frozenset({"delete", "enter", "backspace", "f5"})


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
    """True when the focused window's class/name looks like a terminal emulator."""
    if not window_class:
        return False
    low = window_class.lower()
    return any(part in TERMINAL_WINDOW_CLASSES for part in low.replace(".", " ").split()) or "terminal" in low


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
        chord = tuple(sorted(action.keys))
        if tuple(sorted(k for k in chord)) in {tuple(sorted(c)) for c in _DESTRUCTIVE_CHORDS}:
            return RiskAssessment(Risk.HIGH, f"{'+'.join(action.keys)} may submit, close, quit or delete")
        if len(action.keys) == 1 and action.keys[0] in _DESTRUCTIVE_SINGLE:
            return RiskAssessment(Risk.HIGH, f"{action.keys[0]} may submit or delete")
        if is_terminal(focused_window):
            return RiskAssessment(Risk.HIGH, f"presses keys in a terminal ({focused_window})")
        return RiskAssessment(Risk.LOW, "presses keys")
    if isinstance(action, (Wait, Done, Answer)):
        return RiskAssessment(Risk.LOW, "does not touch the screen")
    return RiskAssessment(Risk.LOW, "pointer action")
