"""Wayland through xdg-desktop-portal: one ScreenCast + RemoteDesktop portal session.

The desktop-neutral route, for sandboxes and for compositors without Mutter's own APIs (KDE Plasma, and
GNOME where ``org.gnome.Mutter.*`` is not reachable). The portal (``org.freedesktop.portal.Desktop`` on
the session bus) asks the user in a dialog which screens may be shared and controlled.

Session set-up (every call answers with a Request object whose ``Response(u code, a{sv} results)``
signal carries the result; code 0 = granted, 1 = the user cancelled, 2 = ended otherwise):

1. ``RemoteDesktop.CreateSession`` -> ``session_handle``;
2. ``RemoteDesktop.SelectDevices(types = keyboard|pointer)``; from RemoteDesktop version 2 on with
   ``persist_mode = 2`` (until revoked) and the stored ``restore_token``;
3. ``ScreenCast.SelectSources(types = monitor, multiple, cursor_mode = embedded)``;
4. ``RemoteDesktop.Start`` -> ``streams a(ua{sv})`` (PipeWire node, ``position``, ``size``) and, when the
   permission is remembered, a new single-use ``restore_token``, which is stored for the next start;
5. ``ScreenCast.OpenPipeWireRemote`` -> a PipeWire fd for ``pipewiresrc fd=… path=NODE``.

Input goes through ``NotifyPointerMotionAbsolute(stream, x, y)`` (stream logical coordinates),
``NotifyPointerButton``, ``NotifyPointerAxisDiscrete`` and ``NotifyKeyboardKeysym`` on the session.

Remembering the permission: xdg-desktop-portal 1.16 (Debian 12; RemoteDesktop version 1) refuses
``persist_mode`` on a remote-desktop session ("Remote desktop sessions cannot persist"); only a
screen-cast-only session may persist, and Holodesk needs input too. So with RemoteDesktop version 1 the
desktop asks at every start of Holodesk (:attr:`PortalRemoteDesktop.permission_note` says so, and
``holodesk doctor``); from version 2 on it asks once and the restore token in
:func:`restore_token_path` is used afterwards.

Sources: the portal's D-Bus interface files (org.freedesktop.portal.RemoteDesktop.xml, ScreenCast.xml,
Request.xml) and xdg-desktop-portal 1.16's screen-cast.c / remote-desktop.c.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import platformdirs

from holodesk.core.geometry import Monitor
from holodesk.display.remote import (
    CALL_TIMEOUT_S,
    MutterMonitor,
    RemoteDesktopSession,
    ServiceWording,
    unwrap_variant,
)
from holodesk.errors import ActionError, DisplayError

log = logging.getLogger(__name__)

PORTAL_BUS_NAME = "org.freedesktop.portal.Desktop"
PORTAL_PATH = "/org/freedesktop/portal/desktop"
SCREEN_CAST = "org.freedesktop.portal.ScreenCast"
REMOTE_DESKTOP = "org.freedesktop.portal.RemoteDesktop"
REQUEST = "org.freedesktop.portal.Request"
DIALOG_TIMEOUT_S = 180.0
"""How long a portal request may wait for the user to answer its dialog."""

DEVICE_KEYBOARD, DEVICE_POINTER = 1, 2
SOURCE_MONITOR = 1
CURSOR_EMBEDDED = 2
PERSIST_UNTIL_REVOKED = 2
PERSIST_MIN_REMOTE_DESKTOP_VERSION = 2
"""RemoteDesktop interface version from which ``SelectDevices`` takes ``persist_mode``/``restore_token``."""

_tokens = itertools.count(1)


def restore_token_path() -> Path:
    """Where the portal's restore token is kept: ``<user state dir>/holodesk/portal.json`` (platformdirs)."""
    return Path(platformdirs.user_state_dir("holodesk")) / "portal.json"


