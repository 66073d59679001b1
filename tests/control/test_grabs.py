"""The input-grab watcher on a real X server (Xvfb, with the RECORD extension): a grab that ends with its window
while the grabs are read."""

from __future__ import annotations

import time
from typing import Any

import pytest

from holodesk.control.grabs import GrabWatcher

pytestmark = pytest.mark.gui


def test_a_grab_whose_window_goes_away_during_the_read_is_not_reported(
        xvfb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another program grabs the keyboard on a window of its own (as a menu does on its popup) and the watcher sees
    it taken; the window is destroyed (the X server ends the grab with it) between the request that finds the
    keyboard grabbed and the one that reads the grab window. The grabs are read again: no grab, so no reason (which
    would make every step ask, as "another program holds the keyboard grab")."""
    from Xlib import X

    from tests.helpers.vanishing import vanishing_windows

    watcher = GrabWatcher()
    try:
        assert watcher() is None
        with vanishing_windows(monkeypatch, (100, 100, 50, 50), again=False) as menu:
            popup = menu.display.create_resource_object("window", menu.add())
            assert popup.grab_keyboard(False, X.GrabModeAsync, X.GrabModeAsync, X.CurrentTime) == X.GrabSuccess
            menu.display.sync()
            deadline = time.monotonic() + 5
            while watcher._owners.get("keyboard") is None:  # the grab as RECORD reported it (owner() reads it)
                assert time.monotonic() < deadline, "the watcher did not see the grab"
                time.sleep(0.01)
            problem = watcher()
            assert menu.vanished == 1
        assert problem is None
        assert watcher.own_grab is False
    finally:
        watcher.close()
