"""The process's desktop backend: chosen once, opened once, reused by every task, closed once at exit.

:func:`desktop` chooses the backend (:func:`holodesk.display.choose_backend`) the first time a task, the CLI,
``holodesk mcp`` or ``doctor`` needs it, and keeps the choice for the process (it is chosen again only when
the ``desktop_backend`` setting or the desktop named by the environment changes: :func:`desktop_key`).

On GNOME Wayland (``mutter``) and through xdg-desktop-portal (``portal``) it owns the remote-desktop session
(its D-Bus connection and clipboard thread) and the one :class:`~holodesk.capture.pipewire_backend.MutterCapture`
on its streams (PipeWire connection, GStreamer pipeline): every task captures through that capture and acts
through an executor on that session. A second capture on the same screen-cast stream gets no frame, so a
task's ``capture.close()`` does not end it (:class:`SharedCapture`); :func:`close_desktop` does, once, at
exit. With ``mss`` (X11) each task gets its own capture and executor, as they hold no session; on Linux the
process's one :class:`~holodesk.display.x11.X11Watch` (opened on first use, closed at exit) notices the X
server's end: the running task is stopped (its executor's ``watch_desktop``) and every later task's capture
fails at once with "the desktop session ended".
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING

from holodesk.capture.mss_backend import MssCapture
from holodesk.capture.pipewire_backend import MutterCapture
from holodesk.control.mutter_executor import MUTTER_CAPABILITIES, MutterExecutor
from holodesk.control.pyautogui_executor import X11_CAPABILITIES, PyAutoGUIExecutor
from holodesk.core.geometry import Frame, Monitor
from holodesk.display import choose_backend
from holodesk.display.mutter import MutterRemoteDesktop
from holodesk.display.portal import PortalRemoteDesktop
from holodesk.display.x11 import X11Watch
from holodesk.errors import DisplayError, HolodeskError

if TYPE_CHECKING:
    from holodesk.capture.base import CaptureBackend
    from holodesk.control.base import Executor, ExecutorCapabilities
    from holodesk.display import BackendChoice
    from holodesk.settings import Settings

log = logging.getLogger(__name__)


class SharedCapture:
    """A task's view of the process's one capture: ``monitors`` and ``grab`` go to it; ``close`` leaves it
    open for the next task (the process's :class:`Desktop` closes it).

    Args:
        capture: the process's capture.
    """

    def __init__(self, capture: MutterCapture) -> None:
        self.capture = capture
        self.name = capture.name

    def monitors(self) -> list[Monitor]:
        """As :meth:`MutterCapture.monitors`."""
        return self.capture.monitors()

    def grab(self, monitor_index: int) -> Frame:
        """As :meth:`MutterCapture.grab`."""
        return self.capture.grab(monitor_index)

    def close(self) -> None:
        """Nothing: the capture stays open for the process's next task."""


class WatchedCapture:
    """A task's X11 capture under the process's watch of the X server: once the server has gone, ``monitors``
    and ``grab`` raise "the desktop session ended" instead of mss's failure (a grab that failed as the server
    went waits up to ``grace_s`` for the watch to see its end, so its error says so too).

    Args:
        capture: the task's capture (closed by ``close``).
        watch: the process's watch of the X server.
        grace_s: how long a failed call waits for the watch to see the server's end (s).
    """

    def __init__(self, capture: CaptureBackend, watch: X11Watch, grace_s: float = 1.0) -> None:
        self.capture = capture
        self.watch = watch
        self.grace_s = grace_s
        self.name = capture.name

    def monitors(self) -> list[Monitor]:
        """As the capture's ``monitors``.

        Raises:
            DisplayError: the X server went away ("the desktop session ended"), or as the capture raises.
        """
        self.watch.raise_if_ended()
        try:
            return self.capture.monitors()
        except HolodeskError as exc:
            if self.watch.ended.wait(self.grace_s):
                raise self.watch.desktop_ended_error() from exc
            raise

    def grab(self, monitor_index: int) -> Frame:
        """As the capture's ``grab``.

        Raises:
            DisplayError: the X server went away ("the desktop session ended"), or as the capture raises.
        """
        self.watch.raise_if_ended()
        try:
            return self.capture.grab(monitor_index)
        except HolodeskError as exc:
            if self.watch.ended.wait(self.grace_s):
                raise self.watch.desktop_ended_error() from exc
            raise

    def close(self) -> None:
        """Close the task's capture."""
        self.capture.close()


class Desktop:
    """The desktop backend of this process.

    Args:
        choice: the chosen backend and why (:func:`holodesk.display.choose_backend`).

    Attributes:
        choice: as given.
        remote: the remote-desktop session (``mutter``/``portal``; None for ``mss``), started on first use.
    """

    def __init__(self, choice: BackendChoice) -> None:
        self.choice = choice
        self.remote: MutterRemoteDesktop | PortalRemoteDesktop | None = None
        self._capture: MutterCapture | None = None
        self._x11_watch: X11Watch | None = None
        self._watch_lock = threading.Lock()
        if choice.backend == "mutter":
            self.remote = MutterRemoteDesktop()
        elif choice.backend == "portal":
            self.remote = PortalRemoteDesktop()
        if self.remote is not None:
            self._capture = MutterCapture(self.remote)

    def capture(self) -> CaptureBackend:
        """The capture a task uses: the process's one screen-cast capture (its ``close`` does nothing), or a
        new mss capture (X11; the task closes it).

        Raises:
            DisplayError: (mss) no X display to capture, or its X server went away ("the desktop session
                ended").
        """
        if self._capture is not None:
            return SharedCapture(self._capture)
        watch = self.x11_watch()
        if watch is not None:
            watch.raise_if_ended()
        return MssCapture() if watch is None else WatchedCapture(MssCapture(), watch)

    def executor(self, settings: Settings, stop_event: threading.Event | None = None) -> Executor:
        """A task's executor: on the process's remote-desktop session (``mutter``/``portal``) or pyautogui's.
        ``stop_event`` ends a running ``wait`` early."""
        if self.remote is not None:
            return MutterExecutor(self.remote, stop_event=stop_event)
        return PyAutoGUIExecutor(typing=settings.typing, stop_event=stop_event, desktop_watch=self.x11_watch())

    def x11_watch(self) -> X11Watch | None:
        """The process's watch of the X server (``mss`` on Linux with ``DISPLAY`` set), opened on first use;
        None elsewhere, or when the X server cannot be reached now (the capture then says why)."""
        if self.remote is not None or not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
            return None
        with self._watch_lock:
            if self._x11_watch is None:
                try:
                    self._x11_watch = X11Watch()
                except DisplayError as exc:
                    log.warning("the X server's end will not be noticed: %s", exc)
                    return None
            return self._x11_watch

    def capabilities(self) -> ExecutorCapabilities:
        """What this backend's executor can do beyond ``execute`` (:func:`executor_capabilities`)."""
        return executor_capabilities(self.choice.backend)

    def close(self) -> None:
        """Stop the capture's pipelines, then end the remote-desktop session and its D-Bus connection; close
        the X server's watch."""
        if self._x11_watch is not None:
            self._x11_watch.close()
        if self._capture is not None:
            self._capture.close()
        if self.remote is not None:
            self.remote.close()


DESKTOP_ENVIRONMENT = ("DISPLAY", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR")
"""The environment variables that say which desktop this process sees (and so which backend it gets)."""

def executor_capabilities(backend: str) -> ExecutorCapabilities:
    """The declared capabilities of backend ``backend``'s executor ("mss", "mutter" or "portal"), without
    building it (pyautogui is not imported)."""
    if backend in ("mutter", "portal"):
        return MUTTER_CAPABILITIES
    return X11_CAPABILITIES


_lock = threading.Lock()
_desktop: Desktop | None = None
_desktop_key: tuple[str, ...] = ()


def desktop_key(settings: Settings | None) -> tuple[str, ...]:
    """``(desktop_backend setting, *values of DESKTOP_ENVIRONMENT)``: a backend is chosen again only when
    this changes (never, in a desktop session; in tests that switch between private desktops, it does)."""
    setting = settings.desktop_backend if settings is not None else "auto"
    return (setting, *(os.environ.get(name, "") for name in DESKTOP_ENVIRONMENT))


def desktop(settings: Settings | None = None) -> Desktop:
    """The process's desktop backend, chosen on first use; chosen again (the old one closed first) only when
    :func:`desktop_key` changes: the ``desktop_backend`` setting or the desktop the environment names.

    Raises:
        DisplayError: no backend can work here (the message says why, the hint what to do).
    """
    global _desktop, _desktop_key
    key = desktop_key(settings)
    with _lock:
        if _desktop is not None and _desktop_key == key:
            return _desktop
        old, _desktop = _desktop, None
        if old is not None:
            log.info("the desktop_backend setting or the desktop changed: closing the %s backend",
                     old.choice.backend)
            old.close()
        choice = choose_backend(key[0])
        log.info("desktop backend: %s (%s)", choice.backend, choice.reason)
        if choice.display.problem and choice.backend == "mss":
            log.warning("%s %s", choice.display.problem, choice.display.hint)
        _desktop, _desktop_key = Desktop(choice), key
        return _desktop


def close_desktop() -> None:
    """Close the process's desktop backend (if one was chosen); the next :func:`desktop` chooses again.
    Registered to run at exit."""
    global _desktop
    with _lock:
        old, _desktop = _desktop, None
    if old is not None:
        old.close()


atexit.register(close_desktop)
