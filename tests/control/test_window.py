"""The window a step acts in, read from the X server: a real window of another process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from holodesk.control.window import window_at
from tests.helpers.target import TargetWindow

pytestmark = pytest.mark.gui


def test_the_window_under_a_point_is_named_with_its_rect(xvfb: Any, tmp_path: Path) -> None:
    with TargetWindow.start(tmp_path, x=300, y=200) as win:
        x, y = win.center("Cancel")
        info = window_at(x, y)
        assert info is not None
        assert info.title == "Holodesk test target"
        assert info.rect == tuple(win.rects["window"])
        assert info.app  # WM_CLASS as Qt sets it for the child process
        assert window_at(5, 5) is None  # bare root window there: nothing to name
        wx, wy, ww, _h = win.rects["window"]
        assert window_at(wx + ww + 5, wy) is None


def test_without_a_point_the_window_keys_go_to_is_named(xvfb: Any, tmp_path: Path) -> None:
    import subprocess

    with TargetWindow.start(tmp_path, x=400, y=300) as win:
        x, y = win.center("field")
        subprocess.run(["xdotool", "mousemove", str(x), str(y), "click", "1"], check=True, timeout=10)
        win.wait_for(lambda s: s["focus"] == "field", timeout=10)
        info = window_at()
        assert info is not None and info.title == "Holodesk test target"
        assert info.rect == tuple(win.rects["window"])


def test_no_display_means_no_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    assert window_at(10, 10) is None
