"""The window a step acts in, read from the X server: a real window of another process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from holodesk.control.window import toplevel_at_pointer, wait_for_focus_in, window_at
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


def _set_focus_none() -> None:
    from Xlib import X, display

    d = display.Display()
    try:
        d.set_input_focus(X.NONE, X.RevertToNone, X.CurrentTime)
        d.sync()
    finally:
        d.close()


def test_keys_wait_until_the_clicked_window_has_taken_the_focus(xvfb: Any, tmp_path: Path) -> None:
    """The wait ends when the other process takes the focus (its FocusIn), not before, and not by timeout."""
    import subprocess
    import threading
    import time

    with TargetWindow.start(tmp_path, x=300, y=200) as win:
        x, y = win.center("field")
        subprocess.run(["xdotool", "mousemove", str(x), str(y)], check=True, timeout=10)
        top = toplevel_at_pointer()
        assert top is not None
        _set_focus_none()
        delay = 0.5
        clicker = threading.Timer(delay, lambda: subprocess.run(["xdotool", "click", "1"], check=True, timeout=10))
        t0 = time.monotonic()
        clicker.start()
        try:
            focused, waited = wait_for_focus_in(top, timeout_s=30.0)
        finally:
            clicker.join()
        assert focused
        assert delay - 0.05 <= waited < 30.0 and time.monotonic() - t0 >= delay
        assert win.wait_for(lambda s: s["focus"] == "field", timeout=10)["focus"] == "field"


def test_a_window_that_never_takes_the_focus_ends_the_wait_at_the_timeout(xvfb: Any, tmp_path: Path) -> None:
    import subprocess

    with TargetWindow.start(tmp_path, x=300, y=200) as win:
        x, y = win.center("field")
        subprocess.run(["xdotool", "mousemove", str(x), str(y)], check=True, timeout=10)
        top = toplevel_at_pointer()
        assert top is not None
        _set_focus_none()
        focused, waited = wait_for_focus_in(top, timeout_s=0.3)
        assert not focused and waited >= 0.3


def test_a_terminal_is_known_by_its_process_whatever_its_class(xvfb: Any, tmp_path: Path) -> None:
    """``xterm -class Notes`` has a window class no terminal list names; its process holds the pty master
    its shell runs on, so the focused-window probe and the window under the pointer say terminal, and the
    autopilot asks for text typed into it. The Qt target window's process holds none."""
    import subprocess

    from holodesk.control.window import TERMINAL_MARK, focused_window_class
    from holodesk.core.actions import Click, Point, Type
    from holodesk.core.risk import Risk, assess
    from tests.helpers.desktop import wait_until

    term = subprocess.Popen(["xterm", "-name", "notes", "-class", "Notes", "-T", "Shopping list", "-geometry",
                             "60x10+50+50", "-e", "bash", "--norc"])
    try:
        def mapped() -> str:
            out = subprocess.run(["xdotool", "search", "--sync", "--onlyvisible", "--class", "Notes"],
                                 capture_output=True, text=True, timeout=10).stdout.split()
            return out[0] if out else ""

        wid = wait_until(mapped, 15, "the xterm window")
        subprocess.run(["xdotool", "windowfocus", "--sync", wid], check=True, timeout=10)
        focused = wait_until(lambda: (focused_window_class() or "").startswith("notes Notes")
                             and focused_window_class(), 10, "the xterm focused")
        assert focused == "notes Notes" + TERMINAL_MARK
        assert assess(Type("touch /tmp/x"), focused_window=focused).level is Risk.HIGH
        under = window_at(60, 60)
        assert under is not None and under.app == "Notes" + TERMINAL_MARK
        assert assess(Click(Point(1, 1)), focused_window=focused, pointer_windows=[under.app]).level is Risk.HIGH
    finally:
        term.terminate()
        term.wait(timeout=10)
    with TargetWindow.start(tmp_path, x=300, y=200) as win:
        info = window_at(*win.center("Cancel"))
        assert info is not None and info.app and TERMINAL_MARK not in info.app


# -- a window that goes away while the windows are read (tests/helpers/vanishing.py) ----------------------------
def test_a_window_that_goes_away_during_the_read_leaves_the_window_at_the_point_known(
        xvfb: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another program's window goes away between the request that lists the windows and the one that reads it:
    over the target's button, and elsewhere on the screen. The window at the point is what is there now: the
    target, not "unknown" (which made the autopilot ask, and its last look refuse a click on an unchanged window)."""
    from tests.helpers.vanishing import vanishing_windows

    with TargetWindow.start(tmp_path, x=300, y=200) as win:
        x, y = win.center("Cancel")
        with vanishing_windows(monkeypatch, (x - 20, y - 20, 40, 40)) as over:
            info = window_at(x, y)
            assert over.vanished == 1
        assert info is not None and info.title == "Holodesk test target"
        assert info.rect == tuple(win.rects["window"])
        with vanishing_windows(monkeypatch, (1500, 900, 60, 60)) as elsewhere:
            info = window_at(x, y)
            assert elsewhere.vanished == 1
        assert info is not None and info.title == "Holodesk test target"


def _focus(window_id: int) -> None:
    from Xlib import X, display

    d = display.Display()
    try:
        d.create_resource_object("window", window_id).set_input_focus(X.RevertToParent, X.CurrentTime)
        d.sync()
    finally:
        d.close()


def test_a_focused_window_that_goes_away_during_the_read_gives_the_focus_it_reverted_to(
        xvfb: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The focused window (a child of the target's window, focused with RevertToParent) is destroyed while its
    class is read: the focus is read again and is the target's window, where X put it back, not "unknown" (which
    makes the risk rules ask for every key)."""
    from holodesk.control.window import focused_window_class
    from tests.helpers.vanishing import vanishing_windows

    with TargetWindow.start(tmp_path, x=300, y=200) as win:
        target = window_at(*win.center("Cancel"))
        assert target is not None and target.window_id is not None
        _focus(target.window_id)
        on_target = focused_window_class()
        assert on_target is not None
        with vanishing_windows(monkeypatch, (0, 0, 10, 10), again=False) as child:
            _focus(child.add(parent=target.window_id))
            focused = focused_window_class()
            assert child.vanished == 1
        assert focused == on_target


def test_with_the_focus_on_the_pointer_root_keys_go_to_the_window_under_the_pointer(xvfb: Any, tmp_path: Path) -> None:
    """X's PointerRoot focus (a bare X server's, and some window managers') sends keys to the window under the
    pointer: the focus read names that window, as window_at() without a point does, and nothing over the bare
    root."""
    import subprocess

    from Xlib import X, display

    from holodesk.control.window import focused_window_class

    with TargetWindow.start(tmp_path, x=300, y=200) as win:
        target = window_at(*win.center("Cancel"))
        assert target is not None and target.app
        d = display.Display()
        try:
            d.set_input_focus(X.PointerRoot, X.RevertToPointerRoot, X.CurrentTime)
            d.sync()
            assert d.get_input_focus().focus == X.PointerRoot
        finally:
            d.close()
        subprocess.run(["xdotool", "mousemove", *map(str, win.center("Cancel"))], check=True, timeout=10)
        focused = focused_window_class()
        assert focused is not None and focused.split()[-1] == target.app
        keys_to = window_at()
        assert keys_to is not None and keys_to.window_id == target.window_id
        subprocess.run(["xdotool", "mousemove", "5", "5"], check=True, timeout=10)
        assert focused_window_class() is None and window_at() is None
