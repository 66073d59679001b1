"""The portal route against the real xdg-desktop-portal (1.16 with its GNOME backend) on a private headless
GNOME Shell: Holodesk asks, the "user" answers the portal's dialog through Mutter's own remote-desktop API
(switches on "Allow remote interaction", presses Share), then Holodesk sees the screen through the portal's
PipeWire fd and clicks a GTK4 app's button through the portal session; the app counts the click."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.capture.pipewire_backend import MutterCapture
from holodesk.control.mutter_executor import MutterExecutor
from holodesk.core.actions import Click
from holodesk.core.geometry import frame_pixel_to_point, place
from holodesk.display.mutter import MutterRemoteDesktop, keysym_for
from holodesk.display.portal import PortalRemoteDesktop
from tests.helpers.mutter import MutterSession, missing_programs, mutter_session
from tests.wayland.conftest import wait_until_window_settled

pytestmark = [pytest.mark.wayland]

SHARE_BLUE = ((30, 80), (110, 155), (200, 245))
"""RGB ranges of GNOME's suggested-action blue (#3584e4), the Share button and a switched-on switch."""
SWITCH_FROM_SHARE = (-25, 201)
"""Offset of the "Allow remote interaction" switch from the Share button's centre in xdg-desktop-portal-gnome
43's remote-desktop dialog (pixels at scale 1)."""


@pytest.fixture(scope="module")
def shell() -> Iterator[MutterSession]:
    missing = missing_programs(portal=True)
    if missing:
        message = f"the portal test session needs {', '.join(missing)} (installers/_setup.sh APT_WAYLAND_TEST)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with mutter_session(portal=True, timeout_s=60.0) as session:
        yield session


def _shell_property(session: MutterSession, name: str) -> Any:
    from jeepney import DBusAddress, new_method_call
    from jeepney.io.blocking import open_dbus_connection

    address = DBusAddress("/org/gnome/Shell", bus_name="org.gnome.Shell", interface="org.freedesktop.DBus.Properties")
    with open_dbus_connection(bus=session.bus_address) as conn:
        reply = conn.send_and_get_reply(new_method_call(address, "Get", "ss", ("org.gnome.Shell", name)), timeout=5)
    return reply.body[0][1]


def _wait(condition: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {timeout_s:g} s")
        time.sleep(0.1)


def _blue_box(pixels: np.ndarray[Any, Any], top: int, bottom: int) -> tuple[float, float] | None:
    """Centre of the suggested-action blue pixels between rows ``top`` and ``bottom`` (None: none)."""
    (r0, r1), (g0, g1), (b0, b1) = SHARE_BLUE
    part = pixels[top:bottom].astype(int)
    mask = ((part[..., 0] >= r0) & (part[..., 0] <= r1) & (part[..., 1] >= g0) & (part[..., 1] <= g1)
            & (part[..., 2] >= b0) & (part[..., 2] <= b1))
    if mask.sum() < 200:
        return None
    ys, xs = np.nonzero(mask)
    return float(xs.mean()), float(ys.mean()) + top


def test_portal_dialog_then_frames_and_a_click(shell: MutterSession, tmp_path: Path) -> None:
    hands = MutterRemoteDesktop(shell.bus_address, os.path.join(shell.env["XDG_RUNTIME_DIR"], "pipewire-0"))
    eyes = MutterCapture(hands)
    portal = PortalRemoteDesktop(shell.bus_address, tmp_path / "portal.json", dialog_timeout_s=60.0)
    capture = MutterCapture(portal)
    app = None
    try:
        eyes.grab(1)  # the user's input is confirmed applied from here on
        # GNOME Shell starts in the overview, where clicks only pick windows: leave it first.
        _wait(lambda: _shell_property(shell, "OverviewActive"), 30, "the Activities overview")
        escape = keysym_for("esc")
        hands.key(escape, True)
        hands.key(escape, False)
        _wait(lambda: not _shell_property(shell, "OverviewActive"), 15, "the overview closing")

        errors: list[BaseException] = []

        def ask() -> None:
            try:
                portal.start()
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        h = shell.height
        share = _wait(lambda: _blue_box(eyes.grab(1).pixels, 40, h // 2), 30, "the portal's dialog")
        switch = (share[0] + SWITCH_FROM_SHARE[0], share[1] + SWITCH_FROM_SHARE[1])
        hands.move_pointer("Meta-0", *switch)
        hands.button(0x110, True)
        hands.button(0x110, False)
        _wait(lambda: _blue_box(eyes.grab(1).pixels, int(switch[1]) - 12, int(switch[1]) + 12), 15,
              "the switch turning on")
        hands.move_pointer("Meta-0", *share)
        hands.button(0x110, True)
        hands.button(0x110, False)
        asking.join(30)
        assert not errors, errors
        assert not asking.is_alive(), "the portal did not answer after Share"
        assert "each time Holodesk starts" in portal.permission_note  # portal 1.16: RemoteDesktop version 1
        assert portal.remote_desktop_version == 1 and not (tmp_path / "portal.json").exists()

        app = shell.start_app()
        frame = capture.grab(1)
        assert frame.pixels.shape == (shell.height, shell.width, 3) and capture.name == "portal"
        executor = MutterExecutor(portal)
        wait_until_window_settled(executor, frame, app)
        result = executor.execute(place(Click(frame_pixel_to_point(frame, *app.center("button"))), frame))
        assert result.ok and result.details["backend"] == "portal", result.message
        app.wait_state(lambda s: s.get("clicks") == 1)
    finally:
        if app is not None:
            app.stop()
        capture.close()
        portal.close()
        eyes.close()
        hands.close()


def test_doctor_shows_portal_versions_and_the_permission(shell: MutterSession, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from holodesk import doctor
    from holodesk.display.portal import restore_token_path, save_restore_token

    for name in ("DBUS_SESSION_BUS_ADDRESS", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "XDG_SESSION_TYPE"):
        monkeypatch.setenv(name, shell.env[name])
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    report = doctor._desktop_backend()
    assert report["interfaces"]["portal RemoteDesktop"] == "1"
    assert report["interfaces"]["portal ScreenCast"] == "4"
    assert "each time Holodesk starts" in report["portal permission"]
    assert report["restore token"] == "none stored"
    save_restore_token("0b7c2f9e-token")
    assert restore_token_path().is_relative_to(tmp_path)
    assert doctor._desktop_backend()["restore token"].startswith("stored")
