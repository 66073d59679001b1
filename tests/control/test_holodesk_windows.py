"""Holodesk's own windows are never a target, and keys after a click go to the window the click focused.

The real executor (pyautogui, XTest) on the session Xvfb against real X windows: a window of this process
(``_NET_WM_PID``, as Qt marks every Holodesk window), an xterm of WM_CLASS class ``Holodesk`` (another
Holodesk process's window, as Qt names them), a window that never takes the keyboard focus (as a panel),
and the Qt target window of tests/apps/target_window.py. What arrived is read from the X server's own
events on those windows and from the target window's state file.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.control.window import holodesk_window_at, window_at
from holodesk.core.actions import Click, Point, Type
from holodesk.core.geometry import Frame, frame_pixel_to_point, place
from tests.conftest import XvfbServer
from tests.helpers.desktop import wait_until
from tests.helpers.processes import stop_process
from tests.helpers.target import TargetWindow

pytestmark = pytest.mark.gui


class XWindow:
    """A plain top-level X window of this process, for the X server's record of what reached it.

    Args:
        rect: ``(x, y, width, height)`` on the root window.
        wm_class: its WM_CLASS ``(instance, class)``.
        pid: the ``_NET_WM_PID`` it states (None: none).
    """

    def __init__(self, rect: tuple[int, int, int, int], wm_class: tuple[str, str], pid: int | None) -> None:
        from Xlib import X, Xatom, display

        self.d = display.Display()
        screen = self.d.screen()
        x, y, width, height = rect
        self.window = screen.root.create_window(
            x, y, width, height, 0, screen.root_depth, X.InputOutput, X.CopyFromParent,
            background_pixel=screen.white_pixel, override_redirect=False,
            event_mask=X.ButtonPressMask | X.KeyPressMask | X.StructureNotifyMask | X.FocusChangeMask)
        self.window.set_wm_class(*wm_class)
        self.window.set_wm_name(f"{wm_class[1]} window")
        if pid is not None:
            self.window.change_property(self.d.intern_atom("_NET_WM_PID"), Xatom.CARDINAL, 32, [pid])
        self.window.map()
        self.d.sync()
        self.presses: list[str] = []
        self.center = (x + width // 2, y + height // 2)
        title = f"{wm_class[1]} window"

        def mapped() -> bool:
            info = window_at(*self.center)
            return info is not None and info.title == title

        wait_until(mapped, 10, f"{title} mapped on top")

    def _read(self) -> bool:
        from Xlib import X

        while self.d.pending_events():
            event = self.d.next_event()
            if event.type == X.ButtonPress:
                self.presses.append(f"button {event.detail}")
            elif event.type == X.KeyPress:
                self.presses.append(f"key {event.detail}")
        return False

    def wait_presses(self, count: int) -> list[str]:
        """The presses that reached the window, once there are at least ``count`` (bounded wait)."""
        wait_until(lambda: self._read() or len(self.presses) >= count, 10, f"{count} press(es) on the window")
        return list(self.presses)

    def focus(self) -> None:
        from Xlib import X

        self.window.set_input_focus(X.RevertToPointerRoot, X.CurrentTime)
        self.d.sync()

    def close(self) -> None:
        self.window.destroy()
        self.d.close()


@pytest.fixture
def executor(xvfb: XvfbServer) -> Iterator[PyAutoGUIExecutor]:
    ex = PyAutoGUIExecutor(focus_timeout_s=1.0)
    ex.move_pointer_out_of_corner()
    yield ex
    ex.end_episode()


@pytest.fixture
def frame(xvfb: XvfbServer) -> Frame:
    with MssCapture() as cap:
        return cap.grab(1)


def at(frame: Frame, xy: tuple[int, int]) -> Point:
    return frame_pixel_to_point(frame, *xy)


def test_a_click_on_a_window_of_this_process_is_refused(executor: PyAutoGUIExecutor, frame: Frame,
                                                        xvfb: XvfbServer) -> None:
    own = XWindow((500, 400, 300, 200), ("probe", "Probe"), pid=os.getpid())
    try:
        result = executor.execute(place(Click(at(frame, own.center)), frame))
        assert not result.ok and result.status == "failed", result
        assert f"the point ({own.center[0]}, {own.center[1]}) is on Holodesk's own window" in result.message
        assert "nothing was done" in result.message
        # The X server's record: a control click (xdotool) is the first and only press the window got.
        xvfb.run("xdotool", "mousemove", str(own.center[0]), str(own.center[1]), "click", "1")
        assert own.wait_presses(1) == ["button 1"]
    finally:
        own.close()


def test_keys_while_a_window_of_this_process_has_the_focus_are_refused(executor: PyAutoGUIExecutor,
                                                                       frame: Frame, xvfb: XvfbServer) -> None:
    own = XWindow((500, 400, 300, 200), ("probe", "Probe"), pid=os.getpid())
    try:
        own.focus()
        result = executor.execute(place(Type("abc"), frame))
        assert not result.ok and result.status == "failed", result
        assert "the keyboard focus is in Holodesk's own window" in result.message
        xvfb.run("xdotool", "key", "x")  # a control key: the first and only press the window got
        assert len(own.wait_presses(1)) == 1
    finally:
        own.close()


def test_a_window_of_another_holodesk_process_is_known_by_its_class(xvfb: XvfbServer) -> None:
    """Qt names every window of a Holodesk process with WM_CLASS class ``Holodesk``; another program's
    window (class ``Notes``) is not Holodesk's."""
    procs = {cls: subprocess.Popen(["xterm", "-class", cls, "-T", f"{cls} term", "-geometry", geometry],
                                   stdin=subprocess.DEVNULL)
             for cls, geometry in (("Holodesk", "40x8+40+40"), ("Notes", "40x8+40+400"))}
    try:
        for cls in procs:
            wait_until(lambda c=cls: subprocess.run(["xdotool", "search", "--onlyvisible", "--class", c],
                                                    capture_output=True, text=True, timeout=10).stdout.strip(),
                       15, f"the {cls} xterm")
        assert holodesk_window_at(60, 60) == "Holodesk term"
        assert holodesk_window_at(60, 420) is None
        assert holodesk_window_at(1500, 900) is None  # the bare root window
    finally:
        for proc in procs.values():
            stop_process(proc)


