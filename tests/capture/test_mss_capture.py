"""MssCapture against real Xvfb servers: pixels, threads (F18), monitor layouts (F04), bad indices."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.core.geometry import Monitor
from holodesk.errors import CaptureError
from tests.conftest import XvfbServer
from tests.helpers.target import TargetWindow

ROOT_RGB = (0x20, 0x80, 0x40)
WINDOW_RGB = (0x33, 0x66, 0xCC)


def _paint_root(server: XvfbServer, rgb: tuple[int, int, int]) -> None:
    r, g, b = rgb
    server.run("xsetroot", "-solid", f"#{r:02x}{g:02x}{b:02x}")


def test_grab_shows_window_of_known_colour(xvfb: XvfbServer, tmp_path: Path) -> None:
    _paint_root(xvfb, ROOT_RGB)
    with TargetWindow.start(tmp_path, x=300, y=200, color="#3366cc") as win:
        cap = MssCapture()
        try:
            frame = cap.grab(1)
        finally:
            cap.close()
        assert frame.pixels.shape == (1080, 1920, 3)
        assert frame.pixels.dtype == np.uint8
        assert frame.monitor == Monitor(1, 0, 0, 1920, 1080, name=frame.monitor.name,
                                        physical_width=1920, physical_height=1080)
        wx, wy, ww, wh = win.rects["window"]
        # window background between the buttons and the field (rows y+65..y+85 are empty)
        assert tuple(frame.pixels[wy + 75, wx + 5]) == WINDOW_RGB
        assert tuple(frame.pixels[wy + wh - 3, wx + ww - 3]) == WINDOW_RGB
        assert tuple(frame.pixels[wy - 5, wx - 5]) == ROOT_RGB
        assert tuple(frame.pixels[1079, 1919]) == ROOT_RGB
        assert frame.scale == (1.0, 1.0)


def test_three_threads_grab_at_once_with_handle_per_thread(xvfb: XvfbServer) -> None:
    """F18: the backend is created on this ('GUI') thread and used from three workers at once."""
    _paint_root(xvfb, ROOT_RGB)
    cap = MssCapture()
    cap.grab(1)  # main-thread handle first, like a GUI thread would
    barrier = threading.Barrier(3)
    results: dict[int, list[tuple[int, ...]]] = {}
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            pixels = []
            for _ in range(5):
                frame = cap.grab(1)
                assert frame.pixels.shape == (1080, 1920, 3)
                pixels.append(tuple(frame.pixels[540, 960]))
            results[n] = pixels
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    try:
        assert not errors, errors
        assert sorted(results) == [0, 1, 2]
        assert all(p == ROOT_RGB for px in results.values() for p in px)
        assert cap.open_handles == 4  # main thread + three workers
    finally:
        cap.close()


def test_unknown_monitor_index_names_the_valid_ones(xvfb: XvfbServer) -> None:
    with MssCapture() as cap:
        with pytest.raises(CaptureError) as info:
            cap.grab(3)
        assert "no monitor 3" in str(info.value)
        assert "valid monitor indices are 1" in str(info.value)
        assert "0 = all" not in str(info.value)  # the monitor setting accepts one monitor, 1 or more
        with pytest.raises(CaptureError):
            cap.grab(-1)


def test_closed_backend_refuses_to_grab(xvfb: XvfbServer) -> None:
    cap = MssCapture()
    cap.grab(1)
    cap.close()
    with pytest.raises(CaptureError, match="closed"):
        cap.grab(1)


def test_two_monitors_with_offsets_and_grab_of_monitor_2(make_xvfb: Callable[..., XvfbServer],
                                                         tmp_path: Path) -> None:
    """F04 on a real X server: monitors declared with xrandr --setmonitor (environment.md)."""
    server = make_xvfb(3200, 1080)
    server.run("xrandr", "--setmonitor", "L", "1280/338x800/211+0+280", "screen")
    server.run("xrandr", "--setmonitor", "R", "1920/508x1080/286+1280+0", "none")
    _paint_root(server, ROOT_RGB)
    with MssCapture() as cap:
        mons = cap.monitors()
        assert [(m.index, m.left, m.top, m.width, m.height) for m in mons] == [
            (1, 0, 280, 1280, 800),
            (2, 1280, 0, 1920, 1080),
        ]
        # A window on monitor 2 only: 100 px right of monitor 2's origin.
        with TargetWindow.start(tmp_path, x=1280 + 100, y=200, color="#3366cc") as win:
            frame2 = cap.grab(2)
            frame1 = cap.grab(1)
            whole = cap.grab(0)
            wx, wy, _ww, _wh = win.rects["window"]
        assert frame2.monitor == mons[1]
        assert frame2.pixels.shape == (1080, 1920, 3)
        # monitor-2 frame pixel = screen pixel - monitor 2 origin
        assert tuple(frame2.pixels[wy + 75, wx - 1280 + 5]) == WINDOW_RGB
        assert tuple(frame2.pixels[wy + 75, wx - 1280 - 5]) == ROOT_RGB
        assert frame1.pixels.shape == (800, 1280, 3)
        assert not np.any(np.all(frame1.pixels == np.array(WINDOW_RGB, dtype=np.uint8), axis=-1))
        assert whole.pixels.shape == (1080, 3200, 3)
        assert tuple(whole.pixels[wy + 75, wx + 5]) == WINDOW_RGB


def test_2560x1440_screen(make_xvfb: Callable[..., XvfbServer]) -> None:
    server = make_xvfb(2560, 1440)
    _paint_root(server, ROOT_RGB)
    with MssCapture() as cap:
        (mon,) = cap.monitors()
        assert (mon.left, mon.top, mon.width, mon.height) == (0, 0, 2560, 1440)
        frame = cap.grab(1)
    assert frame.pixels.shape == (1440, 2560, 3)
    assert tuple(frame.pixels[1439, 2559]) == ROOT_RGB
