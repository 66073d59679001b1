"""GNOME on Wayland: one remote-desktop session with Mutter's own D-Bus APIs (no dialog).

``org.gnome.Mutter.RemoteDesktop`` gives input (pointer, buttons, wheel, keys, clipboard) and
``org.gnome.Mutter.ScreenCast`` a PipeWire stream per monitor; ``org.gnome.Mutter.DisplayConfig`` the
monitor layout (logical position, size and scale). These are what gnome-remote-desktop uses; any process
of the user's session may call them. The sessions live only while the D-Bus connection that created them
stays open, so one :class:`MutterRemoteDesktop` owns one connection
(:class:`~holodesk.display.remote.RemoteDesktopSession`).

Coordinates: :class:`~holodesk.core.geometry.Monitor` values are in Mutter's logical layout (the input
space of :mod:`holodesk.core.geometry`); ``NotifyPointerMotionAbsolute`` takes stream pixels, i.e. the
frame pixels of that monitor's stream (logical offset times the monitor's scale).

Sources: mutter's D-Bus interface files (org.gnome.Mutter.RemoteDesktop.xml, ScreenCast.xml,
DisplayConfig.xml); facts verified on mutter 43 in docs/architecture.md ("Wayland").
"""

from __future__ import annotations

import logging
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from holodesk.core.geometry import Monitor
from holodesk.display.remote import (
    CALL_TIMEOUT_S,
    SHIFT_KEYSYM,
    MutterMonitor,
    RemoteDesktopSession,
    ServiceWording,
    unwrap_variant,
)
from holodesk.errors import ActionError, DisplayError

log = logging.getLogger(__name__)

REMOTE_DESKTOP = "org.gnome.Mutter.RemoteDesktop"
SCREEN_CAST = "org.gnome.Mutter.ScreenCast"
DISPLAY_CONFIG = "org.gnome.Mutter.DisplayConfig"
STREAM_TIMEOUT_S = 10.0
UTF8_MIME = "text/plain;charset=utf-8"
TEXT_MIMES = (UTF8_MIME, "UTF8_STRING", "text/plain", "STRING", "TEXT")

BTN_LEFT, BTN_RIGHT, BTN_MIDDLE = 0x110, 0x111, 0x112
"""Linux evdev button codes (linux/input-event-codes.h), as NotifyPointerButton takes them."""

AXIS_VERTICAL, AXIS_HORIZONTAL = 0, 1

_NAMED_KEYSYMS: dict[str, int] = {
    "ctrl": 0xFFE3, "alt": 0xFFE9, "shift": SHIFT_KEYSYM, "super": 0xFFEB, "win": 0xFFEB, "cmd": 0xFFEB,
    "option": 0xFFE9, "altgr": 0xFE03, "enter": 0xFF0D, "tab": 0xFF09, "esc": 0xFF1B, "backspace": 0xFF08,
    "delete": 0xFFFF, "insert": 0xFF63, "space": 0x0020, "up": 0xFF52, "down": 0xFF54, "left": 0xFF51,
    "right": 0xFF53, "home": 0xFF50, "end": 0xFF57, "pageup": 0xFF55, "pagedown": 0xFF56,
    "capslock": 0xFFE5, "numlock": 0xFF7F, "scrolllock": 0xFF14, "printscreen": 0xFF61, "pause": 0xFF13,
    "menu": 0xFF67, "apps": 0xFF67,
    **{f"f{i}": 0xFFBE + i - 1 for i in range(1, 25)},
}
"""Normalised key names (:func:`holodesk.core.actions.normalize_key`) -> X keysyms (X11/keysymdef.h)."""


def keysym_for(key: str) -> int:
    """X keysym of a normalised key name or a single character.

    Latin-1 characters map to themselves, other characters to ``0x01000000 + code point``
    (X11's Unicode keysyms); ``"\\n"`` is Return and ``"\\t"`` Tab.

    Raises:
        ActionError: (field ``keys``) for an unknown key name.
    """
    if key in ("\n", "\r"):
        return 0xFF0D
    if key == "\t":
        return 0xFF09
    if len(key) == 1:
        cp = ord(key)
        return cp if 0x20 <= cp <= 0x7E or 0xA0 <= cp <= 0xFF else 0x01000000 + cp
    try:
        return _NAMED_KEYSYMS[key]
    except KeyError:
        raise ActionError(f"key {key!r} has no keysym", field="keys",
                          hint="Use a single character or a named key (enter, tab, ctrl, ...).") from None


