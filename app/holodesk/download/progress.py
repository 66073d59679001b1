"""How far a model download is: :class:`DownloadProgress` (one figure in bytes for the whole model), its
words (:func:`~holodesk.core.units.format_bytes`, :func:`~holodesk.core.units.format_duration`) and a terminal
line that shows it (:class:`TerminalProgress`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from holodesk.core.units import format_bytes, format_duration


@dataclass(frozen=True)
class DownloadProgress:
    """One progress report (all figures cover the whole model, not one file).

    Attributes:
        repo_id: the model.
        done_bytes: bytes on disk so far (cached + partial + downloaded); never decreases between reports.
        total_bytes: bytes of the whole model.
        bytes_per_s: download speed over the last few seconds (0.0 before any byte).
        eta_s: seconds left at that speed, None while unknown.
        file: the file being fetched ("" when none), file_index (1-based) of files.
        folder: the repo's cache folder.
        stage: ``"downloading"``, or ``"checking"`` while files already in the cache are hashed again
            (``verify_cached``; done_bytes then counts checked bytes).
    """

    repo_id: str
    done_bytes: int
    total_bytes: int
    bytes_per_s: float
    eta_s: float | None
    file: str
    file_index: int
    files: int
    folder: Path
    stage: str = "downloading"

    @property
    def fraction(self) -> float:
        """done/total in [0, 1] (1.0 for an empty model)."""
        return min(1.0, self.done_bytes / self.total_bytes) if self.total_bytes else 1.0

    def describe(self) -> str:
        """One line for a terminal or a dialog:
        ``"Downloading owner/name: 1.2 GB of 25.0 GB (5%), 35.0 MB/s, 11 min 20 s left — model.safetensors
        (2/9)"``."""
        verb = "Checking" if self.stage == "checking" else "Downloading"
        line = (f"{verb} {self.repo_id}: {format_bytes(self.done_bytes)} of {format_bytes(self.total_bytes)} "
                f"({self.fraction:.0%})")
        if self.bytes_per_s > 0:
            line += f", {format_bytes(self.bytes_per_s)}/s"
        if self.eta_s is not None and self.done_bytes < self.total_bytes:
            line += f", {format_duration(self.eta_s)} left"
        if self.file:
            line += f" — {self.file} ({self.file_index}/{self.files})"
        return line


ProgressCallback = Callable[[DownloadProgress], None]


class TerminalProgress:
    """A progress callback writing :meth:`DownloadProgress.describe` on one terminal line (``\\r``),
    or a new line every 10% when ``stream`` is not a terminal. Call :meth:`close` to end the line."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._width = 0
        self._step = -1
        self._last = ""
        self._folder_shown = False

    def __call__(self, report: DownloadProgress) -> None:
        if not self._folder_shown:
            self._folder_shown = True
            self._stream.write(f"Downloading {report.repo_id} ({format_bytes(report.total_bytes)}) into "
                               f"{report.folder}\n")
        self.line(report.describe(), report.fraction)

    def line(self, text: str, fraction: float | None = None) -> None:
        """Show ``text`` (the ``progress(stage, fraction)`` form the loader uses)."""
        if self._tty:
            pad = max(0, self._width - len(text))
            self._stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            step = int(fraction * 10) if fraction is not None else -1
            if step == self._step and (fraction is not None or text == self._last):
                return
            self._step, self._last = step, text
            self._stream.write(text + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._tty and self._width:
            self._stream.write("\n")
            self._stream.flush()
        self._width = 0
