"""Episode records on disk: one folder per task, JSON Lines plus one PNG per frame.

Layout of ``<episodes_dir>/<YYYYmmdd-HHMMSS>-<slug>/``:

* ``episode.jsonl`` — line 1 ``{"type": "start", ...}`` (task, policy, monitor, settings summary);
  one ``{"type": "step", ...}`` per step (frame file, raw model text, parsed action, thought, note,
  risk, approval decision and who made it, result, timings in ms, error if any); ``{"type": "event"}``
  for warnings; a last ``{"type": "end", ...}`` (status, reason, answer). Every line is flushed and
  fsynced as it is written, so a crash loses nothing already recorded.
* Write-ahead (F24): an approved action's step line is written *before* the action is performed, with
  ``"result": {"ok": null, "status": "unknown", ...}`` (:data:`RESULT_UNKNOWN`); a second line for the
  same step, with the real result, follows the action. A run that dies in between leaves the first
  line: the action was approved and handed to the executor, its result is unknown. When reading,
  the last line of a step number wins (:func:`load_episode`).
* Lossless text: lines are JSON with every non-ASCII character escaped (``ensure_ascii``), so any
  ``str`` — lone surrogates, NUL, bidi overrides, control characters included — is stored and
  :func:`json.loads` gives back the very same ``str``. The file itself is plain ASCII.
* ``step-000.png`` ... — the frame the model saw at each step, at full resolution. PNGs are written on
  a background thread (encoding a 1080p frame takes 0.2-0.3 s on a laptop CPU, which must not delay the
  model); every JSON line waits for the frames queued before it, so no line names a missing file.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from PIL import Image

from holodesk.core.geometry import Frame
from holodesk.errors import HolodeskError

log = logging.getLogger(__name__)

EPISODE_FILE = "episode.jsonl"
RESULT_UNKNOWN: dict[str, Any] = {
    "ok": None, "status": "unknown", "verified": None, "details": {},
    "message": "performed, result unknown: the action was approved and handed to the executor, and the run "
               "ended before its result was recorded",
}
"""The result of a step's write-ahead line (written before the action is performed)."""


def _slug(text: str, limit: int = 40) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()
    return slug[:limit].rstrip("-") or "task"


def _private(path: str, flags: int) -> int:
    """``open``'s opener for files only the user may read: created 0600 (screenshots and typed text)."""
    return os.open(path, flags, 0o600)


def save_png(frame: Frame, path: Path) -> None:
    """Write the frame's pixels as a PNG (fast compression), fsynced; a new file is created 0600."""
    img = Image.fromarray(frame.pixels, "RGB")
    with open(path, "wb", opener=_private) as fh:
        img.save(fh, format="PNG", compress_level=1)
        fh.flush()
        os.fsync(fh.fileno())


class EpisodeRecorder:
    """Writes one episode as it happens.

    Args:
        root: the episodes folder; the episode gets a new sub-folder there.
        task: the user's instruction (used in the folder name and the start record).
        meta: extra start-record fields (policy name, monitor, mode, ...). Must hold no secrets.
    The episodes folder (when it is created here) and the episode's folder are created 0700, its files
    0600: they hold screenshots of the desktop and the text typed.

    Raises:
        HolodeskError: when the folder cannot be created.
    """

    def __init__(self, root: Path, task: str, meta: dict[str, Any] | None = None) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(root) / f"{stamp}-{_slug(task)}"
        path = base
        n = 1
        while path.exists():
            n += 1
            path = Path(f"{base}-{n}")
        try:
            Path(root).mkdir(parents=True, exist_ok=True, mode=0o700)
            path.mkdir(mode=0o700)  # private: screenshots of the desktop, typed text
        except OSError as exc:
            raise HolodeskError(f"cannot create the episode folder {path}: {exc}",
                                hint="Check the data_dir setting and free disk space.") from exc
        self.path = path
        self._frames = ThreadPoolExecutor(max_workers=1, thread_name_prefix="episode-frames")
        self._pending: list[tuple[str, Future[None]]] = []
        self._fh: TextIO | None = open(path / EPISODE_FILE, "a", encoding="utf-8", opener=_private)  # noqa: SIM115
        self.write({"type": "start", "task": task, "started_at": time.time(), **(meta or {})})

    def write(self, record: dict[str, Any]) -> None:
        """Append one JSON line and make it durable (flush + fsync), after the frames queued so far are on
        disk.

        Raises:
            HolodeskError: the episode is closed, or a queued frame could not be written.
        """
        if self._fh is None:
            raise HolodeskError(f"episode {self.path} is already closed")
        self._drain()
        line = json.dumps(record, ensure_ascii=True, default=_json_default) + "\n"
        try:
            self._fh.write(line)
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            raise HolodeskError(f"cannot write the episode record {self.path / EPISODE_FILE}: {exc}",
                                hint="Check the data_dir setting and free disk space.") from exc

    def save_frame(self, step: int, frame: Frame) -> str:
        """Queue the step's frame for writing (background thread); returns the file name relative to the
        episode folder. The next :meth:`write` waits for it."""
        name = f"step-{step:03d}.png"
        self._pending.append((name, self._frames.submit(save_png, frame, self.path / name)))
        return name

    def _drain(self) -> None:
        """Wait for every queued frame; raise HolodeskError naming the first that failed."""
        pending, self._pending = self._pending, []
        failed: list[str] = []
        for name, future in pending:
            exc = future.exception()
            if exc is not None:
                failed.append(f"{name}: {exc}")
        if failed:
            raise HolodeskError(f"cannot write episode frames in {self.path}: " + "; ".join(failed),
                                hint="Check the data_dir setting and free disk space.")

    def close(self, record: dict[str, Any]) -> None:
        """Write the end record and close the file (idempotent). The file is closed even when the end
        record cannot be written.

        Raises:
            HolodeskError: the end record could not be written.
        """
        if self._fh is None:
            return
        try:
            try:
                self._drain()
            except HolodeskError as exc:  # the end record still gets written, and says what was lost
                record = {**record, "frame_error": str(exc)}
            self.write({"type": "end", "ended_at": time.time(), **record})
        finally:
            fh, self._fh = self._fh, None
            try:
                fh.close()
            except OSError as exc:
                log.warning("could not close the episode record %s: %s", self.path / EPISODE_FILE, exc)
            self._frames.shutdown(wait=True)


