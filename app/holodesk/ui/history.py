"""The history window: past episodes read from disk, step by step.

Left: episodes (newest first) from :func:`~holodesk.session.episode.list_episodes`. Middle: the steps of
the selected episode. Right: the step's frame with its action drawn on it (the mark sits on the frame
pixel the action designated, :func:`~holodesk.core.geometry.point_to_frame_pixel`), the model's thought
and raw reply (plain text), the decision and who made it, the result and the timings in ms.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QImage, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from holodesk.core.actions import Action, action_from_dict
from holodesk.core.geometry import point_to_frame_pixel
from holodesk.errors import HolodeskError
from holodesk.session.episode import Episode, list_episodes, load_episode
from holodesk.ui.overlay import paint_action_on_image

log = logging.getLogger(__name__)


class _FrameSize:
    """Stand-in carrying only a frame's pixel size, for point_to_frame_pixel (which reads width/height)."""

    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height


def action_pixels(action: Action, width: int, height: int) -> list[QPointF]:
    """The frame pixels (physical) that ``action``'s points designate in a ``width`` x ``height`` frame."""
    frame: Any = _FrameSize(width, height)
    out = []
    for p in action.points():
        px, py = point_to_frame_pixel(frame, p)
        out.append(QPointF(px + 0.5, py + 0.5))
    return out


def step_action(step: dict[str, Any]) -> Action | None:
    """The action that ran in ``step`` (the edited one when the user edited it), or None."""
    data = step.get("edited_action") or step.get("action")
    if not isinstance(data, dict):
        return None
    try:
        return action_from_dict(data)
    except HolodeskError as exc:
        log.warning("step %s: cannot rebuild its action: %s", step.get("step"), exc)
        return None


def step_summary(step: dict[str, Any]) -> str:
    """One line for the step list: number, action kind, decision, result."""
    action = step.get("edited_action") or step.get("action") or {}
    kind = action.get("kind", "no action") if isinstance(action, dict) else "no action"
    decision = step.get("decision") or ("reply rejected" if step.get("error") else "-")
    result = step.get("result") or {}
    status = result.get("status", "") if isinstance(result, dict) else ""
    return f"{int(step.get('step', 0)) + 1}. {kind} · {decision}" + (f" · {status}" if status else "")


def step_details(step: dict[str, Any]) -> str:
    """Plain-text details of a step: thought, decision, risk, result, timings, error."""
    lines = []
    if step.get("thought"):
        lines.append(f"Thought: {step['thought']}")
    if step.get("action"):
        lines.append(f"Proposed: {json.dumps(step['action'], ensure_ascii=False)}")
    if step.get("edited_action"):
        lines.append(f"Edited to: {json.dumps(step['edited_action'], ensure_ascii=False)}")
    if step.get("decision") is not None:
        lines.append(f"Decision: {step.get('decision')} (by {step.get('decided_by', '?')})")
    risk = step.get("risk")
    if isinstance(risk, dict):
        lines.append(f"Risk: {risk.get('level')} — {risk.get('reason')}")
    result = step.get("result")
    if isinstance(result, dict):
        lines.append(f"Result: {result.get('status')} — {result.get('message', '')}")
    if step.get("error"):
        lines.append(f"Error: {step['error']}")
    timings = step.get("timings_ms")
    if isinstance(timings, dict) and timings:
        lines.append("Timings (ms): " + ", ".join(f"{k} {float(v):.1f}" for k, v in timings.items()))
    return "\n".join(lines)


class _ScaledImage(QLabel):
    """A label showing a pixmap scaled to fit, keeping its aspect ratio."""

    def __init__(self) -> None:
        super().__init__()
        self._pixmap: QPixmap | None = None
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setMinimumSize(320, 200)

    def set_image(self, pixmap: QPixmap | None, placeholder: str = "") -> None:
        self._pixmap = pixmap
        if pixmap is None:
            self.setPixmap(QPixmap())
            self.setText(placeholder)
        else:
            self._rescale()

    def _rescale(self) -> None:
        if self._pixmap is not None:
            self.setPixmap(self._pixmap.scaled(self.size(), Qt.AspectRatioMode.KeepAspectRatio,
                                               Qt.TransformationMode.SmoothTransformation))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._rescale()


