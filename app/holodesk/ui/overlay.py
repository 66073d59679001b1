"""The approval overlay: a frameless, always-on-top window covering the monitor being acted on.

It marks where the proposed action will land — a ring on the click target, a path for a drag, arrows
for a scroll, an I-beam where text will be typed — and shows a card with the action in plain words,
the model's thought, a risk badge, the exact text to type, an autopilot countdown, and the buttons
Approve (Enter), Edit (E), Skip (S), Stop (Esc).

Coordinates. Points arrive in OS *input space* (``ApprovalRequest.input_points``, what the executor
sends to the OS). The overlay covers the QScreen showing the frame's monitor; inside it Qt paints in
*logical* pixels. :class:`OverlayGeometry` maps between the two with the ratio measured from the
monitor's input-space size and the QScreen's logical size: on X11 at device pixel ratio 1 both are
the same pixels (ratio 1); at a DPR of 2 on X11 the input space is physical pixels and Qt's logical
pixels are twice as large (ratio 0.5); on macOS both are points (ratio 1). No DPI setting is assumed.

The window is shaped (``setMask``) to the marks and the card, so it never hides the rest of the
screen, works without a compositor, and lets clicks through except on the card. While editing a
target it grabs the pointer so the next click anywhere on the monitor picks the new point.

Model text (thought, description, typed text) is shown as plain text only (field case F10).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from PySide6.QtCore import QPoint, QPointF, QRect, QRectF, QSize, Qt, Signal
from PySide6.QtGui import (
    QBitmap,
    QColor,
    QCursor,
    QGuiApplication,
    QImage,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPen,
    QPolygonF,
    QRegion,
    QScreen,
)
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from holodesk.core.actions import Action, DoubleClick, Drag, Key, RightClick, Scroll, Type, Wait
from holodesk.core.geometry import InputPoint, Monitor
from holodesk.core.risk import Risk, RiskAssessment

log = logging.getLogger(__name__)

MARKER_COLOR = "#ff00cc"
"""Colour of target marks (a magenta that desktops rarely show; the F13 test looks for it)."""

CARD_WIDTH = 420
"""Card width in logical pixels."""


@dataclass(frozen=True)
class OverlayGeometry:
    """Maps OS input space to the overlay's widget-local logical pixels for one monitor.

    Attributes:
        monitor: the frame's monitor (input-space origin and size).
        screen_rect: the QScreen's geometry in Qt logical pixels (the overlay window covers it).
    """

    monitor: Monitor
    screen_rect: QRect

    @property
    def scale(self) -> tuple[float, float]:
        """Logical pixels per input-space unit (x, y), measured; 1.0 on X11 at DPR 1."""
        return (self.screen_rect.width() / self.monitor.width, self.screen_rect.height() / self.monitor.height)

    def to_local(self, point: InputPoint | tuple[int, int]) -> QPointF:
        """Input-space point -> widget-local logical position (the centre of that input unit)."""
        ix, iy = (point.x, point.y) if isinstance(point, InputPoint) else point
        sx, sy = self.scale
        return QPointF((ix - self.monitor.left + 0.5) * sx, (iy - self.monitor.top + 0.5) * sy)

    def to_input(self, local: QPointF | QPoint) -> tuple[int, int]:
        """Widget-local logical position -> the input-space unit under it (integers, on the monitor)."""
        sx, sy = self.scale
        ix = self.monitor.left + math.floor(local.x() / sx)
        iy = self.monitor.top + math.floor(local.y() / sy)
        ix = min(max(ix, self.monitor.left), self.monitor.left + self.monitor.width - 1)
        iy = min(max(iy, self.monitor.top), self.monitor.top + self.monitor.height - 1)
        return ix, iy


def screen_for_monitor(monitor: Monitor, screens: list[QScreen] | None = None) -> QScreen:
    """The QScreen that shows ``monitor``.

    Matched by exact geometry, then by output name, then by origin; with a single screen that one is
    used. Anything else is logged as a warning (and the screen with the monitor's origin, or the primary
    screen, is used).

    Raises:
        RuntimeError: no screens at all (no QGuiApplication).
    """
    screens = list(screens if screens is not None else QGuiApplication.screens())
    if not screens:
        raise RuntimeError("Qt reports no screens; is a QApplication running on a display?")
    want = QRect(monitor.left, monitor.top, monitor.width, monitor.height)
    for s in screens:
        if s.geometry() == want:
            return s
    for s in screens:
        if monitor.name and s.name() == monitor.name:
            return s
    for s in screens:
        if s.geometry().topLeft() == want.topLeft():
            return s
    if len(screens) == 1:
        return screens[0]
    for s in screens:
        if s.geometry().contains(want.center()):
            log.warning("no screen matches %s exactly; using %s", monitor.label, s.name())
            return s
    primary = QGuiApplication.primaryScreen() or screens[0]
    log.warning("no screen matches %s; using the primary screen %s", monitor.label, primary.name())
    return primary


def _plain_label(text: str = "", *, wrap: bool = True, object_name: str = "") -> QLabel:
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)  # F10: model text is data, never markup
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setWordWrap(wrap)
    label.setText(text)
    if object_name:
        label.setObjectName(object_name)
    return label


class ApprovalCard(QFrame):
    """The card: what will happen, why, how risky, and the four decisions."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("approvalCard")
        self.setFixedWidth(CARD_WIDTH)
        self.setStyleSheet(
            "#approvalCard { background: #1f2430; border: 2px solid MARKER; border-radius: 10px; }"
            "#approvalCard QLabel { color: #f2f4f8; font-size: 13px; }"
            "#approvalCard QLabel#title { font-size: 12px; color: #aab3c5; }"
            "#approvalCard QLabel#description { font-size: 15px; font-weight: 600; }"
            "#approvalCard QLabel#thought { color: #d6dbe6; font-style: italic; }"
            "#approvalCard QLabel#edit_hint { color: #ffd479; }"
            "#approvalCard QLabel#countdown { color: #9fe6b8; }"
            "#approvalCard QPlainTextEdit { background: #11141b; color: #ffffff; border: 1px solid #3a4252;"
            " font-family: monospace; font-size: 13px; }"
            "#approvalCard QPushButton { padding: 5px 10px; border-radius: 5px; background: #343b4b;"
            " color: #f2f4f8; border: 1px solid #4b5468; }"
            "#approvalCard QPushButton:disabled { color: #6b7385; background: #262b36; }"
            "#approvalCard QPushButton#approve { background: #1f9d55; border-color: #1f9d55; }"
            "#approvalCard QPushButton#stop { background: #a52a22; border-color: #a52a22; }"
            "#approvalCard QProgressBar { border: 0; background: #343b4b; height: 6px;"
            " border-radius: 3px; }"
            "#approvalCard QProgressBar::chunk { background: #1f9d55; border-radius: 3px; }"
            .replace("MARKER", MARKER_COLOR)
        )
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 12, 14, 12)
        layout.setSpacing(7)

        top = QHBoxLayout()
        self.title = _plain_label(wrap=False, object_name="title")
        self.risk_badge = _plain_label(wrap=False, object_name="risk")
        top.addWidget(self.title, 1)
        top.addWidget(self.risk_badge, 0)
        layout.addLayout(top)

        self.description = _plain_label(object_name="description")
        layout.addWidget(self.description)
        self.risk_reason = _plain_label(object_name="risk_reason")
        layout.addWidget(self.risk_reason)
        self.thought = _plain_label(object_name="thought")
        layout.addWidget(self.thought)

        self.text_caption = _plain_label("Exact text to type:", object_name="text_caption")
        layout.addWidget(self.text_caption)
        self.text_box = QPlainTextEdit()
        self.text_box.setObjectName("text_box")
        self.text_box.setReadOnly(True)
        self.text_box.setFixedHeight(64)
        self.text_box.setTabChangesFocus(False)
        layout.addWidget(self.text_box)

        self.edit_hint = _plain_label(object_name="edit_hint")
        layout.addWidget(self.edit_hint)

        self.countdown_label = _plain_label(object_name="countdown")
        self.countdown_bar = QProgressBar()
        self.countdown_bar.setTextVisible(False)
        self.countdown_bar.setRange(0, 1000)
        self.countdown_bar.setFixedHeight(6)
        layout.addWidget(self.countdown_label)
        layout.addWidget(self.countdown_bar)

        self.where = _plain_label(object_name="where")
        self.where.setStyleSheet("color: #8d96a8; font-size: 11px;")
        layout.addWidget(self.where)

        buttons = QHBoxLayout()
        self.approve_button = QPushButton("Approve  ⏎")
        self.approve_button.setObjectName("approve")
        self.edit_button = QPushButton("Edit  E")
        self.edit_button.setObjectName("edit")
        self.skip_button = QPushButton("Skip  S")
        self.skip_button.setObjectName("skip")
        self.stop_button = QPushButton("Stop  Esc")
        self.stop_button.setObjectName("stop")
        for b in (self.approve_button, self.edit_button, self.skip_button, self.stop_button):
            b.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # keys go to the overlay, not to a button
            b.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
            buttons.addWidget(b)
        layout.addLayout(buttons)
        self.set_countdown(None)

    def set_risk(self, risk: RiskAssessment) -> None:
        high = risk.level is Risk.HIGH
        self.risk_badge.setText("HIGH RISK" if high else "low risk")
        color = "#d93025" if high else "#1f9d55"
        self.risk_badge.setStyleSheet(f"background: {color}; color: white; border-radius: 4px; padding: 2px 6px;"
                                      " font-weight: 700; font-size: 11px;")
        self.risk_reason.setText(("High risk, needs your approval: " if high else "Low risk: ") + risk.reason)

    def set_typed_text(self, text: str | None, editable: bool = False) -> None:
        shown = text is not None
        self.text_caption.setVisible(shown)
        self.text_box.setVisible(shown)
        if shown:
            if self.text_box.toPlainText() != text:
                self.text_box.setPlainText(text or "")
            self.text_box.setReadOnly(not editable)
            self.text_caption.setText("Edit the text, then Ctrl+Enter:" if editable else "Exact text to type:")

    def set_countdown(self, remaining_s: float | None, total_s: float = 1.0) -> None:
        shown = remaining_s is not None
        self.countdown_label.setVisible(shown)
        self.countdown_bar.setVisible(shown)
        if remaining_s is not None:
            self.countdown_label.setText(f"Autopilot approves in {remaining_s:.1f} s · Esc stop · S skip · "
                                         "P pause")
            frac = 0.0 if total_s <= 0 else max(0.0, min(1.0, remaining_s / total_s))
            self.countdown_bar.setValue(round(frac * 1000))