def _json_default(obj: object) -> object:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "value"):
        return obj.value
    return repr(obj)


@dataclass
class Episode:
    """A recorded episode read back from disk."""

    path: Path
    start: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None

    @property
    def task(self) -> str:
        return str(self.start.get("task", ""))

    @property
    def status(self) -> str:
        """Final status, or "incomplete" when the run never wrote its end record."""
        return str(self.end.get("status")) if self.end else "incomplete"

    def frame_path(self, step: dict[str, Any]) -> Path | None:
        name = step.get("frame")
        return self.path / name if name else None


def load_episode(path: Path) -> Episode:
    """Read an episode folder. A truncated last line (crash mid-write) is ignored; of several lines for
    one step (write-ahead, then the result) the last wins.

    Raises:
        HolodeskError: when the folder has no readable episode.jsonl.
    """
    file = Path(path) / EPISODE_FILE
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise HolodeskError(f"no episode record at {file}: {exc}") from exc
    records: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise HolodeskError(f"episode record {file} is corrupt at line {i + 1}") from None
    if not records or records[0].get("type") != "start":
        raise HolodeskError(f"episode record {file} has no start line")
    ep = Episode(path=Path(path), start=records[0])
    step_index: dict[object, int] = {}
    for rec in records[1:]:
        kind = rec.get("type")
        if kind == "step":
            number = rec.get("step")
            if number in step_index:  # the result line replaces the step's write-ahead line
                ep.steps[step_index[number]] = rec
            else:
                step_index[number] = len(ep.steps)
                ep.steps.append(rec)
        elif kind == "end":
            ep.end = rec
        else:
            ep.events.append(rec)
    return ep


def list_episodes(root: Path) -> list[Path]:
    """Episode folders under ``root``, newest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if (p / EPISODE_FILE).is_file()), reverse=True)


def export_episode(path: Path, target: Path) -> Path:
    """Write one episode as a zip file: its ``episode.jsonl`` and its PNG frames, under a folder named
    like the episode's. Returns ``target``.

    Raises:
        HolodeskError: ``path`` is not an episode folder, or the zip cannot be written (the partial file
            is removed).
    """
    folder = Path(path)
    if not (folder / EPISODE_FILE).is_file():
        raise HolodeskError(f"{folder} is not an episode folder (no {EPISODE_FILE})")
    target = Path(target)
    files = [folder / EPISODE_FILE, *sorted(folder.glob("*.png"))]
    try:
        with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for file in files:
                # PNGs are compressed already: store them as they are
                kind = zipfile.ZIP_DEFLATED if file.suffix == ".jsonl" else zipfile.ZIP_STORED
                zf.write(file, f"{folder.name}/{file.name}", compress_type=kind)
    except OSError as exc:
        target.unlink(missing_ok=True)
        raise HolodeskError(f"cannot write {target}: {exc}", hint="Choose another folder or free disk space.") \
            from exc
    return target


def delete_episode(path: Path, root: Path) -> None:
    """Delete one episode folder. Only a folder directly under ``root`` that holds an ``episode.jsonl`` is
    deleted, so a wrong path can never remove anything else.

    Raises:
        HolodeskError: ``path`` is not an episode of ``root``, or it cannot be deleted.
    """
    folder = Path(path).resolve()
    if folder.parent != Path(root).resolve() or not (folder / EPISODE_FILE).is_file():
        raise HolodeskError(f"{path} is not an episode folder in {root}; nothing was deleted")
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        raise HolodeskError(f"cannot delete {folder}: {exc}") from exc