def parse_display_state(state: Sequence[Any]) -> list[MutterMonitor]:
    """Monitors from ``DisplayConfig.GetCurrentState()``'s reply body, in logical layout order
    (primary first, then left to right, top to bottom), ``index`` 1-based.

    Args:
        state: ``(serial, monitors, logical_monitors, properties)`` as jeepney returns it.
    Raises:
        DisplayError: no logical monitor.
    """
    _serial, monitors, logical_monitors, properties = state
    physical_layout = int(unwrap_variant(properties.get("layout-mode", ("u", 1)))) == 2
    modes: dict[str, tuple[int, int]] = {}
    for (connector, _vendor, _product, _serial_no), mode_list, _props in monitors:
        for _mode_id, width, height, _refresh, _pref_scale, _scales, mode_props in mode_list:
            if bool(unwrap_variant(mode_props.get("is-current", ("b", False)))):
                modes[connector] = (int(width), int(height))
    found: list[tuple[bool, int, int, str, float, tuple[int, int]]] = []
    for x, y, scale, _transform, primary, specs, _props in logical_monitors:
        for connector, *_rest in specs:
            if connector in modes:
                found.append((bool(primary), int(x), int(y), str(connector), float(scale), modes[connector]))
    if not found:
        raise DisplayError("Mutter reports no active monitor", hint="Turn a monitor on, then try again.")
    found.sort(key=lambda m: (not m[0], m[2], m[1]))
    out = []
    for i, (primary, x, y, connector, scale, (pw, ph)) in enumerate(found, start=1):
        lw, lh = (pw, ph) if physical_layout else (round(pw / scale), round(ph / scale))
        out.append(MutterMonitor(Monitor(index=i, left=x, top=y, width=lw, height=lh, name=connector,
                                         physical_width=pw, physical_height=ph),
                                 connector, 1.0 if physical_layout else scale, primary))
    return out


def pipewire_socket_path(environ: Mapping[str, str] | None = None) -> str:
    """Path of the PipeWire daemon's socket as libpipewire finds it (``PIPEWIRE_REMOTE`` in
    ``PIPEWIRE_RUNTIME_DIR`` or ``XDG_RUNTIME_DIR``, default name ``pipewire-0``).

    Raises:
        DisplayError: neither runtime dir is set.
    """
    env = os.environ if environ is None else environ
    name = env.get("PIPEWIRE_REMOTE") or "pipewire-0"
    if name.startswith("/"):
        return name
    base = env.get("PIPEWIRE_RUNTIME_DIR") or env.get("XDG_RUNTIME_DIR")
    if not base:
        raise DisplayError("cannot find PipeWire: XDG_RUNTIME_DIR is not set",
                           hint="Run Holodesk inside your desktop session.")
    return os.path.join(base, name)


