"""The approval overlay: a frameless, always-on-top window covering the monitor being acted on.

It marks where the proposed action will land — corner brackets and two pointers on the click target, a
path for a drag, arrows for a scroll, an I-beam where text will be typed — and shows a card that leads
with the step in plain words ("Click ‘Cancel button’ in Demo form", :func:`holodesk.core.wording.step_words`),
then its coordinates, the risk reason and the model's thought, a risk badge, the exact text to type, an
autopilot countdown, and the buttons Approve (Enter), Edit (E), Skip (S), Stop (Esc).

The marks leave the target's own label readable: nothing is painted in the band of ``LABEL_HALF_HEIGHT``
above and below the target's line, ``LABEL_HALF_WIDTH`` to each side (the centre is hollow; the
pointers come from above and below). The card is placed by :func:`place_card`: never over a target and
its label, and never over the target's window (the form it would submit) when that is known and there
is room beside it.

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

import itertools
import logging
import math
from dataclasses import dataclass

from PySide6.QtCore import QPoint, QPointF, QRect, QRectF, QSizeF, Qt, Signal
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
    QBoxLayout,
    QFrame,
    QHBoxLayout,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from holodesk.core.actions import Action, Click, Drag, Key, KeyDown, KeyUp, Plan, Scroll, Type, Wait
from holodesk.core.geometry import InputPoint, Monitor
from holodesk.core.risk import Risk, RiskAssessment
from holodesk.ui.theme import THEME, banner_style, card_style, risk_badge_style, text_style
from holodesk.ui.widgets import name_window, plain_label, push_button

log = logging.getLogger(__name__)

MARKER_COLOR = THEME.palette.marker
"""Colour of target marks (:attr:`Palette.marker`); callers may pass another."""

CARD_WIDTH = 420
"""Card width in logical pixels."""

NARROW_CARD_WIDTHS = (360, 300, 260)
"""Narrower card widths tried, in order, when the full-width card fits nowhere off the target (small
monitors); each is used only if the card's buttons still fit."""

LABEL_HALF_WIDTH = 100.0
LABEL_HALF_HEIGHT = 13.0
"""Half extents (logical px) of the band around a target where its label is: the marks paint nothing
there, and the card keeps off it (with the marks: :data:`TARGET_KEEP`)."""

TARGET_KEEP = (LABEL_HALF_WIDTH + 10.0, 48.0)
"""Half extents (logical px) around each target that the card never covers: the label band plus the
marks (pointers reach 40 px above and below)."""


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


def _free(rect: QRectF, blockers: list[QRectF]) -> bool:
    return not any(rect.intersects(b) for b in blockers)


def place_card(area: QRectF, size: QSizeF | list[QSizeF], targets: list[QPointF], avoid: QRectF | None = None,
               *, margin: float = 8.0, gap: float = 16.0) -> QRectF:
    """Where the card goes on the overlay (all in the overlay's logical pixels).

    The card keeps off every target with its label and marks (:data:`TARGET_KEEP` around each) and off
    ``avoid`` (the target's window: the form it would submit) when it is known. Tried in order: beside
    what it must keep off, on the right, left, below, above (level with the first target); else the free
    position nearest to the first target on a 16 px grid. Each of the card's sizes is tried in turn
    (the full card first, then narrower, taller ones). When the monitor has no room beside the window,
    only the targets are kept clear; when not even that fits, the card goes to the corner farthest from
    the first target and a warning is logged (only a card larger than the free space can get there).

    Args:
        area: the overlay's rect (the monitor).
        size: the card's size, or its possible sizes in order of preference (the result's size is one
            of them).
        targets: target points (the first anchors the card); none: the card sits centred, low.
        avoid: the target window's rect, or None.
    Returns:
        The card's rect, inside ``area`` (less ``margin``) whenever the card fits the monitor.
    """
    sizes = size if isinstance(size, list) else [size]
    inner = area.adjusted(margin, margin, -margin, -margin)
    w, h = sizes[0].width(), sizes[0].height()

    def clamp(x: float, y: float) -> QRectF:
        x = min(max(inner.left(), x), inner.right() - w)
        y = min(max(inner.top(), y), inner.bottom() - h)
        return QRectF(x, y, w, h)

    if not targets and avoid is None:
        return clamp((area.width() - w) / 2, area.height() * 0.62 - h / 2)
    kx, ky = TARGET_KEEP
    keep = [QRectF(p.x() - kx, p.y() - ky, 2 * kx, 2 * ky) for p in targets]
    tiers = ([[*keep, avoid]] if avoid is not None and not avoid.isEmpty() else []) + ([keep] if keep else [])
    anchor = targets[0] if targets else (avoid.center() if avoid is not None else inner.center())
    for blockers, (w, h) in itertools.product(tiers, [(z.width(), z.height()) for z in sizes]):
        union = blockers[0]
        for b in blockers[1:]:
            union = union.united(b)
        candidates = [
            clamp(union.right() + gap, anchor.y() - h / 2),
            clamp(union.left() - gap - w, anchor.y() - h / 2),
            clamp(anchor.x() - w / 2, union.bottom() + gap),
            clamp(anchor.x() - w / 2, union.top() - gap - h),
        ]
        for rect in candidates:
            if inner.contains(rect) and _free(rect, blockers):
                return rect
        best: QRectF | None = None
        best_d = math.inf
        step = 16.0
        y = inner.top()
        while y + h <= inner.bottom() + 0.01:
            x = inner.left()
            while x + w <= inner.right() + 0.01:
                rect = QRectF(x, y, w, h)
                if _free(rect, blockers):
                    d = math.hypot(rect.center().x() - anchor.x(), rect.center().y() - anchor.y())
                    if d < best_d:
                        best, best_d = rect, d
                x += step
            y += step
        if best is not None:
            return best
    w, h = sizes[0].width(), sizes[0].height()
    log.warning("the approval card (%dx%d) does not fit beside the target on this %dx%d monitor",
                round(w), round(h), round(area.width()), round(area.height()))
    far_y = inner.top() if anchor.y() > area.center().y() else inner.bottom() - h
    far_x = inner.left() if anchor.x() > area.center().x() else inner.right() - w
    return clamp(far_x, far_y)


