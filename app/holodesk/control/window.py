"""Which window has keyboard focus (for risk assessment: typing into a terminal is high-risk, F11),
which window a step acts in (for the approval's plain words and to keep the card off it), and where the
X11 monitors are (for the fail-safe corners)."""

from __future__ import annotations

import logging
import os
import select
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from holodesk.core.wording import WindowInfo
from holodesk.errors import ActionError, DisplayError

log = logging.getLogger(__name__)

T = TypeVar("T")


READS_WHILE_WINDOWS_VANISH = 3
"""How many times :func:`read_while_windows_vanish` (and so :func:`_read_display`) reads when a window is
destroyed during the read (X's BadWindow or BadDrawable): reading the windows takes several requests (the
stacking order, then each window's attributes, geometry, class), and a window that goes away between two of
them (an approval overlay whose frame openbox destroys when it unmanages it, a closing tooltip or
notification) would make the whole read fail, so the target window or the focus would be "unknown": the
autopilot would ask for a harmless click, and the executor's last look would refuse one on an unchanged window.
Read again, the windows are as they are now."""


def vanished_errors() -> tuple[type[Exception], ...]:
    """The X errors of a window (or drawable) that no longer exists: BadWindow, BadDrawable."""
    from Xlib import error  # lazy: python-xlib (Linux only)

    return (error.BadWindow, error.BadDrawable)


def read_while_windows_vanish(read: Callable[[], T], doing: str) -> T:
    """``read()``, made again (at most :data:`READS_WHILE_WINDOWS_VANISH` reads in all) while it meets a window
    destroyed during it (:func:`vanished_errors`): the windows are then read as they are now. The last read's
    error, and any other error at once, goes to the caller.

    Args:
        read: reads the windows on an open X connection (python-xlib raises the vanished window's error).
        doing: what the read is for, for the log ("read the focused window").
    """
    for _ in range(READS_WHILE_WINDOWS_VANISH - 1):
        try:
            return read()
        except vanished_errors() as exc:
            log.debug("a window went away while Holodesk tried to %s (%s); reading again", doing, exc)
    return read()


def _read_display(read: Callable[[Any], T], default: T, doing: str, missing: str = "") -> T:
    """``read(d)`` on a new connection ``d`` to the X display (``Xlib.display.Display``), closed afterwards;
    read again when a window was destroyed during the read (:func:`read_while_windows_vanish`).

    Returns:
        What ``read`` returns; ``default`` where there is no X display (not Linux, DISPLAY unset), where
        python-xlib is missing (logged as "python-xlib is missing; <missing>" when ``missing`` is given), or
        where the connection or the last ``read`` raises (logged as "could not <doing>: <error>": Xlib raises
        several unrelated types on a bad display or a window that went away).
    """
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return default
    try:
        from Xlib import display  # lazy: python-xlib (Linux only)
    except ImportError:
        if missing:
            log.warning("python-xlib is missing; %s", missing)
        return default
    try:
        d = display.Display()
    except Exception as exc:
        log.warning("could not %s: %s", doing, exc)
        return default
    try:
        return read_while_windows_vanish(lambda: read(d), doing)
    except Exception as exc:
        log.warning("could not %s: %s", doing, exc)
        return default
    finally:
        try:
            d.close()
        except Exception as exc:  # a connection the server broke: nothing left to release
            log.debug("closing the X connection failed: %s", exc)


def focused_window_class() -> str | None:
    """WM_CLASS (instance and class, space-separated) of the X11 window keys go to now, e.g. ``"xterm XTerm"``
    (:func:`_key_window`: the focused one; with X's PointerRoot focus, the one under the pointer), with
    :data:`TERMINAL_MARK` when its process is a terminal's.

    Returns None where it cannot be known (no X display, not Linux, no focused window, the bare root under
    the pointer); the approval policy then treats keyboard actions by their content alone.
    """
    return _read_display(_focused_class, None, "read the focused window",
                         missing="the focused window cannot be identified")


def _focused_class(d: Any) -> str | None:
    found = _key_window(d, d.screen().root)
    if found is None:
        return None
    client = found[1]
    cls = client.get_wm_class()
    return " ".join(cls).strip() + terminal_mark(d, client) if cls else None


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


