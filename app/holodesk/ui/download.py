"""The download dialog: fetches a model's checkpoint (any family: Holotron, Holo2, Holo3.x) with a progress bar,
speed, time left, the file being fetched, Cancel, and the download's own advice when it fails; its title names
the model.

The dialog does not download anything itself: it runs a download function (the download manager,
``holodesk.download.manager.download_model``) on a worker thread. What it expects of that function
(:class:`DownloadFn`)::

    download(repo_id: str, *, revision: str, cache_dir: Path,
             progress: Callable[[progress report], None], cancel: threading.Event) -> folder or result

* ``progress`` is called (from any thread, as often as the function likes) with an object that has the
  attributes of :class:`DownloadProgressLike`: ``done_bytes``, ``total_bytes`` (0: unknown),
  ``bytes_per_s``, ``eta_s`` (None: unknown), ``file`` and optionally ``stage`` ("checking" while cached
  files are hashed again);
* ``cancel`` is set when the user presses Cancel (or closes the dialog or the wizard); the function then
  stops soon and returns or raises (anything it raises after a cancel is shown as "Cancelled");
* it returns the folder of the downloaded checkpoint, or an object whose ``folder`` attribute is that
  folder;
* an error it raises may carry ``advice`` (what to do); a HolodeskError's ``hint`` is used otherwise.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QProgressBar,
    QVBoxLayout,
    QWidget,
)

from holodesk.core.units import format_bytes, format_duration
from holodesk.errors import HolodeskError
from holodesk.policy.models import find_model
from holodesk.ui.theme import THEME, text_style
from holodesk.ui.widgets import name_window, plain_label, push_button

log = logging.getLogger(__name__)


class DownloadProgressLike(Protocol):
    """What the dialog reads from a progress report (attributes; sizes in bytes, speed in bytes/s)."""

    @property
    def done_bytes(self) -> int: ...
    @property
    def total_bytes(self) -> int: ...
    @property
    def bytes_per_s(self) -> float: ...
    @property
    def eta_s(self) -> float | None: ...
    @property
    def file(self) -> str: ...


@dataclass(frozen=True)
class DownloadProgress:
    """A progress report (satisfies :class:`DownloadProgressLike`; the download manager has its own, with
    the same attributes).

    Attributes:
        done_bytes: bytes on disk so far (all files).
        total_bytes: bytes of the whole download, 0 while unknown.
        bytes_per_s: recent speed, bytes per second (0.0 while unknown).
        eta_s: seconds left (None while unknown).
        file: the file being fetched, relative to the repository.
        stage: "downloading", or "checking" while files already on disk are hashed again.
    """

    done_bytes: int
    total_bytes: int
    bytes_per_s: float
    eta_s: float | None
    file: str
    stage: str = "downloading"


class DownloadFn(Protocol):
    """The download manager's entry point, as the dialog calls it (see the module docstring)."""

    def __call__(self, repo_id: str, *, revision: str, cache_dir: Path, progress: Callable[[Any], None],
                 cancel: threading.Event) -> Any: ...


def format_eta(seconds: float | None) -> str:
    """``3725`` -> ``"1 h 2 min"``; ``None`` -> ``"unknown"``."""
    return "unknown" if seconds is None else format_duration(seconds)


def progress_text(p: DownloadProgressLike) -> str:
    """One line: "1.2 GB of 26.4 GB · 85.0 MB/s · 4 min 56 s left" ("Checking 1.2 GB of ..." while cached
    files are hashed again)."""
    done = format_bytes(p.done_bytes)
    total = f" of {format_bytes(p.total_bytes)}" if p.total_bytes else ""
    speed = f" · {format_bytes(p.bytes_per_s)}/s" if p.bytes_per_s else ""
    left = f" · {format_eta(p.eta_s)} left" if not p.total_bytes or p.done_bytes < p.total_bytes else ""
    verb = "Checking " if getattr(p, "stage", "") == "checking" else ""
    return f"{verb}{done}{total}{speed}{left}"


def error_advice(exc: BaseException) -> str:
    """What to do about a failed download: the error's ``advice``, else a HolodeskError's hint."""
    advice = getattr(exc, "advice", None)
    if isinstance(advice, str) and advice:
        return advice
    return exc.hint if isinstance(exc, HolodeskError) else ""


class _Relay(QObject):
    """Carries the worker's reports to the GUI thread (queued signals)."""

    progress = Signal(object)
    done = Signal(object)
    failed = Signal(object)


