"""One action in plain words: the headline every approval surface leads with, and its details.

The overlay card, the terminal approval of ``holodesk run`` and the history viewer all call
:func:`step_words`, so they say the same thing::

    Click ‘Cancel button’ in Demo form
    Type ‘John Smith’ into ‘Your name’ in Demo form
    Press Ctrl+S in Mousepad
    Scroll down 3 over ‘File list’ in Files
    Click at (812, 440) in Demo form            (no ``element``: holo-v1 replies)

The headline says what the step does to what; coordinates come second, in :attr:`StepWords.details`
(the risk reason and the model's thought are added by each surface after them).

Text from the model (element, typed text, window titles) is data: :func:`plain` shows control,
line-break and invisible formatting characters (bidi overrides, zero-width characters) as escapes
(``\\n``, ``\\u202e``), so a reply cannot restyle a terminal, fake a line of a prompt, or reorder what
the user reads. Surfaces still render the result as plain text, never as markup.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from holodesk.core.actions import (
    ACTION_TYPES,
    Action,
    Answer,
    Done,
    Drag,
    Key,
    KeyDown,
    KeyUp,
    Move,
    Plan,
    Point,
    Scroll,
    Type,
    Wait,
)
from holodesk.core.geometry import InputPoint

ELEMENT_CHARS = 60
"""Longest element description quoted in a headline (longer ones end in "…")."""
TYPED_CHARS = 48
PLAN_STATUS_WORDS: dict[str, str] = {"todo": "To do", "running": "Doing now", "done": "Done", "failed": "Failed"}
"""A plan goal's status (:data:`holodesk.core.actions.PLAN_STATUSES`) in words."""
"""Longest typed text quoted in a headline (the card and the terminal show the exact text apart)."""
WINDOW_CHARS = 50
"""Longest window title in a headline."""

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"})

_KEY_WORDS = {
    "ctrl": "Ctrl", "alt": "Alt", "shift": "Shift", "super": "Super", "win": "Win", "cmd": "Cmd",
    "option": "Option", "altgr": "AltGr", "enter": "Enter", "tab": "Tab", "esc": "Esc",
    "backspace": "Backspace", "delete": "Delete", "insert": "Insert", "space": "Space", "up": "Up",
    "down": "Down", "left": "Left", "right": "Right", "home": "Home", "end": "End", "pageup": "Page Up",
    "pagedown": "Page Down", "capslock": "Caps Lock", "numlock": "Num Lock", "scrolllock": "Scroll Lock",
    "printscreen": "Print Screen", "pause": "Pause", "menu": "Menu", "apps": "Menu",
}


def plain(text: str, limit: int | None = None) -> str:
    """``text`` made safe to show inside a sentence: every control, line-break, private-use or
    invisible formatting character (Unicode categories Cc, Cf, Zl, Zp, Co, Cs, Cn; bidi overrides and
    zero-width characters included) is written as its Python escape (``\\n``, ``\\x1b``, ``\\u202e``);
    printable text is kept as is. With ``limit``, the result is cut to at most ``limit`` characters,
    ending in "…"."""
    out = "".join(repr(ch)[1:-1] if unicodedata.category(ch) in _UNSAFE_CATEGORIES else ch for ch in text)
    if limit is not None and len(out) > limit:
        out = out[: max(0, limit - 1)].rstrip() + "…"
    return out


def key_words(keys: Sequence[str]) -> str:
    """A chord as people write it: ``("ctrl", "s")`` -> ``"Ctrl+S"``, ``("pagedown",)`` -> ``"Page Down"``."""
    names = []
    for k in keys:
        if k in _KEY_WORDS:
            names.append(_KEY_WORDS[k])
        elif len(k) > 1 and k[0] == "f" and k[1:].isdigit():
            names.append(k.upper())
        elif k == "+":
            names.append("Plus")
        else:
            names.append(plain(k.upper() if k.isalpha() else k))
    return "+".join(names)


