"""Keys held across steps (``key_down`` / ``key_up``) through Mutter's remote-desktop session, on a real headless
GNOME Wayland session and a native GTK4 app; every assertion reads the app's own entry text."""

from __future__ import annotations

from pathlib import Path

import pytest

from holodesk.core.actions import Click, Key, KeyDown, KeyUp, Type
from holodesk.core.geometry import frame_pixel_to_point, place
from tests.helpers.mutter import TargetApp
from tests.wayland.conftest import GnomeDesktop, wait_until_window_settled

pytestmark = [pytest.mark.wayland]


def test_a_held_shift_goes_with_the_next_keys_and_the_end_of_the_run_releases_it(
        gnome: GnomeDesktop, gtk_app: TargetApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    executor = gnome.executor
    frame = gnome.capture.grab(1)
    wait_until_window_settled(executor, frame, gtk_app)

    def do(action: object) -> None:
        result = executor.execute(place(action, frame))  # type: ignore[arg-type]
        assert result.ok, result

    do(Click(frame_pixel_to_point(frame, *gtk_app.center("entry"))))
    gtk_app.wait_state(lambda s: s["entry_focused"])
    do(Type("abcdef"))
    gtk_app.wait_state(lambda s: s["text"] == "abcdef")
    # Shift held across steps: Home (the caret is at the end) selects the text, so Z replaces it.
    do(KeyDown(("shift",)))
    assert executor.held_keys == ("shift",)
    do(Key(("home",)))
    do(KeyUp(("shift",)))
    do(Type("Z"))
    assert gtk_app.wait_state(lambda s: s["text"] == "Z")["text"] == "Z"
    # Held again, then the run ends without a key up: the end releases it, so Home only moves the caret
    # (with Shift still down it would select the Z, and the ! would replace it).
    do(KeyDown(("shift",)))
    executor.end_episode()
    assert executor.held_keys == ()
    do(Key(("home",)))
    do(Type("!"))
    assert gtk_app.wait_state(lambda s: s["text"] == "!Z")["text"] == "!Z"