class DownloadDialog(QDialog):
    """Runs one download and shows it.

    Args:
        download: the download manager's function (:data:`DownloadFn`).
        repo_id / revision / cache_dir: what to fetch and where.
    Attributes:
        result_path: the checkpoint folder after success, else None.
        state: "idle", "running", "cancelling", "done", "cancelled" or "failed".
    Signals:
        downloaded(Path): the checkpoint is complete in this folder.
    """

    downloaded = Signal(object)

    def __init__(self, download: DownloadFn, repo_id: str, cache_dir: Path, revision: str = "main",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        spec = find_model(repo_id)
        name_window(self, f"Downloading {spec.display_name if spec else repo_id}", "holodeskDownload")
        self.download = download
        self.repo_id = repo_id
        self.revision = revision
        self.cache_dir = Path(cache_dir)
        self.result_path: Path | None = None
        self.state = "idle"
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._relay = _Relay(self)
        self._relay.progress.connect(self._on_progress, Qt.ConnectionType.QueuedConnection)
        self._relay.done.connect(self._on_done, Qt.ConnectionType.QueuedConnection)
        self._relay.failed.connect(self._on_failed, Qt.ConnectionType.QueuedConnection)

        layout = QVBoxLayout(self)
        self.heading = plain_label(f"{repo_id} into {self.cache_dir}")
        layout.addWidget(self.heading)
        self.bar = QProgressBar()
        self.bar.setObjectName("progress")
        self.bar.setRange(0, 0)
        layout.addWidget(self.bar)
        self.numbers = plain_label("Starting...", "numbers", wrap=False)
        layout.addWidget(self.numbers)
        self.file = plain_label("", "file", wrap=False, style=text_style(THEME.palette.muted))
        layout.addWidget(self.file)
        self.message = plain_label("", "message", hidden=True)
        layout.addWidget(self.message)
        row = QHBoxLayout()
        row.addStretch(1)
        self.retry_button = push_button("Retry", "retry", self.start, hidden=True)
        row.addWidget(self.retry_button)
        self.cancel_button = push_button("Cancel", "cancel", self.cancel)
        row.addWidget(self.cancel_button)
        layout.addLayout(row)
        self.setMinimumWidth(520)

    def start(self) -> None:
        """Start (or restart after a failure) the download on a worker thread."""
        if self.state in ("running", "cancelling"):
            return
        self._cancel = threading.Event()
        self.state = "running"
        self.message.hide()
        self.retry_button.hide()
        self.cancel_button.setText("Cancel")
        self.cancel_button.setEnabled(True)
        cancel, relay = self._cancel, self._relay

        def work() -> None:
            try:
                result = self.download(self.repo_id, revision=self.revision, cache_dir=self.cache_dir,
                                       progress=relay.progress.emit, cancel=cancel)
            except BaseException as exc:  # shown in the dialog, never lost
                relay.failed.emit(exc)
            else:
                relay.done.emit(Path(getattr(result, "folder", result)))

        self._thread = threading.Thread(target=work, name="holodesk-download", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """Ask the download to stop (Cancel); closes the dialog when nothing runs."""
        if self.state == "running":
            self.state = "cancelling"
            self._cancel.set()
            self.cancel_button.setEnabled(False)
            self.numbers.setText("Cancelling...")
        elif self.state != "cancelling":
            self.reject()

    def wait(self, timeout_s: float) -> bool:
        """Wait for the worker thread; True when it has ended."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _on_progress(self, p: DownloadProgressLike) -> None:
        if self.state != "running":
            return
        if p.total_bytes:
            self.bar.setRange(0, 1000)
            self.bar.setValue(min(1000, round(1000 * p.done_bytes / p.total_bytes)))
        self.numbers.setText(progress_text(p))
        self.file.setText(f"Fetching {p.file}" if p.file else "")

    def _on_done(self, path: Path) -> None:
        if self.state == "cancelling":
            self._show_cancelled()
            return
        self.state = "done"
        self.result_path = path
        self.bar.setRange(0, 1000)
        self.bar.setValue(1000)
        self.numbers.setText(f"Done: {path}")
        self.downloaded.emit(path)
        self.accept()

    def _on_failed(self, exc: BaseException) -> None:
        if self.state == "cancelling" or self._cancel.is_set():
            self._show_cancelled()
            return
        self.state = "failed"
        log.warning("download of %s failed: %s", self.repo_id, exc)
        text = exc.message if isinstance(exc, HolodeskError) else str(exc) or type(exc).__name__
        advice = error_advice(exc)
        self.message.setText(f"The download failed: {text}" + (f"\n\n{advice}" if advice else ""))
        self.message.setStyleSheet("")
        self.message.show()
        self.numbers.setText("Stopped.")
        self.retry_button.show()
        self.cancel_button.setText("Close")
        self.cancel_button.setEnabled(True)

    def _show_cancelled(self) -> None:
        self.state = "cancelled"
        self.numbers.setText("Cancelled.")
        self.cancel_button.setText("Close")
        self.cancel_button.setEnabled(True)
        self.retry_button.setText("Start again")
        self.retry_button.show()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.state == "running":
            self.cancel()
        super().closeEvent(event)
