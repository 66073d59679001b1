"""A monitor layout change on GNOME Wayland: Mutter announces it (``MonitorsChanged``), Holodesk replaces its
remote-desktop session with one recording the new layout (new streams, new PipeWire nodes), and on a frame of
the new session clicks land exactly. The change: the 2560x1600 virtual monitor goes to scale 2
(Mutter's physical layout mode, the default: global coordinates stay pixels, the app draws at 2x)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from holodesk.capture.pipewire_backend import MutterCapture
from holodesk.control.mutter_executor import MutterExecutor
from holodesk.core.actions import Click
from holodesk.core.geometry import frame_pixel_to_point, place, to_input_point
from holodesk.display.mutter import DISPLAY_CONFIG, MutterRemoteDesktop
from tests.helpers.mutter import MutterSession, mutter_session
from tests.wayland.conftest import _require_programs, wait_until_window_settled

pytestmark = [pytest.mark.wayland]


@pytest.fixture(scope="module")
def big_mutter() -> Iterator[MutterSession]:
    """A headless mutter session with a 2560x1600 virtual monitor (Mutter allows scales 1, 2, 3 on it)."""
    _require_programs()
    with mutter_session(2560, 1600) as session:
        yield session


def set_scale(mutter: MutterSession, scale: float) -> None:
    """Apply ``scale`` to the session's one monitor through Mutter's DisplayConfig API (as GNOME Settings
    does), temporarily."""
    from jeepney import DBusAddress, new_method_call
    from jeepney.io.blocking import open_dbus_connection

    config = DBusAddress("/org/gnome/Mutter/DisplayConfig", bus_name=DISPLAY_CONFIG, interface=DISPLAY_CONFIG)
    with open_dbus_connection(bus=mutter.bus_address) as conn:
        serial, monitors, _logical, _props = conn.send_and_get_reply(
            new_method_call(config, "GetCurrentState"), timeout=10).body
        (connector, *_), modes, _mprops = monitors[0]
        mode = next(m[0] for m in modes if m[6].get("is-current", ("b", False))[1])
        reply = conn.send_and_get_reply(new_method_call(
            config, "ApplyMonitorsConfig", "uua(iiduba(ssa{sv}))a{sv}",
            (serial, 1, [(0, 0, scale, 0, True, [(connector, mode, {})])], {})), timeout=10)
    assert reply.header.message_type.name == "method_return", reply.body


def test_layout_change_replaces_the_session_and_clicks_stay_exact(big_mutter: MutterSession) -> None:
    app = big_mutter.start_app()
    remote = MutterRemoteDesktop(big_mutter.bus_address,
                                 os.path.join(big_mutter.env["XDG_RUNTIME_DIR"], "pipewire-0"))
    capture = MutterCapture(remote)
    executor = MutterExecutor(remote)
    try:
        before = capture.grab(1)
        assert (before.width, before.height) == (2560, 1600) and remote.generation == 1
        set_scale(big_mutter, 2.0)
        # The app follows the new scale: its widgets are now half as many logical pixels wide.
        state = app.wait_state(lambda s: s.get("scale_factor") == 2 and s["area"][2] == 1280.0)
        after = capture.grab(1)
        assert remote.generation == 2  # a new session recording the new layout
        assert (after.width, after.height) == (2560, 1600)
        wait_until_window_settled(executor, after, app)
        ax, ay, _w, _h = state["area"]
        for n, (px, py) in enumerate([(601, 201), (2000, 333)], start=1):
            result = executor.execute(place(Click(frame_pixel_to_point(after, px, py)), after))
            assert result.ok, result
            aim = to_input_point(after, frame_pixel_to_point(after, px, py))
            pressed = app.wait_state(lambda s, n=n: len(s["presses"]) == n)["presses"][-1]
            # The app's coordinates are logical: screen pixels / 2.
            assert pressed == [(aim.x + 0.5) / 2 - ax, (aim.y + 0.5) / 2 - ay]
    finally:
        capture.close()
        remote.close()
        app.stop()