class MutterRemoteDesktop(RemoteDesktopSession):
    """A Mutter remote-desktop session with one screen-cast stream per monitor.

    Args:
        bus_address: D-Bus address of the session bus (default ``$DBUS_SESSION_BUS_ADDRESS``).
        pipewire_socket: path of PipeWire's socket (default :func:`pipewire_socket_path`).

    Raises (from :meth:`start` and every call): :class:`DisplayError` when Mutter's APIs are not on the bus
    or a call fails; the message names the call and what to do.

    Thread safety: every method may be called from any thread.
    """

    wording = ServiceWording(
        session="Mutter", service="GNOME's remote-desktop service", refuser="Mutter", answerer="Mutter",
        lost_hint="If GNOME Shell restarted, try again; Holodesk opens a new session.",
        refused_hint="Run 'holodesk doctor' to see the Wayland backend's state.",
        timeout_hint="The desktop may be busy or locked; try again.")

    def __init__(self, bus_address: str | None = None, pipewire_socket: str | None = None) -> None:
        super().__init__(bus_address)
        self.pipewire_socket = pipewire_socket
        self._session_path = ""
        self._streams: dict[str, str] = {}
        self._nodes: dict[str, int] = {}
        self._clipboard_enabled = False
        self._selection: bytes | None = None
        self._transfers = _CountingQueue()
        self._served: queue.Queue[int] = queue.Queue()
        self._transfer_thread: threading.Thread | None = None
        self._layout_changed = threading.Event()

    # -- D-Bus plumbing -----------------------------------------------------------------------------
    def _call(self, path: str, interface: str, method: str, signature: str = "", body: tuple[Any, ...] = (),
              bus_name: str | None = None, timeout: float = CALL_TIMEOUT_S) -> tuple[Any, ...]:
        from jeepney import DBusAddress, new_method_call  # lazy: jeepney (Linux only)

        name = bus_name or (SCREEN_CAST if interface.startswith(SCREEN_CAST) else
                            DISPLAY_CONFIG if interface.startswith(DISPLAY_CONFIG) else REMOTE_DESKTOP)
        msg = new_method_call(DBusAddress(path, bus_name=name, interface=interface), method, signature, body)
        return self._send(msg, interface, method, timeout)

    def _session(self, method: str, signature: str = "", body: tuple[Any, ...] = ()) -> tuple[Any, ...]:
        return self._call(self._session_path, REMOTE_DESKTOP + ".Session", method, signature, body)

    # -- lifecycle ----------------------------------------------------------------------------------
    def _start_session(self) -> None:
        """Create and start the session with one stream per monitor.

        Raises:
            DisplayError: Mutter's APIs absent, a call refused, or a stream's PipeWire node not announced
                within 10 s.
        """
        from jeepney import MatchRule  # lazy: jeepney (Linux only)

        self._watch_service(REMOTE_DESKTOP, "GNOME's compositor (Mutter)")
        created = self._call("/org/gnome/Mutter/RemoteDesktop", REMOTE_DESKTOP, "CreateSession")
        self._session_path = str(created[0])
        session_id = self._get_property(self._session_path, REMOTE_DESKTOP + ".Session", "SessionId")
        cast = self._call("/org/gnome/Mutter/ScreenCast", SCREEN_CAST, "CreateSession", "a{sv}",
                          ({"remote-desktop-session-id": ("s", session_id)},))
        cast_path = str(cast[0])
        layout_rule = MatchRule(type="signal", interface=DISPLAY_CONFIG, member="MonitorsChanged")
        self._router.filter(layout_rule, queue=_SetEvent(self._layout_changed))
        self._add_match(layout_rule)
        self._layout_changed.clear()  # a change from now on replaces this session at the next use
        self._monitors = self._read_monitors()
        added: queue.Queue[Any] = queue.Queue()
        rule = MatchRule(type="signal", interface=SCREEN_CAST + ".Stream", member="PipeWireStreamAdded")
        with self._router.filter(rule, queue=added):
            self._add_match(rule)
            for mon in self._monitors:
                stream = self._call(cast_path, SCREEN_CAST + ".Session", "RecordMonitor", "sa{sv}",
                                    (mon.connector, {"cursor-mode": ("u", 1)}))
                self._streams[mon.connector] = str(stream[0])
            self._session("Start")
            self._await_nodes(added)
        self._press_throwaway_key()
        self.generation += 1
        log.info("Mutter remote-desktop session %s started: %s", self._session_path,
                 ", ".join(f"{m.connector} -> node {self._nodes[m.connector]}" for m in self._monitors))

    def _get_property(self, path: str, interface: str, name: str, bus_name: str = REMOTE_DESKTOP) -> Any:
        reply = self._call(path, "org.freedesktop.DBus.Properties", "Get", "ss", (interface, name),
                           bus_name=bus_name)
        return unwrap_variant(reply[0])

    def _read_monitors(self) -> list[MutterMonitor]:
        state = self._call("/org/gnome/Mutter/DisplayConfig", DISPLAY_CONFIG, "GetCurrentState")
        return parse_display_state(state)

    def _await_nodes(self, added: queue.Queue[Any]) -> None:
        from jeepney import HeaderFields  # lazy: jeepney (Linux only)

        by_stream = {path: connector for connector, path in self._streams.items()}
        deadline = time.monotonic() + STREAM_TIMEOUT_S
        while len(self._nodes) < len(self._streams):
            left = deadline - time.monotonic()
            try:
                msg = added.get(timeout=max(left, 0.0))
            except queue.Empty:
                raise DisplayError("Mutter started the screen cast but announced no PipeWire stream within "
                                   f"{STREAM_TIMEOUT_S:g} s",
                                   hint="Check that PipeWire and WirePlumber run in your session.") from None
            connector = by_stream.get(str(msg.header.fields.get(HeaderFields.path, "")))
            if connector is not None:
                self._nodes[connector] = int(msg.body[0])

    def _stop_session(self) -> None:
        self._session("Stop")

    def _forget_session(self) -> None:
        self._streams.clear()
        self._nodes.clear()
        self._selection = None  # a new session owns no clipboard
        thread, self._transfer_thread = self._transfer_thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)  # it sees the ended session within 0.2 s
        self._clipboard_enabled = False
        super()._forget_session()

    # -- layout and streams -------------------------------------------------------------------------
    def monitors(self) -> list[MutterMonitor]:
        """The current monitor layout (starting the session if needed). When Mutter announced a layout
        change (``MonitorsChanged``) the session is replaced by one recording the new monitors
        (:attr:`generation` changes).

        Raises:
            DisplayError: as :meth:`start`.
        """
        with self._lock:
            if self._layout_changed.is_set() and self._router is not None:
                log.info("the monitor layout changed: starting a new Mutter remote-desktop session")
                try:
                    self._session("Stop")
                except DisplayError as exc:
                    log.debug("stopping the old session failed: %s", exc)
                self._shutdown()
            return super().monitors()

    def pipewire_node(self, connector: str) -> int:
        """PipeWire node id of ``connector``'s stream."""
        self.start()
        return self._nodes[connector]

    def open_pipewire_fd(self) -> int:
        """A new connection to the session's PipeWire daemon, as a file descriptor for ``pipewiresrc fd=``
        (the caller owns and closes it).

        Raises:
            DisplayError: PipeWire's socket cannot be reached.
        """
        path = self.pipewire_socket or pipewire_socket_path()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            raise DisplayError(f"cannot connect to PipeWire at {path} ({exc})",
                               hint="Check that PipeWire runs in your desktop session.") from exc
        return sock.detach()

    # -- input ----------------------------------------------------------------------------------------
    def move_pointer(self, connector: str, stream_x: float, stream_y: float) -> None:
        """Move the pointer to stream pixel (x, y) of ``connector``'s monitor."""
        self.start()
        self._session("NotifyPointerMotionAbsolute", "sdd", (self._streams[connector], stream_x, stream_y))

    def nudge_pointer(self) -> None:
        """Move the pointer one pixel and back (relative motion), so the compositor redraws the
        embedded cursor and sends a fresh frame on every stream. Sent without waiting for replies (the
        frame that follows is the answer that matters; two round trips to a busy compositor cost 10-40 ms)."""
        from jeepney import DBusAddress, MessageFlag, new_method_call  # lazy: jeepney (Linux only)

        self.start()
        address = DBusAddress(self._session_path, bus_name=REMOTE_DESKTOP, interface=REMOTE_DESKTOP + ".Session")
        for dx in (1.0, -1.0):
            msg = new_method_call(address, "NotifyPointerMotionRelative", "dd", (dx, 0.0))
            msg.header.flags |= MessageFlag.no_reply_expected
            self._router.send(msg)

    def button(self, button: int, pressed: bool) -> None:
        """Press or release an evdev button (``BTN_LEFT`` ...)."""
        self.start()
        self._session("NotifyPointerButton", "ib", (button, pressed))

    def scroll(self, axis: int, steps: int) -> None:
        """Turn the wheel ``steps`` clicks on ``axis`` (vertical: positive = down; horizontal: positive =
        right)."""
        self.start()
        self._session("NotifyPointerAxisDiscrete", "ui", (axis, steps))

    def key(self, keysym: int, pressed: bool) -> None:
        """Press or release a key by keysym (Mutter finds its keycode and shift level in the active layout;
        a keysym absent from the layout is dropped by Mutter)."""
        self.start()
        self._session("NotifyKeyboardKeysym", "ub", (keysym, pressed))

    # -- clipboard --------------------------------------------------------------------------------------
    def _enable_clipboard(self) -> None:
        """Enable the session's clipboard once, start answering ``SelectionTransfer`` requests and watch
        ``SelectionOwnerChanged``: when another client takes the clipboard (the user copied something), the
        text this session owned is forgotten (:meth:`_selection_lost`), so it is neither read back as the
        clipboard's text nor put back over the user's copy."""
        if self._clipboard_enabled:
            return
        from jeepney import MatchRule  # lazy: jeepney (Linux only)

        rule = MatchRule(type="signal", interface=REMOTE_DESKTOP + ".Session", member="SelectionTransfer",
                         path=self._session_path)
        handle = self._router.filter(rule, queue=self._transfers)
        self._add_match(rule)
        owner_rule = MatchRule(type="signal", interface=REMOTE_DESKTOP + ".Session", member="SelectionOwnerChanged",
                               path=self._session_path)
        self._router.filter(owner_rule, queue=_OwnerWatch(self))
        self._add_match(owner_rule)
        self._transfer_thread = threading.Thread(target=self._serve_transfers, args=(handle, self._router),
                                                 name="mutter-selection", daemon=True)
        self._transfer_thread.start()
        self._session("EnableClipboard", "a{sv}", ({},))
        self._clipboard_enabled = True

    def _serve_transfers(self, handle: Any, router: Any) -> None:
        """Answer ``SelectionTransfer(mime, serial)`` with the selection we own, until the session of
        ``router`` ends (the next session has its own thread). Each answered request's arrival number goes
        into ``_served``."""
        while self._router is router:
            try:
                number, msg = self._transfers.get(timeout=0.2)
            except queue.Empty:
                continue
            _mime, serial = msg.body
            data = self._selection
            try:
                reply = self._session("SelectionWrite", "u", (serial,))
                fd = reply[0].to_raw_fd()
                try:
                    if data:
                        _write_all(fd, data)
                finally:
                    os.close(fd)
                self._session("SelectionWriteDone", "ub", (serial, data is not None))
                self._served.put(number)
            except Exception as exc:  # one failed transfer must not stop serving the next ones
                log.warning("answering a clipboard transfer failed: %s", exc)
        handle.close()

    def _selection_lost(self) -> None:
        """Another client owns the clipboard now: this session's text is no longer in it."""
        self._selection = None

    def read_selection(self, timeout_s: float = 2.0) -> bytes | None:
        """The clipboard's current UTF-8 text, or None when it holds no text (or the owner does not answer
        within ``timeout_s``)."""
        self.start()
        self._enable_clipboard()
        if self._selection is not None:
            return self._selection
        try:
            reply = self._session("SelectionRead", "s", (UTF8_MIME,))
        except DisplayError as exc:  # no owner, or no text offered
            log.debug("no text in the clipboard: %s", exc)
            return None
        fd = reply[0].to_raw_fd()
        try:
            return _read_all(fd, timeout_s)
        finally:
            os.close(fd)

    def set_selection(self, data: bytes) -> int:
        """Own the clipboard with ``data`` (UTF-8 text), answering every paste from now on.

        Returns:
            The number of transfer requests that had arrived when Mutter confirmed the new owner. Mutter's
            clipboard manager copies a new owner's text at once, and that request arrives before the
            confirmation (one connection keeps its order), so a paste is a request numbered above this.
        """
        self.start()
        self._enable_clipboard()
        self._selection = data
        self._session("SetSelection", "a{sv}", ({"mime-types": ("as", list(TEXT_MIMES))},))
        return self._transfers.arrived

    def paste_text(self, text: str, chord: Callable[[], None], timeout_s: float = 5.0) -> bool:
        """Paste ``text`` through the compositor clipboard, then put the clipboard's previous text back, only
        while the clipboard still holds ``text`` from this session (a copy the user made meanwhile is kept).

        When the clipboard held no text before (empty, or an image), the pasted text stays in it.

        Args:
            text: the text to paste.
            chord: presses the paste chord (Ctrl+V) in the focused window.
            timeout_s: how long to wait for the focused window to fetch the text.
        Returns:
            True when the focused window fetched the text (the paste was taken), False when it did not ask
            within ``timeout_s`` (nothing was pasted, e.g. the focused widget takes no text).
        """
        previous = self.read_selection()
        pasted = text.encode("utf-8")
        mark = self.set_selection(pasted)
        taken = False
        try:
            chord()
            deadline = time.monotonic() + timeout_s
            while not taken:
                try:
                    taken = self._served.get(timeout=max(deadline - time.monotonic(), 0.0)) > mark
                except queue.Empty:
                    break
        finally:
            if previous is not None and self._selection is pasted:
                self.set_selection(previous)
            elif previous is not None:
                log.info("the clipboard changed during the paste; it is left as it is now")
        return taken