class HistoryWindow(QDialog):
    """Browse recorded episodes.

    Args:
        episodes_dir: the folder holding one sub-folder per episode (``Settings.episodes_dir``).
    """

    def __init__(self, episodes_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Holodesk history")
        self.setObjectName("holodeskHistory")
        self.episodes_dir = Path(episodes_dir)
        self.episode: Episode | None = None
        self.current_image: QImage | None = None  # the shown frame with its marks, frame pixels
        splitter = QSplitter(Qt.Orientation.Horizontal)
        self.episode_list = QListWidget()
        self.episode_list.setObjectName("episodes")
        self.episode_list.setWordWrap(True)
        self.step_list = QListWidget()
        self.step_list.setObjectName("steps")
        right = QWidget()
        right_layout = QVBoxLayout(right)
        self.header = QLabel()
        self.header.setTextFormat(Qt.TextFormat.PlainText)
        self.header.setWordWrap(True)
        self.header.setStyleSheet("font-weight: 600;")
        self.image = _ScaledImage()
        self.details = QPlainTextEdit()
        self.details.setObjectName("details")
        self.details.setReadOnly(True)
        self.raw = QPlainTextEdit()
        self.raw.setObjectName("raw")
        self.raw.setReadOnly(True)
        self.raw.setMaximumHeight(110)
        right_layout.addWidget(self.header)
        right_layout.addWidget(self.image, 3)
        right_layout.addWidget(QLabel("Decision, result, timings"))
        right_layout.addWidget(self.details, 1)
        right_layout.addWidget(QLabel("Raw model reply"))
        right_layout.addWidget(self.raw)
        splitter.addWidget(self.episode_list)
        splitter.addWidget(self.step_list)
        splitter.addWidget(right)
        splitter.setSizes([240, 220, 640])
        layout = QHBoxLayout(self)
        layout.addWidget(splitter)
        self.episode_list.currentItemChanged.connect(self._episode_selected)
        self.step_list.currentRowChanged.connect(self._step_selected)
        self.resize(1180, 720)
        self.reload()

    def reload(self) -> None:
        """Re-read the episodes folder."""
        self.episode_list.clear()
        paths = list_episodes(self.episodes_dir)
        if not paths:
            self.header.setText(f"No episodes recorded yet in {self.episodes_dir}.")
        for path in paths:
            try:
                ep = load_episode(path)
                text = f"{ep.task}\n{path.name} · {ep.status} · {len(ep.steps)} steps"
            except HolodeskError as exc:
                text = f"{path.name}\n(unreadable: {exc.message})"
            item = QListWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, str(path))
            self.episode_list.addItem(item)
        if paths:
            self.episode_list.setCurrentRow(0)

    def _episode_selected(self, item: QListWidgetItem | None, _previous: QListWidgetItem | None = None) -> None:
        self.step_list.clear()
        self.episode = None
        if item is None:
            return
        path = Path(str(item.data(Qt.ItemDataRole.UserRole)))
        try:
            self.episode = load_episode(path)
        except HolodeskError as exc:
            self.header.setText(f"Cannot read {path}: {exc}")
            return
        ep = self.episode
        end = ep.end or {}
        self.header.setText(f"{ep.task} — {ep.status}: {end.get('reason', '')}"
                            + (f"\nAnswer: {end['answer']}" if end.get("answer") else ""))
        for step in ep.steps:
            self.step_list.addItem(step_summary(step))
        if ep.steps:
            self.step_list.setCurrentRow(0)
        else:
            self.image.set_image(None, "This episode has no steps.")

    def _step_selected(self, row: int) -> None:
        ep = self.episode
        if ep is None or not 0 <= row < len(ep.steps):
            return
        step = ep.steps[row]
        self.details.setPlainText(step_details(step))
        self.raw.setPlainText(str(step.get("raw_text") or ""))
        path = ep.frame_path(step)
        image = QImage(str(path)) if path is not None and path.exists() else QImage()
        if image.isNull():
            self.current_image = None
            self.image.set_image(None, "No frame recorded for this step.")
            return
        action = step_action(step)
        if action is not None:
            image = paint_action_on_image(image, action, action_pixels(action, image.width(), image.height()))
        self.current_image = image
        self.image.set_image(QPixmap.fromImage(image))

