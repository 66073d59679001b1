"""Which window has keyboard focus (for risk assessment: typing into a terminal is high-risk, F11), and
which window a step acts in (for the approval's plain words and to keep the card off it)."""

from __future__ import annotations

import logging
import os
import select
import socket
import sys
import time
from typing import Any

from holodesk.core.wording import WindowInfo

log = logging.getLogger(__name__)


def focused_window_class() -> str | None:
    """WM_CLASS (instance and class, space-separated) of the focused X11 window, e.g. ``"xterm XTerm"``.

    Returns None where it cannot be known (no X display, not Linux, no focused window); the approval
    policy then treats keyboard actions by their content alone.
    """
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return None
    try:
        from Xlib import X, display
        from Xlib.error import XError
    except ImportError:
        log.warning("python-xlib is missing; the focused window cannot be identified")
        return None
    try:
        d = display.Display()
        try:
            win = d.get_input_focus().focus
            for _ in range(8):  # walk up to the client window that carries WM_CLASS
                if win in (None, X.NONE, X.PointerRoot) or isinstance(win, int):
                    return None
                cls = win.get_wm_class()
                if cls:
                    return " ".join(cls).strip() + terminal_mark(d, win)
                tree = win.query_tree()
                if tree.parent in (None, X.NONE) or tree.parent == tree.root:
                    return None
                win = tree.parent
            return None
        finally:
            d.close()
    except (XError, OSError, Exception) as exc:  # Xlib raises several unrelated types on a bad display
        log.warning("could not read the focused window: %s", exc)
        return None


TERMINAL_MARK = " [terminal]"
"""Appended to a window's class when its process holds a pseudo-terminal master, so that the risk rules
(:func:`holodesk.core.risk.is_terminal`) see a terminal whatever the class says."""


