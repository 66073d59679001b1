"""The desktop backend choice (no compositor needed: environment and bus names are given), Mutter's
display-state parsing (a reply shaped as mutter 43 sends it) and the key mapping."""

from __future__ import annotations

import pytest

from holodesk.display import MUTTER_NAMES, PORTAL_NAME, choose_backend
from holodesk.display.mutter import keysym_for, parse_display_state
from holodesk.errors import ActionError, DisplayError

WAYLAND = {"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"}
GNOME_BUS = {*MUTTER_NAMES, PORTAL_NAME, "org.freedesktop.DBus"}


def test_gnome_wayland_picks_mutter_and_says_why() -> None:
    choice = choose_backend("auto", WAYLAND, "linux", GNOME_BUS)
    assert choice.backend == "mutter"
    assert "Wayland" in choice.reason and "RemoteDesktop" in choice.reason
    # With XWayland present too, native windows still need Mutter's route.
    assert choose_backend("auto", {**WAYLAND, "DISPLAY": ":0"}, "linux", GNOME_BUS).backend == "mutter"


def test_x11_session_keeps_mss_even_with_mutter_on_the_bus() -> None:
    choice = choose_backend("auto", {"DISPLAY": ":0", "XDG_SESSION_TYPE": "x11"}, "linux", GNOME_BUS)
    assert choice.backend == "mss" and choice.reason == "an X11 session"


def test_wayland_without_mutter_falls_back_to_xwayland_and_says_so() -> None:
    no_portal = {"portal ScreenCast": "absent", "portal RemoteDesktop": "absent"}
    choice = choose_backend("auto", {**WAYLAND, "DISPLAY": ":0"}, "linux", {PORTAL_NAME}, portal_versions=no_portal)
    assert choice.backend == "mss"
    assert "X11 windows through XWayland only" in choice.reason and "not on the session bus" in choice.reason


def test_wayland_without_mutter_or_display_is_a_clear_error() -> None:
    with pytest.raises(DisplayError) as err:
        choose_backend("auto", WAYLAND, "linux", {"org.freedesktop.DBus"})
    assert "org.gnome.Mutter.RemoteDesktop" in err.value.message
    assert "nor the desktop portal: org.freedesktop.portal.Desktop is not on the session bus" in err.value.message
    with pytest.raises(DisplayError, match="there is no session D-Bus"):
        choose_backend("auto", {**WAYLAND, "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/bus"}, "linux")


def test_setting_overrides_the_choice() -> None:
    assert choose_backend("mutter", {"DISPLAY": ":0"}, "linux", GNOME_BUS).backend == "mutter"
    assert "chosen in Settings" in choose_backend("mutter", {"DISPLAY": ":0"}, "linux", GNOME_BUS).reason
    assert choose_backend("mss", {**WAYLAND, "DISPLAY": ":0"}, "linux", GNOME_BUS).backend == "mss"
    with pytest.raises(DisplayError, match="needs GNOME's Mutter"):
        choose_backend("mutter", {"DISPLAY": ":0"}, "linux", {"org.freedesktop.DBus"})
    with pytest.raises(DisplayError, match="DISPLAY is unset"):
        choose_backend("mss", WAYLAND, "linux", GNOME_BUS)
    with pytest.raises(DisplayError, match="unknown desktop backend"):
        choose_backend("x11", WAYLAND, "linux", GNOME_BUS)


def test_windows_and_macos_use_mss() -> None:
    assert choose_backend("auto", {}, "win32", set()).backend == "mss"
    assert choose_backend("auto", {}, "darwin", set()).reason == "macOS"


def mode(width: int, height: int, current: bool) -> tuple[object, ...]:
    return (f"{width}x{height}@60", width, height, 60.0, 1.0, [1.0, 2.0], {"is-current": ("b", current)})


def test_display_state_gives_logical_geometry_and_scale() -> None:
    monitors = [
        (("DP-1", "DEL", "U2720Q", "1"), [mode(3840, 2160, True), mode(1920, 1080, False)], {}),
        (("eDP-1", "BOE", "0x0a1c", "0"), [mode(2560, 1600, True)], {}),
        (("HDMI-1", "GSM", "LG", "2"), [mode(1920, 1080, False)], {}),  # connected, switched off
    ]
    logical = [
        (1280, 0, 2.0, 0, False, [("DP-1", "DEL", "U2720Q", "1")], {}),
        (0, 0, 2.0, 0, True, [("eDP-1", "BOE", "0x0a1c", "0")], {}),
    ]
    mons = parse_display_state((7, monitors, logical, {"layout-mode": ("u", 1)}))
    assert [m.connector for m in mons] == ["eDP-1", "DP-1"]  # primary first
    laptop, external = mons
    assert (laptop.monitor.index, laptop.monitor.width, laptop.monitor.height, laptop.scale) == (1, 1280, 800, 2.0)
    assert (external.monitor.left, external.monitor.width, external.monitor.physical_width) == (1280, 1920, 3840)
    # Physical layout mode: logical sizes are pixel sizes, scale 1.
    phys = parse_display_state((7, monitors, logical, {"layout-mode": ("u", 2)}))
    assert phys[0].monitor.width == 2560 and phys[0].scale == 1.0
    with pytest.raises(DisplayError, match="no active monitor"):
        parse_display_state((7, monitors[2:], [], {}))


def test_keysyms() -> None:
    assert keysym_for("a") == 0x61 and keysym_for("A") == 0x41 and keysym_for("é") == 0xE9
    assert keysym_for("日") == 0x01000000 + ord("日")
    assert keysym_for("\n") == keysym_for("enter") == 0xFF0D
    assert keysym_for("ctrl") == 0xFFE3 and keysym_for("f12") == 0xFFC9 and keysym_for("super") == 0xFFEB
    with pytest.raises(ActionError):
        keysym_for("hyper")


def test_the_backend_is_chosen_once_per_process_and_again_only_when_the_desktop_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every task, the CLI and doctor ask the factory for the backend; it is chosen (the session bus asked)
    once, and again only when the setting or the desktop named by the environment changes."""
    from holodesk.session import desktop as process_desktop
    from holodesk.session.factory import desktop_backend
    from holodesk.settings import Settings

    calls: list[str] = []

    def counting_choice(setting: str = "auto", *args: object, **kwargs: object) -> object:
        calls.append(setting)
        return choose_backend(setting, {"DISPLAY": ":0", "XDG_SESSION_TYPE": "x11"}, "linux", GNOME_BUS)

    monkeypatch.setattr(process_desktop, "choose_backend", counting_choice)
    monkeypatch.setenv("DISPLAY", ":0")
    process_desktop.close_desktop()
    try:
        auto = Settings()
        for _ in range(3):  # three tasks
            assert desktop_backend(auto).backend == "mss"
        assert calls == ["auto"]
        assert desktop_backend(auto.model_copy(update={"desktop_backend": "mss"})).backend == "mss"
        assert calls == ["auto", "mss"]
        monkeypatch.setenv("DISPLAY", ":1")
        desktop_backend(auto.model_copy(update={"desktop_backend": "mss"}))
        assert calls == ["auto", "mss", "mss"]
    finally:
        process_desktop.close_desktop()
