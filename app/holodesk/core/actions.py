"""The action vocabulary: a closed set of frozen, validated types.

Every pointer position is a :class:`Point` in the protocol's normalised space: integers in
``[0, NORM_MAX]`` (``NORM_MAX`` = 1000) relative to the frame the model saw, x from the left edge and
y from the top. Conversion to OS input coordinates happens in exactly one place,
:func:`holodesk.core.geometry.to_input_point`, using the frame the action was proposed for.

Each constructor validates its fields and raises :class:`~holodesk.errors.ActionError` naming the
first bad field. (The closed-set style with one error per wrong argument follows Anthropic's
computer-use demo, ``tools/computer.py``.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, TypeVar

from holodesk.errors import ActionError

NORM_MAX = 1000
"""Upper bound (inclusive) of the normalised coordinate space of the action protocol."""

MAX_TYPE_CHARS = 10_000
MAX_WAIT_SECONDS = 60.0
MAX_SCROLL_AMOUNT = 100
"""Most wheel clicks of one scroll (H Company's published ``scroll_desktop`` allows 100)."""
MAX_PLAN_GOALS = 20
"""Most goals in one plan (:class:`Plan`; H Company's published ``update_plan`` allows 20)."""
MAX_CHORD_KEYS = 5
"""Most keys pressed together in one chord (:attr:`Key.keys` without taps)."""
MAX_HELD_KEYS = 3
"""Most keys held down at once: the held keys of a hold-and-tap, and :class:`KeyDown`'s keys held across steps
(H Company's published ``hold_and_tap_key_desktop`` holds up to 3)."""
MAX_TAPPED_KEYS = 5
"""Most keys tapped in turn while others are held (:attr:`Key.taps`; the published ``tap_keys`` allows 5)."""
MAX_KEY_REPEAT = 20
"""Most presses of one chord in one step (:attr:`Key.repeat`; the published ``repeat_count`` states no bound)."""
OMIT_DEFAULT = {"omit_default": True}
"""``field(metadata=...)`` of an optional action field that :meth:`Action.to_dict` leaves out while it has its
default value (so records written before the field existed read the same)."""
MAX_GOAL_CHARS = 100
"""Longest goal title of a plan."""
PLAN_STATUSES: tuple[str, ...] = ("todo", "running", "done", "failed")
"""A plan goal's statuses, from H Company's agent loop (``update_plan``)."""

MOUSE_BUTTONS: tuple[str, ...] = ("left", "right", "middle")
"""The buttons a :class:`Click` may press."""
MAX_CLICK_COUNT = 3
"""Most presses of one :class:`Click` (3: a triple click)."""
_COUNT_WORDS = {2: "double", 3: "triple"}

ScrollDirection = Literal["up", "down", "left", "right"]
SCROLL_DIRECTIONS: tuple[str, ...] = ("up", "down", "left", "right")

NAMED_KEYS = frozenset(
    {
        "ctrl", "alt", "shift", "super", "win", "cmd", "command", "option", "meta", "altgr",
        "enter", "return", "tab", "esc", "escape", "backspace", "delete", "del", "insert", "space",
        "up", "down", "left", "right", "home", "end", "pageup", "pagedown", "capslock", "numlock",
        "scrolllock", "printscreen", "pause", "menu", "apps",
        *(f"f{i}" for i in range(1, 25)),
    }
)
KEY_ALIASES = {
    "control": "ctrl", "escape": "esc", "return": "enter", "del": "delete", "windows": "win",
    "page_up": "pageup", "page_down": "pagedown", "pgup": "pageup", "pgdn": "pagedown",
    "arrowup": "up", "arrowdown": "down", "arrowleft": "left", "arrowright": "right",
    "spacebar": "space", "command": "cmd", "meta": "super", "print": "printscreen",
}


def normalize_key(name: str) -> str:
    """Return the canonical lower-case name of one key (``"Control"`` -> ``"ctrl"``).

    Accepts the named keys above, any single printable character, and aliases.

    Raises:
        ActionError: (field ``keys``) for an empty or unknown key name.
    """
    if not isinstance(name, str) or not name:
        raise ActionError(f"key name must be a non-empty string, got {name!r}", field="keys")
    if len(name) == 1:
        if not name.isprintable():
            raise ActionError(f"key {name!r} is not a printable character", field="keys")
        return name.lower() if name.isalpha() and name.isascii() else name
    low = name.strip().lower().replace(" ", "")
    low = KEY_ALIASES.get(low, low)
    if low in NAMED_KEYS:
        return low
    raise ActionError(
        f"unknown key {name!r}",
        field="keys",
        hint="Use a single character or one of: " + ", ".join(sorted(NAMED_KEYS)) + ".",
    )


@dataclass(frozen=True)
class Point:
    """A position in the protocol's normalised space of one frame.

    Attributes:
        x: 0 (left edge) .. 1000 (right edge) of the frame the model saw, integer.
        y: 0 (top edge) .. 1000 (bottom edge), integer.

    Raises:
        ActionError: when a coordinate is not an integer or lies outside ``[0, 1000]``.
    """

    x: int
    y: int

    def __post_init__(self) -> None:
        for name in ("x", "y"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ActionError(
                    f"coordinate {name} must be an integer in [0, {NORM_MAX}], got {value!r}",
                    field=name,
                )
            if not 0 <= value <= NORM_MAX:
                raise ActionError(
                    f"coordinate {name}={value} lies outside the image the model saw "
                    f"(allowed 0..{NORM_MAX})",
                    field=name,
                )


@dataclass(frozen=True)
class Action:
    """Base of all actions. ``kind`` is the protocol's tool name."""

    kind: ClassVar[str] = ""
    on_screen: ClassVar[bool] = True
    """False for an action that touches neither the screen nor the keyboard (wait, plan, answer, done)."""
    keyboard: ClassVar[bool] = False
    """True for an action that sends keys to the focused window (type, key, key down): its target is the focus."""
    presses: ClassVar[bool] = False
    """True for an action that presses a mouse button over its target (a click, a drag): the rules on its
    target's words (:mod:`holodesk.core.risk`) apply to it."""

    def points(self) -> tuple[Point, ...]:
        """All points this action touches, in order (empty for keyboard and control actions)."""
        return ()

    @property
    def verb(self) -> str:
        """What a one-point action does, as the verb of its headline, lower case (``"double-click"``: the card
        says "Double-click ‘OK’"); "" for an action whose words :mod:`holodesk.core.wording` writes from its
        fields."""
        return ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``{"kind": ..., field: value, ...}`` with points as ``{"x":, "y":}``."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            name = f.name
            value = getattr(self, name)
            if f.metadata.get("omit_default") and value == f.default:
                continue
            if isinstance(value, Point):
                value = {"x": value.x, "y": value.y}
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out

    @property
    def ends_episode(self) -> bool:
        """True for actions that finish the task (answer, done)."""
        return False


def _require_point(value: object, name: str) -> None:
    if not isinstance(value, Point):
        raise ActionError(f"{name} must be a Point, got {type(value).__name__}", field=name)


MAX_ELEMENT_CHARS = 500
"""Longest ``element`` description accepted (the model names a target in a few words)."""


def _check_element(action: Action) -> None:
    """Validate ``action.element``: None or a string of at most 500 characters; blank becomes None.

    Raises:
        ActionError: (field ``element``) for a non-string or an over-long description.
    """
    value = getattr(action, "element", None)
    if value is None:
        return
    if not isinstance(value, str):
        raise ActionError(f"element must be a string describing the target, got {type(value).__name__}",
                          field="element")
    if len(value) > MAX_ELEMENT_CHARS:
        raise ActionError(f"element has {len(value)} characters, more than {MAX_ELEMENT_CHARS}", field="element")
    if not value.strip():
        object.__setattr__(action, "element", None)


@dataclass(frozen=True)
class _PointerAction(Action):
    """A pointer action at ``point``; ``element`` is what the model aims at, in its words (the H
    agent contract's ``element``), or None when the model did not say (holo-v1)."""

    point: Point
    element: str | None = None

    def __post_init__(self) -> None:
        _require_point(self.point, "point")
        _check_element(self)

    def points(self) -> tuple[Point, ...]:
        return (self.point,)


@dataclass(frozen=True)
class Click(_PointerAction):
    """Press and release ``button`` ``count`` times at ``point``: one click, a double click (2) or a triple
    click (3), with the left (default), right or middle button.

    Raises:
        ActionError: (field ``button``) a button not in :data:`MOUSE_BUTTONS`; (field ``count``) a count that
            is not an integer in ``1..3``.
    """

    kind: ClassVar[str] = "click"
    presses: ClassVar[bool] = True
    button: str = field(default="left", metadata=OMIT_DEFAULT)
    count: int = field(default=1, metadata=OMIT_DEFAULT)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.button not in MOUSE_BUTTONS:
            raise ActionError(f"button must be one of {', '.join(MOUSE_BUTTONS)}, got {self.button!r}",
                              field="button")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or not 1 <= self.count <= MAX_CLICK_COUNT:
            raise ActionError(f"count must be an integer in 1..{MAX_CLICK_COUNT}, got {self.count!r}", field="count")

    @property
    def verb(self) -> str:
        """The click in words, lower case: ``"click"``, ``"double-click"``, ``"triple-click"``, ``"right-click"``,
        ``"middle-click"``, ``"right double-click"``."""
        button = "" if self.button == "left" else self.button
        if self.count == 1:
            return f"{button}-click" if button else "click"
        return f"{button} {_COUNT_WORDS[self.count]}-click".lstrip()


@dataclass(frozen=True)
class Move(_PointerAction):
    """Move the pointer to ``point`` without clicking."""

    kind: ClassVar[str] = "move"


@dataclass(frozen=True)
class Drag(Action):
    """Press the left button at ``start``, move to ``end``, release. ``element``: what is dragged or
    where to, in the model's words, or None."""

    kind: ClassVar[str] = "drag"
    presses: ClassVar[bool] = True
    start: Point
    end: Point
    element: str | None = None

    def __post_init__(self) -> None:
        _require_point(self.start, "start")
        _require_point(self.end, "end")
        _check_element(self)

    def points(self) -> tuple[Point, ...]:
        return (self.start, self.end)


@dataclass(frozen=True)
class Scroll(Action):
    """Scroll ``amount`` wheel clicks towards ``direction``, with the pointer at ``point`` if given;
    ``element`` names what is scrolled, in the model's words, or None.

    Raises:
        ActionError: unknown direction, or amount not an integer in ``1..50``.
    """

    kind: ClassVar[str] = "scroll"
    direction: str
    amount: int = 3
    point: Point | None = None
    element: str | None = None

    def __post_init__(self) -> None:
        _check_element(self)
        if self.direction not in SCROLL_DIRECTIONS:
            raise ActionError(
                f"scroll direction must be one of {', '.join(SCROLL_DIRECTIONS)}, got {self.direction!r}",
                field="direction",
            )
        if isinstance(self.amount, bool) or not isinstance(self.amount, int):
            raise ActionError(f"scroll amount must be an integer, got {self.amount!r}", field="amount")
        if not 1 <= self.amount <= MAX_SCROLL_AMOUNT:
            raise ActionError(
                f"scroll amount must be 1..{MAX_SCROLL_AMOUNT} wheel clicks, got {self.amount}",
                field="amount",
            )
        if self.point is not None:
            _require_point(self.point, "point")

    def points(self) -> tuple[Point, ...]:
        return (self.point,) if self.point is not None else ()


@dataclass(frozen=True)
class Type(Action):
    """Type ``text`` exactly (any Unicode, tabs and newlines included) into the focused widget; with
    ``replace``, first select everything in it (ctrl+a), so the text replaces what it held.

    Raises:
        ActionError: text empty, not a string, or longer than 10,000 characters; replace not a bool.
    """

    kind: ClassVar[str] = "type"
    keyboard: ClassVar[bool] = True
    text: str
    replace: bool = field(default=False, metadata=OMIT_DEFAULT)

    def __post_init__(self) -> None:
        if not isinstance(self.replace, bool):
            raise ActionError(f"replace must be true or false, got {self.replace!r}", field="replace")
        if not isinstance(self.text, str):
            raise ActionError(f"text must be a string, got {type(self.text).__name__}", field="text")
        if not self.text:
            raise ActionError("text to type is empty", field="text")
        if len(self.text) > MAX_TYPE_CHARS:
            raise ActionError(
                f"text to type has {len(self.text)} characters, more than {MAX_TYPE_CHARS}", field="text"
            )


def _key_names(value: object, name: str, most: int, *, unique: bool = False) -> tuple[str, ...]:
    """``value`` (a list of key names, or one ``"ctrl+s"`` string) as canonical names (:func:`normalize_key`);
    with ``unique``, a key named again (``["Control", "ctrl"]``) is kept once.

    Raises:
        ActionError: (field ``name``) no keys or more than ``most``, or an unknown key name.
    """
    keys = value
    if isinstance(keys, str):
        keys = tuple(k for k in keys.replace(" ", "").split("+") if k) if len(keys) > 1 else (keys,)
    if not isinstance(keys, (tuple, list)) or not keys:
        raise ActionError(f"{name} must be a non-empty list of key names", field=name)
    if len(keys) > most:
        raise ActionError(f"{name} has at most {most} keys, got {len(keys)}", field=name)
    out = tuple(normalize_key(k) for k in keys)
    return tuple(dict.fromkeys(out)) if unique else out


@dataclass(frozen=True)
class Key(Action):
    """Press ``keys`` together (a chord such as ``("ctrl", "s")``) and release them in reverse order, ``repeat``
    times (1 to :data:`MAX_KEY_REPEAT`); with ``taps``, hold ``keys`` down and tap each key of ``taps`` in turn
    (hold ``("shift",)``, tap ``("tab", "tab")``) before releasing them. Every key is released before the next
    press and before the step ends; keys held by :class:`KeyDown` stay held.

    Keys are normalised by :func:`normalize_key`.

    Raises:
        ActionError: no keys, more than :data:`MAX_CHORD_KEYS` keys (with taps: more than :data:`MAX_HELD_KEYS`
            held or :data:`MAX_TAPPED_KEYS` tapped), an unknown key name, or repeat outside 1..20.
    """

    kind: ClassVar[str] = "key"
    keyboard: ClassVar[bool] = True
    keys: tuple[str, ...]
    repeat: int = field(default=1, metadata=OMIT_DEFAULT)
    taps: tuple[str, ...] = field(default=(), metadata=OMIT_DEFAULT)

    def __post_init__(self) -> None:
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or not 1 <= self.repeat <= MAX_KEY_REPEAT:
            raise ActionError(f"repeat must be an integer in 1..{MAX_KEY_REPEAT}, got {self.repeat!r}",
                              field="repeat")
        taps = self.taps
        if not isinstance(taps, (tuple, list)) or len(taps) > MAX_TAPPED_KEYS:
            raise ActionError(f"taps must be a list of at most {MAX_TAPPED_KEYS} key names, got {taps!r}",
                              field="taps")
        object.__setattr__(self, "taps", tuple(normalize_key(k) for k in taps))
        object.__setattr__(self, "keys", _key_names(self.keys, "keys", MAX_HELD_KEYS if taps else MAX_CHORD_KEYS))


@dataclass(frozen=True)
class _HeldKeysAction(Action):
    """An action on keys held across steps: ``keys``, 1 to :data:`MAX_HELD_KEYS` key names, a key named twice kept
    once.

    Raises:
        ActionError: no keys, more than :data:`MAX_HELD_KEYS`, or an unknown key name.
    """

    keys: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", _key_names(self.keys, "keys", MAX_HELD_KEYS, unique=True))


@dataclass(frozen=True)
class KeyDown(_HeldKeysAction):
    """Press ``keys`` in order and keep them held after the step (for Shift+clicks, a drag with Ctrl), until a
    :class:`KeyUp` releases them or the run ends: the executor releases every held key at the end of the run,
    whatever ends it, and at the next start after a run that was killed (:mod:`holodesk.control.held_keys`)."""

    kind: ClassVar[str] = "key_down"
    keyboard: ClassVar[bool] = True


@dataclass(frozen=True)
class KeyUp(_HeldKeysAction):
    """Release ``keys``, held by an earlier :class:`KeyDown` of the run, in reverse order."""

    kind: ClassVar[str] = "key_up"


@dataclass(frozen=True)
class Wait(Action):
    """Do nothing for ``seconds`` (0 < seconds <= 60), then look again."""

    kind: ClassVar[str] = "wait"
    on_screen: ClassVar[bool] = False
    seconds: float = 1.0

    def __post_init__(self) -> None:
        s = self.seconds
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            raise ActionError(f"wait seconds must be a number, got {s!r}", field="seconds")
        if not 0 < s <= MAX_WAIT_SECONDS:
            raise ActionError(f"wait seconds must be in (0, {MAX_WAIT_SECONDS:g}], got {s}", field="seconds")
        object.__setattr__(self, "seconds", float(s))


@dataclass(frozen=True)
class Plan(Action):
    """Record the model's task plan; it has no effect on the desktop.

    ``goals`` is a tuple of ``(title, status)`` pairs in order, ``status`` one of :data:`PLAN_STATUSES`.
    Pairs may be given as 2-item lists or as ``{"title": ..., "status": ...}`` mappings (episode records,
    edits); they are stored as tuples.

    Raises:
        ActionError: no goals, more than :data:`MAX_PLAN_GOALS`, a blank or too long title (more than
            :data:`MAX_GOAL_CHARS` characters), or an unknown status.
    """

    kind: ClassVar[str] = "plan"
    on_screen: ClassVar[bool] = False
    goals: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        goals = self.goals
        if not isinstance(goals, (tuple, list)) or not goals:
            raise ActionError("a plan needs at least one goal", field="goals")
        if len(goals) > MAX_PLAN_GOALS:
            raise ActionError(f"a plan has at most {MAX_PLAN_GOALS} goals, got {len(goals)}", field="goals")
        out: list[tuple[str, str]] = []
        for goal in goals:
            if isinstance(goal, dict):
                title, status = goal.get("title"), goal.get("status", "todo")
            elif isinstance(goal, (tuple, list)) and len(goal) == 2:
                title, status = goal
            else:
                raise ActionError(f"a goal is a (title, status) pair, got {goal!r}", field="goals")
            if not isinstance(title, str) or not title.strip() or len(title) > MAX_GOAL_CHARS:
                raise ActionError(f"a goal title must be 1 to {MAX_GOAL_CHARS} characters of text, "
                                  f"got {title!r}", field="goals")
            if status not in PLAN_STATUSES:
                raise ActionError(f"a goal status must be one of {', '.join(PLAN_STATUSES)}, got {status!r}",
                                  field="goals")
            out.append((title, str(status)))
        object.__setattr__(self, "goals", tuple(out))


@dataclass(frozen=True)
class Answer(Action):
    """Finish the task by answering the user with ``text``."""

    kind: ClassVar[str] = "answer"
    on_screen: ClassVar[bool] = False
    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise ActionError("answer text must be a non-empty string", field="text")

    @property
    def ends_episode(self) -> bool:
        return True


@dataclass(frozen=True)
class Done(Action):
    """Finish the task: the model reports it is complete."""

    kind: ClassVar[str] = "done"
    on_screen: ClassVar[bool] = False
    message: str = field(default="")

    def __post_init__(self) -> None:
        if not isinstance(self.message, str):
            raise ActionError("done message must be a string", field="message")

    @property
    def ends_episode(self) -> bool:
        return True


ACTION_TYPES: dict[str, type[Action]] = {
    cls.kind: cls
    for cls in (Click, Move, Drag, Scroll, Type, Key, KeyDown, KeyUp, Wait, Plan, Answer, Done)
}
"""The closed set: action kind -> action class (the one list of action classes)."""

OFF_SCREEN_TYPES: tuple[type[Action], ...] = tuple(cls for cls in ACTION_TYPES.values() if not cls.on_screen)
"""The action classes that touch neither the screen nor the keyboard (:attr:`Action.on_screen` False)."""

RECORDED_CLICK_KINDS: dict[str, dict[str, Any]] = {
    "double_click": {"count": 2}, "right_click": {"button": "right"}, "middle_click": {"button": "middle"}}
"""Kinds of episode records written before :class:`Click` carried its button and count, and the fields they
stand for (read by :func:`action_from_dict`)."""


def action_from_dict(data: dict[str, Any]) -> Action:
    """Rebuild an action from :meth:`Action.to_dict` output (episode records, edits); the kinds of
    :data:`RECORDED_CLICK_KINDS` (older records) come back as a :class:`Click` with their button or count.

    Raises:
        ActionError: unknown kind or any bad field.
    """
    kind = data.get("kind")
    if isinstance(kind, str) and kind in RECORDED_CLICK_KINDS:
        data = {**data, **RECORDED_CLICK_KINDS[kind], "kind": Click.kind}
        kind = Click.kind
    cls = ACTION_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ActionError(f"unknown action kind {kind!r}", field="kind",
                          hint="Known kinds: " + ", ".join(ACTION_TYPES) + ".")
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        name = f.name
        if name not in data:
            continue
        value = data[name]
        if isinstance(value, dict) and set(value) == {"x", "y"}:
            value = Point(value["x"], value["y"])
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ActionError(f"bad fields for {kind}: {exc}", field=None) from exc


Handler = TypeVar("Handler")


def handler_for(handlers: Mapping[type[Action], Handler], action: Action) -> Handler | None:
    """The entry of ``handlers`` (a module's table: action class -> what it does with it) for the exact type of
    ``action``, or None when the table does not declare it: an action class the module does not know, a subclass
    included, is never handled as its base class."""
    return handlers.get(type(action))