class _OwnerWatch:
    """A stand-in for a filter queue: ``SelectionOwnerChanged`` with ``session-is-owner`` false tells
    ``session`` that another client took the clipboard."""

    def __init__(self, session: MutterRemoteDesktop) -> None:
        self.session = session

    def put_nowait(self, msg: Any) -> None:
        options = msg.body[0]
        if not bool(unwrap_variant(options.get("session-is-owner", ("b", False)))):
            self.session._selection_lost()


class _SetEvent:
    """A stand-in for a filter queue that sets ``event`` for every message put into it."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def put_nowait(self, item: Any) -> None:
        self.event.set()


class _CountingQueue(queue.Queue[tuple[int, Any]]):
    """A queue that numbers what is put into it (1, 2, ...) and counts arrivals in ``arrived``."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = 0

    def _put(self, item: Any) -> None:  # called with the queue's lock held
        self.arrived += 1
        super()._put((self.arrived, item))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_all(fd: int, timeout_s: float) -> bytes | None:
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


VERSIONED_INTERFACES = (
    ("Mutter RemoteDesktop", REMOTE_DESKTOP, "/org/gnome/Mutter/RemoteDesktop", REMOTE_DESKTOP, "Version"),
    ("Mutter ScreenCast", SCREEN_CAST, "/org/gnome/Mutter/ScreenCast", SCREEN_CAST, "Version"),
    ("portal ScreenCast", "org.freedesktop.portal.Desktop", "/org/freedesktop/portal/desktop",
     "org.freedesktop.portal.ScreenCast", "version"),
    ("portal RemoteDesktop", "org.freedesktop.portal.Desktop", "/org/freedesktop/portal/desktop",
     "org.freedesktop.portal.RemoteDesktop", "version"),
    ("portal Screenshot", "org.freedesktop.portal.Desktop", "/org/freedesktop/portal/desktop",
     "org.freedesktop.portal.Screenshot", "version"),
)
"""(label, bus name, object path, interface, version property) of the desktop interfaces doctor reports."""