@dataclass(frozen=True)
class WindowInfo:
    """The window a step acts in, as the window system reports it.

    Attributes:
        title: window title (``_NET_WM_NAME``), "" when unknown.
        app: application class (``WM_CLASS`` class part) or app id, "" when unknown.
        rect: ``(left, top, width, height)`` in OS input space, frame included, or None when unknown.
        client_rect: the client area (the application's own window, without the window manager's title
            bar and borders) as ``(left, top, width, height)`` in OS input space, or None when unknown.
        window_id: the window system's id of the client window (X11: its XID), or None when unknown; two
            windows of one program at one place differ by it.
    """

    title: str = ""
    app: str = ""
    rect: tuple[int, int, int, int] | None = None
    client_rect: tuple[int, int, int, int] | None = None
    window_id: int | None = None

    def on_frame(self, x: int, y: int) -> bool:
        """True when input point ``(x, y)`` lies in :attr:`rect` but outside :attr:`client_rect`: on the
        window manager's decorations (title bar, its buttons, borders). False when either is unknown."""
        if self.rect is None or self.client_rect is None:
            return False
        left, top, width, height = self.rect
        c_left, c_top, c_width, c_height = self.client_rect
        inside = left <= x < left + width and top <= y < top + height
        in_client = c_left <= x < c_left + c_width and c_top <= y < c_top + c_height
        return inside and not in_client

    @property
    def name(self) -> str:
        """How a headline names it: the title, else the application, else ""."""
        return self.title.strip() or self.app.strip()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for episode records: ``{"title", "app", "rect": [l, t, w, h] | None}``."""
        return {"title": self.title, "app": self.app, "rect": list(self.rect) if self.rect else None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> WindowInfo | None:
        """Inverse of :meth:`to_dict`; None for a missing or malformed record."""
        if not isinstance(data, Mapping):
            return None
        rect = data.get("rect")
        ok_rect = (isinstance(rect, (list, tuple)) and len(rect) == 4
                   and all(isinstance(v, int) and not isinstance(v, bool) for v in rect))
        return cls(str(data.get("title") or ""), str(data.get("app") or ""),
                   tuple(rect) if ok_rect else None)  # type: ignore[arg-type]


@dataclass(frozen=True)
class StepWords:
    """What a step does, in plain words.

    Attributes:
        headline: what the step does to what, e.g. "Click ‘Cancel button’ in Demo form".
        details: secondary lines, in order: where (screen and model coordinates), the window's
            application, the length of the text to type.
    """

    headline: str
    details: tuple[str, ...] = ()


def _pt(p: InputPoint | Point) -> str:
    return f"({p.x}, {p.y})"


def step_words(
    action: Action,
    *,
    window: WindowInfo | None = None,
    focus_element: str | None = None,
    input_points: Sequence[InputPoint] = (),
    monitor_label: str | None = None,
    held_keys: Sequence[str] = (),
) -> StepWords:
    """The headline and details of ``action``.

    Args:
        action: the proposed (or edited) action; its ``element`` is what the model aims at.
        window: the window the step acts in when known: for pointer actions the window under the
            target, for keys and typing the focused window.
        focus_element: for typing, the field that has keyboard focus, in words (the element of the click
            that put it there), when known.
        input_points: the action's points in OS input space (same order as ``action.points()``), when
            known; the headline then quotes screen coordinates, else the model's 0–1000 coordinates.
        monitor_label: the monitor's name for the details, e.g. "Monitor 1, screen, 1920x1080 at +0+0".
        held_keys: the keys held down by an earlier ``key_down`` of the run (canonical names); a details line
            names them: "Held down: Shift (released by a key up, or when the task ends)".
    Returns:
        :class:`StepWords`. Every piece of model or window text in it has gone through :func:`plain`.
    """
    where_window = f" in {plain(window.name, WINDOW_CHARS)}" if window is not None and window.name else ""
    model_points = action.points()
    on_screen = tuple(input_points) if len(input_points) == len(model_points) and model_points else ()
    spots = (tuple(_pt(p) for p in on_screen) if on_screen
             else tuple(f"{_pt(p)} of 1000" for p in model_points))
    details = _where_details(action, on_screen, monitor_label, window)
    if ACTION_TYPES.get(action.kind) is not type(action):  # a class of no declared kind: say so, guess nothing
        headline = (f"Unknown action \u2018{plain(action.kind or type(action).__name__)}\u2019"
                    + (f" at {', '.join(spots)}" if spots else "") + where_window)
    else:
        pointer = _pointer_headline(action, spots, where_window)
        headline, more = (pointer, []) if pointer is not None else _other_headline(action, focus_element, where_window)
        details.extend(more)
    if held_keys:
        details.append(f"Held down: {key_words(held_keys)} (released by a key up, or when the task ends)")
    return StepWords(headline, tuple(details))


def _where_details(action: Action, on_screen: Sequence[InputPoint], monitor_label: str | None,
                   window: WindowInfo | None) -> list[str]:
    """The details that say where ``action`` acts: its points (screen coordinates when ``on_screen`` has
    them, and the model's 0–1000 ones), or for a scroll without points "Where the pointer is"; then the
    window's title and application when both are known."""
    model_points = action.points()
    on = f" on {monitor_label}" if monitor_label else ""
    details: list[str] = []
    if model_points:
        model = " to ".join(_pt(p) for p in model_points)
        if on_screen:
            details.append("Screen " + " to ".join(_pt(p) for p in on_screen) + on + f" · model point {model} of 1000")
        else:
            details.append(f"Model point {model} of 1000{on}")
    elif isinstance(action, Scroll):
        details.append("Where the pointer is" + on)
    if window is not None and window.title.strip() and window.app.strip():
        details.append(f"Window: {plain(window.title, 120)} ({plain(window.app, 40)})")
    return details


def _pointer_headline(action: Action, spots: Sequence[str], where_window: str) -> str | None:
    """The headline of a pointer action (move, drag, scroll, clicks), else None.

    Args:
        spots: the action's points in words, e.g. "(960, 540)" on the screen or "(500, 500) of 1000".
        where_window: " in <window>" or "".
    """
    element = getattr(action, "element", None)
    target = f"‘{plain(element, ELEMENT_CHARS)}’" if element else None
    match action:
        case Move():
            return f"Move the pointer to {target or 'at ' + spots[0]}{where_window}"
        case Drag():
            return f"Drag from {spots[0]} to {target or spots[1]}{where_window}"
        case Scroll(direction=d, amount=n):
            over = f" over {target}" if target else (f" at {spots[0]}" if spots else "")
            return f"Scroll {d} {n}{over}{where_window}"
        case _ if action.verb and spots:  # a click of any button and count, and any one-point action with a verb
            verb = action.verb
            return f"{verb[0].upper()}{verb[1:]} {target or 'at ' + spots[0]}{where_window}"
    return None


def _other_headline(action: Action, focus_element: str | None, where_window: str) -> tuple[str, list[str]]:
    """The headline of an action without points (type, key, wait, plan, answer, done) and the details it
    adds after the window's: the length of the text to type, or the plan's goals."""
    match action:
        case Type(text=t, replace=replace):
            into = f" into ‘{plain(focus_element, ELEMENT_CHARS)}’" if focus_element else ""
            lines = t.count("\n") + 1
            verb = "Replace the text with" if replace else "Type"
            return (f"{verb} ‘{plain(t, TYPED_CHARS)}’{into}{where_window}",
                    [f"{len(t)} character{'s' if len(t) != 1 else ''}"
                     + (f" on {lines} lines" if lines > 1 else "")
                     + (", shortened above" if plain(t, TYPED_CHARS) != plain(t) else "")])
        case Key(keys=keys, repeat=repeat, taps=taps):
            pressed = (f"Hold {key_words(keys)} and tap {', '.join(key_words((t,)) for t in taps)}" if taps
                       else f"Press {key_words(keys)}")
            return pressed + (f" {repeat} times" if repeat > 1 else "") + where_window, []
        case KeyDown(keys=keys):
            return f"Hold {key_words(keys)} down{where_window}", ["Stays held for the next steps, until a key up "
                                                                  "or the end of the task"]
        case KeyUp(keys=keys):
            return f"Release {key_words(keys)}{where_window}", []
        case Wait(seconds=s):
            return f"Wait {s:g} s", []
        case Plan(goals=goals):
            current = next((title for title, status in goals if status == "running"), None)
            return ("Update the plan" + (f": now ‘{plain(current, 200)}’" if current else ""),
                    [f"{PLAN_STATUS_WORDS.get(status, status)}: {plain(title, 200)}" for title, status in goals])
        case Answer(text=t):
            return f"Answer: {plain(t, 200)}", []
        case Done(message=m):
            return "Finish the task" + (f": {plain(m, 200)}" if m else ""), []
    return plain(action.kind), []


def describe(action: Action) -> str:
    """The action's headline in plain words without context, e.g. ``Click ‘OK’`` (:func:`step_words`
    gives the headline with its window and the details)."""
    return step_words(action).headline