def _refine_button(layout: QVBoxLayout) -> QPushButton:
    """The card's "Click more precisely" button, added to ``layout``; hidden until a pointer step whose policy
    can localize its target again is shown."""
    button = push_button("Click more precisely", "refine")
    layout.addWidget(button)
    button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
    button.setToolTip("Ask the model again for the target's point, in a close-up around it")
    button.setVisible(False)
    return button


class ApprovalCard(QFrame):
    """The card: what will happen, why, how risky, and the four decisions."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("approvalCard")
        self.setFixedWidth(CARD_WIDTH)
        self.setStyleSheet(card_style(MARKER_COLOR))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(*THEME.spacing.card_margins)
        layout.setSpacing(THEME.spacing.card_gap)

        top = QHBoxLayout()
        self.title = plain_label(wrap=False, name="title", selectable=True)
        self.risk_badge = plain_label(wrap=False, name="risk", selectable=True)
        top.addWidget(self.title, 1)
        top.addWidget(self.risk_badge, 0)
        layout.addLayout(top)

        self.description = plain_label(name="description", selectable=True)
        layout.addWidget(self.description)
        self.details = plain_label(name="details", selectable=True)
        layout.addWidget(self.details)
        self.risk_reason = plain_label(name="risk_reason", selectable=True)
        layout.addWidget(self.risk_reason)
        self.thought = plain_label(name="thought", selectable=True)
        layout.addWidget(self.thought)

        self.text_caption = plain_label("Exact text to type:", name="text_caption", selectable=True)
        layout.addWidget(self.text_caption)
        self.text_box = QPlainTextEdit()
        self.text_box.setObjectName("text_box")
        self.text_box.setReadOnly(True)
        self.text_box.setFixedHeight(64)
        self.text_box.setTabChangesFocus(False)
        layout.addWidget(self.text_box)

        self.edit_hint = plain_label(name="edit_hint", selectable=True)
        layout.addWidget(self.edit_hint)

        self.countdown_label = plain_label(name="countdown", selectable=True)
        self.countdown_bar = QProgressBar()
        self.countdown_bar.setTextVisible(False)
        self.countdown_bar.setRange(0, 1000)
        self.countdown_bar.setFixedHeight(6)
        layout.addWidget(self.countdown_label)
        layout.addWidget(self.countdown_bar)

        self.where = plain_label(name="where", selectable=True, style=text_style(THEME.palette.text_faint,
                                                                                   THEME.fonts.small))
        layout.addWidget(self.where)

        # two pairs of buttons, side by side on a full card, one above the other on a narrow one
        self.buttons = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        self.buttons.setSpacing(THEME.spacing.button_gap)
        self.approve_button = push_button("Approve  ⏎", "approve")
        self.edit_button = push_button("Edit  E", "edit")
        self.skip_button = push_button("Skip  S", "skip")
        self.stop_button = push_button("Stop  Esc", "stop")
        for pair in ((self.approve_button, self.edit_button), (self.skip_button, self.stop_button)):
            row = QHBoxLayout()
            row.setSpacing(THEME.spacing.button_gap)
            for b in pair:
                b.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # keys go to the overlay, not to a button
                b.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
                row.addWidget(b)
            self.buttons.addLayout(row)
        layout.addLayout(self.buttons)
        self.refine_button = _refine_button(layout)
        self.set_countdown(None)

    def set_button_columns(self, columns: int) -> None:
        """Lay the four buttons out in one row (``columns`` 4) or in two rows of two (2, a narrow card)."""
        direction = QBoxLayout.Direction.LeftToRight if columns >= 4 else QBoxLayout.Direction.TopToBottom
        if self.buttons.direction() != direction:
            self.buttons.setDirection(direction)

    def set_words(self, headline: str, details: tuple[str, ...] | list[str] = ()) -> None:
        """Lead with ``headline`` (what the step does to what); ``details`` go below it, smaller."""
        self.description.setText(headline)
        self.details.setText("\n".join(details))
        self.details.setVisible(bool(details))

    def set_risk(self, risk: RiskAssessment) -> None:
        high = risk.level is Risk.HIGH
        self.risk_badge.setText("HIGH RISK" if high else "low risk")
        self.risk_badge.setStyleSheet(risk_badge_style(high))
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


THOUGHT_SHOWN_CHARS = 900
"""Most characters of a growing thought the thinking panel shows (the latest ones; the whole thought is on the
card's record and in the episode)."""


class ThinkingPanel(QWidget):
    """The model's thought while a step is being proposed: a small always-on-top card at the top right of a
    screen, in the approval card's style, whose text grows as the thought is generated; hidden when the
    proposal (the approval card) comes. It never takes the keyboard focus (the step acts on the focused window).

    Attributes:
        title: "Step N · Thinking…". thought: the thought so far (its last :data:`THOUGHT_SHOWN_CHARS`).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowFlags(Qt.WindowType.FramelessWindowHint | Qt.WindowType.WindowStaysOnTopHint
                            | Qt.WindowType.Tool | Qt.WindowType.WindowDoesNotAcceptFocus)
        self.setAttribute(Qt.WidgetAttribute.WA_ShowWithoutActivating, True)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        name_window(self, "Holodesk thinking", "holodeskThinking")
        card = QFrame(self)
        card.setObjectName("approvalCard")
        card.setStyleSheet(card_style(MARKER_COLOR))
        card.setFixedWidth(CARD_WIDTH)
        layout = QVBoxLayout(card)
        layout.setContentsMargins(*THEME.spacing.card_margins)
        layout.setSpacing(THEME.spacing.card_gap)
        self.title = plain_label(wrap=False, name="title")
        self.thought = plain_label(name="thought")
        layout.addWidget(self.title)
        layout.addWidget(self.thought)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(card)

    def show_thought(self, step: int, text: str, screen: QScreen | None = None) -> None:
        """Show step ``step``'s (0-based) thought so far, ``text`` (model text: shown as plain text, escaped by
        the caller), at the top right of ``screen`` (None: the primary screen)."""
        shown = text if len(text) <= THOUGHT_SHOWN_CHARS else "…" + text[-THOUGHT_SHOWN_CHARS:]
        self.title.setText(f"Step {step + 1} · Thinking…")
        self.thought.setText(f"Model's thought: {shown}")
        self.adjustSize()
        target = screen or QGuiApplication.primaryScreen()
        if target is not None:
            area = target.availableGeometry()
            margin = THEME.spacing.card_gap * 2
            self.move(area.right() - self.width() - margin, area.top() + margin)
        if not self.isVisible():
            self.show()


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
    refine_pressed = Signal()

    def __init__(self, geometry: OverlayGeometry, marker_color: str = MARKER_COLOR,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowFlags(Qt.WindowType.FramelessWindowHint | Qt.WindowType.WindowStaysOnTopHint
                            | Qt.WindowType.Tool)
        self.setAttribute(Qt.WidgetAttribute.WA_TranslucentBackground, True)
        self.setAttribute(Qt.WidgetAttribute.WA_ShowWithoutActivating, False)
        name_window(self, "Holodesk approval", "holodeskOverlay")
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.geometry_map = geometry
        self.marker_color = QColor(marker_color)
        self.card = ApprovalCard(self)
        self.card.approve_button.clicked.connect(self.approve_pressed)
        self.card.skip_button.clicked.connect(self.skip_pressed)
        self.card.stop_button.clicked.connect(self.stop_pressed)
        self.card.edit_button.clicked.connect(self.edit_pressed)
        self.card.refine_button.clicked.connect(self.refine_pressed)
        self.action: Action | None = None
        self.points: list[QPointF] = []
        self.mode = "review"  # "review" | "pick" (click a point) | "text" (edit typed text)
        self.caret: QPointF | None = None
        self.avoid: QRectF | None = None
        # While picking a point the card is hidden (it must not cover a target); a banner says what to do.
        self.banner = plain_label(wrap=False, name="banner", selectable=True)
        self.banner.setParent(self)
        self.banner.setStyleSheet(banner_style(MARKER_COLOR))
        self.banner.hide()
        self.setGeometry(geometry.screen_rect)

    # -- content -----------------------------------------------------------------------------------
    def show_action(self, action: Action, input_points: tuple[InputPoint, ...] | list[InputPoint],
                    *, caret_input: tuple[int, int] | None = None,
                    avoid_input: tuple[int, int, int, int] | None = None) -> None:
        """Mark ``action`` at ``input_points`` (input space). ``caret_input`` is where typed text goes
        (the pointer position; typing goes to the focused field, usually the one just clicked).
        ``avoid_input`` is the target's window ``(left, top, width, height)`` in input space, when known:
        the card stays off it where the monitor has room."""
        self.action = action
        self.points = [self.geometry_map.to_local(p) for p in input_points]
        self.caret = self.geometry_map.to_local(caret_input) if caret_input is not None else None
        self.avoid = None
        if avoid_input is not None:
            left, top, width, height = avoid_input
            a = self.geometry_map.to_local((left, top))
            b = self.geometry_map.to_local((left + width, top + height))
            self.avoid = QRectF(a, b).normalized().adjusted(-0.5, -0.5, 0, 0)
        self.card.edit_button.setEnabled(not isinstance(action, (Key, KeyDown, KeyUp, Wait, Plan)))
        self._place_card()
        self._update_mask()
        self.update()

    def refresh(self) -> None:
        """Re-place the card and re-shape the window after the card's content changed."""
        self._place_card()
        self._update_mask()
        self.update()

    def _measure_card(self, width: int, columns: int) -> QSizeF | None:
        """The card's size at ``width`` with its buttons in ``columns`` (4: one row, 2: two rows), or None
        when its content does not fit that width."""
        layout = self.card.layout()
        assert layout is not None
        self.card.set_button_columns(columns)
        layout.activate()
        if width < layout.minimumSize().width():
            return None
        return QSizeF(width, max(layout.minimumSize().height(), layout.totalHeightForWidth(width)))

    def card_sizes(self) -> list[QSizeF]:
        """The sizes the card can take with its current content, preferred first: the full width, then
        the narrower widths (:data:`NARROW_CARD_WIDTHS`) that its content fits (buttons in two rows
        when one row is too wide). Word-wrapped labels are measured at each width."""
        sizes = []
        for width in (CARD_WIDTH, *NARROW_CARD_WIDTHS):
            size = self._measure_card(width, 4) or self._measure_card(width, 2)
            if size is not None:
                sizes.append(size)
        if not sizes:
            layout = self.card.layout()
            assert layout is not None
            sizes.append(QSizeF(CARD_WIDTH, layout.totalHeightForWidth(CARD_WIDTH)))
        return sizes

    def _place_card(self) -> None:
        targets = list(self.points) or ([self.caret] if self.caret is not None else [])
        rect = place_card(QRectF(self.rect()), self.card_sizes(), targets, self.avoid)
        width = round(rect.width())
        self.card.set_button_columns(4 if self._measure_card(width, 4) is not None else 2)
        self.card.setFixedWidth(width)
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
            painter.setBrush(Qt.GlobalColor.black)  # the mask: any opaque pixel
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