def interface_versions(bus_address: str | None = None, timeout_s: float = 3.0) -> dict[str, str]:
    """Version of each screen-cast/remote-desktop interface on the session bus (``"absent"`` when its
    service is not there or does not implement it); ``{"session bus": reason}`` without a session bus."""
    from jeepney import DBusAddress, new_method_call  # lazy: jeepney (Linux only)
    from jeepney.io.blocking import open_dbus_connection  # lazy: jeepney (Linux only)

    try:
        conn = open_dbus_connection(bus=bus_address or "SESSION", auth_timeout=timeout_s)
    except (OSError, KeyError, ValueError, TimeoutError) as exc:
        return {"session bus": f"not reachable ({type(exc).__name__}: {exc})"}
    out: dict[str, str] = {}
    with conn:
        for label, name, path, interface, prop in VERSIONED_INTERFACES:
            msg = new_method_call(DBusAddress(path, bus_name=name, interface="org.freedesktop.DBus.Properties"),
                                  "Get", "ss", (interface, prop))
            try:
                reply = conn.send_and_get_reply(msg, timeout=timeout_s)
            except TimeoutError:
                out[label] = f"no answer within {timeout_s:g} s"
                continue
            out[label] = "absent" if reply.header.message_type.name == "error" else str(unwrap_variant(reply.body[0]))
    return out