class OverlayWindow(QWidget):
    """Marks an action on one monitor and hosts the approval card.

    Signals:
        approve_pressed(): Enter / Approve button.
        skip_pressed(): S / Skip button.
        stop_pressed(): Esc / Stop button.
        edit_pressed(): E / Edit button.
        point_picked(int, int): in edit mode, the input-space point the user clicked.
        text_edited(str): in text-edit mode, Ctrl+Enter with the new text.
        edit_cancelled(): Esc in edit mode.
        pause_pressed(): P — pause the autopilot (this step then waits for an explicit decision).
    Args:
        geometry: input space <-> local mapping for the monitor; the window covers ``screen_rect``.
        marker_color: colour of the marks (tests pick a distinctive one).
    """

    approve_pressed = Signal()
    skip_pressed = Signal()
    stop_pressed = Signal()
    edit_pressed = Signal()
    point_picked = Signal(int, int)
    text_edited = Signal(str)
    edit_cancelled = Signal()
    pause_pressed = Signal()

    def __init__(self, geometry: OverlayGeometry, marker_color: str = MARKER_COLOR,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowFlags(Qt.WindowType.FramelessWindowHint | Qt.WindowType.WindowStaysOnTopHint
                            | Qt.WindowType.Tool)
        self.setAttribute(Qt.WidgetAttribute.WA_TranslucentBackground, True)
        self.setAttribute(Qt.WidgetAttribute.WA_ShowWithoutActivating, False)
        self.setWindowTitle("Holodesk approval")
        self.setObjectName("holodeskOverlay")
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.geometry_map = geometry
        self.marker_color = QColor(marker_color)
        self.card = ApprovalCard(self)
        self.card.approve_button.clicked.connect(self.approve_pressed)
        self.card.skip_button.clicked.connect(self.skip_pressed)
        self.card.stop_button.clicked.connect(self.stop_pressed)
        self.card.edit_button.clicked.connect(self.edit_pressed)
        self.action: Action | None = None
        self.points: list[QPointF] = []
        self.mode = "review"  # "review" | "pick" (click a point) | "text" (edit typed text)
        self.caret: QPointF | None = None
        # While picking a point the card is hidden (it must not cover a target); a banner says what to do.
        self.banner = _plain_label(wrap=False, object_name="banner")
        self.banner.setParent(self)
        self.banner.setStyleSheet("background: #1f2430; color: #ffd479; border: 2px solid %s; border-radius: 6px;"
                                  " padding: 6px 12px; font-size: 14px;".replace("%s", MARKER_COLOR))
        self.banner.hide()
        self.setGeometry(geometry.screen_rect)

    # -- content -----------------------------------------------------------------------------------
    def show_action(self, action: Action, input_points: tuple[InputPoint, ...] | list[InputPoint],
                    *, caret_input: tuple[int, int] | None = None) -> None:
        """Mark ``action`` at ``input_points`` (input space). ``caret_input`` is where typed text goes
        (the pointer position; typing goes to the focused field, usually the one just clicked)."""
        self.action = action
        self.points = [self.geometry_map.to_local(p) for p in input_points]
        self.caret = self.geometry_map.to_local(caret_input) if caret_input is not None else None
        self.card.edit_button.setEnabled(not isinstance(action, (Key, Wait)))
        self._place_card()
        self._update_mask()
        self.update()

    def refresh(self) -> None:
        """Re-place the card and re-shape the window after the card's content changed."""
        self._place_card()
        self._update_mask()
        self.update()

    def _place_card(self) -> None:
        layout = self.card.layout()
        if layout is not None:
            layout.activate()
        self.card.adjustSize()
        size: QSize = self.card.sizeHint()
        w = CARD_WIDTH
        h = max(size.height(), self.card.heightForWidth(CARD_WIDTH))  # word-wrapped labels need the width
        area = self.rect()
        anchor = self.points[0] if self.points else self.caret
        if anchor is None:
            x, y = (area.width() - w) / 2, area.height() * 0.62 - h / 2
        else:
            gap = 48.0
            x = anchor.x() + gap
            y = anchor.y() + gap
            if x + w > area.width() - 8:
                x = anchor.x() - gap - w
            if y + h > area.height() - 8:
                y = anchor.y() - gap - h
        x = min(max(8.0, x), area.width() - w - 8.0)
        y = min(max(8.0, y), area.height() - h - 8.0)
        # Never put the card over a marked point.
        rect = QRectF(x, y, w, h)
        for p in self.points:
            if rect.adjusted(-30, -30, 30, 30).contains(p):
                y = p.y() + 60 if p.y() + 60 + h < area.height() else p.y() - 60 - h
                rect = QRectF(x, max(8.0, y), w, h)
        self.card.setGeometry(rect.toRect())

    def set_mode(self, mode: str, hint: str = "") -> None:
        """Switch between "review", "pick" (next click picks a point) and "text" (edit typed text)."""
        self.mode = mode
        self.card.edit_hint.setText(hint)
        self.card.edit_hint.setVisible(bool(hint))
        if mode == "pick":
            self.card.hide()
            self.banner.setText(hint)
            self.banner.adjustSize()
            self.banner.move((self.width() - self.banner.width()) // 2, 12)
            self.banner.show()
            self.grabMouse(QCursor(Qt.CursorShape.CrossCursor))
        else:
            self.banner.hide()
            self.card.show()
            self.releaseMouse()
        if mode == "text":
            self.card.text_box.setReadOnly(False)
            self.card.text_box.setFocus()
        else:
            self.setFocus()
        self._place_card()
        self._update_mask()

    # -- painting ---------------------------------------------------------------------------------
    def _paint_marks(self, painter: QPainter) -> None:
        center = QPointF(self.width() / 2, self.height() / 2)
        paint_marks(painter, self.action, self.points, caret=self.caret, color=self.marker_color, center=center)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        try:
            self._paint_marks(painter)
        finally:
            painter.end()

    def _update_mask(self) -> None:
        """Shape the window to the marks plus the card (or the banner while picking), rounded corners
        included, so it works the same with or without a compositor."""
        image = QImage(self.size(), QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        try:
            self._paint_marks(painter)
            panel = self.banner if self.mode == "pick" else self.card
            radius = 6.0 if panel is self.banner else 10.0
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor("#000000"))
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
            painter.drawRoundedRect(QRectF(panel.geometry()), radius, radius)
        finally:
            painter.end()
        self.setMask(QRegion(QBitmap.fromImage(image.createAlphaMask(Qt.ImageConversionFlag.ThresholdAlphaDither))))

    def mark_region(self) -> QRegion:
        """The part of the window covered by marks and the card (widget-local logical pixels)."""
        return self.mask()

    # -- input ------------------------------------------------------------------------------------
    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        mods = event.modifiers()
        if self.mode == "text":
            if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and mods & Qt.KeyboardModifier.ControlModifier:
                self.text_edited.emit(self.card.text_box.toPlainText())
                return
            if key == Qt.Key.Key_Escape:
                self.edit_cancelled.emit()
                return
            super().keyPressEvent(event)
            return
        if key == Qt.Key.Key_Escape:
            if self.mode == "pick":
                self.edit_cancelled.emit()
            else:
                self.stop_pressed.emit()
        elif key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.mode == "review":
            self.approve_pressed.emit()
        elif key == Qt.Key.Key_S and self.mode == "review":
            self.skip_pressed.emit()
        elif key == Qt.Key.Key_E and self.mode == "review" and self.card.edit_button.isEnabled():
            self.edit_pressed.emit()
        elif key == Qt.Key.Key_P and self.mode == "review":
            self.pause_pressed.emit()
        else:
            super().keyPressEvent(event)

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if self.mode == "pick" and event.button() == Qt.MouseButton.LeftButton:
            local = self.mapFromGlobal(event.globalPosition().toPoint())
            if not self.banner.geometry().contains(local):
                ix, iy = self.geometry_map.to_input(QPointF(local))
                self.point_picked.emit(ix, iy)
                return
        super().mousePressEvent(event)

    def hideEvent(self, event: object) -> None:
        self.releaseMouse()
        super().hideEvent(event)  # type: ignore[arg-type]


def _ring(painter: QPainter, p: QPointF, r: float, color: QColor) -> None:
    painter.drawEllipse(p, r, r)
    # Cross-hair ticks outside the ring; the exact point stays visible in the middle.
    for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)):
        painter.drawLine(QPointF(p.x() + dx * (r + 4), p.y() + dy * (r + 4)),
                         QPointF(p.x() + dx * (r + 14), p.y() + dy * (r + 14)))
    painter.save()
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(color)
    painter.drawEllipse(p, 2.5, 2.5)
    painter.restore()


