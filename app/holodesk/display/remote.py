"""What the two Wayland remote-desktop sessions share: Mutter's own D-Bus APIs
(:class:`~holodesk.display.mutter.MutterRemoteDesktop`) and xdg-desktop-portal
(:class:`~holodesk.display.portal.PortalRemoteDesktop`).

Both hold one session-bus connection (jeepney's threaded router: any thread may call, a receiver thread
dispatches replies and signals) for as long as their session lives, and offer the same calls to the
PipeWire capture backend and the Mutter executor. This module holds the connection's lifecycle, the
mapping of D-Bus failures to :class:`~holodesk.errors.DisplayError`, and the monitor lookup; each subclass
sets up its own session.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from holodesk.core.geometry import Monitor
from holodesk.errors import ActionError, DisplayError

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 10.0
"""How long a D-Bus call may wait for its reply, in seconds."""
DESKTOP_ENDED = "the desktop session ended"
"""How every failure caused by the desktop going away begins (the compositor or X server exited)."""
SHIFT_KEYSYM = 0xFFE1
"""X keysym of the left Shift key (X11/keysymdef.h)."""


@dataclass(frozen=True)
class MutterMonitor:
    """One monitor of Mutter's layout (or one screen shared through the portal).

    Attributes:
        monitor: geometry in the logical layout (input space), ``physical_*`` in pixels.
        connector: the output's connector name (``"Meta-0"`` for a headless virtual monitor; the PipeWire
            node id as text for a portal stream).
        scale: Mutter's scale of its logical monitor (pixels per logical unit when the layout is logical).
        primary: True for the primary monitor.
    """

    monitor: Monitor
    connector: str
    scale: float
    primary: bool


def unwrap_variant(value: Any) -> Any:
    """A jeepney variant ``(signature, value)`` -> value."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return value[1]
    return value


def close_connection(conn: Any) -> None:
    """Close a ``jeepney.io.threading.DBusConnection`` with everything it opened.

    jeepney 0.9's ``close()`` closes the socket but not the pipe the connection made to interrupt its
    receiver (``_stop_r``/``_stop_w``): 2 descriptors per connection, kept until the process ends. They are
    closed here after it."""
    conn.close()
    for name in ("_stop_r", "_stop_w"):
        fd = getattr(conn, name, None)
        if isinstance(fd, int) and fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
            setattr(conn, name, -1)


class _OwnerLost:
    """A stand-in for a filter queue: a ``NameOwnerChanged`` signal with an empty new owner marks the
    session's desktop as ended."""

    def __init__(self, session: RemoteDesktopSession, reason: str) -> None:
        self.session = session
        self.reason = reason

    def put_nowait(self, msg: Any) -> None:
        _name, _old, new = msg.body
        if not new:
            self.session._mark_ended(self.reason)


@dataclass(frozen=True)
class ServiceWording:
    """How the error messages of a session name its D-Bus service, and what they advise.

    Attributes:
        session: the session's name in "this ... session was closed" ("Mutter", "portal").
        service: who the connection goes to ("GNOME's remote-desktop service").
        refuser: who refuses a call ("Mutter", "the portal").
        answerer: who fails to answer in time ("Mutter", "xdg-desktop-portal").
        lost_hint, refused_hint, timeout_hint: what the user can do in each case.
    """

    session: str
    service: str
    refuser: str
    answerer: str
    lost_hint: str
    refused_hint: str
    timeout_hint: str