def test_keys_after_a_click_that_did_not_focus_its_window_are_not_sent(executor: PyAutoGUIExecutor, frame: Frame,
                                                                       xvfb: XvfbServer, tmp_path: Path) -> None:
    """A click on a window that never takes the keyboard focus (a panel) leaves the focus in the target's
    field; the keys meant for the clicked window are not typed there: the step fails saying so."""
    with TargetWindow.start(tmp_path, x=200, y=150) as target:
        panel = XWindow((900, 600, 200, 100), ("panel", "Panel"), pid=None)
        try:
            fx, fy = target.center("field")
            xvfb.run("xdotool", "mousemove", str(fx), str(fy), "click", "1")
            target.wait_for(lambda s: s["focus"] == "field", timeout=10)
            clicked = executor.execute(place(Click(at(frame, panel.center)), frame))
            assert clicked.ok, clicked
            assert panel.wait_presses(1) == ["button 1"]
            typed = executor.execute(place(Type("abc"), frame))
            assert not typed.ok and typed.status == "failed", typed
            assert "the keys were not sent" in typed.message and "did not take the keyboard focus" in typed.message
            assert typed.details["focus_after_click"]["focused"] is False
            # Without a click before them, keys go where the focus is: the first text the field gets is "z".
            assert executor.execute(place(Type("z"), frame)).ok
            assert target.wait_for(lambda s: s["text"] != "", timeout=10)["text"] == "z"
        finally:
            panel.close()


def test_keys_after_a_refused_click_are_not_sent(executor: PyAutoGUIExecutor, frame: Frame, xvfb: XvfbServer,
                                                 tmp_path: Path) -> None:
    """The click meant to focus a field lands on Holodesk's window and is refused; the keys meant for that
    field are not typed into the window that has the focus (here the target's field) either."""
    with TargetWindow.start(tmp_path, x=200, y=150) as target:
        fx, fy = target.center("field")
        xvfb.run("xdotool", "mousemove", str(fx), str(fy), "click", "1")
        target.wait_for(lambda s: s["focus"] == "field", timeout=10)
        own = XWindow((900, 600, 200, 100), ("probe", "Probe"), pid=os.getpid())
        try:
            assert not executor.execute(place(Click(at(frame, own.center)), frame)).ok
            typed = executor.execute(place(Type("abc"), frame))
            assert not typed.ok and typed.status == "failed", typed
            assert "the keys were not sent: the click before them was not performed" in typed.message
            assert executor.execute(place(Type("z"), frame)).ok  # no click before: where the focus is
            assert target.wait_for(lambda s: s["text"] != "", timeout=10)["text"] == "z"
        finally:
            own.close()