UNKNOWN_PROCESS_MARK = " [may be a terminal: its process cannot be found]"
"""Appended to a window's class when the process behind it cannot be found (a client of another machine,
as with ``ssh -X``; a process this user cannot inspect): it may be a terminal, and the risk rules read the
mark as one, so keys and clicks there ask."""


def client_pid(d: Any, client: Any) -> int | None:
    """The process id of the X client that created window ``client``, as the X server knows it: the
    X-Resource extension's ``QueryClientIds`` with ``LocalClientPIDMask`` (the server takes it from the
    connection's peer credentials, so neither a false ``_NET_WM_PID`` nor a sandbox's own PID namespace nor a
    ``WM_CLIENT_MACHINE`` naming another host changes it). None for a client of another machine, or where
    the server lacks the extension."""
    try:
        from Xlib.ext import res  # lazy: python-xlib (Linux only)

        if not d.has_extension(res.extname):
            return None
        reply = d.res_query_client_ids([{"client": int(client.id), "mask": res.LocalClientPIDMask}])
    except Exception:  # python-xlib raises several unrelated types on a bad reply
        return None
    for found in reply.ids:
        if found.spec.mask & res.LocalClientPIDMask and len(found.value) > 0:
            return int(found.value[0])
    return None


def _process_children() -> dict[int, list[int]]:
    """Parent process id -> its children's ids, from ``/proc/*/stat`` (empty where /proc cannot be read)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="latin-1") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    return children


def tree_holds_pty_master(pid: int, limit: int = 256) -> bool | None:
    """Whether ``pid`` or one of its descendants (at most ``limit`` processes) holds a pseudo-terminal
    master (:func:`holds_pty_master`): an IDE's terminal panel runs its shell on a pty a helper process
    holds. None when ``pid`` itself cannot be inspected."""
    first = holds_pty_master(pid)
    if first is not False:
        return first
    children = _process_children()
    queue, seen = list(children.get(pid, ())), {pid}
    while queue and len(seen) < limit:
        child = queue.pop(0)
        if child in seen:
            continue
        seen.add(child)
        if holds_pty_master(child):
            return True
        queue.extend(children.get(child, ()))
    return False


def terminal_mark(d: Any, client: Any) -> str:
    """:data:`TERMINAL_MARK` when the process behind ``client`` or one of its descendants holds a
    pseudo-terminal master (:func:`tree_holds_pty_master`), :data:`UNKNOWN_PROCESS_MARK` when that process
    cannot be found or inspected, else "". The process is the one the X server names (:func:`client_pid`);
    without the X-Resource extension, the one ``_NET_WM_PID`` states when ``WM_CLIENT_MACHINE`` is this
    host."""
    pid = client_pid(d, client)
    if pid is None:
        pid = _wm_pid(d, client)
        try:
            machine = client.get_wm_client_machine()
        except Exception:
            machine = None
        host = machine.decode("latin-1", "replace") if isinstance(machine, bytes) else str(machine or "")
        if pid is None or (host and host != socket.gethostname()):
            return UNKNOWN_PROCESS_MARK  # a client of another machine, or one that names no process
    holds = tree_holds_pty_master(pid)
    if holds is None:
        return UNKNOWN_PROCESS_MARK
    return TERMINAL_MARK if holds else ""


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
    """``win`` or the first descendant carrying WM_CLASS (the application's window inside a WM frame); a
    descendant destroyed while it is read is passed over (it is no longer there)."""
    if win.get_wm_class():
        return win
    if depth <= 0:
        return None
    for child in reversed(win.query_tree().children):
        try:
            found = _client_of(child, depth - 1)
        except vanished_errors():
            continue
        if found is not None:
            return found
    return None


def _title(d: Any, client: Any) -> str:
    """The title of ``client``: ``_NET_WM_NAME``, else ``WM_NAME``; "" when it has none."""
    title = _text_property(d, client, "_NET_WM_NAME") or (client.get_wm_name() or "")
    return title.decode("latin-1", "replace") if isinstance(title, bytes) else str(title)


def _info(d: Any, root: Any, top: Any, client: Any) -> WindowInfo:
    geo = top.get_geometry()
    origin = root.translate_coords(top, 0, 0)
    title = _title(d, client)
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


HOLODESK_WM_CLASS = "Holodesk"
"""The class part of WM_CLASS that Qt gives every window of a Holodesk process (from the application name
that :func:`holodesk.ui.app.run_app` and :func:`holodesk.ui.host.host_tasks` set)."""


def is_holodesk_window(d: Any, client: Any) -> bool:
    """True when the application window ``client`` is Holodesk's own: this process's (``_NET_WM_PID``) or
    any Holodesk process's (WM_CLASS class :data:`HOLODESK_WM_CLASS`), such as the app's window while
    ``holodesk run`` drives the desktop from a terminal."""
    if _wm_pid(d, client) == os.getpid():
        return True
    try:
        cls = client.get_wm_class()
    except Exception:
        return False
    return bool(cls) and cls[-1] == HOLODESK_WM_CLASS


def _frame_of(win: Any, root: Any) -> Any:
    """The root window's child that holds ``win`` (its window manager frame, or ``win`` itself)."""
    top = win
    for _ in range(16):
        tree = top.query_tree()
        if tree.parent in (None, 0) or tree.parent == root:
            break
        top = tree.parent
    return top


def _window_at(root: Any, x: int, y: int) -> tuple[Any, Any] | None:
    """``(frame, client)`` of the topmost viewable root child that contains root point ``(x, y)`` and holds
    an application window (WM_CLASS), None when there is none (the bare root window). A root child destroyed
    after the stacking order was read is passed over: it is not on the screen any more, whatever it was
    (another program's closing window does not make the window at the point unknown)."""
    from Xlib import X  # lazy: python-xlib (Linux only)

    for top in reversed(root.query_tree().children):
        try:
            if top.get_attributes().map_state != X.IsViewable:
                continue
            geo = top.get_geometry()
            if not (geo.x <= x < geo.x + geo.width and geo.y <= y < geo.y + geo.height):
                continue
            client = _client_of(top)
        except vanished_errors():
            continue
        if client is not None:
            return top, client
    return None


def _key_window(d: Any, root: Any) -> tuple[Any, Any] | None:
    """``(frame, client)`` of the window keys go to now: the focused one, or with X's PointerRoot focus
    (or the root focused) the one under the pointer; None when there is none (no focus, the bare root)."""
    from Xlib import X  # lazy: python-xlib (Linux only)

    win = d.get_input_focus().focus
    if win == X.PointerRoot or win == root:
        pointer = root.query_pointer()
        return _window_at(root, int(pointer.root_x), int(pointer.root_y))
    if win in (None, X.NONE) or isinstance(win, int):
        return None
    top = _frame_of(win, root)
    client = _client_of(win, 0) or _client_of(top)
    return None if client is None else (top, client)


def window_at(x: int | None = None, y: int | None = None) -> WindowInfo | None:
    """The application window at input-space point ``(x, y)`` (X11), or the window keys go to when no
    point is given (the focused one; with X's PointerRoot focus, the one under the pointer): its title,
    application class, frame rectangle (input space, decorations included) and client rectangle (the
    application's own window, without the window manager's decorations).

    The window at a point is the first viewable child of the root, from the top of the stacking order,
    that contains the point and holds an application window (WM_CLASS). Holodesk's own windows are named
    like any other (class ``Holodesk``); an action there is refused by :func:`refuse_holodesk_target`.

    Returns:
        :class:`~holodesk.core.wording.WindowInfo`, or None where it cannot be known (no X display,
        not Linux, no window there); the approval then names no window.
    """
    def read(d: Any) -> WindowInfo | None:
        root = d.screen().root
        found = _key_window(d, root) if x is None or y is None else _window_at(root, x, y)
        return None if found is None else _info(d, root, *found)

    return _read_display(read, None, "read the window at the target", missing="the target window cannot be identified")


def holodesk_window_at(x: int | None = None, y: int | None = None) -> str | None:
    """The title of Holodesk's own window (:func:`is_holodesk_window`) when it is the window at input-space
    point ``(x, y)`` or, without a point, the window keys go to now (both found as :func:`window_at` does).

    Returns:
        The window's title (``"Holodesk"`` when it has none); None when the window there is another
        program's, there is none, or it cannot be known (no X display, not Linux, an X error: logged).
    """
    def read(d: Any) -> str | None:
        root = d.screen().root
        found = _key_window(d, root) if x is None or y is None else _window_at(root, x, y)
        if found is None or not is_holodesk_window(d, found[1]):
            return None
        return _title(d, found[1]) or HOLODESK_WM_CLASS

    return _read_display(read, None, "tell whether the target is a Holodesk window")


def refuse_holodesk_target(points: Sequence[tuple[int, int]] | None) -> None:
    """Refuse an action aimed at one of Holodesk's own windows (:func:`holodesk_window_at`): a pointer
    action where the window at one of its ``points`` (input space) is Holodesk's, or keys (``points``
    None) while the window keys go to is Holodesk's. The executor calls it just before it acts, after the
    approval overlay has left the screen.

    Raises:
        ActionError: the action would land on Holodesk's own window; nothing was done. The message names
            the window and the point (or the keyboard focus).
    """
    targets: list[tuple[int, int] | None] = list(points) if points is not None else [None]
    for at in targets:
        title = holodesk_window_at(*at) if at is not None else holodesk_window_at()
        if title is None:
            continue
        where = f"the point ({at[0]}, {at[1]}) is on" if at is not None else "the keyboard focus is in"
        raise ActionError(
            f"refused: {where} Holodesk's own window \u2018{title}\u2019, not on the program the task is "
            "about; nothing was done",
            hint="Move or minimise Holodesk's window so that it does not cover the target, then try again.",
        )


def toplevel_at_pointer() -> int | None:
    """X11 id of the root window's child under the pointer (the window manager's frame, or the
    application window itself without a window manager); None where it cannot be known."""
    def read(d: Any) -> int | None:
        from Xlib import X  # lazy: python-xlib (Linux only)

        child = d.screen().root.query_pointer().child
        return None if child in (None, X.NONE) or isinstance(child, int) else int(child.id)

    return _read_display(read, None, "read the window under the pointer",
                         missing="the clicked window cannot be identified")


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
    t0 = time.monotonic()

    def wait(d: Any) -> bool:
        from Xlib import X  # lazy: python-xlib (Linux only)

        root = d.screen().root
        top = d.create_resource_object("window", toplevel)  # BadWindow (logged) when the window went away
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
                return False
            select.select([d], [], [], min(left, 0.25))  # a FocusIn (or anything) wakes us up
            while d.pending_events():
                d.next_event()
        return True

    return _read_display(wait, False, "wait for the keyboard focus"), time.monotonic() - t0


def monitor_rects() -> list[tuple[int, int, int, int]]:
    """The X11 monitors (RandR 1.5 GetMonitors: outputs and ``xrandr --setmonitor`` monitors) as
    ``(left, top, width, height)`` in root-window pixels (OS input space), in the server's order.

    Returns:
        An empty list where there is no X display (not Linux, DISPLAY unset).
    Raises:
        DisplayError: the X server cannot be reached or lacks RandR 1.5.
    """
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return []
    try:
        from Xlib import display  # lazy: python-xlib (Linux only)

        d = display.Display()
    except Exception as exc:  # Xlib raises several unrelated types on a bad display
        raise DisplayError(f"cannot connect to the X display to list its monitors ({exc})",
                           hint="Check DISPLAY and XAUTHORITY.") from exc
    try:
        reply = d.screen().root.xrandr_get_monitors(is_active=True)
        return [(int(m.x), int(m.y), int(m.width_in_pixels), int(m.height_in_pixels)) for m in reply.monitors]
    except Exception as exc:
        raise DisplayError(f"the X server did not list its monitors (RandR 1.5 GetMonitors: {exc})",
                           hint="Holodesk needs an X server with RandR 1.5 (X.Org 1.18 or later).") from exc
    finally:
        d.close()