class RemoteDesktopSession:
    """A remote-desktop session over one session-bus connection; subclasses set it up and drive it.

    Subclasses implement :meth:`_start_session` (called under the lock with the connection open; it fills
    ``_monitors`` and raises :class:`DisplayError` on failure), :meth:`_stop_session`, :meth:`key`, and
    may extend :meth:`_forget_session`.

    Args:
        bus_address: D-Bus address of the session bus (default ``$DBUS_SESSION_BUS_ADDRESS``).

    Thread safety: every method may be called from any thread.
    """

    wording: ClassVar[ServiceWording]

    def __init__(self, bus_address: str | None = None) -> None:
        self.bus_address = bus_address
        self._lock = threading.RLock()
        self._router: Any = None
        self._conn: Any = None
        self._monitors: list[MutterMonitor] = []
        self._closed = False
        self.generation = 0
        """Counts the sessions started; it changes when a session is replaced (monitor layout change, lost
        connection), so users of stream nodes know to reconnect."""
        self.ended = threading.Event()
        """Set when the desktop this session drives went away (its compositor left the session bus:
        :meth:`_watch_service`); from then on every use raises :meth:`desktop_ended_error` at once."""
        self.ended_reason = ""
        self.on_end: Callable[[str], None] | None = None
        """Called once (with the reason, from the D-Bus receiver thread; it must not block) when the desktop
        ends: the running task's stop request (one task at a time: each task's set-up replaces it)."""
        self.input_ready = threading.Event()
        """Set once input from this session is known to be applied (GNOME drops input sent in the first
        50-200 ms of a session; :class:`~holodesk.capture.pipewire_backend.MutterCapture` checks it)."""

    # -- D-Bus plumbing -----------------------------------------------------------------------------
    def _send(self, msg: Any, interface: str, method: str, timeout: float) -> tuple[Any, ...]:
        """Send method call ``msg`` and return its reply's body.

        Raises:
            DisplayError: the session is not started, the connection was lost (the session is shut down,
                so the next call starts a new one), the service refused the call, or it did not answer
                within ``timeout`` s.
        """
        from jeepney.io.common import RouterClosed  # lazy: jeepney (Linux only)
        from jeepney.wrappers import DBusErrorResponse, unwrap_msg  # lazy: jeepney (Linux only)

        words = self.wording
        self.raise_if_ended()
        router = self._router
        if router is None:
            raise DisplayError(f"the {words.session} remote-desktop session is not started")
        try:
            return tuple(unwrap_msg(router.send_and_get_reply(msg, timeout=timeout)))
        except (RouterClosed, OSError) as exc:
            self._shutdown()  # the next call starts a new session
            raise DisplayError(f"the connection to {words.service} was lost during {method} "
                               f"({type(exc).__name__}: {exc})", hint=words.lost_hint) from exc
        except DBusErrorResponse as exc:
            raise DisplayError(f"{words.refuser} refused {interface.rsplit('.', 1)[-1]}.{method}: {exc.name}: "
                               f"{' '.join(map(str, exc.data))}", hint=words.refused_hint) from exc
        except TimeoutError as exc:
            raise DisplayError(f"{words.answerer} did not answer {method} within {timeout:g} s",
                               hint=words.timeout_hint) from exc

    def desktop_ended_error(self) -> DisplayError:
        """The error every use of an ended session raises: "the desktop session ended (why)"."""
        return DisplayError(f"{DESKTOP_ENDED} ({self.ended_reason})",
                            hint="Log in to the desktop again (or start it), then run the task again.")

    def raise_if_ended(self) -> None:
        """Raise :meth:`desktop_ended_error` when the desktop went away (:attr:`ended`)."""
        if self.ended.is_set():
            raise self.desktop_ended_error()

    def _watch_service(self, name: str, who: str) -> None:
        """Set :attr:`ended` when bus name ``name`` loses its owner (``NameOwnerChanged`` with an empty new
        owner): the process behind it (``who``, for the reason) is gone, and the desktop with it."""
        from jeepney import MatchRule  # lazy: jeepney (Linux only)

        rule = MatchRule(type="signal", sender="org.freedesktop.DBus", interface="org.freedesktop.DBus",
                         member="NameOwnerChanged", path="/org/freedesktop/DBus")
        rule.add_arg_condition(0, name)
        self._router.filter(rule, queue=_OwnerLost(self, f"{who} left the session bus"))
        self._add_match(rule)

    def _mark_ended(self, reason: str) -> None:
        if self.ended.is_set():
            return
        self.ended_reason = reason
        self.ended.set()
        log.warning("%s (%s)", DESKTOP_ENDED, reason)
        listener = self.on_end
        if listener is not None:
            try:
                listener(f"{DESKTOP_ENDED}: {reason}")
            except Exception:  # the receiver thread must keep running
                log.exception("telling the running task that the desktop ended failed")

    def _add_match(self, rule: Any) -> None:
        """Ask the bus to route signals matching jeepney ``MatchRule`` ``rule`` to this connection."""
        from jeepney.bus_messages import message_bus  # lazy: jeepney (Linux only)

        self._router.send_and_get_reply(message_bus.AddMatch(rule), timeout=CALL_TIMEOUT_S)

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Open the bus and set up and start the session (idempotent).

        Raises:
            DisplayError: no session bus, the session was closed, the desktop ended (:attr:`ended`), or the
                subclass's set-up failed.
        """
        with self._lock:
            self.raise_if_ended()
            if self._router is not None:
                return
            if self._closed:
                raise DisplayError(f"this {self.wording.session} session was closed")
            from jeepney.io.threading import DBusRouter, open_dbus_connection  # lazy: jeepney (Linux only)

            try:
                self._conn = open_dbus_connection(bus=self.bus_address or "SESSION", enable_fds=True)
            except (OSError, KeyError, ValueError) as exc:
                raise DisplayError(f"cannot connect to the session D-Bus ({type(exc).__name__}: {exc})",
                                   hint="Run Holodesk inside your desktop session.") from exc
            self._router = DBusRouter(self._conn)
            try:
                self._start_session()
            except BaseException:
                self._shutdown()
                raise

    def _start_session(self) -> None:
        raise NotImplementedError

    def _stop_session(self) -> None:
        """Ask the service to end the session (the connection is still open)."""
        raise NotImplementedError

    def _press_throwaway_key(self) -> None:
        """GNOME's compositor drops the first key event of a new session; a Shift press/release absorbs it."""
        for pressed in (True, False):
            self.key(SHIFT_KEYSYM, pressed)

    def key(self, keysym: int, pressed: bool) -> None:
        """Press or release a key by X keysym."""
        raise NotImplementedError

    def close(self) -> None:
        """End the session and close the bus connection (the streams end with it). Idempotent."""
        with self._lock:
            self._closed = True
            if self._router is not None:
                try:
                    self._stop_session()
                except Exception as exc:  # the compositor or portal may be gone already
                    log.debug("ending the %s session failed: %s", self.wording.session, exc)
            self._shutdown()

    def _shutdown(self) -> None:
        """Close the router and the connection and forget the session's state (idempotent)."""
        with self._lock:
            router, conn = self._router, self._conn
            self._router = self._conn = None
        if router is not None:
            router.close()
        if conn is not None:
            close_connection(conn)
        self._forget_session()

    def _forget_session(self) -> None:
        """Drop what belonged to the ended session (the subclass adds its own)."""
        self.input_ready.clear()

    @property
    def started(self) -> bool:
        """True while the session runs."""
        return self._router is not None

    # -- layout -------------------------------------------------------------------------------------
    def monitors(self) -> list[MutterMonitor]:
        """The session's monitors (starting the session if needed).

        Raises:
            DisplayError: as :meth:`start`; the desktop ended (:meth:`raise_if_ended`)."""
        self.raise_if_ended()
        self.start()
        return list(self._monitors)

    def monitor(self, index: int) -> MutterMonitor:
        """Monitor ``index`` (1-based).

        Raises:
            DisplayError: as :meth:`start`. ActionError: no such monitor (the message lists the valid ones).
        """
        mons = self.monitors()
        for mon in mons:
            if mon.monitor.index == index:
                return mon
        valid = ", ".join(str(m.monitor.index) for m in mons)
        raise ActionError(f"there is no monitor {index!r}; valid monitor indices are {valid}",
                          hint="Pick one of the listed monitors (`holodesk doctor` shows them).")
