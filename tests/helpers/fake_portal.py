"""A FAKE xdg-desktop-portal (``org.freedesktop.portal.Desktop``) on a private dbus-daemon, for the
portal route's unit tests.

It is a fake: it shows no dialog and shares no real screen. It answers the ScreenCast and RemoteDesktop
calls Holodesk makes the way the portal's interface files specify them (a Request object path back, then
``org.freedesktop.portal.Request.Response(u, a{sv})`` on that path), records every call, grants or refuses
the ``Start`` request as told, gives restore tokens when ``persist_mode`` is asked (RemoteDesktop version
2 and later) and hands out one end of a socket pair for ``OpenPipeWireRemote``.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

NAME = "org.freedesktop.portal.Desktop"
PATH = "/org/freedesktop/portal/desktop"


@dataclass
class FakePortal:
    """State of the fake: what it was asked and how it answers."""

    bus_address: str
    remote_desktop_version: int = 1
    screen_cast_version: int = 4
    start_response: int = 0
    streams: list[tuple[int, dict[str, Any]]] = field(default_factory=lambda: [
        (42, {"position": ("(ii)", (0, 0)), "size": ("(ii)", (1280, 800)), "source_type": ("u", 1)})])
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    pipewire_peers: list[socket.socket] = field(default_factory=list)
    _tokens: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def names(self) -> list[str]:
        """Method names called, in order."""
        return [name for name, _ in self.calls]

    def args_of(self, method: str) -> list[tuple[Any, ...]]:
        """Arguments of every call of ``method``."""
        return [args for name, args in self.calls if name == method]

    def serve(self, stop: threading.Event, ready: threading.Event) -> None:
        from jeepney import DBusAddress, HeaderFields, MessageType, new_error, new_method_return, new_signal
        from jeepney.bus_messages import message_bus
        from jeepney.io.blocking import open_dbus_connection

        with open_dbus_connection(bus=self.bus_address, enable_fds=True) as conn:
            conn.send_and_get_reply(message_bus.RequestName(NAME), timeout=5)
            ready.set()
            while not stop.is_set():
                try:
                    msg = conn.receive(timeout=0.1)
                except TimeoutError:
                    continue
                if msg.header.message_type != MessageType.method_call:
                    continue
                member = msg.header.fields[HeaderFields.member]
                sender = str(msg.header.fields[HeaderFields.sender])
                body = tuple(msg.body)
                self.calls.append((member, body))

                def respond(code: int, results: dict[str, Any], options: dict[str, Any],
                            sender: str = sender, msg: Any = msg) -> None:
                    token = options["handle_token"][1]
                    path = f"{PATH}/request/{sender[1:].replace('.', '_')}/{token}"
                    conn.send(new_method_return(msg, "o", (path,)))
                    conn.send(new_signal(DBusAddress(path, interface="org.freedesktop.portal.Request"),
                                         "Response", "ua{sv}", (code, results)))

                if member == "Get":
                    interface = body[0]
                    version = {"org.freedesktop.portal.RemoteDesktop": self.remote_desktop_version,
                               "org.freedesktop.portal.ScreenCast": self.screen_cast_version}.get(interface)
                    if version is None:
                        conn.send(new_error(msg, "org.freedesktop.DBus.Error.InvalidArgs", "s", ("no such",)))
                    else:
                        conn.send(new_method_return(msg, "v", (("u", version),)))
                elif member == "CreateSession":
                    handle = f"{PATH}/session/{sender[1:].replace('.', '_')}/{body[0]['session_handle_token'][1]}"
                    respond(0, {"session_handle": ("s", handle)}, body[0])
                elif member in ("SelectDevices", "SelectSources"):
                    if member == "SelectDevices" and "persist_mode" in body[1] and self.remote_desktop_version < 2:
                        conn.send(new_error(msg, "org.freedesktop.portal.Error.InvalidArgument", "s",
                                            ("Remote desktop sessions cannot persist",)))
                        continue
                    respond(0, {}, body[1])
                elif member == "Start":
                    results: dict[str, Any] = {}
                    if self.start_response == 0:
                        results = {"devices": ("u", 3), "streams": ("a(ua{sv})", self.streams)}
                        if self.args_of("SelectDevices")[-1][1].get("persist_mode"):
                            results["restore_token"] = ("s", f"token-{next(self._tokens)}")
                    respond(self.start_response, results, body[2])
                elif member == "OpenPipeWireRemote":
                    ours, theirs = socket.socketpair()
                    self.pipewire_peers.append(ours)
                    conn.send(new_method_return(msg, "h", (theirs,)))
                    theirs.close()
                else:  # Notify*, Session.Close
                    conn.send(new_method_return(msg))


@contextmanager
def fake_portal(remote_desktop_version: int = 1) -> Iterator[FakePortal]:
    """A private dbus-daemon with the fake portal on it (both ended afterwards)."""
    tmp = tempfile.mkdtemp(prefix="holodesk-fake-portal-")
    socket_path = os.path.join(tmp, "bus")
    daemon = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--nosyslog",
                               f"--address=unix:path={socket_path}"], stdout=subprocess.DEVNULL)
    stop, ready = threading.Event(), threading.Event()
    thread: threading.Thread | None = None
    try:
        from jeepney.io.blocking import open_dbus_connection

        deadline = time.monotonic() + 20
        while True:  # the socket file appears before dbus-daemon listens on it
            try:
                open_dbus_connection(bus=f"unix:path={socket_path}").close()
                break
            except (ConnectionRefusedError, FileNotFoundError):
                if time.monotonic() > deadline or daemon.poll() is not None:
                    raise RuntimeError("the private dbus-daemon did not start") from None
                time.sleep(0.02)
        portal = FakePortal(f"unix:path={socket_path}", remote_desktop_version)
        thread = threading.Thread(target=portal.serve, args=(stop, ready), daemon=True)
        thread.start()
        if not ready.wait(20):
            raise RuntimeError("the fake portal did not take its bus name")
        yield portal
    finally:
        stop.set()
        if thread is not None:
            thread.join(5)
        daemon.terminate()
        daemon.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
