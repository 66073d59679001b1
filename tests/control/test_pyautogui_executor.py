"""PyAutoGUIExecutor on a real Xvfb server against a real Qt window (tests/apps/target_window.py).

pyautogui binds to $DISPLAY at import, so every test here uses the session server (``xvfb``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.core.actions import (
    Answer,
    Click,
    Done,
    Drag,
    Key,
    Move,
    Point,
    Scroll,
    Type,
    Wait,
)
from holodesk.core.geometry import Frame, Monitor, frame_pixel_to_point, place, to_input_point
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.loop import Session
from holodesk.session.state import State
from tests.conftest import XvfbServer
from tests.helpers.target import TargetWindow

F14_TEXT = "Grüße, żółw, Ελληνικά, 日本語"


@pytest.fixture
def executor(xvfb: XvfbServer) -> Iterator[PyAutoGUIExecutor]:
    ex = PyAutoGUIExecutor()
    ex.move_pointer_out_of_corner()
    yield ex
    ex.end_episode()  # as the session does: the shared X server gets its keyboard map back


@pytest.fixture
def target(xvfb: XvfbServer, tmp_path: Path) -> Iterator[TargetWindow]:
    with TargetWindow.start(tmp_path, x=200, y=150) as win:
        yield win


@pytest.fixture
def frame(xvfb: XvfbServer, target: TargetWindow) -> Frame:
    with MssCapture() as cap:
        return cap.grab(1)


def at(frame: Frame, xy: tuple[int, int]) -> Point:
    """Model-space point for a screen pixel of monitor 1 (origin 0,0, scale 1)."""
    return frame_pixel_to_point(frame, *xy)


def settle_then(target: TargetWindow, seconds: float = 0.4) -> dict[str, Any]:
    time.sleep(seconds)
    return target.state()


def pointer(xvfb: XvfbServer) -> tuple[int, int]:
    out = xvfb.run("xdotool", "getmouselocation", "--shell").stdout
    vals = dict(line.split("=", 1) for line in out.split())
    return int(vals["X"]), int(vals["Y"])


def keyboard_map() -> list[tuple[int, ...]]:
    from Xlib import display

    d = display.Display()
    try:
        info = d.display.info
        return [tuple(r) for r in d.get_keyboard_mapping(info.min_keycode, info.max_keycode - info.min_keycode + 1)]
    finally:
        d.close()


# -- pointer -------------------------------------------------------------------------------------------
def test_click_real_buttons(executor: PyAutoGUIExecutor, target: TargetWindow, frame: Frame,
                            xvfb: XvfbServer) -> None:
    ok_point = at(frame, target.center("OK"))
    r = executor.execute(place(Click(ok_point), frame))
    assert r.ok and r.status == "performed", r
    expected = to_input_point(frame, ok_point)
    assert r.details["input_points"] == [[expected.x, expected.y]]
    x, y, w, h = target.rects["OK"]
    assert x <= expected.x < x + w and y <= expected.y < y + h
    assert r.details["method"].startswith("pyautogui.click")
    assert r.duration_ms > 0
    target.wait_for(lambda s: s["clicks"] == ["OK"])
    assert executor.execute(place(Click(at(frame, target.center("Cancel")), button="right"), frame)).ok
    apply_point = at(frame, target.center("Apply"))
    assert executor.execute(place(Click(apply_point), frame)).ok
    state = target.wait_for(lambda s: len(s["clicks"]) >= 2)
    assert settle_then(target, 0.2)["clicks"] == ["OK", "Apply"] == state["clicks"]
    expected = to_input_point(frame, apply_point)
    assert pointer(xvfb) == (expected.x, expected.y)


def test_double_click_clicks_twice(executor: PyAutoGUIExecutor, target: TargetWindow, frame: Frame) -> None:
    assert executor.execute(place(Click(at(frame, target.center("Cancel")), count=2), frame)).ok
    target.wait_for(lambda s: s["clicks"] == ["Cancel", "Cancel"])


def test_move_lands_exactly(executor: PyAutoGUIExecutor, frame: Frame, xvfb: XvfbServer) -> None:
    p = Point(250, 750)
    r = executor.execute(place(Move(p), frame))
    assert r.ok
    assert pointer(xvfb) == tuple(r.details["input_points"][0]) == (480, 810)


def test_drag_selects_field_text(executor: PyAutoGUIExecutor, target: TargetWindow, frame: Frame) -> None:
    assert executor.execute(place(Click(at(frame, target.center("field"))), frame)).ok
    assert executor.execute(place(Type("select me"), frame)).ok
    target.wait_for(lambda s: s["text"] == "select me")
    fx, fy, fw, fh = target.rects["field"]
    r = executor.execute(place(Drag(at(frame, (fx + fw - 4, fy + fh // 2)), at(frame, (fx + 3, fy + fh // 2))), frame))
    assert r.ok, r
    assert executor.execute(place(Type("X"), frame)).ok  # replaces the selection made by the drag
    target.wait_for(lambda s: s["text"] == "X")


# -- the approved point is the performed point ----------------------------------------------------------
def test_a_session_clicks_where_the_approval_showed(executor: PyAutoGUIExecutor, target: TargetWindow,
                                                    tmp_path: Path) -> None:
    """Step mode on the real screen: the approver sees OK's input point; after the approval the frame's
    monitor is moved so that mapping the proposal again would land on Cancel. The click lands on OK (the
    window's own record), where the approval showed it."""
    ok_x, ok_y = target.center("OK")
    cancel_x, cancel_y = target.center("Cancel")
    shown: list[tuple[int, int]] = []

    def approver(request: ApprovalRequest) -> ApprovalResponse:
        (ip,) = request.input_points
        shown.append((ip.x, ip.y))
        mon = request.frame.monitor
        moved = Monitor(mon.index, mon.left + cancel_x - ok_x, mon.top + cancel_y - ok_y, mon.width, mon.height)
        assert to_input_point(Frame(request.frame.pixels, moved), request.action.points()[0]) != ip
        object.__setattr__(request.frame, "monitor", moved)  # a later mapping would click Cancel
        return ApprovalResponse(Decision.APPROVE)

    with MssCapture() as capture:
        ok = at(capture.grab(1), (ok_x, ok_y))
        replies = [{"note": None, "thought": "press OK", "tool_call": {"tool_name": "click", "x": ok.x, "y": ok.y}},
                   {"note": None, "thought": "done", "tool_call": {"tool_name": "answer", "text": "pressed"}}]
        session = Session(ScriptedPolicy(replies), capture, executor, ApprovalPolicy("step", approver),
                          episodes_dir=tmp_path)
        result = session.run("press OK")
    assert result.status is State.FINISHED, result.reason
    x, y, w, h = target.rects["OK"]
    assert len(shown) == 1 and x <= shown[0][0] < x + w and y <= shown[0][1] < y + h
    assert target.wait_for(lambda s: s["clicks"] != [])["clicks"] == ["OK"]
    assert settle_then(target)["clicks"] == ["OK"]


# -- F06: the pointer cannot reach the target ----------------------------------------------------------
def test_clamped_pointer_at_screen_edge_fails_without_clicking(
        executor: PyAutoGUIExecutor, xvfb: XvfbServer, tmp_path: Path) -> None:
    """A frame from a monitor that is no longer there (x = 1920.. on a 1920-wide screen): X clamps the
    pointer to x=1919, where the Apply button is. Nothing may be clicked."""
    with TargetWindow.start(tmp_path, x=1619, y=300) as win:
        ax, ay, aw, ah = win.rects["Apply"]
        assert ax <= 1919 < ax + aw
        stale = Frame(np.zeros((1080, 1920, 3), np.uint8), Monitor(2, 1920, 0, 1920, 1080))
        point = frame_pixel_to_point(stale, 600, ay + ah // 2)
        r = executor.execute(place(Click(point), stale))
        assert not r.ok and r.status == "failed"
        assert r.details["target"] == [2520, ay + ah // 2]
        assert r.details["pointer_readback"] == [1919, ay + ah // 2]
        assert "could not reach" in r.message and "did not click" in r.message
        assert settle_then(win)["clicks"] == []


def test_clamp_into_a_corner_is_a_failure_not_a_user_stop(executor: PyAutoGUIExecutor) -> None:
    stale = Frame(np.zeros((1080, 1920, 3), np.uint8), Monitor(2, 1920, 1080, 1920, 1080))
    r = executor.execute(place(Click(Point(500, 500)), stale))
    assert (r.ok, r.status) == (False, "failed")
    assert r.details["pointer_readback"] == [1919, 1079]
    assert executor.move_pointer_out_of_corner() is not None


class FakePointerReadback:
    """A fake pointer readback that always reports the same (wrong) position."""

    def __init__(self, pos: tuple[int, int]) -> None:
        self.pos = pos

    def __call__(self) -> tuple[int, int]:
        return self.pos


def test_readback_mismatch_inside_screen_fails(xvfb: XvfbServer, target: TargetWindow, frame: Frame) -> None:
    ex = PyAutoGUIExecutor(pointer_readback=FakePointerReadback((5, 5)))
    r = ex.execute(place(Click(at(frame, target.center("OK"))), frame))
    assert (r.ok, r.status) == (False, "failed")
    assert r.details["pointer_readback"] == [5, 5]
    assert settle_then(target)["clicks"] == []


# -- F12: fail-safe ------------------------------------------------------------------------------------
def test_failsafe_corner_is_stopped_by_user(executor: PyAutoGUIExecutor, target: TargetWindow,
                                            frame: Frame, xvfb: XvfbServer) -> None:
    xvfb.run("xdotool", "mousemove", "0", "0")
    assert executor.pointer_in_failsafe_corner()
    r = executor.execute(place(Click(at(frame, target.center("OK"))), frame))
    assert (r.ok, r.status) == (False, "stopped_by_user")
    assert "fail-safe" in r.message
    assert settle_then(target, 0.2)["clicks"] == []
    moved = executor.move_pointer_out_of_corner()
    assert moved is not None and (moved.x, moved.y) == (960, 540)
    assert not executor.pointer_in_failsafe_corner()
    assert executor.move_pointer_out_of_corner() is None
    assert executor.execute(place(Click(at(frame, target.center("OK"))), frame)).ok
    target.wait_for(lambda s: s["clicks"] == ["OK"])


def test_target_in_a_corner_is_refused(executor: PyAutoGUIExecutor, frame: Frame, xvfb: XvfbServer) -> None:
    r = executor.execute(place(Click(Point(0, 0)), frame))
    assert (r.ok, r.status) == (False, "failed")
    assert "corner" in r.message
    assert pointer(xvfb) != (0, 0)


# -- keyboard ------------------------------------------------------------------------------------------
def test_type_unicode_exactly_and_restore_keyboard_map(executor: PyAutoGUIExecutor, target: TargetWindow,
                                                       frame: Frame) -> None:
    """F14 through the X11 keysym typer: the bindings are held for the episode and given back at its end."""
    before = keyboard_map()
    assert executor.execute(place(Click(at(frame, target.center("field"))), frame)).ok
    target.wait_for(lambda s: s["focus"] == "field")
    text = F14_TEXT + " plain ASCII: Hello, World! 123 ~`@#$%^&*()_+{}|:\"<>?"
    r = executor.execute(place(Type(text), frame))
    assert r.ok, r
    assert r.details["method"] == "xtest_keysym"
    assert r.details["remapped_characters"] > 0
    state = target.wait_for(lambda s: s["text"] == text)
    assert state["text"] == text
    held = keyboard_map()
    assert held != before  # the characters keep their spare keycodes until the episode ends
    # a character of the text's last segment again (the server may have too few spare keycodes for all
    # of the text's characters at once): no keyboard-map change at all
    again = [ch for ch in text if ord(ch) > 0x7E][-1] * 3
    r2 = executor.execute(place(Type(again), frame))
    assert r2.ok and "client_sync" not in r2.details, r2
    target.wait_for(lambda s: s["text"] == text + again)
    assert keyboard_map() == held
    executor.end_episode()
    assert keyboard_map() == before


def test_binding_overwritten_by_someone_else_is_forgotten(executor: PyAutoGUIExecutor, target: TargetWindow,
                                                          frame: Frame, xvfb: XvfbServer) -> None:
    """A layout switch mid-episode rewrites the keycodes we hold: the typer binds afresh (the text still
    arrives exactly) and does not empty a keycode that is no longer ours."""
    from Xlib import display

    assert executor.execute(place(Click(at(frame, target.center("field"))), frame)).ok
    target.wait_for(lambda s: s["focus"] == "field")
    assert executor.execute(place(Type("ß"), frame)).ok
    target.wait_for(lambda s: s["text"] == "ß")
    d = display.Display()
    try:
        info = d.display.info
        rows = d.get_keyboard_mapping(info.min_keycode, info.max_keycode - info.min_keycode + 1)
        ours = [info.min_keycode + i for i, row in enumerate(rows) if list(row)[:2] == [0xDF, 0xDF]]
        assert len(ours) == 1
        d.change_keyboard_mapping(ours[0], [[0x2A, 0x2A] + [0] * (len(rows[0]) - 2)])  # "*", someone else's
        d.sync()
        assert executor.execute(place(Type("ßß"), frame)).ok
        target.wait_for(lambda s: s["text"] == "ßßß")
        executor.end_episode()
        after = d.get_keyboard_mapping(ours[0], 1)
        assert list(after[0])[:2] == [0x2A, 0x2A]  # not ours any more: left as the other party set it
        d.change_keyboard_mapping(ours[0], [[0] * len(rows[0])])
        d.sync()
    finally:
        d.close()


def test_type_newline_is_return_and_tab_moves_focus(executor: PyAutoGUIExecutor, target: TargetWindow,
                                                    frame: Frame) -> None:
    assert executor.execute(place(Click(at(frame, target.center("field"))), frame)).ok
    assert executor.execute(place(Type("abc\n"), frame)).ok
    target.wait_for(lambda s: s["text"] == "abc" and s["submits"] == 1)
    assert executor.execute(place(Type("\t"), frame)).ok
    state = target.wait_for(lambda s: s["focus"] != "field")
    assert state["text"] == "abc" and state["focus"] == "OK"


def test_key_chord_select_all_and_delete(executor: PyAutoGUIExecutor, target: TargetWindow,
                                         frame: Frame) -> None:
    assert executor.execute(place(Click(at(frame, target.center("field"))), frame)).ok
    assert executor.execute(place(Type("to be deleted"), frame)).ok
    target.wait_for(lambda s: s["text"] == "to be deleted")
    r = executor.execute(place(Key(("ctrl", "a")), frame))
    assert r.ok and r.details["pyautogui_keys"] == ["ctrl", "a"]
    assert executor.execute(place(Key(("backspace",)), frame)).ok
    target.wait_for(lambda s: s["text"] == "")


def test_overwrite_replaces_the_fields_text_and_repeat_presses_the_chord_again(
        executor: PyAutoGUIExecutor, target: TargetWindow, frame: Frame) -> None:
    """write_desktop's overwrite and hotkey_desktop's repeat_count, read back from the window's own field."""
    assert executor.execute(place(Click(at(frame, target.center("field"))), frame)).ok
    assert executor.execute(place(Type("old text"), frame)).ok
    target.wait_for(lambda s: s["text"] == "old text")
    result = executor.execute(place(Type("Ada", replace=True), frame))
    assert result.ok and result.details["replaced"] is True
    target.wait_for(lambda s: s["text"] == "Ada")
    result = executor.execute(place(Key(("backspace",), repeat=2), frame))
    assert result.ok and result.message == "pressed backspace 2 times"
    target.wait_for(lambda s: s["text"] == "A")


def test_chord_pressed_in_order_released_in_reverse(executor: PyAutoGUIExecutor,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import pyautogui

    events: list[tuple[str, str]] = []
    monkeypatch.setattr(pyautogui, "keyDown", lambda k: events.append(("down", k)))
    monkeypatch.setattr(pyautogui, "keyUp", lambda k: events.append(("up", k)))
    frame = Frame(np.zeros((1080, 1920, 3), np.uint8), Monitor(1, 0, 0, 1920, 1080))
    assert executor.execute(place(Key(("ctrl", "shift", "super", "t")), frame)).ok
    assert events == [("down", "ctrl"), ("down", "shift"), ("down", "win"), ("down", "t"),
                      ("up", "t"), ("up", "win"), ("up", "shift"), ("up", "ctrl")]


def test_unknown_key_fails_before_pressing_anything(executor: PyAutoGUIExecutor,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import pyautogui

    events: list[str] = []
    monkeypatch.setattr(pyautogui, "keyDown", events.append)
    frame = Frame(np.zeros((1080, 1920, 3), np.uint8), Monitor(1, 0, 0, 1920, 1080))
    r = executor.execute(place(Key(("ctrl", "ü")), frame))
    assert (r.ok, r.status) == (False, "failed") and "'ü'" in r.message
    assert events == []


def test_clipboard_paste_restores_previous_clipboard(xvfb: XvfbServer, target: TargetWindow,
                                                     frame: Frame) -> None:
    """F14/F15 through the clipboard path (pyperclip + xclip)."""
    import pyperclip

    pyperclip.copy("previous ✓ value")
    ex = PyAutoGUIExecutor(typing="clipboard")
    assert ex.execute(place(Click(at(frame, target.center("field"))), frame)).ok
    target.wait_for(lambda s: s["focus"] == "field")
    r = ex.execute(place(Type(F14_TEXT), frame))
    assert r.ok, r
    assert r.details["method"] == "clipboard"
    assert r.details["paste_chord"] == "ctrl+v"
    assert r.details["verified"] is False and "could not be verified" in r.message
    assert r.details["clipboard_restored"] is True
    target.wait_for(lambda s: s["text"] == F14_TEXT)
    assert pyperclip.paste() == "previous ✓ value"


def test_scroll_moves_pointer_then_scrolls_in_the_right_direction(
        executor: PyAutoGUIExecutor, frame: Frame, xvfb: XvfbServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyautogui

    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(pyautogui, "scroll", lambda n: calls.append(("v", n)))
    monkeypatch.setattr(pyautogui, "hscroll", lambda n: calls.append(("h", n)))
    for direction in ("up", "down", "left", "right"):
        assert executor.execute(place(Scroll(direction, 3, Point(500, 500)), frame)).ok
    assert calls == [("v", 3), ("v", -3), ("h", -3), ("h", 3)]
    assert pointer(xvfb) == (960, 540)


# -- no pointer, no display needed --------------------------------------------------------------------
def test_wait_answer_done_and_stop_event() -> None:
    frame = Frame(np.zeros((10, 10, 3), np.uint8), Monitor(1, 0, 0, 10, 10))
    stop = threading.Event()
    ex = PyAutoGUIExecutor(stop_event=stop)
    r = ex.execute(place(Wait(0.1), frame))
    assert r.ok and r.duration_ms >= 100
    assert ex.execute(place(Answer("42"), frame)).ok
    assert ex.execute(place(Done(), frame)).ok
    stop.set()
    r = ex.execute(place(Wait(30), frame))
    assert (r.ok, r.status) == (False, "stopped_by_user") and r.duration_ms < 1000


def test_display_changed_after_pyautogui_import_is_reported(
        executor: PyAutoGUIExecutor, make_xvfb: Callable[..., XvfbServer]) -> None:
    """pyautogui connects once, at import; a later DISPLAY change must not silently drive the old one."""
    executor.pointer_in_failsafe_corner()  # pyautogui is now bound to the session display
    other = make_xvfb(800, 600)
    frame = Frame(np.zeros((600, 800, 3), np.uint8), Monitor(1, 0, 0, 800, 600))
    r = PyAutoGUIExecutor().execute(place(Click(Point(500, 500)), frame))
    assert (r.ok, r.status, r.details.get("error")) == (False, "failed", "DisplayError")
    assert f"DISPLAY is now '{other.display}'" in r.message


def test_a_window_manager_that_is_gone_is_not_waited_for(xvfb: XvfbServer) -> None:
    """A killed window manager leaves _NET_SUPPORTING_WM_CHECK on the root, naming a window that no longer
    exists: the typer's sync must not wait its 2 s round-trip bound for it on every keyboard-map change."""
    from Xlib import X, Xatom, display

    from holodesk.control.typing import ClientSync

    d = display.Display()
    root = d.screen().root
    atom = d.intern_atom("_NET_SUPPORTING_WM_CHECK")
    check = root.create_window(0, 0, 1, 1, 0, 0, X.InputOnly, X.CopyFromParent)
    try:
        for w in (root, check):
            w.change_property(atom, Xatom.WINDOW, 32, [check.id])
        d.sync()
        assert ClientSync(d, 2.0).method["window_manager"] == "frame_extents"  # looks alive: asked
        check.destroy()
        d.sync()
        sync = ClientSync(d, 2.0)
        assert sync.method["window_manager"] == "none"  # so wait() sends it no request and waits for none
        sync.close()
    finally:
        root.delete_property(atom)
        d.sync()
        d.close()


def test_a_focused_window_that_goes_away_is_not_taken_for_a_window_that_cannot_be_pinged(
        xvfb: XvfbServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The typer's sync pings the focused window's top-level (_NET_WM_PING). The focused window, a child of a
    top-level that answers pings, is destroyed while it is read: the focus is read again (X gave it to the
    top-level), and the top-level is pinged, not replaced by fixed delays for the rest of the text."""
    from Xlib import X, Xatom, display

    from holodesk.control.typing import ClientSync
    from tests.helpers.vanishing import vanishing_windows

    d = display.Display()
    top = d.screen().root.create_window(200, 200, 300, 200, 0, X.CopyFromParent, override_redirect=1)
    top.change_property(d.intern_atom("WM_PROTOCOLS"), Xatom.ATOM, 32, [d.intern_atom("_NET_WM_PING")])
    top.map()
    d.sync()
    try:
        with vanishing_windows(monkeypatch, (0, 0, 10, 10), again=False) as child:
            focused = child.display.create_resource_object("window", child.add(parent=top.id))
            focused.set_input_focus(X.RevertToParent, X.CurrentTime)
            child.display.sync()
            sync = ClientSync(d, 2.0)
            assert child.vanished == 1
        sync.close()
        assert sync.client is not None and sync.client.id == top.id
    finally:
        top.destroy()
        d.close()
