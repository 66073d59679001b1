"""The approval overlay: Enter approves, S skips, Esc stops, E edits — through the real Session loop."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QLabel

from holodesk.core.actions import Click, Drag, Point, Scroll, Type
from holodesk.core.geometry import to_input_point
from holodesk.session.state import State
from holodesk.ui.overlay import MARKER_COLOR
from tests.helpers.qt import rgb
from tests.ui.conftest import wait_finished, wait_overlay

pytestmark = pytest.mark.gui


def test_enter_approves_and_the_executor_gets_the_proposed_point(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(250, 400))])
    kit.app.start_task("click the thing")
    overlay = wait_overlay(qtbot, kit.app)
    assert kit.executor.calls == []  # nothing runs before the decision (F10)
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    result = wait_finished(qtbot, kit.app)
    assert result.status is State.FINISHED
    assert [c.action for c in kit.executor.calls] == [Click(Point(250, 400))]
    frame = kit.executor.calls[0].frame
    assert kit.executor.calls[0].input_points == (to_input_point(frame, Point(250, 400)),)


def test_s_skips_and_esc_stops(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(100, 100)), Click(Point(900, 900))])
    kit.app.start_task("two clicks")
    overlay = wait_overlay(qtbot, kit.app)
    qtbot.keyClick(overlay, Qt.Key.Key_S)
    qtbot.waitUntil(lambda: kit.app.approval.pending is not None
                    and kit.app.approval.pending.request.step == 1, timeout=10000)
    qtbot.keyClick(kit.app.approval.overlay, Qt.Key.Key_Escape)
    result = wait_finished(qtbot, kit.app)
    assert result.status is State.STOPPED
    assert kit.executor.calls == []  # skipped, then stopped: nothing was performed


def test_e_then_click_edits_the_target(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(100, 100))])
    kit.app.start_task("click, edited")
    overlay = wait_overlay(qtbot, kit.app)
    qtbot.keyClick(overlay, Qt.Key.Key_E)
    assert overlay.mode == "pick"
    # Click at input-space (1500, 700); the overlay covers the 1920x1080 monitor at (0, 0), DPR 1.
    qtbot.mouseClick(overlay, Qt.MouseButton.LeftButton, pos=QPoint(1500, 700))
    assert overlay.mode == "review"
    assert kit.app.approval.edited is not None
    assert "Edited" in overlay.card.description.text()
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    wait_finished(qtbot, kit.app)
    call = kit.executor.calls[0]
    assert isinstance(call.action, Click)
    assert call.input_points == (to_input_point(call.frame, call.action.point),)
    ip = call.input_points[0]
    # Model space has 1001 steps across 1920 pixels: an edit lands within one model unit (1.92 px).
    assert abs(ip.x - 1500) <= 1 and abs(ip.y - 700) <= 1


def test_edit_a_drag_takes_two_clicks(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Drag(Point(100, 100), Point(200, 200))])
    kit.app.start_task("drag")
    overlay = wait_overlay(qtbot, kit.app)
    qtbot.keyClick(overlay, Qt.Key.Key_E)
    qtbot.mouseClick(overlay, Qt.MouseButton.LeftButton, pos=QPoint(300, 300))
    assert overlay.mode == "pick"  # waits for the end point
    qtbot.mouseClick(overlay, Qt.MouseButton.LeftButton, pos=QPoint(1200, 800))
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    wait_finished(qtbot, kit.app)
    pts = kit.executor.calls[0].input_points
    for got, want in zip(pts, [(300, 300), (1200, 800)], strict=True):
        assert abs(got.x - want[0]) <= 1 and abs(got.y - want[1]) <= 1


def test_edit_typed_text(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Type("hello")])
    kit.app.start_task("type")
    overlay = wait_overlay(qtbot, kit.app)
    assert overlay.card.text_box.toPlainText() == "hello"
    qtbot.keyClick(overlay, Qt.Key.Key_E)
    assert overlay.mode == "text" and not overlay.card.text_box.isReadOnly()
    overlay.card.text_box.setPlainText("Grüße, żółw")
    qtbot.keyClick(overlay.card.text_box, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert overlay.mode == "review"
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    wait_finished(qtbot, kit.app)
    assert [c.action for c in kit.executor.calls] == [Type("Grüße, żółw")]


def test_model_text_is_shown_as_plain_text(qtbot: Any, make_app: Any) -> None:
    """F10: markup and shell syntax from the model are shown verbatim, never rendered."""
    html = '<b>hi</b><img src=x> "; touch /tmp/x; echo " $(id)'
    kit = make_app([reply_with_thought(Type(html), thought="<i>ignore the user</i> & <a href=x>go</a>")])
    kit.app.start_task("type markup")
    overlay = wait_overlay(qtbot, kit.app)
    for label in overlay.card.findChildren(QLabel):
        assert label.textFormat() == Qt.TextFormat.PlainText, label.objectName()
    assert overlay.card.thought.text() == "Model's thought: <i>ignore the user</i> & <a href=x>go</a>"
    assert overlay.card.text_box.toPlainText() == html
    assert overlay.card.description.text().startswith('Type ‘<b>hi</b><img src=x> "; touch')
    qtbot.keyClick(overlay, Qt.Key.Key_Escape)
    assert wait_finished(qtbot, kit.app).status is State.STOPPED
    assert kit.executor.calls == []


def test_marker_sits_on_the_exact_input_point(qtbot: Any, make_app: Any) -> None:
    """The mark is centred on the input-space pixel the click will hit (grabbed with mss): that pixel is
    left unpainted (its label stays readable) and the pointers above and below sit on its column."""
    import mss

    kit = make_app([Scroll("down", 3, Point(640, 300)), Click(Point(333, 777))])
    kit.app.start_task("scroll then click")
    overlay = wait_overlay(qtbot, kit.app)
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: kit.app.approval.pending is not None
                    and kit.app.approval.pending.request.step == 1, timeout=10000)
    request = kit.app.approval.pending.request
    ip = request.input_points[0]
    qtbot.wait(200)
    with (getattr(mss, "MSS", None) or mss.mss)() as sct:
        shot = sct.grab({"left": ip.x - 6, "top": ip.y - 28, "width": 13, "height": 57})
    want = rgb(MARKER_COLOR)
    assert shot.pixel(6, 28) != want  # the target pixel itself
    assert shot.pixel(6, 0) == want and shot.pixel(6, 56) == want  # 28 px above and below, same column
    assert all(shot.pixel(6 + dx, y) != want for dx in (-6, 6) for y in (0, 56))  # the pointers are narrow
    qtbot.keyClick(kit.app.approval.overlay, Qt.Key.Key_Escape)
    wait_finished(qtbot, kit.app)


def reply_with_thought(action: Any, thought: str) -> str:
    from tests.ui.conftest import reply

    return reply(action, thought=thought)


def test_card_buttons_decide_too(qtbot: Any, make_app: Any) -> None:
    kit = make_app([Click(Point(100, 100)), Click(Point(200, 200))])
    kit.app.start_task("buttons")
    overlay = wait_overlay(qtbot, kit.app)
    qtbot.mouseClick(overlay.card.skip_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: kit.app.approval.pending is not None
                    and kit.app.approval.pending.request.step == 1, timeout=10000)
    qtbot.mouseClick(kit.app.approval.overlay.card.approve_button, Qt.MouseButton.LeftButton)
    assert wait_finished(qtbot, kit.app).status is State.FINISHED
    assert [c.action for c in kit.executor.calls] == [Click(Point(200, 200))]


def test_an_overlay_that_cannot_open_stops_the_run_and_says_why(qtbot: Any, make_app: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import holodesk.ui.approval as approval_module

    def no_screens(monitor: Any) -> Any:
        raise RuntimeError("Qt reports no screens")

    monkeypatch.setattr(approval_module, "screen_for_monitor", no_screens)
    kit = make_app([Click(Point(100, 100))])
    kit.app.start_task("cannot show")
    assert wait_finished(qtbot, kit.app).status is State.STOPPED
    assert kit.executor.calls == []
    qtbot.waitUntil(lambda: any(n.title == "The approval overlay could not be shown"
                                for n in kit.app.notifier.history), timeout=10000)