def holds_pty_master(pid: int) -> bool | None:
    """Whether process ``pid`` has a pseudo-terminal master open (``/dev/ptmx``): what a terminal
    emulator does to run its shell on the other end, whatever its window class (``xterm -class Notes``,
    ``kitty --class``). None when ``/proc/<pid>/fd`` cannot be read (another user's process, no /proc)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for name in names:
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") in ("/dev/ptmx", "/dev/pts/ptmx"):
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def terminal_mark(d: Any, client: Any) -> str:
    """:data:`TERMINAL_MARK` when the process owning ``client`` (``_NET_WM_PID``, on this machine by
    ``WM_CLIENT_MACHINE``) holds a pseudo-terminal master, else ""; "" too when that cannot be told."""
    pid = _wm_pid(d, client)
    if pid is None:
        return ""
    try:
        machine = client.get_wm_client_machine()
    except Exception:
        return ""
    host = machine.decode("latin-1", "replace") if isinstance(machine, bytes) else str(machine or "")
    if host and host != socket.gethostname():
        return ""  # a client of another machine: its pid means nothing here
    return TERMINAL_MARK if holds_pty_master(pid) else ""


def _text_property(d: Any, win: Any, name: str) -> str:
    """A UTF-8 text property (``_NET_WM_NAME``) of ``win``, "" when absent."""
    try:
        prop = win.get_full_property(d.intern_atom(name), d.intern_atom("UTF8_STRING"))
    except Exception:
        return ""
    if prop is None or not prop.value:
        return ""
    value = prop.value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _client_of(win: Any, depth: int = 3) -> Any:
    """``win`` or the first descendant carrying WM_CLASS (the application's window inside a WM frame)."""
    if win.get_wm_class():
        return win
    if depth <= 0:
        return None
    for child in reversed(win.query_tree().children):
        found = _client_of(child, depth - 1)
        if found is not None:
            return found
    return None


def _info(d: Any, root: Any, top: Any, client: Any) -> WindowInfo:
    geo = top.get_geometry()
    origin = root.translate_coords(top, 0, 0)
    title = _text_property(d, client, "_NET_WM_NAME") or (client.get_wm_name() or "")
    if isinstance(title, bytes):
        title = title.decode("latin-1", "replace")
    cls = client.get_wm_class() or ("", "")
    border = int(getattr(geo, "border_width", 0))
    client_geo = client.get_geometry()
    client_origin = root.translate_coords(client, 0, 0)
    rect = (int(origin.x) - border, int(origin.y) - border, int(geo.width) + 2 * border, int(geo.height) + 2 * border)
    return WindowInfo(str(title), str(cls[-1]) + terminal_mark(d, client), rect,
                      (int(client_origin.x), int(client_origin.y), int(client_geo.width), int(client_geo.height)),
                      int(client.id))


def _wm_pid(d: Any, client: Any) -> int | None:
    """The process id ``client`` states (``_NET_WM_PID``), None when it states none."""
    try:
        prop = client.get_full_property(d.intern_atom("_NET_WM_PID"), 0)
    except Exception:
        return None
    return int(prop.value[0]) if prop is not None and len(prop.value) > 0 else None


def _own(d: Any, client: Any) -> bool:
    return _wm_pid(d, client) == os.getpid()


def window_at(x: int | None = None, y: int | None = None) -> WindowInfo | None:
    """The application window at input-space point ``(x, y)`` (X11), or the focused window when no point
    is given (with X's PointerRoot focus, the window under the pointer, where keys then go): its title,
    application class, frame rectangle (input space, decorations included) and client rectangle (the
    application's own window, without the window manager's decorations).

    Walks the root window's children from the top of the stacking order: the first viewable one that
    contains the point and holds an application window (WM_CLASS), skipping this process's own windows.

    Returns:
        :class:`~holodesk.core.wording.WindowInfo`, or None where it cannot be known (no X display,
        not Linux, no window there); the approval then names no window.
    """
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return None
    try:
        from Xlib import X, display
    except ImportError:
        log.warning("python-xlib is missing; the target window cannot be identified")
        return None
    try:
        d = display.Display()
        try:
            root = d.screen().root
            if x is None or y is None:
                win = d.get_input_focus().focus
                if win == X.PointerRoot or win == root:  # keys go to the window under the pointer
                    pointer = root.query_pointer()
                    x, y = int(pointer.root_x), int(pointer.root_y)
                elif win in (None, X.NONE) or isinstance(win, int):
                    return None
            if x is None or y is None:
                top = win
                for _ in range(16):  # up to the child of the root: the frame
                    tree = top.query_tree()
                    if tree.parent in (None, X.NONE) or tree.parent == root:
                        break
                    top = tree.parent
                client = _client_of(win, 0) or _client_of(top)
                if client is None or _own(d, client):
                    return None
                return _info(d, root, top, client)
            for top in reversed(root.query_tree().children):
                attrs = top.get_attributes()
                if attrs.map_state != X.IsViewable:
                    continue
                geo = top.get_geometry()
                if not (geo.x <= x < geo.x + geo.width and geo.y <= y < geo.y + geo.height):
                    continue
                client = _client_of(top)
                if client is None or _own(d, client):
                    continue
                return _info(d, root, top, client)
            return None
        finally:
            d.close()
    except Exception as exc:  # Xlib raises several unrelated types on a bad display
        log.warning("could not read the window at the target: %s", exc)
        return None


def toplevel_at_pointer() -> int | None:
    """X11 id of the root window's child under the pointer (the window manager's frame, or the
    application window itself without a window manager); None where it cannot be known."""
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return None
    try:
        from Xlib import X, display
    except ImportError:
        log.warning("python-xlib is missing; the clicked window cannot be identified")
        return None
    try:
        d = display.Display()
        try:
            child = d.screen().root.query_pointer().child
            return None if child in (None, X.NONE) or isinstance(child, int) else int(child.id)
        finally:
            d.close()
    except Exception as exc:  # Xlib raises several unrelated types on a bad display
        log.warning("could not read the window under the pointer: %s", exc)
        return None


def wait_for_focus_in(toplevel: int, timeout_s: float) -> tuple[bool, float]:
    """Wait until the X input focus is ``toplevel`` or one of its descendants (or PointerRoot, where
    keys go to the window under the pointer), at most ``timeout_s`` seconds.

    Event-based: FocusChange events are selected on ``toplevel`` (the server sends it a FocusIn when the
    focus enters its subtree, X11 protocol "Input Focus Events"), and the focus is read back with
    GetInputFocus after each event, so a click that a busy client handles late still ends the wait as
    soon as the client has taken the focus.

    Returns:
        ``(focused, waited_s)``: whether the focus got there, and the seconds waited. False also where
        the focus cannot be read (no X display, the window is gone); the caller logs it.
    """
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return False, 0.0
    try:
        from Xlib import X, display
    except ImportError:
        return False, 0.0
    t0 = time.monotonic()
    try:
        d = display.Display()
        try:
            root = d.screen().root
            top = d.create_resource_object("window", toplevel)
            top.change_attributes(event_mask=X.FocusChangeMask)
            d.sync()

            def focused() -> bool:
                win = d.get_input_focus().focus
                if win == X.PointerRoot:
                    return True
                for _ in range(32):
                    if win in (None, X.NONE) or isinstance(win, int) or win.id == root.id:
                        return False
                    if win.id == toplevel:
                        return True
                    win = win.query_tree().parent
                return False

            deadline = t0 + timeout_s
            while not focused():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False, time.monotonic() - t0
                select.select([d], [], [], min(left, 0.25))  # a FocusIn (or anything) wakes us up
                while d.pending_events():
                    d.next_event()
            return True, time.monotonic() - t0
        finally:
            d.close()
    except Exception as exc:  # BadWindow when the window went away; Xlib raises several unrelated types
        log.warning("could not wait for the keyboard focus: %s", exc)
        return False, time.monotonic() - t0