def _target_mark(painter: QPainter, p: QPointF, color: QColor, *, spread: float = 0.0) -> None:
    """Mark target ``p`` without hiding its label: four corner brackets at (±34, ±22) and two pointers
    from above and below whose tips stop 16 px short of the point. Nothing is painted within
    ``LABEL_HALF_HEIGHT`` of the target's line; the exact point is where the pointers aim.
    ``spread`` pushes the brackets further out (one more set for each more press of a double or triple
    click)."""
    bx, by, arm = 34.0 + spread, 22.0 + spread, 10.0
    painter.save()
    painter.setPen(QPen(color, 3, Qt.PenStyle.SolidLine, Qt.PenCapStyle.FlatCap))
    for sx in (-1, 1):
        for sy in (-1, 1):
            corner = QPointF(p.x() + sx * bx, p.y() + sy * by)
            painter.drawLine(corner, QPointF(corner.x() - sx * arm, corner.y()))
            painter.drawLine(corner, QPointF(corner.x(), corner.y() - sy * min(arm, by - LABEL_HALF_HEIGHT - 2)))
    if spread == 0.0:
        for sy in (-1, 1):
            tip = QPointF(p.x(), p.y() + sy * 16)
            painter.drawLine(QPointF(p.x(), p.y() + sy * 40), QPointF(p.x(), p.y() + sy * 22))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(color)
            painter.drawPolygon(QPolygonF([tip, QPointF(p.x() - 6, p.y() + sy * 24),
                                           QPointF(p.x() + 6, p.y() + sy * 24)]))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(color, 3, Qt.PenStyle.SolidLine, Qt.PenCapStyle.FlatCap))
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


