"""The history window: past episodes read from disk, step by step, in plain words.

Top: search by task text and by date (from / to), Export... (a zip of the episode's JSONL and PNGs,
:func:`~holodesk.session.episode.export_episode`) and Delete... (after a confirmation,
:func:`~holodesk.session.episode.delete_episode`). Left: episodes (newest first) from
:func:`~holodesk.session.episode.list_episodes`. Middle: the steps of the selected episode, each a
thumbnail of the screen the model saw and a sentence (:func:`~holodesk.core.wording.describe`, who
decided, what happened). Right: the step's frame with its action drawn on it (the mark sits on the frame
pixel the action designated, :func:`~holodesk.core.geometry.point_to_frame_pixel`), the step in words and
the timings in ms; the model's reply as received is one click away.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QDate, QPointF, QSize, Qt
from PySide6.QtGui import QIcon, QImage, QPixmap, QResizeEvent
from PySide6.QtWidgets import (
    QDateEdit,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from holodesk.core.actions import Action, action_from_dict
from holodesk.core.geometry import point_to_frame_pixel
from holodesk.core.text import display_safe
from holodesk.core.wording import describe, step_words
from holodesk.errors import HolodeskError
from holodesk.session.episode import Episode, delete_episode, export_episode, list_episodes, load_episode
from holodesk.ui.overlay import paint_action_on_image
from holodesk.ui.theme import THEME, strong_style
from holodesk.ui.widgets import name_window, push_button

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


DECISION_WORDS = {"approve": "approved", "edit": "edited, then approved", "skip": "skipped", "stop": "stopped",
                  "none needed": "no approval needed"}
RESULT_WORDS = {"performed": "done", "failed": "failed", "skipped": "not performed"}


def _who(step: dict[str, Any]) -> str:
    by = step.get("decided_by")
    return {"user": "by you", "autopilot": "by the autopilot"}.get(str(by), f"by {by}" if by else "")


def step_headline(step: dict[str, Any]) -> str:
    """The step's action in plain words (the edited one when the user edited it): "Click at (500, 300)";
    for a reply that was not an action, what went wrong."""
    action = step_action(step)
    if action is not None:
        return describe(action)
    if step.get("error"):
        return "The model's reply was not a valid action"
    return "No action"


def step_summary(step: dict[str, Any]) -> str:
    """Two lines for the step list: "3. Type 5 characters: 'hello'" and "approved by you · done"."""
    decision = step.get("decision")
    parts = []
    if decision:
        parts.append(" ".join(p for p in (DECISION_WORDS.get(str(decision), str(decision)), _who(step)) if p))
    elif step.get("error"):
        parts.append("rejected")
    result = step.get("result")
    if isinstance(result, dict) and result.get("status"):
        parts.append(RESULT_WORDS.get(str(result["status"]), str(result["status"])))
    return f"{int(step.get('step', 0)) + 1}. {step_headline(step)}\n" + (" · ".join(parts) or "-")


def step_details(step: dict[str, Any]) -> str:
    """Plain-text details of a step, in words: thought, proposal (and edit), decision, risk, result,
    error, timings."""
    lines = []
    if step.get("thought"):
        lines.append(f"Thought: {step['thought']}")
    proposed = _action_of(step.get("action"))
    if proposed is not None:
        lines.append(f"Proposed: {describe(proposed)}")
        lines.extend(f"  {detail}" for detail in step_words(proposed).details)  # e.g. a plan's goals
    edited = _action_of(step.get("edited_action"))
    if edited is not None:
        lines.append(f"Edited to: {describe(edited)}")
    if step.get("decision") is not None:
        lines.append(f"Decision: {step.get('decision')} ({_who(step) or 'by ?'})")
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
    return "\n".join(display_safe(line) for line in lines)  # F24: controls, bidi, surrogates as escapes


def _action_of(data: Any) -> Action | None:
    if not isinstance(data, dict):
        return None
    try:
        return action_from_dict(data)
    except HolodeskError:
        return None


_STAMP = re.compile(r"^(\d{8})-(\d{6})")


def episode_started(path: Path, episode: Episode | None) -> dt.datetime | None:
    """When an episode started (local time): its start record's ``started_at``, else its folder name's
    ``YYYYmmdd-HHMMSS`` prefix; None when neither says."""
    if episode is not None and isinstance(episode.start.get("started_at"), int | float):
        return dt.datetime.fromtimestamp(float(episode.start["started_at"]))
    m = _STAMP.match(Path(path).name)
    if m:
        try:
            return dt.datetime.strptime(m.group(1) + m.group(2), "%Y%m%d%H%M%S")
        except ValueError:
            return None
    return None


@dataclass
class EpisodeEntry:
    """One row of the episode list.

    Attributes:
        path: the episode folder.
        episode: the loaded record, or None when unreadable (``error`` says why).
        started: start time, local.
    """

    path: Path
    episode: Episode | None
    error: str
    started: dt.datetime | None

    def matches(self, text: str, first: dt.date | None, last: dt.date | None) -> bool:
        """Whether the task holds ``text`` (any case) and the start date is within [first, last]."""
        task = self.episode.task if self.episode is not None else self.path.name
        if text and text.casefold() not in task.casefold():
            return False
        if self.started is not None:
            day = self.started.date()
            if (first is not None and day < first) or (last is not None and day > last):
                return False
        return True


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


THUMB = QSize(128, 72)


class HistoryWindow(QDialog):
    """Browse, search, export and delete recorded episodes.

    Args:
        episodes_dir: the folder holding one sub-folder per episode (``Settings.episodes_dir``).
    """

    def __init__(self, episodes_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        name_window(self, "Holodesk history", "holodeskHistory")
        self.episodes_dir = Path(episodes_dir)
        self.entries: list[EpisodeEntry] = []
        self.episode: Episode | None = None
        self.current_image: QImage | None = None  # the shown frame with its marks, frame pixels
        self.confirm: QMessageBox | None = None

        bar = self._make_bar()
        splitter = QSplitter(Qt.Orientation.Horizontal)
        self.episode_list = QListWidget()
        self.episode_list.setObjectName("episodes")
        self.episode_list.setWordWrap(True)
        self.step_list = QListWidget()
        self.step_list.setObjectName("steps")
        self.step_list.setIconSize(THUMB)
        self.step_list.setWordWrap(True)
        self.step_list.setSpacing(THEME.spacing.list_gap)
        right = self._make_step_view()
        splitter.addWidget(self.episode_list)
        splitter.addWidget(self.step_list)
        splitter.addWidget(right)
        splitter.setSizes([240, 300, 640])
        layout = QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(splitter, 1)
        self.episode_list.currentItemChanged.connect(self._episode_selected)
        self.step_list.currentRowChanged.connect(self._step_selected)
        self.resize(1180, 720)
        self.reload()

    def _make_bar(self) -> QHBoxLayout:
        """The top bar: search, date range, Export and Delete."""
        bar = QHBoxLayout()
        self.search = QLineEdit()
        self.search.setObjectName("search")
        self.search.setPlaceholderText("Search tasks")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.apply_filter)
        self.date_from = QDateEdit()
        self.date_from.setObjectName("date_from")
        self.date_to = QDateEdit()
        self.date_to.setObjectName("date_to")
        for edit in (self.date_from, self.date_to):
            edit.setCalendarPopup(True)
            edit.setDisplayFormat("yyyy-MM-dd")
            edit.dateChanged.connect(self.apply_filter)
        self.export_button = push_button("Export...", "export", self._export_clicked)
        self.export_button.setToolTip("Save the episode as a zip file (its record and screenshots)")
        self.delete_button = push_button("Delete...", "delete", self.ask_delete)
        bar.addWidget(self.search, 2)
        bar.addWidget(QLabel("From"))
        bar.addWidget(self.date_from)
        bar.addWidget(QLabel("to"))
        bar.addWidget(self.date_to)
        bar.addStretch(1)
        bar.addWidget(self.export_button)
        bar.addWidget(self.delete_button)
        return bar

    def _make_step_view(self) -> QWidget:
        """The right pane: the step's header, its frame with the marks, what happened, the raw reply."""
        right = QWidget()
        right_layout = QVBoxLayout(right)
        self.header = QLabel()
        self.header.setTextFormat(Qt.TextFormat.PlainText)
        self.header.setWordWrap(True)
        self.header.setStyleSheet(strong_style())
        self.image = _ScaledImage()
        self.details = QPlainTextEdit()
        self.details.setObjectName("details")
        self.details.setReadOnly(True)
        self.raw_toggle = QToolButton()
        self.raw_toggle.setObjectName("raw_toggle")
        self.raw_toggle.setText("The model's reply, as received")
        self.raw_toggle.setCheckable(True)
        self.raw_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.raw_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.raw = QPlainTextEdit()
        self.raw.setObjectName("raw")
        self.raw.setReadOnly(True)
        self.raw.setMaximumHeight(110)
        self.raw.hide()
        self.raw_toggle.toggled.connect(self._toggle_raw)
        right_layout.addWidget(self.header)
        right_layout.addWidget(self.image, 3)
        right_layout.addWidget(QLabel("What happened"))
        right_layout.addWidget(self.details, 1)
        right_layout.addWidget(self.raw_toggle)
        right_layout.addWidget(self.raw)
        return right

    def _toggle_raw(self, shown: bool) -> None:
        self.raw.setVisible(shown)
        self.raw_toggle.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)

    def reload(self) -> None:
        """Re-read the episodes folder; the date range is reset to span every episode."""
        self.entries = []
        for path in list_episodes(self.episodes_dir):
            try:
                ep: Episode | None = load_episode(path)
                error = ""
            except HolodeskError as exc:
                ep, error = None, exc.message
            self.entries.append(EpisodeEntry(path, ep, error, episode_started(path, ep)))
        days = [e.started.date() for e in self.entries if e.started is not None] or [dt.date.today()]
        for edit, day in ((self.date_from, min(days)), (self.date_to, max(max(days), dt.date.today()))):
            edit.blockSignals(True)
            edit.setDate(QDate(day.year, day.month, day.day))
            edit.blockSignals(False)
        self.apply_filter()

    def apply_filter(self) -> None:
        """Show the episodes whose task holds the search text and that started within the dates."""
        first = self.date_from.date().toPython()
        last = self.date_to.date().toPython()
        assert isinstance(first, dt.date) and isinstance(last, dt.date)
        self.episode_list.clear()
        shown = [e for e in self.entries if e.matches(self.search.text().strip(), first, last)]
        for entry in shown:
            when = entry.started.strftime("%Y-%m-%d %H:%M") if entry.started else entry.path.name
            if entry.episode is not None:
                ep = entry.episode
                text = f"{ep.task}\n{when} · {ep.status} · {len(ep.steps)} steps"
            else:
                text = f"{entry.path.name}\n(unreadable: {entry.error})"
            item = QListWidgetItem(text)
            item.setData(Qt.ItemDataRole.UserRole, str(entry.path))
            self.episode_list.addItem(item)
        if not self.entries:
            self.header.setText(f"No episodes recorded yet in {self.episodes_dir}.")
        elif not shown:
            self.header.setText("No episode matches the search.")
        has = bool(shown)
        self.export_button.setEnabled(has)
        self.delete_button.setEnabled(has)
        if shown:
            self.episode_list.setCurrentRow(0)
        else:
            self.step_list.clear()
            self.episode = None
            self.image.set_image(None, "")

    def selected_path(self) -> Path | None:
        item = self.episode_list.currentItem()
        return Path(str(item.data(Qt.ItemDataRole.UserRole))) if item is not None else None

    def _export_clicked(self) -> None:
        path = self.selected_path()
        if path is None:
            return
        target, _ = QFileDialog.getSaveFileName(self, "Export the episode", str(Path.home() / f"{path.name}.zip"),
                                                "Zip files (*.zip)")
        if target:
            self.export_selected(Path(target))

    def export_selected(self, target: Path) -> Path | None:
        """Write the selected episode to ``target`` (a zip); the header says where, or why not."""
        path = self.selected_path()
        if path is None:
            return None
        try:
            written = export_episode(path, target)
        except HolodeskError as exc:
            self.header.setText(str(exc))
            return None
        self.header.setText(f"Exported to {written}")
        return written

    def ask_delete(self) -> QMessageBox | None:
        """Ask before deleting the selected episode (non-modal); Delete in that box deletes it."""
        path = self.selected_path()
        if path is None:
            return None
        task = self.episode.task if self.episode is not None else path.name
        box = QMessageBox(QMessageBox.Icon.Warning, "Delete the episode",
                          f"Delete the record of \u201c{task}\u201d and its screenshots? This cannot be undone.",
                          QMessageBox.StandardButton.NoButton, self)
        box.setTextFormat(Qt.TextFormat.PlainText)
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        delete.setObjectName("confirm_delete")
        box.addButton(QMessageBox.StandardButton.Cancel)
        delete.clicked.connect(lambda _=False, p=path: self.delete(p))
        self.confirm = box
        box.open()
        return box

    def delete(self, path: Path) -> bool:
        """Delete one episode folder and refresh the list. True when deleted."""
        try:
            delete_episode(path, self.episodes_dir)
        except HolodeskError as exc:
            self.header.setText(str(exc))
            return False
        self.reload()
        return True

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
            item = QListWidgetItem(step_summary(step))
            thumb = self._thumbnail(ep, step)
            if thumb is not None:
                item.setIcon(QIcon(thumb))
            self.step_list.addItem(item)
        if ep.steps:
            self.step_list.setCurrentRow(0)
        else:
            self.image.set_image(None, "This episode has no steps.")

    @staticmethod
    def _thumbnail(ep: Episode, step: dict[str, Any]) -> QPixmap | None:
        path = ep.frame_path(step)
        if path is None or not path.exists():
            return None
        image = QImage(str(path))
        if image.isNull():
            return None
        return QPixmap.fromImage(image.scaled(THUMB, Qt.AspectRatioMode.KeepAspectRatio,
                                              Qt.TransformationMode.SmoothTransformation))

    def _step_selected(self, row: int) -> None:
        ep = self.episode
        if ep is None or not 0 <= row < len(ep.steps):
            return
        step = ep.steps[row]
        self.details.setPlainText(step_details(step))
        self.raw.setPlainText(display_safe(str(step.get("raw_text") or ""), keep_newlines=True))
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
