"""What is really on screen at an action's point: one user-interface element as the accessibility tree
(AT-SPI on Linux) publishes it.

:mod:`holodesk.control.accessibility` finds elements; the risk rules (:mod:`holodesk.core.risk`) judge
an action by them; the approval card shows them next to the model's words; the episode record stores
them (:meth:`Element.to_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from holodesk.core.text import display_safe

TEXT_ROLES = frozenset({"text", "entry", "password text", "paragraph", "document text", "editbar",
                        "spin button", "combo box", "text box", "search box"})
"""AT-SPI roles that take typed characters as text when they are also ``editable`` (an editable combo
box or spin button holds an entry; GTK 4 names its entries "text box"). A terminal is never one of them."""

SELECTOR_ROLES = frozenset({"combo box", "spin button", "slider", "scroll bar", "list box", "page tab list",
                            "page tab", "menu", "menu bar", "radio button", "dial", "level bar"})
"""AT-SPI roles whose value a scroll wheel may change (a GTK combo box or a spin button steps its value
on each notch; a tab strip switches the page)."""

ACTIVATING_ROLES = frozenset({"push button", "toggle button", "check box", "radio button", "menu item",
                              "check menu item", "radio menu item", "link", "page tab", "list item",
                              "table cell", "tree item", "icon", "toggle", "switch", "button"})
"""AT-SPI roles that a typed space or Enter activates when they have the keyboard focus."""


@dataclass(frozen=True)
class Element:
    """One accessible element.

    Attributes:
        role: the AT-SPI role name, lower case (``"push button"``, ``"text"``, ``"terminal"``, ``"menu
            item"``, ``"combo box"``).
        name: its accessible name (a button's label, a field's label), possibly empty.
        states: AT-SPI state names, lower case (``"focused"``, ``"editable"``, ``"sensitive"``,
            ``"enabled"``, ``"showing"``).
        bounds: ``(x, y, width, height)`` in screen pixels (X11: physical pixels of the root window),
            or None when the toolkit does not say.
        application: the name of the application that publishes it (``"mousepad"``), possibly empty.
        active_window: True when its window states that it is active (the window with the keyboard focus, by
            the toolkit's own account); the risk rules then know the focused window by it where the desktop does
            not say (GNOME Wayland).
    """

    role: str
    name: str
    states: frozenset[str]
    bounds: tuple[int, int, int, int] | None = None
    application: str = ""
    active_window: bool = False

    @property
    def editable_text(self) -> bool:
        """True for an editable text field (typed characters become text in it)."""
        return self.role in TEXT_ROLES and "editable" in self.states

    @property
    def terminal(self) -> bool:
        """True for a terminal (typed characters go to a program, line by line)."""
        return self.role == "terminal"

    @property
    def disabled(self) -> bool:
        """True when the element does not accept input: not ``sensitive`` (GTK 4 sets no ``enabled``)."""
        return "sensitive" not in self.states

    def describe(self) -> str:
        """The element as the approval card names it: ``push button ‘Delete all files’`` (the name without the
        spaces around it: GTK 3 pads a menu item's name, e.g. ``"Copy      "``)."""
        name = self.name.strip()
        return f"{self.role} \u2018{display_safe(name)}\u2019" if name else self.role

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the episode record: role, name, states (sorted), bounds, application,
        active_window."""
        return {"role": self.role, "name": self.name, "states": sorted(self.states),
                "bounds": list(self.bounds) if self.bounds is not None else None, "application": self.application,
                "active_window": self.active_window}


class ElementProbe(Protocol):
    """Finds elements on the desktop (:class:`holodesk.control.accessibility.AccessibilityProbe`).

    Attributes:
        last_problem: why the last lookup found nothing ("" when nothing went wrong).
        last_ms: how long the last lookup took, in milliseconds.
    """

    last_problem: str
    last_ms: float

    def element_at(self, x: int, y: int, window_rect: tuple[int, int, int, int] | None = None) -> Element | None:
        """The deepest element at screen point ``(x, y)``, or None when none is known there."""
        ...

    def focused(self) -> Element | None:
        """The element with the keyboard focus, or None when none is known."""
        ...
