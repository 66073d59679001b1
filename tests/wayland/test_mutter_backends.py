"""Holodesk's GNOME Wayland backends against a real compositor: a private headless mutter session with
PipeWire and WirePlumber, and a native GTK4 Wayland app (no XWayland: mutter runs with ``--no-x11``).

Every assertion reads the app's own state (its state file) or compares frame pixels with the colours the
app paints; nothing is taken from Holodesk's own log.
"""

from __future__ import annotations

import numpy as np
import pytest

from holodesk.core.actions import Click, Key, Scroll, Type
from holodesk.core.geometry import Frame, frame_pixel_to_point, place, to_input_point
from tests.helpers.mutter import MutterSession, TargetApp
from tests.helpers.new_action import TripleTap
from tests.wayland.conftest import GnomeDesktop, wait_until_window_settled

pytestmark = [pytest.mark.wayland]

TEXT = "Grüße 日本語 naïve"

def app_constants() -> tuple[list[tuple[int, int, int]], str]:
    """COLUMNS and OWN_CLIPBOARD of the GTK4 app, read from its source (it imports gi, which this
    interpreter may lack, so the two constants are parsed, not imported)."""
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[1] / "apps" / "gtk4_wayland_target.py").read_text("utf-8"))
    found: dict[str, object] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id in ("COLUMNS", "OWN_CLIPBOARD"):
            found[target.id] = ast.literal_eval(node.value)  # type: ignore[union-attr]
    return found["COLUMNS"], found["OWN_CLIPBOARD"]  # type: ignore[return-value]


COLUMNS, OWN_CLIPBOARD = app_constants()


def click_at(gnome: GnomeDesktop, frame: Frame, x: float, y: float, count: int = 1) -> None:
    """Click ``count`` times at screen point (x, y) the way a proposal would arrive: as a [0, 1000] point on
    ``frame``, mapped back by the executor."""
    result = gnome.executor.execute(place(Click(frame_pixel_to_point(frame, x, y), count=count), frame))
    assert result.ok, result


def stripe_colours(frame: Frame, app: TargetApp) -> list[tuple[int, int, int]]:
    """The colour at the centre of each stripe of the app's stripe area, as captured."""
    ax, ay, aw, ah = app.state()["area"]
    y = int(ay + ah / 2)
    return [tuple(int(v) for v in frame.pixels[y, int(ax + (i + 0.5) * aw / len(COLUMNS))])  # type: ignore[misc]
            for i in range(len(COLUMNS))]


def test_frame_matches_the_screen_and_is_fresh(mutter: MutterSession, gnome: GnomeDesktop, gtk_app: TargetApp) -> None:
    frame = gnome.capture.grab(1)
    assert (frame.width, frame.height) == (mutter.width, mutter.height)
    assert frame.monitor.name == "Meta-0" and frame.scale == (1.0, 1.0)
    assert frame.pixels.dtype == np.uint8 and frame.pixels.shape == (mutter.height, mutter.width, 3)
    assert stripe_colours(frame, gtk_app) == [tuple(c) for c in COLUMNS]
    # Each stripe fills its whole cell: every pixel of the stripe row has one of the app's colours.
    ax, ay, aw, ah = gtk_app.state()["area"]
    row = frame.pixels[int(ay + ah / 2), int(ax):int(ax + aw)]
    assert set(map(tuple, row.tolist())) <= {tuple(c) for c in COLUMNS} | {(0, 0, 0), (255, 255, 255)}
    # The app inverts its colours on a press; the next grab shows the new colours (not a stale frame).
    for presses in (1, 2, 3):
        cx, cy = gtk_app.center("area")
        click_at(gnome, frame, cx, cy)
        state = gtk_app.wait_state(lambda s, n=presses: len(s["presses"]) == n)
        fresh = gnome.capture.grab(1)
        expected = [tuple(255 - v for v in c) if state["inverted"] else tuple(c) for c in COLUMNS]
        assert stripe_colours(fresh, gtk_app) == expected


def test_click_lands_exactly_where_the_frame_says(gnome: GnomeDesktop, gtk_app: TargetApp) -> None:
    frame = gnome.capture.grab(1)
    wait_until_window_settled(gnome.executor, frame, gtk_app)
    ax, ay, aw, ah = gtk_app.state()["area"]
    targets = [(ax + 17, ay + 9), (ax + aw - 33, ay + ah - 21), (ax + aw / 2 + 0.4, ay + ah / 3)]
    for n, (x, y) in enumerate(targets, start=1):
        click_at(gnome, frame, x, y)
        state = gtk_app.wait_state(lambda s, n=n: len(s["presses"]) == n)
        # The pointer lands on the centre of the input pixel that the proposed [0, 1000] point designates
        # (one point spans 1.28 pixels here, so that pixel may be a neighbour of (x, y)).
        aim = to_input_point(frame, frame_pixel_to_point(frame, x, y))
        assert abs(aim.x - x) <= 1 and abs(aim.y - y) <= 1
        assert state["presses"][-1] == [aim.x + 0.5 - ax, aim.y + 0.5 - ay]


