"""Field cases F22, F26 and F28 on a real desktop: a window manager (openbox; xfwm4 compositing) on Xvfb,
third-party programs (mousepad, xterm, zenity) and the Tk form, driven by the real PyAutoGUIExecutor.

Every assertion is read from the programs themselves (the Tk form's own report and its JSON output,
the X server's pointer and lock state through xdotool / numlockx / a separate X connection).

* F22: under a window manager the pointer reaches a target some time after the move request (the WM
  holds a synchronous button grab until it has replayed the previous click). 50 clicks on mousepad,
  xterm, zenity and the Tk form under each window manager: no false misses. Positive controls: a
  pointer that another program really moves away, or holds, is still a miss, and nothing is clicked.
  A click on a GTK check box right after Unicode typing (keyboard-map changes) reaches the box every time.
* F26: Caps Lock / Num Lock on: typed text arrives exactly and the locks are as they were.
* F28: a capture backend that misreports the monitor (a fake: the OS reporting a wrong size or
  origin) is caught by the start-up self-check before anything is clicked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.capture.fake import FakeCapture
from holodesk.capture.mss_backend import MssCapture
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.core.actions import Click, Point, Type
from holodesk.core.geometry import Frame, Monitor, frame_pixel_to_point, place
from holodesk.errors import GeometryMismatch
from holodesk.session.state import SessionLimits, State
from tests.field_cases.fakes import make_run, reply
from tests.helpers.desktop import Desktop, FormApp, wait_until

pytestmark = [pytest.mark.gui, pytest.mark.slow]

CLICKS = 50


def grab() -> Frame:
    with MssCapture() as cap:
        return cap.grab(1)


def at(frame: Frame, xy: tuple[int, int]) -> Point:
    return frame_pixel_to_point(frame, *xy)


def points_inside(rect: tuple[int, int, int, int], n: int, inset: int, seed: int) -> list[tuple[int, int]]:
    """``n`` reproducible points spread over ``rect`` (x, y, w, h) at least ``inset`` px from its edges."""
    rng = np.random.default_rng(seed)
    x, y, w, h = rect
    return [(int(rng.integers(x + inset, x + w - inset)), int(rng.integers(y + inset, y + h - inset)))
            for _ in range(n)]


def sync_with_form(desktop: Desktop, form: FormApp) -> dict[str, Any]:
    """Click the form's name field with xdotool and wait until the form reports the focus there. X
    delivers input in order, so any click sent before this one has been handled once this returns."""
    desktop.click(*form.center("Count"), button=3)  # move focus away first (a right click does nothing)
    desktop.click(*form.center("name"))
    return form.wait_layout(lambda lay: lay.get("focus") == "name")


# -- F22 --------------------------------------------------------------------------------------------------
def test_F22_fifty_clicks_on_three_programs_have_no_false_misses(desktop: Desktop, tmp_path: Path) -> None:
    """Round-robin clicks on three Debian programs (mousepad's text area, xterm, a zenity entry dialog
    above its buttons) and the Tk form, whose every turn alternates a click on Count with a click into
    the name field followed by Unicode typing (which remaps keys and keeps the window manager busy).
    Every click must be performed, the pointer must be on its target right after the step (read with
    xdotool), the form must count exactly the Count clicks and zenity must still be open (none of its
    buttons was hit)."""
    note = tmp_path / "note.txt"
    note.write_text("", encoding="utf-8")
    editor = desktop.launch(["mousepad", "--disable-server", str(note)], wm_class="mousepad")
    term = desktop.launch(["xterm", "-T", "F22 xterm", "-geometry", "70x12"], name="^F22 xterm$")
    dialog = desktop.launch(["zenity", "--entry", "--title", "F22 zenity", "--text", "Your name:"],
                            name="^F22 zenity$")
    form = desktop.tk_form()
    desktop.place(editor, 40, 60, 800, 500)
    desktop.place(term, 1000, 60)
    desktop.place(dialog, 100, 700)
    desktop.place(form, 1000, 560)
    ex = PyAutoGUIExecutor()
    ex.move_pointer_out_of_corner()
    frame = grab()
    ex_, ey_, ew, eh = editor.geometry()
    text_area = (ex_, ey_ + eh // 3, ew, eh - eh // 3 - 30)  # below menu and toolbar, above the status bar
    dx, dy, dw, dh = dialog.geometry()
    dialog_top = (dx, dy, dw, dh // 2)  # label and entry; the buttons are at the bottom
    targets = {"mousepad": points_inside(text_area, 13, 20, 1), "xterm": points_inside(term.geometry(), 13, 10, 2),
               "zenity": points_inside(dialog_top, 12, 8, 3)}
    results: list[tuple[str, tuple[int, int], Any]] = []
    count_clicks = typed = 0
    for i in range(CLICKS):
        program = ("mousepad", "xterm", "zenity", "tk")[i % 4]
        if program == "tk":
            turn = i // 4
            name = "Count" if turn % 2 == 0 else "name"
            bx, by, bw, bh = form.rects()[name]
            xy = points_inside((bx, by, bw, bh), 1, 4, 100 + i)[0]
            if name == "name":  # the other programs were clicked since: the form must have lost the focus
                form.wait_layout(lambda lay: lay.get("focus") is None)
        else:
            xy = targets[program].pop()
        r = ex.execute(place(Click(at(frame, xy)), frame))
        results.append((program, xy, r))
        sent = tuple(r.details["input_points"][0])  # xy after the round trip through [0, 1000]
        assert abs(sent[0] - xy[0]) <= 1 and abs(sent[1] - xy[1]) <= 1, (xy, sent)
        assert desktop.pointer() == sent, (program, xy, r)
        if program == "tk" and name == "Count":
            count_clicks += 1
        elif program == "tk":
            form.wait_layout(lambda lay: lay.get("focus") == "name")
            assert ex.execute(place(Type("日"), frame)).ok
            typed += 1
    misses = [(p, xy, r.message) for p, xy, r in results if not r.ok]
    settle = max(r.details.get("pointer_settle_s", 0.0) for _p, _xy, r in results)
    per_program = {p: sum(1 for q, _xy, _r in results if q == p) for p in ("mousepad", "xterm", "zenity", "tk")}
    print(f"F22 {desktop.wm.name}: {len(results)} clicks {per_program}: {len(misses)} false misses; "
          f"longest settle {settle:.3f} s")
    assert misses == []
    assert all(r.status == "performed" for _p, _xy, r in results)
    sx, sy = form.center("Submit")
    assert ex.execute(place(Click(at(frame, (sx, sy))), frame)).ok
    assert form.result() == {"name": "日" * typed, "agree": False, "count": count_clicks, "submitted": True}
    assert dialog.process.poll() is None


def test_F22_pointer_moved_away_by_another_program_is_a_miss_and_nothing_is_clicked(
        desktop: Desktop) -> None:
    """Positive control: another X client (xdotool) moves the pointer away right after the executor
    moved it (the readback first lets it run). The pointer really is elsewhere, so the step must fail
    and the Count button must never be clicked."""
    import pyautogui

    form = desktop.tk_form(600, 400)
    away = (200, 950)  # empty desktop

    def readback_after_another_program_moved_the_pointer() -> tuple[int, int]:
        desktop.xdotool("mousemove", str(away[0]), str(away[1]))
        x, y = pyautogui.position()
        return int(x), int(y)

    ex = PyAutoGUIExecutor(pointer_readback=readback_after_another_program_moved_the_pointer)
    frame = grab()
    r = ex.execute(place(Click(at(frame, form.center("Count"))), frame))
    assert (r.ok, r.status) == (False, "failed"), r
    assert "did not click" in r.message and r.details["pointer_readback"] == list(away)
    assert desktop.pointer() == away
    assert sync_with_form(desktop, form)["count"] == 0


def test_F22_pointer_held_by_another_client_past_the_bound_is_a_miss_and_nothing_is_clicked(
        desktop: Desktop) -> None:
    """Positive control on the X server itself: another client freezes the pointer with a synchronous
    grab (as a window manager does while it decides about a click) and keeps it frozen longer than the
    executor's settle bound. The move never arrives in time, so the step fails and no click is sent;
    after the grab is released the pointer finishes the move, and the form still counts no click."""
    from Xlib import X, display

    form = desktop.tk_form(600, 400)
    frame = grab()
    ex = PyAutoGUIExecutor(settle_timeout_s=0.5)
    ex.move_pointer_out_of_corner()
    start = desktop.pointer()
    other = display.Display(desktop.display)
    try:
        status = other.screen().root.grab_pointer(False, 0, X.GrabModeSync, X.GrabModeAsync, X.NONE, X.NONE,
                                                  X.CurrentTime)
        assert status == X.GrabSuccess
        other.sync()
        r = ex.execute(place(Click(at(frame, form.center("Count"))), frame))
        assert (r.ok, r.status) == (False, "failed"), r
        assert r.details["pointer_readback"] == list(start) and r.details["settle_wait_s"] >= 0.5
    finally:
        other.ungrab_pointer(X.CurrentTime)
        other.sync()
        other.close()
    target = tuple(r.details["target"])
    wait_until(lambda: desktop.pointer() == target, 10, "the queued move to finish after the grab")
    assert sync_with_form(desktop, form)["count"] == 0


GREETING = "Grüße 日本語"
TICKS = 10


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_F22_click_after_unicode_typing_in_gtk_is_not_lost(desktop: Desktop) -> None:
    """The issue's order, TICKS times, through a real session in autopilot: click the name field, type
    "Grüße 日本語" into the GTK form (five characters need temporary keycodes, so the keyboard map
    changes and openbox reloads its key bindings), then click the check box right away. Every click must
    toggle the box (the form's own toggle counter and final state) and every character must arrive (its
    name field)."""
    form = desktop.gtk_form(500, 300)
    frame = grab()
    ex = PyAutoGUIExecutor()
    ex.move_pointer_out_of_corner()

    def click(name: str, dx: int = 0) -> dict[str, Any]:
        x, y = form.center(name)
        point = at(frame, (x + dx, y))
        return {"tool_name": "click", "x": point.x, "y": point.y}

    replies = []
    for tick in range(TICKS):  # the click on the box takes the keyboard focus, so each turn focuses the field
        # 10 px apart: GTK counts two clicks on the entry within 400 ms and 5 px as a double click, which
        # selects a word that the next text then replaces (the steps of a scripted run are milliseconds apart)
        replies.append(reply(click("name", 10 * tick - 45), "focus the name field"))
        replies.append(reply({"tool_name": "type", "text": GREETING}, "type the greeting"))
        replies.append(reply(click("agree"), "tick the box"))
    replies.append(reply(click("Submit"), "submit"))
    replies.append(reply(None, "submitted"))
    with MssCapture() as cap:
        run = make_run(replies, cap, ex, mode="auto", limits=SessionLimits(monitor=1, max_steps=3 * TICKS + 5))
        result = run.session.run("fill in the form")
    assert result.status is State.FINISHED, result
    final = form.result()
    # each click into the field puts the caret where it lands, so the greetings interleave: compare the
    # characters typed, not their order
    assert sorted(final.pop("name")) == sorted(GREETING * TICKS)
    assert final == {"agree": TICKS % 2 == 1, "count": 0, "submitted": True}
    toggles = form.layout()["toggles"]
    print(f"F22 GTK after Unicode typing: {toggles} of {TICKS} clicks on the check box arrived")
    assert toggles == TICKS
    typed = [e.data["result"].details for e in run.kinds("result") if e.data["result"].details.get("kind") == "type"]
    # the first text binds its characters (synchronised with GTK and openbox); the others reuse them
    assert typed[0]["client_sync"] == {"client": "net_wm_ping", "window_manager": "frame_extents"}
    assert all("client_sync" not in d for d in typed[1:]), typed


# -- F26 --------------------------------------------------------------------------------------------------
def lock_state(desktop: Desktop) -> dict[str, bool]:
    """Caps Lock and Num Lock as the X server has them (modifier state read on a separate connection,
    and numlockx's own report)."""
    from Xlib import X, display

    conn = display.Display(desktop.display)
    try:
        mask = int(conn.screen().root.query_pointer().mask)
    finally:
        conn.close()
    num = desktop.run("numlockx", "status").strip()
    assert num in ("Numlock is on", "Numlock is off"), num
    return {"caps": bool(mask & X.LockMask), "num": num == "Numlock is on"}


def set_locks(desktop: Desktop, caps: bool, num: bool) -> None:
    """Turn Caps Lock / Num Lock on or off with xdotool and numlockx, and wait until the server has them."""
    if lock_state(desktop)["caps"] != caps:
        desktop.xdotool("key", "Caps_Lock")
    desktop.run("numlockx", "on" if num else "off")
    want = {"caps": caps, "num": num}
    wait_until(lambda: lock_state(desktop) == want, 10, f"the locks {want}")


@pytest.fixture
def locks_off_afterwards(desktop: Desktop) -> Any:
    """The session's X server is shared: leave both locks off after the test, whatever happened."""
    set_locks(desktop, caps=False, num=False)
    yield
    set_locks(desktop, caps=False, num=False)


F26_TEXT = "ABCabc Grüße 123 ÄÖÜ äöü ß 0123456789 +-*/., = Σσ"


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
@pytest.mark.parametrize("locks", [("caps",), ("num",), ("caps", "num")], ids="+".join)
def test_F26_typed_text_arrives_exactly_with_lock_keys_on(desktop: Desktop, locks: tuple[str, ...],
                                                         locks_off_afterwards: None) -> None:
    form = desktop.tk_form(500, 300)
    ex = PyAutoGUIExecutor()
    frame = grab()
    assert ex.execute(place(Click(at(frame, form.center("name"))), frame)).ok
    form.wait_layout(lambda lay: lay.get("focus") == "name")
    set_locks(desktop, caps="caps" in locks, num="num" in locks)
    want = {"caps": "caps" in locks, "num": "num" in locks}
    r = ex.execute(place(Type(F26_TEXT), frame))
    assert r.ok, r
    assert set(r.details["locks_cleared"]) == {"Caps_Lock" if k == "caps" else "Num_Lock" for k in locks}
    assert r.details["locks_restored"] is True
    form.wait_layout(lambda lay: lay.get("name") == F26_TEXT)
    assert lock_state(desktop) == want  # as the user left them
    assert ex.execute(place(Click(at(frame, form.center("Submit"))), frame)).ok
    assert form.result()["name"] == F26_TEXT


# -- F28 --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
@pytest.mark.parametrize("misreported", [Monitor(1, 0, 0, 2560, 1440, name="FAKE-TOO-BIG"),
                                         Monitor(1, 640, 0, 1920, 1080, name="FAKE-WRONG-ORIGIN")],
                         ids=["size", "origin"])
def test_F28_misreported_monitor_refuses_the_run_before_any_click(desktop: Desktop, misreported: Monitor) -> None:
    """FakeCapture reports a monitor that disagrees with the real 1920x1080 input space (as an OS that
    misreports a monitor would). The Count button sits where the script's click lands after clamping;
    the self-check refuses the run before the policy is even asked, and the form counts no click."""
    form = desktop.tk_form(1500, 700)
    pixels = np.zeros((misreported.height, misreported.width, 3), np.uint8)
    capture = FakeCapture({1: [pixels]}, [misreported])
    frame = Frame(pixels, misreported)
    cx, cy = form.center("Count")
    point = at(frame, (cx - misreported.left, cy - misreported.top))
    tool = {"tool_name": "click", "x": point.x, "y": point.y}
    ex = PyAutoGUIExecutor()
    ex.move_pointer_out_of_corner()
    before = desktop.pointer()
    run = make_run([reply(tool), reply(None, "clicked")], capture, ex, mode="auto",
                   limits=SessionLimits(monitor=1))
    result = run.session.run("press Count")
    assert result.status is State.FAILED, result
    assert result.reason.startswith("start-up geometry check failed: the screen capture reports Monitor 1")
    assert misreported.name in result.reason and "input space is 1920x1080" in result.reason
    assert "Check the display scaling and monitor layout" in result.reason
    assert result.steps == 0 and run.policy.observations == [] and run.kinds("result") == []
    assert [e.message for e in run.kinds("error")] == [result.reason]
    assert desktop.pointer() == before  # the check put the pointer back
    assert sync_with_form(desktop, form)["count"] == 0


def test_F28_self_check_passes_on_the_real_layout_and_puts_the_pointer_back(xvfb: Any) -> None:
    ex = PyAutoGUIExecutor()
    ex.move_pointer_out_of_corner()
    with MssCapture() as cap:
        (monitor,) = cap.monitors()
    xvfb.run("xdotool", "mousemove", "333", "444")
    probes = ex.check_geometry(monitor)
    assert probes == [[8, 8], [1911, 8], [8, 1071], [1911, 1071], [960, 540]]
    out = dict(line.split("=", 1) for line in xvfb.run("xdotool", "getmouselocation", "--shell").stdout.split())
    assert (int(out["X"]), int(out["Y"])) == (333, 444)
    with pytest.raises(GeometryMismatch, match=r"sent to \(2551, 8\) on it stopped at \(1919, 8\)"):
        ex.check_geometry(Monitor(1, 0, 0, 2560, 1440, name="FAKE-TOO-BIG"))
