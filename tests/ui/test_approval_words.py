"""The approval card leads with the step in plain words, its marks leave the target's label readable,
and it is placed off the target and off the target's window (the form it would submit)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from PySide6.QtCore import QPointF, QRect, QRectF, Qt
from PySide6.QtGui import QColor, QImage, QPainter

from holodesk.capture.fake import FakeCapture
from holodesk.core.actions import Action, Click, Drag, Move, Point, Scroll, Type
from holodesk.core.geometry import Frame, InputPoint, Monitor, frame_pixel_to_point, place
from holodesk.core.risk import Risk, RiskAssessment
from holodesk.core.wording import WindowInfo
from holodesk.policy.base import Proposal
from holodesk.session.approval import make_request
from holodesk.session.state import State
from holodesk.ui.approval import ApprovalController
from holodesk.ui.overlay import (
    LABEL_HALF_HEIGHT,
    LABEL_HALF_WIDTH,
    TARGET_KEEP,
    OverlayGeometry,
    OverlayWindow,
    paint_marks,
    place_card,
)
from holodesk.ui.theme import THEME
from holodesk.ui.workers import PendingDecision, WindowGuard
from tests.ui.conftest import blank_frame, wait_finished, wait_overlay

pytestmark = pytest.mark.gui

SCREENS = [(1920, 1080), (1366, 768), (1280, 720), (1024, 768), (800, 600)]


def _keep(p: QPointF) -> QRectF:
    kx, ky = TARGET_KEEP
    return QRectF(p.x() - kx, p.y() - ky, 2 * kx, 2 * ky)


def _overlay(qtbot: Any, width: int, height: int, action: Action) -> OverlayWindow:
    """A real overlay for a ``width`` x ``height`` monitor whose card holds ``action`` in words with a
    long thought and risk reason (the tallest card the overlay shows without an edit hint)."""
    frame = Frame(np.zeros((height, width, 3), np.uint8), Monitor(1, 0, 0, width, height))
    request = make_request(0, Proposal(action, thought="Open the form and fill in the name, then save it. " * 2),
                           place(action, frame), RiskAssessment(Risk.HIGH, "presses keys in a terminal (xterm XTerm)"),
                           "step",
                           window=WindowInfo("Demo form", "Tk"))
    overlay = OverlayWindow(OverlayGeometry(frame.monitor, QRect(0, 0, width, height)))
    qtbot.addWidget(overlay)
    overlay.card.set_words(request.description, request.details)
    overlay.card.thought.setText(f"Model's thought: {request.proposal.thought}")
    overlay.card.set_risk(request.risk)
    overlay.card.set_typed_text(action.text if isinstance(action, Type) else None)
    return overlay


def _place(overlay: OverlayWindow, x: int, y: int, avoid: tuple[int, int, int, int] | None = None) -> QRectF:
    """Show the overlay's action at input point (x, y) (logical = input pixels here); the card's rect."""
    overlay.show_action(overlay.action or Click(Point(1, 1)), [InputPoint(x, y)], avoid_input=avoid)
    return QRectF(overlay.card.geometry())


# The sweeps call place_card with the real card's sizes (measured once per screen) rather than
# re-laying out the card hundreds of times: PySide6 6.12 on Python 3.11 drops a reference to None on
# every void Qt call, so a few thousand of them in one process end it (see the report to the lead).
@pytest.mark.parametrize(("width", "height"), SCREENS)
def test_the_card_never_covers_a_target_or_its_label(qtbot: Any, width: int, height: int) -> None:
    overlay = _overlay(qtbot, width, height, Click(Point(500, 500), element="Cancel button"))
    area = QRectF(0, 0, width, height)
    sizes = overlay.card_sizes()
    inner = area.adjusted(8, 8, -8, -8)
    for x, y in itertools.product(range(0, width, width // 23), range(0, height, height // 17)):
        target = QPointF(x + 0.5, y + 0.5)
        card = place_card(area, sizes, [target], None)
        assert inner.contains(card), (width, height, x, y, card)
        assert not card.intersects(_keep(target)), (width, height, x, y, card)
        assert (card.width(), card.height()) in [(z.width(), z.height()) for z in sizes]
    # the real overlay, at a few of those points, puts its card where place_card says
    for x, y in ((width // 2, height // 2), (10, 10), (width - 10, height - 10)):
        target = QPointF(x + 0.5, y + 0.5)
        assert _place(overlay, x, y) == QRectF(place_card(area, sizes, [target], None).toRect())


@pytest.mark.parametrize(("width", "height"), SCREENS)
def test_the_card_keeps_off_the_form_when_there_is_room(qtbot: Any, width: int, height: int) -> None:
    overlay = _overlay(qtbot, width, height, Type("John Smith"))
    area = QRectF(0, 0, width, height)
    sizes = overlay.card_sizes()
    rng = np.random.default_rng(13)
    checked = 0
    for _ in range(300):
        fw, fh = int(rng.integers(120, width * 0.6)), int(rng.integers(80, height * 0.6))
        fx, fy = int(rng.integers(0, width - fw)), int(rng.integers(0, height - fh))
        tx, ty = fx + rng.uniform(0.1, 0.9) * fw, fy + rng.uniform(0.1, 0.9) * fh
        form = QRectF(fx, fy, fw, fh)
        card = place_card(area, sizes, [QPointF(tx, ty)], form)
        assert not card.intersects(_keep(QPointF(tx, ty)))
        # room, judged independently: a free band as wide (or tall) as some card size on one side of
        # the form and the target's keep box together
        kx, ky = TARGET_KEEP
        left, right = min(fx, tx - kx), max(fx + fw, tx + kx)
        top, bottom = min(fy, ty - ky), max(fy + fh, ty + ky)
        room = any(left - 24 >= z.width() or width - right - 24 >= z.width()
                   or top - 24 >= z.height() or height - bottom - 24 >= z.height() for z in sizes)
        if room:
            checked += 1
            assert not card.intersects(form), (width, height, form, (tx, ty), card)
    assert checked > 50


def test_a_window_filling_the_screen_still_leaves_the_target_clear(qtbot: Any) -> None:
    overlay = _overlay(qtbot, 1280, 720, Click(Point(1, 1)))
    for x, y in ((640, 360), (20, 20), (1270, 710), (640, 700)):
        card = _place(overlay, x, y, (0, 0, 1280, 720))
        assert not card.intersects(_keep(QPointF(x + 0.5, y + 0.5)))
        assert QRectF(0, 0, 1280, 720).contains(card)


def _painted_in(image: QImage, rect: QRectF) -> int:
    r = rect.toAlignedRect().intersected(image.rect())
    buf = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), image.bytesPerLine() // 4, 4)
    return int((buf[r.top():r.bottom() + 1, r.left():r.right() + 1, 3] > 0).sum())


def _label_band(p: QPointF) -> QRectF:
    return QRectF(p.x() - LABEL_HALF_WIDTH, p.y() - LABEL_HALF_HEIGHT, 2 * LABEL_HALF_WIDTH, 2 * LABEL_HALF_HEIGHT)


@pytest.mark.parametrize("action", [
    Click(Point(1, 1)), Click(Point(1, 1), count=2), Click(Point(1, 1), button="right"), Move(Point(1, 1)),
    Scroll("up", 3, Point(1, 1)), Scroll("down", 3, Point(1, 1)), Scroll("left", 3, Point(1, 1)),
    Scroll("right", 3, Point(1, 1)), Type("x"),
], ids=lambda a: f"{a.kind}-{getattr(a, 'direction', '')}")
def test_the_marks_leave_the_targets_label_readable(action: Action) -> None:
    image = QImage(800, 600, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    target = QPointF(400.5, 300.5)
    painter = QPainter(image)
    paint_marks(painter, action, [] if isinstance(action, Type) else [target], caret=target,
                color=QColor(THEME.palette.marker), center=target)
    painter.end()
    assert _painted_in(image, QRectF(0, 0, 800, 600)) > 100  # something is marked
    assert _painted_in(image, _label_band(target)) == 0
    # the exact point is what the pointers aim at: marks above and below it, on its column
    if not isinstance(action, Type):
        assert _painted_in(image, QRectF(target.x() - 1, target.y() - 40, 2, 16)) > 0
        assert _painted_in(image, QRectF(target.x() - 1, target.y() + 24, 2, 16)) > 0


@pytest.mark.parametrize(("a", "b"), [((100, 300), (600, 300)), ((600, 300), (100, 300)), ((400, 100), (400, 500)),
                                      ((400, 500), (400, 100)), ((100, 100), (600, 500)),
                                      ((100, 100), (250, 150)), ((300, 300), (380, 240)), ((100, 100), (700, 161))])
def test_a_drag_path_keeps_off_both_labels(a: tuple[int, int], b: tuple[int, int]) -> None:
    image = QImage(800, 600, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    pa, pb = QPointF(*a), QPointF(*b)
    painter = QPainter(image)
    paint_marks(painter, Drag(Point(1, 1), Point(2, 2)), [pa, pb], caret=None, color=QColor(THEME.palette.marker),
                center=pa)
    painter.end()
    for p in (pa, pb):
        assert _painted_in(image, _label_band(p)) == 0


def test_the_card_leads_with_the_headline_and_keeps_off_the_form(qtbot: Any) -> None:
    monitor = Monitor(1, 0, 0, 1920, 1080)
    frame = Frame(np.zeros((1080, 1920, 3), np.uint8), monitor)
    form = WindowInfo("Demo form", "Tk", (700, 300, 520, 420))
    target = frame_pixel_to_point(frame, 1000, 640)  # the form's Cancel button
    cancel = Click(target, element="Cancel button")
    request = make_request(0, Proposal(cancel, thought="Cancel the form."), place(cancel, frame),
                           RiskAssessment(Risk.LOW, "pointer action"), "step", window=form)
    controller = ApprovalController(WindowGuard())
    pending = PendingDecision(request, "user")
    controller.present(pending)
    overlay = controller.overlay
    assert overlay is not None
    try:
        card = overlay.card
        assert card.description.text() == "Click ‘Cancel button’ in Demo form"
        (ip,) = request.input_points
        assert card.details.text().startswith(f"Screen ({ip.x}, {ip.y}) on Monitor 1")
        layout = card.layout()
        order = [layout.indexOf(w) for w in (card.description, card.details, card.risk_reason, card.thought)]
        assert order == sorted(order)  # the headline first; coordinates, risk reason and thought after it
        local = overlay.geometry_map.to_local(ip)
        placed = QRectF(card.geometry())
        assert not placed.intersects(_keep(local))
        assert not placed.intersects(QRectF(700, 300, 520, 420))
    finally:
        controller.close()


def test_the_edited_target_drops_the_models_element(qtbot: Any) -> None:
    from holodesk.ui.approval import replace_points

    edited = replace_points(Click(Point(5, 5), element="OK"), [Point(9, 9)])
    assert edited == Click(Point(9, 9))


def test_a_run_names_the_window_under_the_target_and_keeps_the_card_off_it(
        qtbot: Any, make_app: Any, tmp_path: Any) -> None:
    """Through the real app and Session on the X display: the target window (another process) is looked
    up under the target point, named in the headline, and the card stays off it."""
    from tests.helpers.target import TargetWindow

    with TargetWindow.start(tmp_path, x=700, y=420) as win:
        frame = Frame(blank_frame(), Monitor(1, 0, 0, 1920, 1080))
        cancel = frame_pixel_to_point(frame, *win.center("Cancel"))
        kit = make_app([Click(cancel, element="Cancel button")], capture=FakeCapture([blank_frame()]))
        kit.app.start_task("cancel")
        overlay = wait_overlay(qtbot, kit.app)
        request = kit.app.approval.pending.request
        # holo-v1 replies (what the scripted policy speaks here) carry no element: the point is said
        (ip,) = request.input_points
        assert overlay.card.description.text() == f"Click at ({ip.x}, {ip.y}) in Holodesk test target"
        assert request.window is not None and request.window.rect == tuple(win.rects["window"])
        placed = QRectF(overlay.card.geometry())
        x, y, w, h = win.rects["window"]
        assert not placed.intersects(QRectF(x, y, w, h))
        assert not placed.intersects(_keep(overlay.geometry_map.to_local(request.input_points[0])))
        qtbot.keyClick(overlay, Qt.Key.Key_Escape)
        assert wait_finished(qtbot, kit.app).status is State.STOPPED