def test_click_lands_on_the_button(gnome: GnomeDesktop, gtk_app: TargetApp) -> None:
    frame = gnome.capture.grab(1)
    click_at(gnome, frame, *gtk_app.center("button"))
    assert gtk_app.wait_state(lambda s: s["clicks"] == 1)["clicks"] == 1
    click_at(gnome, frame, *gtk_app.center("button"), count=2)
    assert gtk_app.wait_state(lambda s: s["clicks"] == 3)["clicks"] == 3


def test_an_unknown_action_is_refused_and_nothing_is_pressed(gnome: GnomeDesktop, gtk_app: TargetApp) -> None:
    frame = gnome.capture.grab(1)
    point = frame_pixel_to_point(frame, *gtk_app.center("button"))
    refused = gnome.executor.execute(place(TripleTap(point), frame))
    assert not refused.ok and "cannot perform the action 'triple_tap'" in refused.message, refused
    click_at(gnome, frame, *gtk_app.center("button"))  # input arrives in order: this click comes after any other
    assert gtk_app.wait_state(lambda s: s["clicks"] >= 1)["clicks"] == 1


def test_text_arrives_exactly_and_the_clipboard_is_restored(gnome: GnomeDesktop, gtk_app: TargetApp) -> None:
    frame = gnome.capture.grab(1)
    # The app's first button click makes it own the clipboard (the user's clipboard), and reads it back.
    click_at(gnome, frame, *gtk_app.center("button"))
    gtk_app.wait_state(lambda s: s.get("clipboard") == OWN_CLIPBOARD)
    click_at(gnome, frame, *gtk_app.center("entry"))
    gtk_app.wait_state(lambda s: s["entry_focused"])
    result = gnome.executor.execute(place(Type(TEXT), frame))
    assert result.ok, result
    assert result.details["typing_method"] == "clipboard"
    assert gtk_app.wait_state(lambda s: s["text"] == TEXT)["text"] == TEXT
    # Keys right after a paste land after the pasted text.
    assert gnome.executor.execute(place(Type("!\n"), frame)).details["typing_method"] == "keysym"
    assert gtk_app.wait_state(lambda s: s["text"] == TEXT + "!")["text"] == TEXT + "!"
    # Ctrl+A then typing replaces the text: chords work.
    assert gnome.executor.execute(place(Key(("ctrl", "a")), frame)).ok
    assert gnome.executor.execute(place(Type("ok"), frame)).ok
    assert gtk_app.wait_state(lambda s: s["text"] == "ok")["text"] == "ok"
    # The user's clipboard holds its own text again, as the app reads it.
    reads = gtk_app.state()["clipboard_reads"]
    click_at(gnome, frame, *gtk_app.center("button"))
    state = gtk_app.wait_state(lambda s: s.get("clipboard_reads", 0) > reads)
    assert state["clipboard"] == OWN_CLIPBOARD


def test_scroll_and_unknown_monitor(gnome: GnomeDesktop, gtk_app: TargetApp) -> None:
    frame = gnome.capture.grab(1)
    scroll = Scroll("down", 2, frame_pixel_to_point(frame, *gtk_app.center("area")))
    result = gnome.executor.execute(place(scroll, frame))
    assert result.ok and result.details["method"] == "NotifyPointerAxisDiscrete", result
    from holodesk.errors import CaptureError

    with pytest.raises(CaptureError, match="valid monitor indices are 1"):
        gnome.capture.grab(2)


def test_start_up_geometry_check_accepts_the_captured_monitor_and_refuses_another(gnome: GnomeDesktop) -> None:
    from dataclasses import replace

    from holodesk.errors import GeometryMismatch

    monitor = gnome.capture.grab(1).monitor
    assert gnome.executor.capabilities.geometry_check.available
    right, bottom = monitor.left + monitor.width - 1, monitor.top + monitor.height - 1
    assert gnome.executor.check_geometry(monitor) == [[monitor.left, monitor.top], [right, bottom]]
    with pytest.raises(GeometryMismatch, match="clicks would land in the wrong place"):
        gnome.executor.check_geometry(replace(monitor, width=monitor.width // 2))
    with pytest.raises(GeometryMismatch, match="does not have"):
        gnome.executor.check_geometry(replace(monitor, index=7))