def _drag_ends(a: QPointF, b: QPointF) -> tuple[QPointF, QPointF]:
    """Where a drag's path starts and ends so that it crosses neither target's label band: for targets
    more than 60 px apart vertically, from the side of ``a`` facing ``b`` to the side of ``b`` facing
    ``a``; otherwise level, 46 px above the higher of the two."""
    off = 46.0
    if abs(b.y() - a.y()) > 60:
        s = 1.0 if b.y() > a.y() else -1.0
        return QPointF(a.x(), a.y() + s * off), QPointF(b.x(), b.y() - s * off)
    level = min(a.y(), b.y()) - off
    return QPointF(a.x(), level), QPointF(b.x(), level)


def paint_marks(painter: QPainter, action: Action | None, points: list[QPointF], *, caret: QPointF | None,
                color: QColor, center: QPointF) -> None:
    """Draw the marks of ``action``: a target mark on each target (:func:`_target_mark`), a dashed path
    with an arrow for a drag (kept off the targets' label lines), arrows for a scroll (at ``center``
    when it has no point), an I-beam and the field's top and bottom edges at ``caret`` for typing.
    Nothing is painted over a target's label band (``LABEL_HALF_WIDTH`` x ``LABEL_HALF_HEIGHT``).

    Args:
        painter: any paint device; coordinates are the device's (logical) pixels.
        points: the action's points in those coordinates, in order.
    """
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    pen = QPen(color, 4)
    pen.setCapStyle(Qt.PenCapStyle.FlatCap)
    painter.setPen(pen)
    painter.setBrush(Qt.BrushStyle.NoBrush)
    if isinstance(action, Drag) and len(points) == 2:
        a, b = points
        _target_mark(painter, a, color)
        _target_mark(painter, b, color)
        start, end = _drag_ends(a, b)
        painter.setPen(QPen(color, 4, Qt.PenStyle.DashLine, Qt.PenCapStyle.FlatCap))
        painter.drawLine(start, end)
        painter.setPen(pen)
        _arrow_head(painter, start, end, color)
    elif isinstance(action, Scroll):
        at = points[0] if points else center
        _target_mark(painter, at, color)
        dx, dy = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}[action.direction]
        # up/down arrows continue the pointers; left/right ones run above the label line
        base = QPointF(at.x(), at.y() - 34) if dx else at
        first = 52.0 if dy else 44.0
        for k in (0, 1):
            start = QPointF(base.x() + dx * (first + 24 * k), base.y() + dy * (first + 24 * k))
            end = QPointF(base.x() + dx * (first + 18 + 24 * k), base.y() + dy * (first + 18 + 24 * k))
            painter.drawLine(start, end)
            _arrow_head(painter, start, end, color)
    elif isinstance(action, Type):
        field_at = caret or (points[0] if points else None)
        if field_at is not None:
            x, y = field_at.x(), field_at.y()
            clear = LABEL_HALF_HEIGHT + 2
            for sy in (-1, 1):  # I-beam stubs and serifs, the text line itself left readable
                painter.drawLine(QPointF(x, y + sy * clear), QPointF(x, y + sy * (clear + 10)))
                painter.drawLine(QPointF(x - 7, y + sy * (clear + 10)), QPointF(x + 7, y + sy * (clear + 10)))
                painter.drawLine(QPointF(x - 12, y + sy * (clear + 16)), QPointF(x + 128, y + sy * (clear + 16)))
    elif action is not None:
        for p in points:
            _target_mark(painter, p, color)
            for extra in range(1, action.count if isinstance(action, Click) else 1):  # one ring more per click
                _target_mark(painter, p, color, spread=9.0 * extra)
            if isinstance(action, Click) and action.button == "right":
                painter.drawLine(QPointF(p.x() + 40, p.y() - 28), QPointF(p.x() + 50, p.y() - 38))


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
