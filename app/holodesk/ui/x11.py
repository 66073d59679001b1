"""Small X11 queries the UI needs and Qt does not expose (python-xlib, Linux/X11 only).

* :func:`window_viewable` tells whether the X server has really unmapped one of our windows (Qt's
  ``hide()`` only queues the unmap), so the overlay is known to be gone before a grab (F13).
* :func:`iconify` minimises a window through the window manager (the no-tray window during a task).
* :func:`input_focus` / :func:`set_input_focus` let the approval overlay give keyboard focus back to
  the window that had it, so a typed action goes where the user expects (without a window manager
  nobody else restores it).

Every function returns None / False where X11 is not available instead of raising; callers log that.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.Lock()
_connection: Any = None


@contextlib.contextmanager
def _display() -> Iterator[Any]:
    """The process's one python-xlib connection to ``$DISPLAY`` (None off X11), held under a lock for the
    block: queries come from the GUI thread and from each task's worker thread, and a connection per thread
    would stay open (one X socket a task) until the garbage collector found it."""
    global _connection
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        yield None
        return
    with _lock:
        if _connection is None:
            try:
                from Xlib import display  # lazy (here and below): python-xlib exists only with X11

                _connection = display.Display()
            except Exception as exc:  # Xlib raises several unrelated types on a bad display
                log.debug("no X connection for UI queries: %s", exc)
        yield _connection


def window_viewable(window_id: int) -> bool | None:
    """True when X window ``window_id`` is mapped and viewable, False when not; None when unknown
    (not X11, or the window does not exist)."""
    with _display() as d:
        if d is None:
            return None
        try:
            win = d.create_resource_object("window", int(window_id))
            return bool(win.get_attributes().map_state == 2)  # IsViewable
        except Exception as exc:  # BadWindow once destroyed, connection errors
            log.debug("cannot query window %#x: %s", window_id, exc)
            return None


def window_managed(window_id: int) -> bool | None:
    """True when the window manager lists X window ``window_id`` among its clients (``_NET_CLIENT_LIST`` on
    the root window), False when not; None when unknown (not X11, or no window manager publishes the list).

    A compositing window manager (Mutter under XWayland) removes a hidden window from its scene when it
    handles the unmap, which can come well after the X server reported it unmapped; the list tells when.
    """
    with _display() as d:
        if d is None:
            return None
        try:
            atom = d.intern_atom("_NET_CLIENT_LIST", only_if_exists=True)
            if not atom:
                return None
            prop = d.screen().root.get_full_property(atom, 0)  # 0 = AnyPropertyType
        except Exception as exc:
            log.debug("cannot read the window manager's client list: %s", exc)
            return None
    if prop is None:
        return None
    return int(window_id) in {int(w) for w in prop.value}


def input_focus() -> int | None:
    """The X window id that has keyboard focus (None when unknown or none/PointerRoot)."""
    with _display() as d:
        if d is None:
            return None
        try:
            focus = d.get_input_focus().focus
        except Exception as exc:
            log.debug("cannot read input focus: %s", exc)
            return None
    wid = getattr(focus, "id", None)
    return int(wid) if isinstance(wid, int) and wid > 1 else None


def set_input_focus(window_id: int) -> bool:
    """Give keyboard focus to X window ``window_id``; False when that is not possible (also when the window was
    destroyed or unmapped after it was found viewable: the X server then refuses the focus)."""
    with _display() as d:
        if d is None:
            return False
        try:
            from Xlib import X, error  # lazy: python-xlib exists only with X11

            win = d.create_resource_object("window", int(window_id))
            if win.get_attributes().map_state != 2:
                return False
            # SetInputFocus has no reply: without a handler of its own, python-xlib writes its error to stderr
            refused = error.CatchError()  # BadWindow (destroyed since), BadMatch (unmapped since)
            win.set_input_focus(X.RevertToParent, X.CurrentTime, onerror=refused)
            d.sync()
            if refused.get_error() is not None:
                log.debug("cannot give focus back to %#x: %s", window_id, refused.get_error())
                return False
            return True
        except Exception as exc:
            log.debug("cannot give focus back to %#x: %s", window_id, exc)
            return False


def window_iconic(window_id: int) -> bool | None:
    """True when the window manager keeps X window ``window_id`` minimised (its ``WM_STATE`` is ``IconicState``,
    ICCCM 4.1.3.1), False when it is in another state or has none; None when unknown (not X11, no such window).
    Read from the X server: Qt's own idea of the state can miss the change (seen under load with openbox)."""
    with _display() as d:
        if d is None:
            return None
        try:
            atom = d.intern_atom("WM_STATE")
            prop = d.create_resource_object("window", int(window_id)).get_full_property(atom, atom)
            return bool(prop is not None and len(prop.value) > 0 and int(prop.value[0]) == 3)  # 3 = IconicState
        except Exception as exc:  # BadWindow once destroyed, connection errors
            log.debug("cannot read the state of %#x: %s", window_id, exc)
            return None


def iconify(window_id: int) -> bool:
    """Ask the window manager to minimise X window ``window_id`` (ICCCM 4.1.4: a ``WM_CHANGE_STATE``
    client message with ``IconicState`` to the root window). False where that cannot be sent (not X11).

    Unlike Qt's ``showMinimized()``, this leaves the window's own ``WM_HINTS`` as they are: Qt sets their
    initial state to iconic and keeps it after the window manager restores the window, so a later
    hide and show (as around every screen grab) brought a window the user had restored back minimised.
    """
    with _display() as d:
        if d is None:
            return False
        try:
            from Xlib import X  # lazy (here and below): python-xlib exists only with X11
            from Xlib.protocol import event

            root = d.screen().root
            message = event.ClientMessage(window=d.create_resource_object("window", int(window_id)),
                                          client_type=d.intern_atom("WM_CHANGE_STATE"),
                                          data=(32, [3, 0, 0, 0, 0]))  # 3 = IconicState
            root.send_event(message, event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)
            d.sync()
            return True
        except Exception as exc:
            log.debug("cannot minimise %#x: %s", window_id, exc)
            return False