def load_restore_token(path: Path | None = None) -> str | None:
    """The stored restore token, or None when none is stored (or the file is unreadable, logged)."""
    path = path or restore_token_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring the unreadable portal state %s: %s", path, exc)
        return None
    token = data.get("restore_token") if isinstance(data, dict) else None
    return token if isinstance(token, str) and token else None


def save_restore_token(token: str | None, path: Path | None = None) -> None:
    """Store ``token`` (None removes it) in ``path`` (mode 0600: it lets this user skip the dialog)."""
    path = path or restore_token_path()
    if token is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"restore_token": token, "saved_at": time.time()}, f)
    os.replace(tmp, path)


def request_path(unique_name: str, token: str) -> str:
    """Object path of the Request a portal call with ``handle_token = token`` answers on
    (``/org/freedesktop/portal/desktop/request/SENDER/TOKEN``, SENDER = the caller's unique bus name without
    the leading ``:`` and with ``.`` as ``_``)."""
    sender = unique_name.lstrip(":").replace(".", "_")
    return f"{PORTAL_PATH}/request/{sender}/{token}"


def streams_to_monitors(streams: list[Any]) -> list[MutterMonitor]:
    """Monitors from ``Start``'s ``streams`` result ``[(node_id, {"position": (x, y), "size": (w, h)})]``,
    ordered left to right, top to bottom, ``index`` 1-based; ``connector`` is the node id as text.

    The portal gives logical geometry only; frames are assumed to be the same size (scale 1).

    Raises:
        DisplayError: no stream (nothing was shared).
    """
    found = []
    for node_id, props in streams:
        props = {k: unwrap_variant(v) for k, v in dict(props).items()}
        x, y = props.get("position", (0, 0))
        w, h = props.get("size", (0, 0))
        found.append((int(y), int(x), int(w), int(h), int(node_id)))
    if not found:
        raise DisplayError("the desktop shared no screen with Holodesk",
                           hint="Start again and choose a screen in the desktop's sharing dialog.")
    found.sort()
    return [MutterMonitor(Monitor(index=i, left=x, top=y, width=w, height=h, name=f"portal stream {node}",
                                  physical_width=w, physical_height=h), str(node), 1.0, i == 1)
            for i, (y, x, w, h, node) in enumerate(found, start=1)]