def _arrow_head(painter: QPainter, a: QPointF, b: QPointF, color: QColor) -> None:
    angle = math.atan2(b.y() - a.y(), b.x() - a.x())
    size = 14.0
    left = QPointF(b.x() - size * math.cos(angle - 0.45), b.y() - size * math.sin(angle - 0.45))
    right = QPointF(b.x() - size * math.cos(angle + 0.45), b.y() - size * math.sin(angle + 0.45))
    painter.save()
    painter.setBrush(color)
    painter.drawPolygon(QPolygonF([b, left, right]))
    painter.restore()


def paint_marks(painter: QPainter, action: Action | None, points: list[QPointF], *, caret: QPointF | None,
                color: QColor, center: QPointF) -> None:
    """Draw the marks of ``action``: rings on targets, a dashed path with an arrow for a drag, arrows
    for a scroll (at ``center`` when it has no point), an I-beam and field box at ``caret`` for typing.

    Args:
        painter: any paint device; coordinates are the device's (logical) pixels.
        points: the action's points in those coordinates, in order.
    """
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    pen = QPen(color, 4)
    pen.setCapStyle(Qt.PenCapStyle.RoundCap)
    painter.setPen(pen)
    painter.setBrush(Qt.BrushStyle.NoBrush)
    if isinstance(action, Drag) and len(points) == 2:
        a, b = points
        _ring(painter, a, 16, color)
        painter.setPen(QPen(color, 4, Qt.PenStyle.DashLine, Qt.PenCapStyle.RoundCap))
        painter.drawLine(a, b)
        painter.setPen(pen)
        _arrow_head(painter, a, b, color)
        _ring(painter, b, 16, color)
    elif isinstance(action, Scroll):
        at = points[0] if points else center
        _ring(painter, at, 14, color)
        dx, dy = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}[action.direction]
        for k in (0, 1):
            start = QPointF(at.x() + dx * (22 + 24 * k), at.y() + dy * (22 + 24 * k))
            end = QPointF(at.x() + dx * (40 + 24 * k), at.y() + dy * (40 + 24 * k))
            painter.drawLine(start, end)
            _arrow_head(painter, start, end, color)
    elif isinstance(action, Type):
        field_at = caret or (points[0] if points else None)
        if field_at is not None:
            x, y = field_at.x(), field_at.y()
            painter.drawLine(QPointF(x, y - 14), QPointF(x, y + 14))
            painter.drawLine(QPointF(x - 7, y - 14), QPointF(x + 7, y - 14))
            painter.drawLine(QPointF(x - 7, y + 14), QPointF(x + 7, y + 14))
            painter.drawRect(QRectF(x - 12, y - 22, 140, 44))
    elif action is not None:
        for p in points:
            _ring(painter, p, 18, color)
            if isinstance(action, DoubleClick):
                painter.drawEllipse(p, 27, 27)
            if isinstance(action, RightClick):
                painter.drawLine(QPointF(p.x() + 24, p.y() - 24), QPointF(p.x() + 36, p.y() - 36))


def paint_action_on_image(image: QImage, action: Action, action_points: list[QPointF],
                          marker_color: str = MARKER_COLOR) -> QImage:
    """Draw an action's marks onto a copy of ``image`` (the history view's frame).

    Args:
        image: the frame as recorded, in frame pixels (physical).
        action: decides the shape (ring, drag path, scroll arrows, I-beam).
        action_points: the action's points in frame pixels.
    Returns:
        A new ARGB32 image with the marks drawn; marks are scaled up on frames wider than 1280 pixels so
        they stay visible when the frame is shown shrunk.
    """
    out = image.convertToFormat(QImage.Format.Format_ARGB32)
    scale = max(1.0, out.width() / 1280)
    painter = QPainter(out)
    try:
        painter.scale(scale, scale)
        pts = [QPointF(p.x() / scale, p.y() / scale) for p in action_points]
        center = QPointF(out.width() / 2 / scale, out.height() / 2 / scale)
        paint_marks(painter, action, pts, caret=pts[0] if pts else center, color=QColor(marker_color),
                    center=center)
    finally:
        painter.end()
    return out
