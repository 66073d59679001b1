"""The xdg-desktop-portal route against a FAKE portal on a private bus (``tests/helpers/fake_portal.py``):
the call sequence and options, the restore token kept in Holodesk's state, the words about asking again,
a refused dialog, input through the session, the PipeWire fd, and the backend choice.

What this does not show: a real portal's dialog and a real screen cast (not run here)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from holodesk.control.mutter_executor import MutterExecutor
from holodesk.core.actions import Click, Key, Point, Type
from holodesk.core.geometry import Frame, place, to_input_point
from holodesk.display import MUTTER_NAMES, PORTAL_NAME, choose_backend
from holodesk.display.portal import PortalRemoteDesktop, load_restore_token, portal_state
from holodesk.errors import DisplayError
from tests.helpers.fake_portal import FakePortal, fake_portal

WAYLAND = {"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"}
PORTAL_OK = {"portal ScreenCast": "4", "portal RemoteDesktop": "1"}
SHIFT = 0xFFE1


@pytest.fixture
def portal_v1() -> Iterator[FakePortal]:
    with fake_portal(remote_desktop_version=1) as portal:
        yield portal


@pytest.fixture
def portal_v2() -> Iterator[FakePortal]:
    with fake_portal(remote_desktop_version=2) as portal:
        yield portal


def test_v1_session_asks_every_time_and_stores_no_token(portal_v1: FakePortal, tmp_path: Path) -> None:
    token_file = tmp_path / "portal.json"
    remote = PortalRemoteDesktop(portal_v1.bus_address, token_file)
    try:
        mons = remote.monitors()
        assert portal_v1.names()[:5] == ["Get", "CreateSession", "SelectDevices", "SelectSources", "Start"]
        (_session, devices), = portal_v1.args_of("SelectDevices")
        assert devices["types"] == ("u", 3) and "persist_mode" not in devices
        (_session, sources), = portal_v1.args_of("SelectSources")
        assert sources["types"] == ("u", 1) and sources["multiple"] == ("b", True)
        assert sources["cursor_mode"] == ("u", 2)
        assert [(m.connector, m.monitor.width, m.monitor.height, m.scale) for m in mons] == [("42", 1280, 800, 1.0)]
        assert "ask for permission to control the screen each time Holodesk starts" in remote.permission_note
        assert "RemoteDesktop version 1" in remote.permission_note
        assert not token_file.exists()
        # The throwaway Shift at session start, on the session the portal created.
        session = str(portal_v1.args_of("Start")[0][0])
        keys = portal_v1.args_of("NotifyKeyboardKeysym")
        assert [(str(a[0]), a[2], a[3]) for a in keys] == [(session, SHIFT, 1), (session, SHIFT, 0)]
    finally:
        remote.close()
    assert "Close" in portal_v1.names()


def test_v2_remembers_the_permission_with_a_restore_token(portal_v2: FakePortal, tmp_path: Path) -> None:
    token_file = tmp_path / "state" / "portal.json"
    first = PortalRemoteDesktop(portal_v2.bus_address, token_file)
    first.start()
    first.close()
    (_s, devices), = portal_v2.args_of("SelectDevices")
    assert devices["persist_mode"] == ("u", 2) and "restore_token" not in devices
    assert load_restore_token(token_file) == "token-1"
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    assert "will not ask again" in first.permission_note
    assert portal_state(token_file)["restore token"].startswith("stored")

    second = PortalRemoteDesktop(portal_v2.bus_address, token_file)
    second.start()
    second.close()
    assert portal_v2.args_of("SelectDevices")[1][1]["restore_token"] == ("s", "token-1")
    assert json.loads(token_file.read_text())["restore_token"] == "token-2"  # tokens are single-use


def test_refused_dialog_is_a_clear_error(portal_v1: FakePortal, tmp_path: Path) -> None:
    portal_v1.start_response = 1
    remote = PortalRemoteDesktop(portal_v1.bus_address, tmp_path / "portal.json")
    with pytest.raises(DisplayError, match="permission to share and control the screen was refused") as err:
        remote.start()
    assert "allow Holodesk" in err.value.hint
    assert not remote.started
    remote.close()


def test_executor_drives_the_portal_session(portal_v1: FakePortal, tmp_path: Path) -> None:
    remote = PortalRemoteDesktop(portal_v1.bus_address, tmp_path / "portal.json")
    try:
        mon = remote.monitor(1).monitor
        remote.input_ready.set()  # the capture backend sets it after seeing motion applied; no stream here
        executor = MutterExecutor(remote)
        frame = Frame(pixels=np.zeros((mon.height, mon.width, 3), np.uint8), monitor=mon, captured_at=0.0)
        point = Point(100, 200)
        aim = to_input_point(frame, point)
        result = executor.execute(place(Click(point), frame))
        assert result.ok, result.message
        assert result.details["backend"] == "portal"
        (motion,) = portal_v1.args_of("NotifyPointerMotionAbsolute")
        assert motion[2:] == (42, aim.x + 0.5, aim.y + 0.5)  # stream 42's logical coordinates, cell centre
        assert [a[2:] for a in portal_v1.args_of("NotifyPointerButton")] == [(0x110, 1), (0x110, 0)]
        assert executor.execute(place(Key(["ctrl", "a"]), frame)).ok
        assert [a[2:] for a in portal_v1.args_of("NotifyKeyboardKeysym")][2:] == [
            (0xFFE3, 1), (0x61, 1), (0x61, 0), (0xFFE3, 0)]
        # The portal has no clipboard: text outside ASCII fails with the reason, nothing typed.
        failed = executor.execute(place(Type("Grüße"), frame))
        assert not failed.ok and "desktop portal" in failed.message
        # OpenPipeWireRemote hands over a connection: bytes written by the portal's end arrive.
        fd = remote.open_pipewire_fd()
        try:
            portal_v1.pipewire_peers[-1].sendall(b"pw")
            assert os.read(fd, 2) == b"pw"
        finally:
            os.close(fd)
    finally:
        remote.close()


def test_backend_choice_with_the_portal() -> None:
    bus = {PORTAL_NAME, "org.freedesktop.DBus"}
    choice = choose_backend("auto", WAYLAND, "linux", bus, portal_versions=PORTAL_OK)
    assert choice.backend == "portal" and "asks for permission" in choice.reason
    # Mutter's own API wins where it is there.
    gnome = choose_backend("auto", WAYLAND, "linux", {*bus, *MUTTER_NAMES}, portal_versions=PORTAL_OK)
    assert gnome.backend == "mutter"
    # A portal without RemoteDesktop: not chosen; without DISPLAY a clear error naming both routes.
    no_rd = {"portal ScreenCast": "4", "portal RemoteDesktop": "absent"}
    with pytest.raises(DisplayError, match="does not offer portal RemoteDesktop"):
        choose_backend("auto", WAYLAND, "linux", bus, portal_versions=no_rd)
    assert choose_backend("auto", {**WAYLAND, "DISPLAY": ":0"}, "linux", bus, portal_versions=no_rd).backend == "mss"
    # The setting overrides; a portal setting without a portal says what is missing.
    forced = choose_backend("portal", WAYLAND, "linux", {*bus, *MUTTER_NAMES}, portal_versions=PORTAL_OK)
    assert forced.backend == "portal" and "chosen in Settings" in forced.reason
    with pytest.raises(DisplayError, match=r"needs xdg-desktop-portal.*not on the session bus"):
        choose_backend("portal", WAYLAND, "linux", {"org.freedesktop.DBus"})