class PortalRemoteDesktop(RemoteDesktopSession):
    """A RemoteDesktop portal session with the screens the user shared (same calls as
    :class:`~holodesk.display.mutter.MutterRemoteDesktop`, so the PipeWire capture backend and the Mutter
    executor drive it unchanged).

    Args:
        bus_address: session bus address (default ``$DBUS_SESSION_BUS_ADDRESS``).
        token_path: where the restore token is kept (default :func:`restore_token_path`).
        dialog_timeout_s: how long to wait for the user to answer the portal's dialog.

    Raises (from :meth:`start` and every call): :class:`DisplayError` when the portal is absent, the user
    cancelled the dialog, or a call failed; the message says which and what to do.
    """

    backend_name = "portal"
    wording = ServiceWording(
        session="portal", service="xdg-desktop-portal", refuser="the portal", answerer="xdg-desktop-portal",
        lost_hint="Try again; Holodesk opens a new session (the desktop may ask again).",
        refused_hint="Run 'holodesk doctor' to see the portal's versions.",
        timeout_hint="Check that xdg-desktop-portal and its desktop backend run.")

    def __init__(self, bus_address: str | None = None, token_path: Path | None = None,
                 dialog_timeout_s: float = DIALOG_TIMEOUT_S) -> None:
        super().__init__(bus_address)
        self.token_path = token_path
        self.dialog_timeout_s = dialog_timeout_s
        self._session_handle = ""
        self.remote_desktop_version = 0
        self.permission_note = ""
        """Plain words on whether the desktop will ask again at the next start (set by :meth:`start`)."""

    # -- D-Bus plumbing -----------------------------------------------------------------------------
    def _call(self, interface: str, method: str, signature: str, body: tuple[Any, ...],
              timeout: float = CALL_TIMEOUT_S, path: str = PORTAL_PATH) -> tuple[Any, ...]:
        from jeepney import DBusAddress, new_method_call  # lazy: jeepney (Linux only)

        msg = new_method_call(DBusAddress(path, bus_name=PORTAL_BUS_NAME, interface=interface), method,
                              signature, body)
        return self._send(msg, interface, method, timeout)

    def _request(self, interface: str, method: str, signature: str, args: tuple[Any, ...],
                 options: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Call a portal method whose last argument is its options, and wait for its Request's Response.

        Returns:
            The response's results, variants unwrapped.
        Raises:
            DisplayError: the call failed, the user cancelled (code 1), the request ended otherwise
                (code 2), or no response came within ``timeout`` s.
        """
        from jeepney import MatchRule  # lazy: jeepney (Linux only)

        token = f"holodesk{os.getpid()}_{next(_tokens)}"
        path = request_path(self._conn.unique_name, token)
        rule = MatchRule(type="signal", interface=REQUEST, member="Response", path=path)
        answers: queue.Queue[Any] = queue.Queue()
        with self._router.filter(rule, queue=answers):
            self._add_match(rule)
            self._call(interface, method, signature, (*args, {**options, "handle_token": ("s", token)}))
            try:
                msg = answers.get(timeout=timeout)
            except queue.Empty:
                raise DisplayError(f"the desktop did not answer {method} within {timeout:g} s",
                                   hint="Answer the desktop's screen-sharing dialog, then try again.") from None
        code, results = int(msg.body[0]), {k: unwrap_variant(v) for k, v in dict(msg.body[1]).items()}
        if code == 1:
            raise DisplayError(f"permission to share and control the screen was refused ({method})",
                               hint="Start again and allow Holodesk in the desktop's dialog.")
        if code != 0:
            raise DisplayError(f"the desktop ended the portal request {method} (response {code})",
                               hint="Try again; `holodesk doctor` shows the portal's state.")
        return results

    def _version(self, interface: str) -> int:
        reply = self._call("org.freedesktop.DBus.Properties", "Get", "ss", (interface, "version"))
        return int(unwrap_variant(reply[0]))

    # -- lifecycle ----------------------------------------------------------------------------------
    def _start_session(self) -> None:
        """Create, set up and start the session; the desktop may show its dialog.

        Raises:
            DisplayError: see the class.
        """
        self.remote_desktop_version = self._version(REMOTE_DESKTOP)
        created = self._request(REMOTE_DESKTOP, "CreateSession", "a{sv}", (),
                                {"session_handle_token": ("s", f"holodesk{os.getpid()}_{next(_tokens)}")},
                                CALL_TIMEOUT_S)
        self._session_handle = str(created["session_handle"])
        session = self._session_handle
        devices: dict[str, Any] = {"types": ("u", DEVICE_KEYBOARD | DEVICE_POINTER)}
        persist = self.remote_desktop_version >= PERSIST_MIN_REMOTE_DESKTOP_VERSION
        token = load_restore_token(self.token_path) if persist else None
        if persist:
            devices["persist_mode"] = ("u", PERSIST_UNTIL_REVOKED)
            if token:
                devices["restore_token"] = ("s", token)
        self._request(REMOTE_DESKTOP, "SelectDevices", "oa{sv}", (session,), devices, CALL_TIMEOUT_S)
        self._request(SCREEN_CAST, "SelectSources", "oa{sv}", (session,),
                      {"types": ("u", SOURCE_MONITOR), "multiple": ("b", True),
                       "cursor_mode": ("u", CURSOR_EMBEDDED)}, CALL_TIMEOUT_S)
        started = self._request(REMOTE_DESKTOP, "Start", "osa{sv}", (session, ""), {}, self.dialog_timeout_s)
        self._monitors = streams_to_monitors(list(started.get("streams", [])))
        new_token = started.get("restore_token")
        if persist:
            save_restore_token(str(new_token) if new_token else None, self.token_path)
            self.permission_note = ("the desktop remembers the permission: it will not ask again until it is "
                                    "revoked" if new_token else
                                    "the desktop gave no restore token: it will ask again at the next start")
        else:
            self.permission_note = (
                "the desktop will ask for permission to control the screen each time Holodesk starts "
                f"(RemoteDesktop sessions cannot be remembered on portal RemoteDesktop version "
                f"{self.remote_desktop_version}; version {PERSIST_MIN_REMOTE_DESKTOP_VERSION} can)")
        log.warning("xdg-desktop-portal session %s started (%s): %s", session,
                    ", ".join(f"node {m.connector}" for m in self._monitors), self.permission_note)
        self._press_throwaway_key()
        self.generation += 1

    def _notify(self, method: str, signature: str, args: tuple[Any, ...]) -> None:
        self.start()
        self._call(REMOTE_DESKTOP, method, "oa{sv}" + signature, (self._session_handle, {}, *args))

    def _stop_session(self) -> None:
        if self._session_handle:
            self._call("org.freedesktop.portal.Session", "Close", "", (), path=self._session_handle)

    # -- streams ------------------------------------------------------------------------------------
    def pipewire_node(self, connector: str) -> int:
        """PipeWire node id of a shared screen (its ``connector`` is the node id as text)."""
        self.start()
        return int(connector)

    def open_pipewire_fd(self) -> int:
        """``ScreenCast.OpenPipeWireRemote``: a PipeWire connection that sees this session's streams, as a
        file descriptor for ``pipewiresrc fd=`` (the caller owns and closes it)."""
        self.start()
        reply = self._call(SCREEN_CAST, "OpenPipeWireRemote", "oa{sv}", (self._session_handle, {}))
        return int(reply[0].to_raw_fd())

    # -- input ----------------------------------------------------------------------------------------
    def move_pointer(self, connector: str, stream_x: float, stream_y: float) -> None:
        """Move the pointer to (x, y) in the logical coordinates of stream ``connector``."""
        self._notify("NotifyPointerMotionAbsolute", "udd", (int(connector), stream_x, stream_y))

    def nudge_pointer(self) -> None:
        """Move the pointer one unit and back (relative motion), so a fresh frame is drawn."""
        for dx in (1.0, -1.0):
            self._notify("NotifyPointerMotion", "dd", (dx, 0.0))

    def button(self, button: int, pressed: bool) -> None:
        """Press or release an evdev button (``BTN_LEFT`` ...)."""
        self._notify("NotifyPointerButton", "iu", (button, int(pressed)))

    def scroll(self, axis: int, steps: int) -> None:
        """Turn the wheel ``steps`` clicks on ``axis`` (0 vertical, positive = down; 1 horizontal)."""
        self._notify("NotifyPointerAxisDiscrete", "ui", (axis, steps))

    def key(self, keysym: int, pressed: bool) -> None:
        """Press or release a key by X keysym."""
        self._notify("NotifyKeyboardKeysym", "iu", (keysym, int(pressed)))

    def paste_text(self, text: str, chord: Callable[[], None], timeout_s: float = 5.0) -> bool:
        """Not available: the RemoteDesktop portal of xdg-desktop-portal 1.16 has no clipboard.

        Raises:
            ActionError: always (the message says which characters could not be typed).
        """
        raise ActionError("text with characters outside plain ASCII cannot be typed through the desktop portal "
                          "(it has no clipboard for Holodesk to paste through); nothing was typed",
                          field="text", hint="Type that text yourself, or use GNOME's own interfaces "
                          "(desktop_backend = mutter) where they are available.")


def portal_state(token_path: Path | None = None) -> dict[str, str]:
    """For ``holodesk doctor``: whether a restore token is stored, and where."""
    path = token_path or restore_token_path()
    return {"restore token": ("stored (the desktop should not ask again)" if load_restore_token(path)
                              else "none stored"), "state file": str(path)}
