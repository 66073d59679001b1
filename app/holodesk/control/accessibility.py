"""The accessibility tree at an action's point: which element is really there (issue 31).

GTK, Qt, Electron and browsers publish what is on screen through AT-SPI, a D-Bus protocol on its own bus
(the accessibility bus). This module speaks it directly with ``jeepney`` (a D-Bus library Holodesk already
uses for the keychain); the protocol's interfaces are from at-spi2-core's ``xml/*.xml``:

* the session bus's ``org.a11y.Bus.GetAddress`` gives the accessibility bus's address; asking it starts
  ``at-spi-bus-launcher`` (and with it ``at-spi2-registryd``) through D-Bus activation where the desktop
  has not started them; ``org.a11y.Status.IsEnabled`` is set so that toolkits which publish only on request
  (Qt) do;
* ``org.a11y.atspi.Registry`` lists the applications; each application's children are its windows
  (role ``frame``, ``dialog``, ...); ``org.a11y.atspi.Component.GetExtents`` / ``GetAccessibleAtPoint``
  (screen coordinates) find the window and then the deepest element at a point;
* ``org.a11y.atspi.Collection.GetMatches`` with the ``focused`` state finds the focused element of the
  active window (a walk through its showing elements where the toolkit lacks Collection: GTK 4);
* GTK 4 on X11 knows no screen coordinates and reports its windows at (0, 0): such a window is matched
  to the X window under the point by its size and asked in window coordinates.

On GNOME Wayland (``screen_coordinates=False``) a client does not know where its windows are on the screen
(GTK 4 reports each window at (0, 0)), and nothing tells an ordinary client: GNOME Shell 43's
``org.gnome.Shell.Introspect.GetWindows`` gives each window's size only, never its position, and only to the
portal backends (``org.freedesktop.impl.portal.desktop.gnome``/``gtk``) or in the shell's unsafe mode
(gnome-shell ``js/misc/introspect.js``, ``DBusSenderChecker``); plain mutter has no window list on D-Bus at all.
So :meth:`AccessibilityProbe.element_at` answers None there (:data:`NO_SCREEN_POSITIONS`), and
:meth:`AccessibilityProbe.focused` answers only from the one window that states it is ``active``: GTK 4.8 marks
the focus widget of a window that does not have the keyboard focus ``focused`` too, so a focused element in a
window that does not say it is active may not be where keys go (and a program without accessibility may hold the
keyboard focus meanwhile).

Each lookup is bounded by a budget (:data:`LOOKUP_BUDGET_S`): a reply that does not come in time gives
None, and :attr:`AccessibilityProbe.last_problem` says why (the risk rules then judge by the model's words
and the window, as for programs without accessibility: Tk, games, remote desktops).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from holodesk.core.element import ACTIVATING_ROLES, Element

log = logging.getLogger(__name__)

LOOKUP_BUDGET_S = 0.25
"""The longest one lookup (element at a point, or the focused element) may take, in seconds; the whole
D-Bus conversation of a lookup shares it."""

STATE_NAMES: tuple[str, ...] = (
    "invalid", "active", "armed", "busy", "checked", "collapsed", "defunct", "editable", "enabled", "expandable",
    "expanded", "focusable", "focused", "has tooltip", "horizontal", "iconified", "modal", "multi line",
    "multiselectable", "opaque", "pressed", "resizable", "selectable", "selected", "sensitive", "showing",
    "single line", "stale", "transient", "vertical", "visible", "manages descendants", "indeterminate",
    "required", "truncated", "animated", "invalid entry", "supports autocompletion", "selectable text",
    "is default", "visited", "checkable", "has popup", "read only")
"""AT-SPI's ``AtspiStateType`` names by bit number (at-spi2-core ``atspi-constants.h``); ``GetState``
returns them as a bit set of two 32-bit words."""

NO_SCREEN_POSITIONS = ("GNOME Wayland does not tell a program where windows are on the screen (GNOME Shell's "
                       "Introspect.GetWindows gives sizes only, to the portal alone; mutter has no window list), so "
                       "the element under a point cannot be known there")
"""Why :meth:`AccessibilityProbe.element_at` answers None without screen coordinates (module docstring)."""

_ACCESSIBLE = "org.a11y.atspi.Accessible"
_COMPONENT = "org.a11y.atspi.Component"
_COLLECTION = "org.a11y.atspi.Collection"
_SCREEN = 0  # ATSPI_COORD_TYPE_SCREEN
_WINDOW = 1  # ATSPI_COORD_TYPE_WINDOW
_MENU_ITEM_ROLES = frozenset({"menu item", "check menu item", "radio menu item", "menu"})
_MAX_WALK = 400
"""Most elements :meth:`AccessibilityProbe._focused_below` visits."""
_MATCH_ALL = 1  # ATSPI_Collection_MATCH_ALL (an empty set matches everything)
_MATCH_ANY = 2  # ATSPI_Collection_MATCH_ANY
_MENU_ROLE_NUMBERS = (8, 33, 35, 45)
"""AtspiRole numbers of check menu item, menu (a menu bar's item), menu item, radio menu item."""
_SORT_CANONICAL = 1  # ATSPI_Collection_SORT_ORDER_CANONICAL
_MAX_DEPTH = 32
_FOCUSED_BIT = STATE_NAMES.index("focused")
_WINDOW_ROLES = frozenset({"frame", "dialog", "window", "alert", "file chooser", "color chooser", "font chooser"})


class _OverBudget(Exception):
    """The lookup's budget ran out."""


def states_from_bits(words: Sequence[int]) -> frozenset[str]:
    """State names from ``GetState``'s bit set (``[low 32 bits, high 32 bits]``)."""
    names = set()
    for word_index, word in enumerate(words[:2]):
        for bit in range(32):
            number = word_index * 32 + bit
            if word & (1 << bit) and number < len(STATE_NAMES):
                names.add(STATE_NAMES[number])
    return frozenset(names)


class AccessibilityProbe:
    """Asks the accessibility bus of one desktop what element is at a point, and which one has the focus.

    Args:
        session_bus: the desktop's D-Bus session bus address (default: ``DBUS_SESSION_BUS_ADDRESS``).
        budget_s: each lookup's time budget (:data:`LOOKUP_BUDGET_S`).
        screen_coordinates: False on GNOME Wayland, where windows do not know their screen position: no
            element under a point, and the focused element only from the window that states it is active
            (module docstring).

    Attributes:
        last_problem: why the last lookup found nothing ("" when it found an element or there was none at
            the point): the accessibility bus is missing, a reply took longer than the budget, ...
        last_ms: how long the last lookup took, in milliseconds.
    """

    def __init__(self, session_bus: str | None = None, budget_s: float = LOOKUP_BUDGET_S,
                 screen_coordinates: bool = True) -> None:
        self._session_address = session_bus or os.environ.get("DBUS_SESSION_BUS_ADDRESS", "")
        self.budget_s = budget_s
        self.screen_coordinates = screen_coordinates
        self._bus: Any = None
        self._deadline = 0.0
        self.last_problem = ""
        self.last_ms = 0.0
        self._logged = ""

    # -- connection
    def _connect(self) -> Any:
        """The accessibility bus connection, opened on first use.

        Raises:
            OSError, jeepney.DBusErrorResponse, TimeoutError: no session bus, no accessibility bus.
        """
        if self._bus is not None:
            return self._bus
        from jeepney import DBusAddress, Properties, new_method_call  # lazy: jeepney (Linux only)
        from jeepney.io.blocking import open_dbus_connection  # lazy: jeepney (Linux only)

        if not self._session_address:
            raise OSError("no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS is not set)")
        session = open_dbus_connection(self._session_address)
        try:
            launcher = DBusAddress("/org/a11y/bus", bus_name="org.a11y.Bus", interface="org.a11y.Bus")
            reply = session.send_and_get_reply(new_method_call(launcher, "GetAddress"), timeout=5.0)
            _raise_on_error(reply)
            address = str(reply.body[0])
            status = DBusAddress("/org/a11y/bus", bus_name="org.a11y.Bus", interface="org.a11y.Status")
            _raise_on_error(session.send_and_get_reply(Properties(status).set("IsEnabled", "b", True), timeout=5.0))
        finally:
            session.close()
        self._bus = open_dbus_connection(address)
        return self._bus

    def close(self) -> None:
        """Close the accessibility bus connection (a later lookup opens it again)."""
        if self._bus is not None:
            self._bus.close()
            self._bus = None

    def _call(self, bus_name: str, path: str, interface: str, method: str, signature: str | None = None,
              body: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        """One method call within the lookup's deadline; its reply's body."""
        from jeepney import DBusAddress, new_method_call  # lazy: jeepney (Linux only)

        left = self._deadline - time.monotonic()
        if left <= 0:
            raise _OverBudget
        address = DBusAddress(path, bus_name=bus_name, interface=interface)
        try:
            reply = self._connect().send_and_get_reply(new_method_call(address, method, signature, body),
                                                       timeout=left)
        except TimeoutError:
            raise _OverBudget from None
        _raise_on_error(reply)
        return tuple(reply.body)

    def _property(self, ref: tuple[str, str], name: str) -> Any:
        (value,) = self._call(ref[0], ref[1], "org.freedesktop.DBus.Properties", "Get", "ss", (_ACCESSIBLE, name))
        return value[1]  # a variant: (signature, value)

    def _element(self, ref: tuple[str, str], application: str, coords: int = 0,
                 offset: tuple[int, int] = (0, 0), active_window: bool = False) -> Element:
        """The element ``ref``; its bounds asked in ``coords`` (screen, or window coordinates plus the
        window's screen ``offset``; none without screen coordinates)."""
        role = str(self._call(ref[0], ref[1], _ACCESSIBLE, "GetRoleName")[0])
        name = str(self._property(ref, "Name"))
        (bits,) = self._call(ref[0], ref[1], _ACCESSIBLE, "GetState")
        bounds: tuple[int, int, int, int] | None = None
        if self.screen_coordinates:
            try:
                x, y, w, h = self._call(ref[0], ref[1], _COMPONENT, "GetExtents", "u", (coords,))[0]
                bounds = (int(x) + offset[0], int(y) + offset[1], int(w), int(h))
            except LookupError:
                pass
        return Element(role, name, states_from_bits(bits), bounds, application, active_window)

    # -- lookups
    def _run(self, lookup: Any) -> Element | None:
        """Run ``lookup()`` within the budget; None (with :attr:`last_problem`) when it fails."""
        start = time.monotonic()
        self._deadline = start + self.budget_s
        self.last_problem = ""
        try:
            found: Element | None = lookup()
            return found
        except _OverBudget:
            self.last_problem = f"the accessibility lookup took longer than its budget ({self.budget_s * 1000:.0f} ms)"
            self.close()  # a late reply must not be read as the answer to the next call
        except Exception as exc:  # any failure of a program's accessibility means: not known
            self.last_problem = f"the accessibility tree could not be read: {type(exc).__name__}: {exc}"
            self.close()
        finally:
            self.last_ms = (time.monotonic() - start) * 1000
        if self.last_problem != self._logged:
            log.warning("%s; the risk rules judge by the model's words and the window", self.last_problem)
            self._logged = self.last_problem
        return None

    def _windows(self) -> list[tuple[tuple[str, str], str, frozenset[str], tuple[int, int, int, int]]]:
        """Every application window the registry knows: (reference, application name, states, extents)."""
        found = []
        (apps,) = self._call("org.a11y.atspi.Registry", "/org/a11y/atspi/accessible/root", _ACCESSIBLE, "GetChildren")
        for app_bus, app_path in apps:
            try:
                (children,) = self._call(app_bus, app_path, _ACCESSIBLE, "GetChildren")
                application = str(self._property((app_bus, app_path), "Name"))
            except LookupError:
                continue  # an application that went away or does not answer the call
            for bus, path in children:
                try:
                    (bits,) = self._call(bus, path, _ACCESSIBLE, "GetState")
                    states = states_from_bits(bits)
                    if "showing" not in states:
                        continue
                    (extents,) = self._call(bus, path, _COMPONENT, "GetExtents", "u", (_SCREEN,))
                except LookupError:
                    continue
                found.append(((str(bus), str(path)), application, states, tuple(int(v) for v in extents)))
        return found  # type: ignore[return-value]

    def applications(self) -> list[str]:
        """The names of the applications that publish their accessibility tree now (``holodesk doctor``).

        Raises:
            LookupError, OSError, TimeoutError: the accessibility bus cannot be reached or read (the message
                says why).
        """
        self._deadline = time.monotonic() + max(self.budget_s, 2.0)
        try:
            (apps,) = self._call("org.a11y.atspi.Registry", "/org/a11y/atspi/accessible/root", _ACCESSIBLE,
                                 "GetChildren")
            return [str(self._property((str(bus), str(path)), "Name")) for bus, path in apps]
        except _OverBudget:
            raise TimeoutError("the accessibility bus did not answer within 2 s") from None

    def element_at(self, x: int, y: int, window_rect: tuple[int, int, int, int] | None = None) -> Element | None:
        """The deepest element at screen point ``(x, y)`` (X11: root-window pixels), or None when no window
        that publishes its accessibility tree is there, or when it cannot be told which window is (several
        contain the point, and none matches ``window_rect``: the client area of the window the X server
        says is there, ``(x, y, width, height)``); always None without screen coordinates
        (:data:`NO_SCREEN_POSITIONS` in :attr:`last_problem`)."""
        if not self.screen_coordinates:
            self.last_problem, self.last_ms = NO_SCREEN_POSITIONS, 0.0
            return None

        def lookup() -> Element | None:
            windows = self._windows()
            candidates = [(w, _SCREEN, (0, 0)) for w in windows if _contains(w[3], x, y)]
            if candidates and window_rect is not None and \
                    (item := self._menu_item_at([c[0] for c in candidates], window_rect, x, y)) is not None:
                return self._element(*item)
            if len(candidates) > 1 and window_rect is not None:
                candidates = [c for c in candidates if _near(c[0][3], window_rect)]
            if not candidates and window_rect is not None and _contains(window_rect, x, y):
                # A toolkit without screen coordinates (GTK 4 on X11) puts its windows at (0, 0): the one of
                # the X window's size is asked in window coordinates.
                size = (0, 0, window_rect[2], window_rect[3])
                candidates = [(w, _WINDOW, (window_rect[0], window_rect[1])) for w in windows
                              if w[3][:2] == (0, 0) and _near(w[3], size)]
            if len(candidates) != 1:
                if candidates:
                    self.last_problem = f"{len(candidates)} accessible windows contain the point"
                return None
            (window, application, _, _), coords, offset = candidates[0]
            at = (x - offset[0], y - offset[1])
            ref = window
            for _ in range(_MAX_DEPTH):
                (child,) = self._call(ref[0], ref[1], _COMPONENT, "GetAccessibleAtPoint", "iiu", (*at, coords))
                child = (str(child[0]), str(child[1]))
                if child[1] in ("", "/org/a11y/atspi/null") or child == ref:
                    break
                ref = child
            if ref == window:  # the toolkit answered nothing (GTK 4.8): descend by the children's extents
                ref = self._pick_below(window, at, coords)
            return self._element(ref, application, coords, offset)

        return self._run(lookup)

    def focused(self) -> Element | None:
        """The element with the keyboard focus: in the active window, else in any showing window (while a
        menu is open its window is not active); without screen coordinates only in the one window that states
        it is active (the module docstring says why). None when none is known."""

        def lookup() -> Element | None:
            windows = self._windows()
            if not self.screen_coordinates:
                windows = [w for w in windows if "active" in w[2]]
                if len(windows) != 1:
                    self.last_problem = (f"{len(windows)} accessible windows state that they are active" if windows
                                         else "no window that publishes its accessibility tree states that it is "
                                         "active (the window with the keyboard focus publishes none, or no window "
                                         "has it), so where keys go cannot be told")
                    return None
            for ref, application, states, _ in sorted(windows, key=lambda w: "active" not in w[2]):
                active = "active" in states
                # a MatchRule: states ALL of {focused}; attributes, roles, interfaces ALL of none (any); not
                # inverted; sorted canonically, one match, descending into the whole subtree
                rule: tuple[Any, ...] = ([1 << _FOCUSED_BIT, 0], _MATCH_ALL, {}, _MATCH_ALL, [], _MATCH_ALL, [],
                                         _MATCH_ALL, False)
                try:
                    (matches,) = self._call(ref[0], ref[1], _COLLECTION, "GetMatches", "(aiia{ss}iaiiasib)uib",
                                            (rule, _SORT_CANONICAL, 1, True))
                except LookupError:  # no Collection interface (GTK 4): walk the showing elements
                    if (found := self._focused_below(ref, application, active)) is not None:
                        return found
                    continue
                if matches:
                    return self._element((str(matches[0][0]), str(matches[0][1])), application,
                                         active_window=active)
            for ref, application, states, _ in windows:
                if "active" in states and (item := self._open_menu_item(ref)) is not None:
                    return self._element(item, application, active_window=True)
            return None

        return self._run(lookup)

    def _menu_item_at(self, windows: list[tuple[tuple[str, str], str, frozenset[str], tuple[int, int, int, int]]],
                      rect: tuple[int, int, int, int], x: int, y: int) -> tuple[tuple[str, str], str] | None:
        """The smallest showing menu element (menu bar item, menu item) in ``windows`` that contains screen point
        ``(x, y)`` and lies inside ``rect``, the client area of the X window there: a GTK 3 popup menu is its own
        X window over its program's window, its items published in that window's tree under the menu bar's
        item, so a lookup in the window beneath would name what the menu covers. Its reference and
        application; None when there is none."""
        bits = [1 << STATE_NAMES.index("showing"), 0]
        roles = [0, 0, 0, 0]
        for role in _MENU_ROLE_NUMBERS:
            roles[role // 32] |= 1 << (role % 32)
        rule: tuple[Any, ...] = (bits, _MATCH_ALL, {}, _MATCH_ALL, roles, _MATCH_ANY, [], _MATCH_ALL, False)
        found: list[tuple[int, tuple[str, str], str]] = []
        for ref, application, _, _ in windows:
            try:
                (matches,) = self._call(ref[0], ref[1], _COLLECTION, "GetMatches", "(aiia{ss}iaiiasib)uib",
                                        (rule, _SORT_CANONICAL, 64, True))
            except LookupError:  # no Collection interface (GTK 4, whose popovers are no X windows of their own)
                continue
            for bus, path in matches:
                item = (str(bus), str(path))
                (extents,) = self._call(item[0], item[1], _COMPONENT, "GetExtents", "u", (_SCREEN,))
                ex, ey, ew, eh = (int(v) for v in extents)
                inside = _contains(rect, ex, ey) and _contains(rect, ex + ew - 1, ey + eh - 1)
                if inside and _contains((ex, ey, ew, eh), x, y):
                    found.append((ew * eh, item, application))
        if not found:
            return None
        _, item, application = min(found, key=lambda f: f[0])
        return item, application

    def _open_menu_item(self, window: tuple[str, str]) -> tuple[str, str] | None:
        """The highlighted item of an open menu in ``window`` (GTK 3 marks it ``selected``, not ``focused``,
        and keys go to it while the menu is open): the last selected, showing menu item; None without one."""
        bits = [(1 << STATE_NAMES.index("selected")) | (1 << STATE_NAMES.index("showing")), 0]
        rule: tuple[Any, ...] = (bits, _MATCH_ALL, {}, _MATCH_ALL, [], _MATCH_ALL, [], _MATCH_ALL, False)
        try:
            (matches,) = self._call(window[0], window[1], _COLLECTION, "GetMatches", "(aiia{ss}iaiiasib)uib",
                                    (rule, _SORT_CANONICAL, 16, True))
        except LookupError:  # no Collection interface (GTK 4, whose menus take the focus themselves)
            return None
        items = [(str(bus), str(path)) for bus, path in matches
                 if str(self._call(str(bus), str(path), _ACCESSIBLE, "GetRoleName")[0]) in _MENU_ITEM_ROLES]
        return items[-1] if items else None

    def _pick_below(self, window: tuple[str, str], at: tuple[int, int], coords: int) -> tuple[str, str]:
        """The deepest element under ``window`` whose extents (in ``coords``) contain ``at``, the last child
        first at each level (the one drawn on top), not descending below an element a press activates (a
        button's label is the button); ``window`` itself when none does."""
        ref = window
        for _ in range(_MAX_DEPTH):
            if ref != window and str(self._call(ref[0], ref[1], _ACCESSIBLE, "GetRoleName")[0]) in ACTIVATING_ROLES:
                return ref
            (children,) = self._call(ref[0], ref[1], _ACCESSIBLE, "GetChildren")
            for bus, path in reversed(children):
                child = (str(bus), str(path))
                (extents,) = self._call(child[0], child[1], _COMPONENT, "GetExtents", "u", (coords,))
                if _contains(tuple(int(v) for v in extents), *at):  # type: ignore[arg-type]
                    ref = child
                    break
            else:
                return ref
        return ref

    def _focused_below(self, window: tuple[str, str], application: str, active: bool) -> Element | None:
        """The focused element under ``window`` (``active``: the window states it is active), breadth first
        through showing elements (at most :data:`_MAX_WALK` of them, within the lookup's budget); its bounds in
        window coordinates."""
        queue, visited = [window], 0
        while queue and visited < _MAX_WALK:
            node = queue.pop(0)
            visited += 1
            (children,) = self._call(node[0], node[1], _ACCESSIBLE, "GetChildren")
            for bus, path in children:
                child = (str(bus), str(path))
                (bits,) = self._call(child[0], child[1], _ACCESSIBLE, "GetState")
                states = states_from_bits(bits)
                if "focused" in states:
                    return self._element(child, application, _WINDOW, active_window=active)
                if states & {"showing", "visible"}:  # GTK 4.8 sets "visible" only
                    queue.append(child)
        return None


def _raise_on_error(reply: Any) -> None:
    """Raise LookupError for a D-Bus error reply (an application that no longer has the object)."""
    from jeepney import MessageType  # lazy: jeepney (Linux only)

    if reply.header.message_type is MessageType.error:
        raise LookupError(f"{reply.header.fields.get(4, 'D-Bus error')}: {reply.body}")


def _contains(rect: tuple[int, int, int, int], x: int, y: int) -> bool:
    return rect[0] <= x < rect[0] + rect[2] and rect[1] <= y < rect[1] + rect[3]


def _near(a: tuple[int, int, int, int], b: tuple[int, int, int, int], slack: int = 4) -> bool:
    return all(abs(p - q) <= slack for p, q in zip(a, b, strict=True))
