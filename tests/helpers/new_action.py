"""Action classes the vocabulary does not declare, for the tests of what each module does with an action it does
not know (tests/core/test_new_action.py, tests/session/test_new_action_x11.py, tests/wayland/test_mutter_backends.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from holodesk.core.actions import Action, Click, Point


@dataclass(frozen=True)
class TripleTap(Action):
    """A new pointer action, declared the way the vocabulary's actions are, but in no table."""

    kind: ClassVar[str] = "triple_tap"
    point: Point
    element: str | None = None

    def points(self) -> tuple[Point, ...]:
        return (self.point,)


@dataclass(frozen=True)
class LongPress(Click):
    """A subclass of a known action; it must not pass for its base class."""

    kind: ClassVar[str] = "long_press"
