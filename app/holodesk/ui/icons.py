"""Status icons for the tray and the fallback window, drawn with QPainter at run time.

One icon per status the user needs to tell apart at a glance: idle, thinking (capturing or waiting for
the model), awaiting approval, acting (performing an approved action) and error. They are drawn rather
than loaded so the installed package needs no data files; ``assets/make_icons.py`` writes the same
drawings to ``assets/icons/*.png`` for packaging (.desktop files, installers) and the docs.

Sizes are in device-independent (logical) pixels; :func:`status_pixmap` renders at the requested
device pixel ratio so icons stay sharp on 2x screens.
"""

from __future__ import annotations

import enum
import functools
from pathlib import Path

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPainterPath, QPen, QPixmap

from holodesk.session.state import State
from holodesk.ui.theme import THEME


class Status(enum.StrEnum):
    """What the tray icon shows."""

    IDLE = "idle"
    THINKING = "thinking"
    AWAITING = "awaiting"
    ACTING = "acting"
    ERROR = "error"


STATUS_COLORS: dict[Status, str] = {
    Status.IDLE: THEME.palette.muted,  # slate: nothing running
    Status.THINKING: THEME.palette.accent,  # blue: capturing / model thinking
    Status.AWAITING: THEME.palette.waiting,  # amber: your decision is needed
    Status.ACTING: THEME.palette.success,  # green: performing an approved action
    Status.ERROR: THEME.palette.danger,  # red: the last task failed
}

STATUS_TEXT: dict[Status, str] = {
    Status.IDLE: "Idle",
    Status.THINKING: "Thinking",
    Status.AWAITING: "Waiting for your approval",
    Status.ACTING: "Acting",
    Status.ERROR: "Error",
}


def status_for_state(state: State) -> Status:
    """Map a session state to the icon shown for it (FAILED -> error; finished/stopped -> idle)."""
    if state in (State.CAPTURING, State.THINKING):
        return Status.THINKING
    if state is State.AWAITING_APPROVAL:
        return Status.AWAITING
    if state is State.EXECUTING:
        return Status.ACTING
    if state is State.FAILED:
        return Status.ERROR
    return Status.IDLE


def _paint(painter: QPainter, status: Status, size: float) -> None:
    """Draw the icon for ``status`` into a ``size`` x ``size`` logical-pixel square."""
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    color = QColor(STATUS_COLORS[status])
    margin = size * 0.06
    disc = QRectF(margin, margin, size - 2 * margin, size - 2 * margin)
    white = QColor(THEME.palette.text_strong)
    painter.setPen(QPen(white, max(1.0, size * 0.05)))
    painter.setBrush(color)
    painter.drawEllipse(disc)

    c = size / 2
    pen = QPen(white, max(1.5, size * 0.09), Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap,
               Qt.PenJoinStyle.RoundJoin)
    painter.setPen(pen)
    painter.setBrush(Qt.BrushStyle.NoBrush)
    if status is Status.IDLE:
        # A target ring: Holodesk is ready to point at something.
        r = size * 0.2
        painter.drawEllipse(QPointF(c, c), r, r)
        painter.setBrush(white)
        painter.drawEllipse(QPointF(c, c), size * 0.04, size * 0.04)
    elif status is Status.THINKING:
        # Three dots.
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(white)
        for dx in (-0.2, 0.0, 0.2):
            painter.drawEllipse(QPointF(c + dx * size, c), size * 0.07, size * 0.07)
    elif status is Status.AWAITING:
        # A question mark drawn as a hook and a dot.
        path = QPainterPath()
        path.moveTo(c - size * 0.13, c - size * 0.12)
        path.cubicTo(c - size * 0.13, c - size * 0.3, c + size * 0.17, c - size * 0.3, c + size * 0.15,
                     c - size * 0.1)
        path.cubicTo(c + size * 0.13, c + size * 0.02, c, c + size * 0.02, c, c + size * 0.12)
        painter.drawPath(path)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(white)
        painter.drawEllipse(QPointF(c, c + size * 0.25), size * 0.055, size * 0.055)
    elif status is Status.ACTING:
        # A pointer arrow.
        path = QPainterPath()
        path.moveTo(c - size * 0.14, c - size * 0.24)
        path.lineTo(c + size * 0.2, c + size * 0.06)
        path.lineTo(c + size * 0.03, c + size * 0.08)
        path.lineTo(c - size * 0.06, c + size * 0.26)
        path.closeSubpath()
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(white)
        painter.drawPath(path)
    elif status is Status.ERROR:
        # An exclamation mark.
        painter.drawLine(QPointF(c, c - size * 0.24), QPointF(c, c + size * 0.06))
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(white)
        painter.drawEllipse(QPointF(c, c + size * 0.22), size * 0.06, size * 0.06)


@functools.cache
def status_pixmap(status: Status, size: int = 32, device_pixel_ratio: float = 1.0) -> QPixmap:
    """Render the icon for ``status``, once per status, size and ratio (kept: a new pixmap at every status change,
    several a task, would each stay in Qt's pixmap cache, about 4.6 KiB a change).

    Args:
        status: which icon.
        size: edge length in logical pixels.
        device_pixel_ratio: physical pixels per logical pixel of the target screen.
    Returns:
        A transparent pixmap of ``round(size * dpr)`` physical pixels square, with its DPR set.
    """
    physical = max(1, round(size * device_pixel_ratio))
    pixmap = QPixmap(physical, physical)
    pixmap.fill(Qt.GlobalColor.transparent)
    pixmap.setDevicePixelRatio(device_pixel_ratio)
    painter = QPainter(pixmap)
    try:
        _paint(painter, status, float(size))
    finally:
        painter.end()
    return pixmap


@functools.cache
def status_icon(status: Status) -> QIcon:
    """A QIcon for ``status`` with 16, 22, 24, 32, 48 and 64 px renderings (made once per status)."""
    icon = QIcon()
    for size in (16, 22, 24, 32, 48, 64):
        icon.addPixmap(status_pixmap(status, size))
    return icon


def export_pngs(directory: Path, size: int = 64) -> list[Path]:
    """Write ``<status>.png`` for every status into ``directory`` (created). Needs a QGuiApplication.

    Returns:
        The files written.
    Raises:
        OSError: when a file cannot be written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for status in Status:
        path = directory / f"{status.value}.png"
        if not status_pixmap(status, size).save(str(path), "PNG"):
            raise OSError(f"could not write {path}")
        written.append(path)
    return written
