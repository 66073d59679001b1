"""The X server's end, noticed: one connection of its own to the X server, watched by a thread, tells the
running task when the server goes away (it exited, was killed, or the user logged out).

The X server sends a client that selected no events only the events every client gets (``MappingNotify``
after a keyboard remap); the watch thread reads and drops those, and the end of its connection is the end
of the X server (python-xlib raises ``ConnectionClosedError`` on the socket's end of file). The same
attributes as a Wayland remote-desktop session (:class:`~holodesk.display.remote.RemoteDesktopSession`):
``ended``, ``ended_reason``, ``on_end``, :meth:`X11Watch.raise_if_ended`.

pyautogui's X connection is opened once, at its import, so a process whose X server ended cannot act on a
new one: the error says to start Holodesk again.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections.abc import Callable
from typing import Any

from holodesk.display.remote import DESKTOP_ENDED
from holodesk.errors import DisplayError

log = logging.getLogger(__name__)


class X11Watch:
    """Watch the X server named ``display`` until :meth:`close`.

    Args:
        display: the X display name (default ``$DISPLAY``).

    Attributes:
        ended: set once the X server went away; from then on :meth:`raise_if_ended` raises.
        ended_reason: why, in words ("" until ``ended``).
        on_end: called once (with "the desktop session ended: REASON", from the watch thread; it must not
            block) when the server goes away: the running task's stop request (each task's set-up replaces it).

    Raises:
        DisplayError: the X server cannot be reached now.
    """

    def __init__(self, display: str | None = None) -> None:
        from Xlib import display as xdisplay  # lazy: python-xlib (Linux only)

        self.display_name = display if display is not None else os.environ.get("DISPLAY", "")
        self.ended = threading.Event()
        self.ended_reason = ""
        self.on_end: Callable[[str], None] | None = None
        self._lock = threading.Lock()
        try:
            self._conn: Any = xdisplay.Display(self.display_name or None)
        except Exception as exc:  # Xlib raises DisplayConnectionError, ConnectionClosedError, OSError...
            raise DisplayError(f"cannot connect to the X server {self.display_name!r} ({type(exc).__name__}: "
                               f"{exc})", hint="Check that the X server runs and DISPLAY names it.") from exc
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="x11-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from Xlib import error as xerror  # lazy: python-xlib (Linux only)

        fd = self._conn.fileno()
        while True:
            try:
                readable, _, _ = select.select([fd, self._wake_r], [], [])
                if self._wake_r in readable:
                    return
                while self._conn.pending_events():  # reads the socket; raises at its end of file
                    self._conn.next_event()
            except xerror.ConnectionClosedError:
                self.mark_ended(f"the X server {self.display_name} closed its connections")
                return
            except OSError as exc:
                self.mark_ended(f"the connection to the X server {self.display_name} broke ({exc.strerror})")
                return

    def mark_ended(self, reason: str) -> None:
        """Record that the X server went away (``reason``) and call :attr:`on_end` (once; later calls do
        nothing). Also called by users of another connection to the same server that saw it close."""
        with self._lock:
            if self.ended.is_set():
                return
            self.ended_reason = reason
            self.ended.set()
            listener = self.on_end
        log.warning("%s (%s)", DESKTOP_ENDED, reason)
        if listener is not None:
            try:
                listener(f"{DESKTOP_ENDED}: {reason}")
            except Exception:  # the watch thread must not die with a traceback the user sees
                log.exception("telling the running task that the desktop ended failed")

    def desktop_ended_error(self) -> DisplayError:
        """The error every use after the end raises: "the desktop session ended (why)"."""
        return DisplayError(f"{DESKTOP_ENDED} ({self.ended_reason})",
                            hint="Start the desktop (the X server) again, then start Holodesk again: this "
                                 "process's connection to the old X server cannot be reused.")

    def raise_if_ended(self) -> None:
        """Raise :meth:`desktop_ended_error` when the X server went away (:attr:`ended`)."""
        if self.ended.is_set():
            raise self.desktop_ended_error()

    def close(self) -> None:
        """Stop the watch thread and close its connection (idempotent)."""
        if self._wake_w < 0:
            return
        os.write(self._wake_w, b"x")
        self._thread.join(timeout=5)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1
        if not self.ended.is_set():
            try:
                self._conn.close()
            except Exception as exc:  # the server may have gone between the check and the close
                log.debug("closing the X watch connection: %s", exc)


def is_connection_closed(exc: BaseException) -> bool:
    """True when ``exc`` is python-xlib's sign that the X server closed the connection (the server went
    away), as pyautogui and the window queries raise it. Xlib is not imported (it exists on Linux only)."""
    return type(exc).__name__ == "ConnectionClosedError" and type(exc).__module__.startswith("Xlib")
