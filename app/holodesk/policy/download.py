"""Download a model from the Hugging Face hub into the hub cache: planned, resumable, verified, stoppable.

huggingface_hub is the transport: :meth:`HfApi.model_info` (``files_metadata=True``) lists the files with
their sizes and hashes, :func:`huggingface_hub.file_download.http_get` streams each file (Range requests,
a server that ignores Range, transient network errors). This module owns what the library leaves to its
caller:

* the plan: which files, how many bytes are still missing, and whether the cache's disk has room for
  them, all before the first byte is fetched;
* one progress figure in bytes for the whole model (never backwards), with speed and time left;
* resume across runs: each file is written to ``blobs/<etag>.incomplete`` in the repo's cache folder and
  the next run continues it with a Range request;
* verification: a file is moved into the cache only when its sha256 (LFS files) or git blob id (small
  files) equals the hub's listing; a wrong file is deleted, never stored as complete;
* orphan partial files (other revisions, the library's own per-process temporary files) are deleted;
* a stall timeout (no byte for ``stall_timeout_s``) and a bounded retry budget;
* cancellation: the call returns within a second of ``cancel`` being set, and the partial file is left
  as a resumable prefix: the worker itself watches ``cancel`` and refuses every write from the moment it
  is set, whatever the caller's thread is doing (so a signal handler that only sets the event stops the
  download at once);
* errors: :class:`DownloadError` with ``kind`` (one of :data:`KINDS`) and ``advice`` for the user.

The cache layout is the library's (``models--owner--name/{blobs,snapshots/<commit>,refs}``), so
``snapshot_download(..., local_files_only=True)`` and transformers find the files afterwards.

API used by the UI and the CLI::

    result = download_model("owner/name", revision="main", cache_dir=None,
                            progress=on_progress, cancel=threading.Event())
    # on_progress(DownloadProgress): done_bytes, total_bytes, bytes_per_s, eta_s, file, ...;
    #   called on the caller's thread, at most every 0.25 s and once at the end
    # result: DownloadResult(folder=<snapshot folder>, commit, downloaded_bytes, reused_bytes, ...)
    # raises DownloadError (.kind, .advice); DownloadCancelled when ``cancel`` was set

Endpoint: ``endpoint`` argument, else ``HF_ENDPOINT``, else https://huggingface.co. Xet storage is never
used: every file goes through plain HTTP ``/resolve`` (the hub serves xet-backed files there too).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NoReturn, cast

from holodesk.core.units import format_bytes, format_duration
from holodesk.errors import ModelLoadError

log = logging.getLogger(__name__)

MODEL_PATTERNS = ("*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.model", "*.txt")
"""Files of a model repo that Holodesk downloads (weights, configs, tokenizer)."""

KINDS = ("not_found", "gated", "auth", "server", "offline", "disk_full", "stalled", "unstable",
         "truncated", "corrupt", "cancelled")
"""Values of :attr:`DownloadError.kind`."""

DEFAULT_STALL_TIMEOUT_S = 30.0
DEFAULT_RETRY_BUDGET = 5
DAMAGED_COPIES_TOLERATED = 1
"""Damaged copies of one file fetched again (within the retry budget); the next damaged copy ends the
download: the same wrong bytes twice come from the source (a broken mirror or proxy), not from the transfer,
and fetching gigabytes more cannot fix that."""
ORPHAN_AGE_S = 600.0
"""A partial file nobody planned and nobody wrote to for this long is deleted."""
_SPACE_MARGIN = 4 * 1024 * 1024
"""Bytes kept free on top of what the download needs (refs, symlinks, the file system's own use)."""
_TICK_S = 0.1
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
"""Files of these suffixes are weights: fetched after every other file and after the ``before_weights`` check."""
_PROGRESS_EVERY_S = 0.25
_SPEED_WINDOW_S = 5.0
_ESTIMATE_MIN_BYTES = 8 * 1024 * 1024
"""Bytes the speed window must hold before a time left is given: a window of a few small files measures
the per-file requests, not the link, and gave first estimates like "771 h left"."""
HTTP_CHUNK_BYTES = 1024 * 1024
"""Bytes ``http_get`` reads from the response before each write to the partial file (huggingface_hub's
``constants.DOWNLOAD_CHUNK_SIZE``, read at each call; its own default, 10 MiB, moved the progress figure in
10 MiB steps and kept up to 10 MiB received but not yet on disk)."""


class DownloadError(ModelLoadError):
    """A model download failed. ``str()`` is the message followed by the advice.

    Attributes:
        kind: one of :data:`KINDS`.
        advice: what the user can do (same text as ``hint``).
        repo_id: the model asked for.
        folder: the repo's cache folder (where partial files are kept).
    """

    def __init__(self, kind: str, message: str, advice: str, *, repo_id: str = "",
                 folder: Path | None = None) -> None:
        super().__init__(message, hint=advice)
        self.kind = kind
        self.advice = advice
        self.repo_id = repo_id
        self.folder = folder


class DownloadCancelled(DownloadError):
    """The download was stopped through the ``cancel`` event (kind ``"cancelled"``)."""


@dataclass(frozen=True)
class PlannedFile:
    """One file of the plan.

    Attributes:
        name: path in the repo (``"model-00001-of-00002.safetensors"``).
        size: bytes, from the hub's listing.
        sha256: hex sha256 for LFS files, None for small git files.
        blob_id: git blob id (sha1 of ``"blob <size>\\0" + content``) from the listing.
        cached: True when the snapshot already holds the file with the listed size.
        partial_bytes: bytes already in ``blobs/<etag>.incomplete`` from an earlier run.
    """

    name: str
    size: int
    sha256: str | None
    blob_id: str
    cached: bool
    partial_bytes: int

    @property
    def etag(self) -> str:
        """The blob's name in the cache (the library's convention: sha256 for LFS files, else git id)."""
        return self.sha256 or self.blob_id


@dataclass(frozen=True)
class DownloadPlan:
    """What a download will do, known before its first byte.

    Attributes:
        repo_id, revision: as asked; commit: the commit the revision points at.
        endpoint: the hub's base URL.
        repo_folder: the repo's folder in the hub cache (``.../models--owner--name``).
        files: every file to have after the download.
        total_bytes: sum of the files' sizes; missing_bytes: what still has to come over the network.
        free_bytes: free space on the cache's disk when planned.
    """

    repo_id: str
    revision: str
    commit: str
    endpoint: str
    repo_folder: Path
    files: tuple[PlannedFile, ...]
    total_bytes: int
    missing_bytes: int
    free_bytes: int

    @property
    def snapshot(self) -> Path:
        """The folder the model is loaded from once downloaded."""
        return self.repo_folder / "snapshots" / self.commit


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


@dataclass(frozen=True)
class DownloadResult:
    """A finished download.

    Attributes:
        repo_id, commit: what was downloaded.
        folder: the snapshot folder to load the model from.
        downloaded_bytes: bytes fetched by this call; reused_bytes: bytes found in the cache or in partial
            files from earlier runs.
        seconds: wall time of the call.
    """

    repo_id: str
    commit: str
    folder: Path
    downloaded_bytes: int
    reused_bytes: int
    seconds: float


ProgressCallback = Callable[[DownloadProgress], None]


# ---------------------------------------------------------------------------------------------- advice


def login_advice(repo_id: str) -> str:
    """How to give Holodesk a hub token (kept in the system keychain)."""
    return (f"Run `holodesk download {repo_id} --login` and paste a read token from "
            "https://huggingface.co/settings/tokens; Holodesk keeps it in the system keychain.")


_RESUMES = "What was downloaded so far is kept and the download resumes."
"""The end of the advice for a failure that leaves a resumable download."""


def _move_cache_advice() -> str:
    return ("or move the model cache to a disk with room: set HF_HUB_CACHE (or HF_HOME) to a folder there, "
            "or run `holodesk download MODEL --cache-dir FOLDER`")


def disk_full_error(repo_id: str, folder: Path, needed: int, free: int) -> DownloadError:
    """The error for a cache disk without room for ``needed`` bytes."""
    return DownloadError(
        "disk_full",
        f"not enough disk space to download {repo_id}: it needs {format_bytes(needed)} more in {folder}, "
        f"which has {format_bytes(free)} free",
        f"Free {format_bytes(max(0, needed - free))} on that disk, {_move_cache_advice()}. {_RESUMES}",
        repo_id=repo_id, folder=folder)


def _status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return int(status) if isinstance(status, int) else None


def classify(exc: BaseException, repo_id: str, endpoint: str, folder: Path | None, *,
             token_given: bool) -> DownloadError:
    """Turn an exception raised by huggingface_hub/httpx2/the file system into a :class:`DownloadError`
    with the advice for its kind (see :data:`KINDS`); a :class:`DownloadError` is returned as it is.

    The hub's answers are read first (:func:`_hub_refusal`), then a full disk (:func:`_disk_full`), then
    offline mode and the network (:func:`_network_failure`); anything else is a "server" error."""
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, DownloadError):
        return exc
    error = (_hub_refusal(exc, repo_id, endpoint, folder, token_given=token_given)
             or _disk_full(exc, repo_id, folder)
             or _network_failure(exc, repo_id, endpoint, folder))
    if error is not None:
        return error
    if isinstance(exc, HfHubHTTPError):
        return DownloadError("server", f"the model hub answered {_status_of(exc)} for {repo_id}: {exc}",
                             f"Try again later. {_RESUMES}", repo_id=repo_id, folder=folder)
    return DownloadError("server", f"downloading {repo_id} failed: {type(exc).__name__}: {exc}",
                         f"Try again later. {_RESUMES}", repo_id=repo_id, folder=folder)


def _hub_refusal(exc: BaseException, repo_id: str, endpoint: str, folder: Path | None, *,
                 token_given: bool) -> DownloadError | None:
    """The error for a hub answer that refuses the request: a gated repo, a missing revision, file or repo
    ("not_found"), a refused token or account ("auth": 401 with a token, 403), an overloaded or failing
    hub ("server": 5xx, 429); None for any other exception."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    page = f"{endpoint.rstrip('/')}/{repo_id}"
    status = _status_of(exc)
    if isinstance(exc, GatedRepoError):
        return DownloadError(
            "gated", f"{repo_id} is a gated model: its owners must grant you access first",
            f"Open {page}, sign in and accept its terms. {login_advice(repo_id)}",
            repo_id=repo_id, folder=folder)
    if isinstance(exc, RevisionNotFoundError):
        return DownloadError("not_found", f"{repo_id} has no revision by that name ({status})",
                             "Check the revision (branch, tag or commit) on the model page, or leave it out.",
                             repo_id=repo_id, folder=folder)
    if isinstance(exc, RemoteEntryNotFoundError):
        return DownloadError("not_found", f"a file listed for {repo_id} is missing on the hub ({status})",
                             "The repo changed while downloading; run the download again.",
                             repo_id=repo_id, folder=folder)
    if status == 401 and token_given:
        return DownloadError("auth", f"the hub refused the token for {repo_id} (401)",
                             "The token may be expired or lack read access. " + login_advice(repo_id),
                             repo_id=repo_id, folder=folder)
    if isinstance(exc, RepositoryNotFoundError) or status == 401:
        return DownloadError(
            "not_found", f"no model {repo_id} on {endpoint} (or it is private or gated: {status})",
            "Check the repo id (owner/name, exactly as on the model page). If the model is private or gated: "
            + login_advice(repo_id), repo_id=repo_id, folder=folder)
    if isinstance(exc, HfHubHTTPError) and status == 403:
        return DownloadError("auth", f"the hub refused access to {repo_id} (403)",
                             f"Check that your account has access at {page}. " + login_advice(repo_id),
                             repo_id=repo_id, folder=folder)
    if isinstance(exc, HfHubHTTPError) and status is not None and (status >= 500 or status == 429):
        return DownloadError("server", f"the model hub answered {status} for {repo_id}",
                             f"The problem is on the hub's side: try again later. {_RESUMES}",
                             repo_id=repo_id, folder=folder)
    return None


def _disk_full(exc: BaseException, repo_id: str, folder: Path | None) -> DownloadError | None:
    """The "disk_full" error for an :class:`OSError` ENOSPC/EDQUOT (with the free bytes of the disk the
    file was written to, else of ``folder``); None for any other exception."""
    if not (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)):
        return None
    where = Path(exc.filename).parent if getattr(exc, "filename", None) else folder or Path(".")
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        free = 0
    return DownloadError(
        "disk_full", f"the disk filled up while downloading {repo_id} into {where} "
        f"({format_bytes(free)} free)",
        f"Free space on that disk, {_move_cache_advice()}. {_RESUMES}", repo_id=repo_id, folder=folder)


def _network_failure(exc: BaseException, repo_id: str, endpoint: str, folder: Path | None) -> DownloadError | None:
    """The error for offline mode (``HF_HUB_OFFLINE``) or a network failure: "offline" (mode on, or the hub
    cannot be reached), "stalled" (a timeout), "unstable" (any other httpx2 transport error); None for any
    other exception."""
    import httpx2
    from huggingface_hub.errors import OfflineModeIsEnabled

    if isinstance(exc, OfflineModeIsEnabled) or os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return DownloadError("offline", f"{repo_id} cannot be downloaded: offline mode is on (HF_HUB_OFFLINE)",
                             "Unset HF_HUB_OFFLINE to download.", repo_id=repo_id, folder=folder)
    if isinstance(exc, httpx2.ConnectError | httpx2.ConnectTimeout):
        return DownloadError("offline", f"cannot reach the model hub at {endpoint} ({exc})",
                             f"Check the internet connection (and proxy settings), then try again. {_RESUMES}",
                             repo_id=repo_id, folder=folder)
    if isinstance(exc, httpx2.TimeoutException):
        return DownloadError("stalled", f"the model hub at {endpoint} stopped answering ({type(exc).__name__})",
                             f"The server or the network is stuck: try again later. {_RESUMES}",
                             repo_id=repo_id, folder=folder)
    if isinstance(exc, httpx2.TransportError):
        return DownloadError("unstable", f"the connection to {endpoint} kept failing ({type(exc).__name__}: {exc})",
                             f"Check the network and try again later. {_RESUMES}", repo_id=repo_id, folder=folder)
    return None


# ------------------------------------------------------------------------------------------ cache layout


def default_cache_dir() -> Path:
    """The hub cache folder huggingface_hub uses (``HF_HUB_CACHE``, else ``HF_HOME/hub``)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser()


def hub_endpoint(endpoint: str | None = None) -> str:
    """``endpoint``, else ``HF_ENDPOINT``, else huggingface_hub's default, without a trailing slash."""
    from huggingface_hub import constants

    return (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def repo_folder(repo_id: str, cache_dir: Path) -> Path:
    """``cache_dir/models--owner--name``."""
    from huggingface_hub.file_download import repo_folder_name

    return cache_dir / repo_folder_name(repo_id=repo_id, repo_type="model")


def _partial_path(folder: Path, etag: str) -> Path:
    return folder / "blobs" / f"{etag}.incomplete"


def _file_digest(path: Path, sha256: str | None, size: int, job: _Job | None = None, *,
                 count: bool = False) -> str:
    """sha256 of the file when the listing has one, else its git blob id (hashing counts as activity for
    the stall timeout; with ``count`` the hashed bytes are added to the job's progress); raises _Aborted
    once ``job`` is aborted."""
    h = hashlib.sha256() if sha256 else hashlib.sha1()
    if not sha256:
        h.update(f"blob {size}\0".encode())
    with path.open("rb") as f:
        while chunk := f.read(8 * 1024 * 1024):
            if job is not None:
                job.check()
                job.touch()
                if count:
                    with job.lock:
                        job.file_bytes += len(chunk)
            h.update(chunk)
    return h.hexdigest()


def _free_bytes(path: Path) -> tuple[Path, int]:
    """The nearest existing folder at or above ``path`` and its free bytes."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe, shutil.disk_usage(probe).free


def _clean_orphans(folder: Path, keep: set[str]) -> list[Path]:
    """Delete partial files in ``folder/blobs`` that no planned file continues and that nobody wrote to
    for :data:`ORPHAN_AGE_S` (killed runs of other revisions, the library's per-process temp files)."""
    removed: list[Path] = []
    blobs = folder / "blobs"
    if not blobs.is_dir():
        return removed
    now = time.time()
    for path in blobs.glob("*.incomplete"):
        if path.name in keep:
            continue
        try:
            if now - path.stat().st_mtime < ORPHAN_AGE_S:
                continue
            path.unlink()
            removed.append(path)
        except OSError:
            continue
    for path in removed:
        log.info("removed the orphan partial file %s", path)
    return removed


def _link_into_snapshot(folder: Path, commit: str, revision: str, name: str, etag: str) -> None:
    blob = folder / "blobs" / etag
    pointer = folder / "snapshots" / commit / name
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    except OSError:  # file systems without symlinks: a copy, as huggingface_hub does
        shutil.copyfile(blob, pointer)
    if revision != commit:
        refs = folder / "refs"
        refs.mkdir(parents=True, exist_ok=True)
        (refs / revision).write_text(commit)


# ------------------------------------------------------------------------------------------------ plan


def plan_download(repo_id: str, *, revision: str = "main", cache_dir: str | Path | None = None,
                  token: str | None = None, endpoint: str | None = None,
                  patterns: Sequence[str] = MODEL_PATTERNS, timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
                  ) -> DownloadPlan:
    """Ask the hub for the file list (sizes, sha256) of ``repo_id`` at ``revision`` and compare it with
    the cache; checks nothing on disk beyond sizes and reads no file.

    Raises:
        DownloadError: not_found, gated, auth, server, offline (see :func:`classify`).
    """
    from huggingface_hub import HfApi
    from huggingface_hub.utils import filter_repo_objects

    base = hub_endpoint(endpoint)
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = repo_folder(repo_id, cache)
    try:
        info = HfApi(endpoint=base).model_info(repo_id, revision=revision, files_metadata=True, token=token,
                                                timeout=timeout_s + 5.0)
    except Exception as exc:
        raise classify(exc, repo_id, base, folder, token_given=bool(token)) from exc
    commit = str(info.sha or revision)
    files: list[PlannedFile] = []
    siblings = list(filter_repo_objects(info.siblings or [], allow_patterns=list(patterns),
                                        key=lambda s: s.rfilename))
    for s in siblings:
        size = int(s.lfs.size if s.lfs else (s.size or 0))
        sha = str(s.lfs.sha256) if s.lfs else None
        blob_id = str(s.blob_id or "")
        if not sha and not blob_id:
            raise DownloadError("server", f"the hub's listing of {repo_id} gives no hash for {s.rfilename}",
                                "The file cannot be verified; try again later.", repo_id=repo_id, folder=folder)
        etag = sha or blob_id
        pointer = folder / "snapshots" / commit / s.rfilename
        cached = pointer.exists() and (folder / "blobs" / etag).exists() and pointer.stat().st_size == size
        partial = _partial_path(folder, etag)
        partial_bytes = partial.stat().st_size if partial.exists() and not cached else 0
        files.append(PlannedFile(s.rfilename, size, sha, blob_id, cached, min(partial_bytes, size)))
    _record_listing(folder, commit, info.siblings or [])
    total = sum(f.size for f in files)
    missing = sum(f.size - f.partial_bytes for f in files if not f.cached)
    _, free = _free_bytes(folder)
    return DownloadPlan(repo_id, revision, commit, base, folder, tuple(files), total, missing, free)


def _record_listing(folder: Path, commit: str, siblings: Sequence[Any]) -> None:
    """Keep the commit's file listing where huggingface_hub looks for it (``trees/<commit>.json``), so that
    ``snapshot_download(local_files_only=True)`` refuses a snapshot with files missing instead of returning
    it. Only logged when this huggingface_hub has no tree cache."""
    try:
        from huggingface_hub._tree_cache import TreeCacheEntry, write_tree_cache
    except ImportError:
        log.info("this huggingface_hub keeps no tree listing; a partly downloaded snapshot is not detected")
        return
    entries = {
        str(s.rfilename): TreeCacheEntry(size=int(s.size or 0), blob_id=str(s.blob_id or ""),
                                         lfs_sha256=str(s.lfs.sha256) if s.lfs else None,
                                         lfs_size=int(s.lfs.size) if s.lfs else None)
        for s in siblings
    }
    folder.mkdir(parents=True, exist_ok=True)
    write_tree_cache(str(folder), commit, entries)


# ------------------------------------------------------------------------------------------- the worker


class _Aborted(Exception):
    """Raised inside the worker once the caller has stopped waiting (cancel, stall)."""


class _RetryableFileError(Exception):
    """One attempt at a file failed in a way another attempt may fix."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Job:
    """State shared between the worker thread (downloads) and the caller's thread (supervises).

    ``abort`` is set by the caller's thread when it stops waiting (cancel, stall, an exception);
    ``cancel`` is the caller's own event (a Stop button, a SIGINT handler), watched by the worker too."""

    def __init__(self, cancel: threading.Event | None = None) -> None:
        self.lock = threading.Lock()
        self.abort = threading.Event()
        self.cancel = cancel if cancel is not None else threading.Event()
        self.done = threading.Event()
        self.last_activity = time.monotonic()
        self.plan: DownloadPlan | None = None
        self.base_bytes = 0  # bytes of files finished (cached, or downloaded and verified)
        self.file_bytes = 0  # bytes of the current file on disk
        self.fetched = 0  # bytes received from the network by this call
        self.file = ""
        self.file_index = 0
        self.partial: Path | None = None  # the partial file being written
        self.file_lock: Any = None  # filelock.FileLock held for that file
        self.stage = "downloading"  # or "checking" (hashing files already in the cache)
        self.restarts = 0  # attempts that failed or threw bytes away
        self.result: DownloadResult | None = None
        self.error: BaseException | None = None

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def stopped(self) -> bool:
        """True once the job is aborted or the caller's ``cancel`` is set: nothing more may be written."""
        return self.abort.is_set() or self.cancel.is_set()

    def check(self) -> None:
        """Raises _Aborted once :meth:`stopped`."""
        if self.stopped():
            raise _Aborted()

    def halt(self) -> None:
        """Stop the worker from the caller's thread: from here on it writes nothing. A partial file that
        received no byte is deleted, and the file lock is released so that a new download may start at
        once."""
        with self.lock:
            self.abort.set()
            if self.partial is not None and self.partial.exists() and self.partial.stat().st_size == 0:
                self.partial.unlink(missing_ok=True)
            if self.file_lock is not None:
                self.file_lock.release(force=True)
                self.file_lock = None


class _ProgressReporter:
    """Turns a job's counters into :class:`DownloadProgress` calls on the caller's thread: one figure in
    bytes for the whole model that never goes backwards, the speed over the last ``_SPEED_WINDOW_S``
    seconds, stretched back until the window holds ``_ESTIMATE_MIN_BYTES`` (bytes/s; 0 until 0.5 s of
    samples), and the time left (s; None while the window holds fewer than ``_ESTIMATE_MIN_BYTES``)."""

    def __init__(self, job: _Job, repo_id: str, progress: ProgressCallback | None) -> None:
        self.job = job
        self.repo_id = repo_id
        self.progress = progress
        self.samples: deque[tuple[float, int]] = deque()  # (monotonic s, bytes fetched)
        self.shown = 0
        self.last_report = 0.0

    def __call__(self, final: bool = False) -> None:
        """Report, unless there is no callback, no plan yet, or (unless ``final``) the last report is
        less than ``_PROGRESS_EVERY_S`` old."""
        now = time.monotonic()
        if self.progress is None or (not final and now - self.last_report < _PROGRESS_EVERY_S):
            return
        job = self.job
        with job.lock:
            plan = job.plan
            if plan is None:
                return
            done = job.base_bytes + job.file_bytes
            fetched, file, index, stage = job.fetched, job.file, job.file_index, job.stage
        self.last_report = now
        self.shown = max(self.shown, min(done, plan.total_bytes))  # one bar, never backwards
        samples = self.samples
        samples.append((now, fetched))
        while (len(samples) > 2 and now - samples[1][0] >= _SPEED_WINDOW_S
               and fetched - samples[1][1] >= _ESTIMATE_MIN_BYTES):
            samples.popleft()
        span, got = now - samples[0][0], fetched - samples[0][1]
        speed = got / span if span > 0.5 else 0.0
        left = plan.total_bytes - self.shown
        measured = speed > 0 and got >= _ESTIMATE_MIN_BYTES
        eta = 0.0 if left == 0 else left / speed if measured else None
        self.progress(DownloadProgress(self.repo_id, self.shown, plan.total_bytes, speed, eta, file, index,
                                       len(plan.files), plan.repo_folder, stage))


class _GuardedFile:
    """The partial file as handed to ``http_get``: counts bytes, refuses every write once the job is
    aborted or cancelled (so a cancelled download leaves a clean prefix and stops at the next chunk), and
    counts restarts from zero (a server that ignores Range) against the retry budget."""

    def __init__(self, handle: Any, job: _Job, budget: int, name: str) -> None:
        self._f = handle
        self._job = job
        self._budget = budget
        self._name = name

    def write(self, data: bytes) -> int:
        with self._job.lock:
            self._job.check()
            written = int(self._f.write(data))
            self._f.flush()
            self._job.file_bytes += written
            self._job.fetched += written
        self._job.touch()
        return written

    def tell(self) -> int:
        return int(self._f.tell())

    def seek(self, offset: int, whence: int = 0) -> int:
        self._job.check()
        return int(self._f.seek(offset, whence))

    def truncate(self, size: int | None = None) -> int:
        with self._job.lock:
            self._job.check()
            self._job.restarts += 1
            if self._job.restarts > self._budget:
                raise _RetryableFileError(
                    "unstable", f"the server dropped the connection {self._job.restarts} times while sending "
                    f"{self._name} and does not resume (it ignores Range requests)")
            new_size = int(self._f.truncate(size))
            self._job.file_bytes = new_size
        log.warning("the server ignored the Range request for %s: starting the file again", self._name)
        return new_size


def _fetch_file(job: _Job, plan: DownloadPlan, item: PlannedFile, headers: dict[str, str], budget: int) -> None:
    """Download one file into its partial file, verify it, move it into the cache (worker thread)."""
    from huggingface_hub.file_download import hf_hub_url

    folder = plan.repo_folder
    partial = _partial_path(folder, item.etag)
    partial.parent.mkdir(parents=True, exist_ok=True)
    file_lock = _lock_file(job, folder, item)
    with job.lock:
        job.partial = partial
    url = hf_hub_url(plan.repo_id, item.name, revision=plan.commit, endpoint=plan.endpoint)
    try:
        blob = folder / "blobs" / item.etag
        if blob.exists() and blob.stat().st_size == item.size:  # another download finished it meanwhile
            _link_into_snapshot(folder, plan.commit, plan.revision, item.name, item.etag)
            return
        _fetch_attempts(job, plan, item, headers, budget, url, partial)
    finally:
        file_lock.release()
        with job.lock:
            job.partial = None
            job.file_lock = None
            # nothing arrived: leave no empty file (after an abort the caller has done so, and a new
            # download may already be using the name)
            if not job.abort.is_set() and partial.exists() and partial.stat().st_size == 0:
                partial.unlink(missing_ok=True)


def _lock_file(job: _Job, folder: Path, item: PlannedFile) -> Any:
    """Take the file's download lock, the one huggingface_hub itself takes
    (``<cache>/.locks/models--owner--name/<etag>.lock``), so that two processes never append to the same
    partial file; waits (as activity, not a stall) while another download holds it. The caller's thread
    releases it when it stops the job, so a worker still blocked on the network does not keep it."""
    from filelock import FileLock, Timeout

    path = folder.parent / ".locks" / folder.name / f"{item.etag}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), thread_local=False)
    waiting = False
    while True:
        job.check()
        job.touch()
        try:
            lock.acquire(timeout=0.5)
            break
        except Timeout:
            if not waiting:
                waiting = True
                log.warning("another download of %s holds %s; waiting for it", item.name, path)
    with job.lock:
        if job.stopped():
            lock.release(force=True)
            raise _Aborted()
        job.file_lock = lock
    return lock


def _fetch_attempts(job: _Job, plan: DownloadPlan, item: PlannedFile, headers: dict[str, str], budget: int,
                    url: str, partial: Path) -> None:
    from huggingface_hub import constants
    from huggingface_hub.file_download import http_get

    constants.DOWNLOAD_CHUNK_SIZE = HTTP_CHUNK_BYTES
    folder = plan.repo_folder
    damaged = 0
    while True:
        job.check()
        partial.touch(exist_ok=True)
        have = partial.stat().st_size
        if have > item.size:  # cannot be a prefix of this file
            partial.write_bytes(b"")
            have = 0
        with job.lock:
            job.file_bytes = have
        try:
            if have < item.size:
                with partial.open("ab") as handle:
                    http_get(url, cast(BinaryIO, _GuardedFile(handle, job, budget, item.name)), resume_size=have,
                             headers=dict(headers), expected_size=item.size, displayed_filename=item.name,
                             tqdm_class=_silent_tqdm())
            job.touch()
            if partial.stat().st_size != item.size:
                raise _truncated(item, partial)
            digest = _file_digest(partial, item.sha256, item.size, job)
            if digest != item.etag:
                partial.unlink()
                with job.lock:
                    job.file_bytes = 0
                raise _RetryableFileError(
                    "corrupt", f"{item.name} arrived damaged: its {'sha256' if item.sha256 else 'git blob id'} "
                    f"is {digest[:16]}…, the hub lists {item.etag[:16]}…; the damaged copy was deleted")
            with job.lock:
                job.check()
                os.replace(partial, folder / "blobs" / item.etag)
            _link_into_snapshot(folder, plan.commit, plan.revision, item.name, item.etag)
            return
        except _RetryableFileError as exc:
            if exc.kind == "unstable":
                raise
            if exc.kind == "corrupt":
                damaged += 1
                if damaged > DAMAGED_COPIES_TOLERATED:
                    raise _RetryableFileError("corrupt", f"{exc} (the same file arrived damaged {damaged} times, so "
                                              "the source sends damaged bytes; it was not fetched again)") from exc
            _spend_retry(job, budget, exc)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) or _status_of(exc) is not None:
                if _status_of(exc) == 416:  # the server has fewer bytes than the listing says
                    _spend_retry(job, budget, _truncated(item, partial))
                    continue
                if (_status_of(exc) or 0) >= 500:
                    _spend_retry(job, budget, exc)
                    continue
                raise
            if "Consistency check failed" in str(exc):  # http_get: fewer bytes than the listed size
                _spend_retry(job, budget, _truncated(item, partial))
                continue
            raise


def _truncated(item: PlannedFile, partial: Path) -> _RetryableFileError:
    size = partial.stat().st_size if partial.exists() else 0
    return _RetryableFileError(
        "truncated", f"the server sent only {format_bytes(size)} of {item.name}, whose listed size is "
        f"{format_bytes(item.size)} ({size} of {item.size} bytes); the part that arrived was kept, not stored "
        "as complete")


def _spend_retry(job: _Job, budget: int, exc: Exception) -> None:
    """Count one failed attempt; re-raise ``exc`` once the budget is spent, else wait a little."""
    with job.lock:
        job.restarts += 1
        spent = job.restarts
    if spent > budget:
        raise exc
    delay = min(4.0, 0.5 * 2 ** (spent - 1))
    log.warning("download attempt failed (%s); retrying in %.1f s (%d of %d)", exc, delay, spent, budget)
    job.touch()
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline:
        job.check()
        job.abort.wait(min(_TICK_S, max(0.0, deadline - time.monotonic())))
    job.check()
    job.touch()


def _silent_tqdm() -> type:
    """A tqdm class that shows nothing (progress is reported by the supervisor)."""
    from tqdm.auto import tqdm

    class _Silent(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return _Silent


def _run_job(job: _Job, repo_id: str, revision: str, cache_dir: Path, token: str | None, endpoint: str,
             patterns: Sequence[str], budget: int, verify_cached: bool, stall_timeout_s: float,
             before_weights: Callable[[Path], None] | None = None) -> None:
    from huggingface_hub.utils import build_hf_headers

    started = time.monotonic()
    try:
        plan = plan_download(repo_id, revision=revision, cache_dir=cache_dir, token=token, endpoint=endpoint,
                             patterns=patterns, timeout_s=stall_timeout_s)
        job.touch()
        job.check()
        folder = plan.repo_folder
        keep = {_partial_path(folder, f.etag).name for f in plan.files if not f.cached}
        _clean_orphans(folder, keep)
        probe, free = _free_bytes(folder)
        if free < plan.missing_bytes + _SPACE_MARGIN:
            raise disk_full_error(repo_id, probe, plan.missing_bytes + _SPACE_MARGIN, free)
        # the small files first (config.json, the weight index, the tokenizer), then the weights
        files = sorted(plan.files, key=lambda f: f.name.endswith(WEIGHT_SUFFIXES))
        with job.lock:
            job.plan = plan
        if verify_cached:
            with job.lock:
                job.stage = "checking"
            files = [_reverify(job, plan, f, index) for index, f in enumerate(files, start=1)]
        with job.lock:
            job.stage = "downloading"
            job.base_bytes = sum(f.size for f in files if f.cached)
            job.file_bytes = 0
        reused = sum(f.size if f.cached else f.partial_bytes for f in files)
        headers = build_hf_headers(token=token)
        check = before_weights
        for index, item in enumerate(files, start=1):
            if check is not None and item.name.endswith(WEIGHT_SUFFIXES):
                check(plan.snapshot)
                check = None
            if item.cached:  # its snapshot link exists already (a read-only cache stays untouched)
                continue
            with job.lock:
                job.file, job.file_index = item.name, index
            _fetch_file(job, plan, item, headers, budget)
            with job.lock:
                job.base_bytes += item.size
                job.file_bytes = 0
        if check is not None:  # a repo without weight files
            check(plan.snapshot)
        with job.lock:
            job.file = ""
            if plan.revision != plan.commit:
                refs = folder / "refs"
                refs.mkdir(parents=True, exist_ok=True)
                (refs / plan.revision).write_text(plan.commit)
            job.result = DownloadResult(repo_id, plan.commit, plan.snapshot, job.fetched, reused,
                                        time.monotonic() - started)
    except BaseException as exc:  # handed to the caller's thread
        job.error = exc
    finally:
        job.done.set()


def _reverify(job: _Job, plan: DownloadPlan, item: PlannedFile, index: int) -> PlannedFile:
    """Hash a cached file again; a file that does not match the listing is deleted and planned again."""
    if not item.cached:
        return item
    with job.lock:
        job.file, job.file_index, job.file_bytes = item.name, index, 0
    job.touch()
    blob = plan.repo_folder / "blobs" / item.etag
    digest = _file_digest(blob, item.sha256, item.size, job, count=True)
    job.touch()
    with job.lock:
        job.file_bytes = 0
        if digest == item.etag:
            job.base_bytes += item.size
    if digest == item.etag:
        return item
    log.warning("the cached %s of %s does not match the hub's listing: deleted, downloading it again",
                item.name, plan.repo_id)
    blob.unlink()
    (plan.snapshot / item.name).unlink(missing_ok=True)
    return PlannedFile(item.name, item.size, item.sha256, item.blob_id, False, 0)


# --------------------------------------------------------------------------------------------- the API


def download_model(repo_id: str, *, revision: str = "main", cache_dir: str | Path | None = None,
                   progress: ProgressCallback | None = None, cancel: threading.Event | None = None,
                   token: str | None = None, endpoint: str | None = None,
                   patterns: Sequence[str] = MODEL_PATTERNS,
                   stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S, retry_budget: int = DEFAULT_RETRY_BUDGET,
                   verify_cached: bool = False, before_weights: Callable[[Path], None] | None = None,
                   ) -> DownloadResult:
    """Download ``repo_id`` at ``revision`` into the hub cache and return its snapshot folder.

    The work runs on a daemon worker thread; the calling thread supervises it: it calls ``progress`` (at
    most every 0.25 s, and once at the end), watches ``cancel`` and the stall timeout, and raises the
    worker's error. Files already in the cache with their listed size are kept (``verify_cached`` hashes
    them again and replaces those that do not match).

    Args:
        repo_id: ``owner/name``.
        revision: branch, tag or commit.
        cache_dir: hub cache folder; default huggingface_hub's (``HF_HUB_CACHE`` / ``HF_HOME/hub``).
        progress: called with a :class:`DownloadProgress` on the caller's thread.
        cancel: when set, the call raises :class:`DownloadCancelled` within ~0.1 s; the partial file stays
            a resumable prefix.
        token: hub token; None lets huggingface_hub find one (``HF_TOKEN``, its token file).
        endpoint: hub URL; default ``HF_ENDPOINT`` or https://huggingface.co.
        patterns: file patterns to download (default :data:`MODEL_PATTERNS`).
        stall_timeout_s: seconds without a byte (or any other sign of progress) before giving up.
        retry_budget: failed attempts (dropped connections that restart a file, truncated or damaged
            files, server errors while fetching) tolerated for the whole download; a file that arrives
            damaged is fetched again at most :data:`DAMAGED_COPIES_TOLERATED` times.
        verify_cached: hash the files already in the cache too (``holodesk download`` does).
        before_weights: called with the snapshot folder once every file but the weights
            (:data:`WEIGHT_SUFFIXES`) is in it, before the first weight byte is fetched; what it raises ends
            the download (e.g. :func:`holodesk.policy.native.families.check_checkpoint_before_weights`: a
            checkpoint Holodesk cannot run).
    Returns:
        :class:`DownloadResult`.
    Raises:
        DownloadCancelled: ``cancel`` was set.
        ModelLoadError: raised by ``before_weights`` (no weight was downloaded).
        DownloadError: every other failure, with ``kind`` and ``advice``.
    """
    base = hub_endpoint(endpoint)
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = repo_folder(repo_id, cache)
    job = _Job(cancel)
    worker = threading.Thread(
        target=_run_job, name=f"download {repo_id}", daemon=True,
        args=(job, repo_id, revision, cache, token, base, tuple(patterns), retry_budget, verify_cached,
              stall_timeout_s, before_weights))
    report = _ProgressReporter(job, repo_id, progress)
    worker.start()
    try:
        while not job.done.wait(_TICK_S):
            if job.cancel.is_set():
                job.halt()
                raise _cancelled(repo_id, folder)
            if time.monotonic() - job.last_activity > stall_timeout_s:
                job.halt()
                raise DownloadError(
                    "stalled", f"the model hub at {base} sent nothing for {stall_timeout_s:.0f} s while "
                    f"downloading {repo_id}",
                    "The server or the network is stuck: try again later (the download resumes where it "
                    "stopped).", repo_id=repo_id, folder=folder)
            report()
    except BaseException:
        job.abort.set()  # KeyboardInterrupt too: the worker writes nothing more
        raise
    if job.error is not None:
        _raise_worker_error(job, job.error, repo_id, base, folder, token_given=bool(token))
    report(final=True)
    assert job.result is not None
    return job.result


def _cancelled(repo_id: str, folder: Path) -> DownloadCancelled:
    """The error for a download stopped through ``cancel``; ``folder`` is the repo's cache folder."""
    return DownloadCancelled(
        "cancelled", f"the download of {repo_id} was stopped",
        "Start it again to resume where it stopped: the partial file is kept in "
        f"{folder / 'blobs'}.", repo_id=repo_id, folder=folder)


def _raise_worker_error(job: _Job, exc: BaseException, repo_id: str, endpoint: str, folder: Path, *,
                        token_given: bool) -> NoReturn:
    """Raise the error for the exception ``exc`` that ended ``job``'s worker.

    Raises:
        DownloadError: kind "unstable", "truncated" or "corrupt" once the retry budget is spent, else the
            kind :func:`classify` gives (chained to ``exc``).
        DownloadCancelled: the worker saw ``cancel`` before the caller's thread did.
    """
    if isinstance(exc, _RetryableFileError):
        advice = {
            "unstable": "The connection keeps dropping and the server cannot resume; try again later or "
                        "on another network.",
            "truncated": "The server sends less than the listed size; try again later (the part that "
                         "arrived is kept and resumed).",
            "corrupt": "The file was damaged on the way or on the server; try again later. Nothing "
                       "damaged was stored.",
        }[exc.kind]
        raise DownloadError(exc.kind, f"downloading {repo_id} failed: {exc}", advice, repo_id=repo_id,
                            folder=folder) from None
    if isinstance(exc, _Aborted):
        job.halt()
        raise _cancelled(repo_id, folder)
    if isinstance(exc, ModelLoadError):  # the before_weights check refused the checkpoint
        raise exc
    raise classify(exc, repo_id, endpoint, folder, token_given=token_given) from exc


def cached_snapshot(repo_id: str, *, revision: str = "main", cache_dir: str | Path | None = None,
                    patterns: Sequence[str] = MODEL_PATTERNS) -> Path | None:
    """The cached snapshot folder of ``repo_id`` (no network), or None when it is not complete."""
    from huggingface_hub import snapshot_download

    try:
        return Path(str(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir,
                                          allow_patterns=list(patterns), local_files_only=True)))
    except Exception:
        return None


REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""A Hugging Face repo id, ``owner/name``."""


def hub_repo(name: str, *, folder: bool = False) -> str:
    """The Hugging Face repo id ``name`` designates: a registry model's hub id for its key or served name
    (:func:`holodesk.policy.models.hub_id_for`), else ``name`` itself when it is ``owner/name``.

    Raises:
        ModelLoadError: ``name`` is neither (e.g. a mistyped short name); the hint lists the registry's
            models. ``folder``: the message also says that no such folder exists (a checkpoint source).
    """
    from holodesk.policy.models import MODELS, hub_id_for

    text = hub_id_for(name)
    if REPO_ID.match(text):
        return text
    what = "an existing folder, " if folder else ""
    raise ModelLoadError(
        f"{name!r} is neither {what}a model Holodesk lists nor a Hugging Face repo id (owner/name)",
        hint="The listed models: " + ", ".join(spec.key for spec in MODELS) + ".",
    )


def resolve_source(source: str | Path, *, progress: Callable[[str, float | None], None] | None = None,
                   download: bool = True, cancel: threading.Event | None = None,
                   before_weights: Callable[[Path, str], None] | None = None) -> Path:
    """Turn a checkpoint source (a folder, or a hub repo id) into a local folder.

    A path that exists is used as is. A model of the registry named by its key (``holo2-8b``) becomes its
    hub id (:func:`holodesk.policy.models.hub_id_for`). Otherwise ``owner/name`` is treated as a Hugging
    Face repo id and
    fetched by :func:`download_model` (safetensors, configs, tokenizer files;
    resumed, sha256-checked, ``progress("Downloading owner/name: 1.2 GB of 25.0 GB ...", fraction)``,
    stopped by ``cancel``); when the hub is unreachable, stuck or failing, a complete cached copy is used
    instead. With ``download=False`` only the cache is looked at. ``before_weights(folder, repo_id)`` runs once
    the configs are in and before any weight is fetched (:func:`download_model`'s ``before_weights``).

    Raises:
        ModelLoadError: when the path does not exist and is not a repo id, or (``download=False``) when
            the repo is not cached.
        DownloadError: (a ModelLoadError) when the download fails and no cached copy exists, or when the
            repo id, its access or the disk is the problem; its ``advice`` says what to do.
    """
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{path} is a file; give the checkpoint folder")
        return path
    text = hub_repo(str(source), folder=True)
    try:
        import huggingface_hub  # noqa: F401 - the transport of this module
    except ImportError:
        raise ModelLoadError(
            "huggingface_hub is not installed, so a repo id cannot be downloaded",
            hint="Install holodesk[local] or give a local checkpoint folder.",
        ) from None
    if not download:
        cached = cached_snapshot(text)
        if cached is None:
            from holodesk.policy.models import find_model

            spec = find_model(text)
            size = f"{format_bytes(spec.download_bytes)} of weights" if spec is not None else "its weights"
            raise ModelLoadError(
                f"checkpoint {text} is not on this machine, and it is not downloaded for a machine without a "
                f"CUDA GPU ({size} that would run far too slowly on the CPU)",
                hint=("Give a local checkpoint folder to run on the CPU anyway."
                      + no_gpu_advice(spec.display_name if spec is not None else text)).strip(),
            )
        return cached
    try:
        result = download_model(
            text,
            progress=(lambda p: progress(p.describe(), p.fraction)) if progress is not None else None,
            cancel=cancel,
            token=hub_token(),
            before_weights=(lambda folder: before_weights(folder, text)) if before_weights is not None else None,
        )
        return result.folder
    except DownloadError as exc:
        cached = cached_snapshot(text) if exc.kind in ("offline", "server", "stalled", "unstable") else None
        if cached is None:
            raise
        log.warning("%s; using the cached copy of %s", exc.message, text)
        return cached


def no_gpu_advice(model: str = "the local model") -> str:
    """A sentence for load errors on machines without an NVIDIA GPU (no ``nvidia-smi``), where ``model`` (a
    name people read, e.g. ``Holo2-8B``) cannot be used in practice and a remote server is the way; empty
    where a GPU exists."""
    if shutil.which("nvidia-smi"):
        return ""
    return (f" No NVIDIA GPU was found on this machine, and {model} needs one to run at a usable speed: "
            "use a remote server instead (Settings > Basic > Server URL, or holodesk run --endpoint URL "
            "--model NAME).")


def cache_repair_advice(folder: Path) -> str:
    """For a load failure in ``folder``: when it is a hub-cache snapshot, how to check and fetch its files
    again; else ""."""
    parts = folder.resolve().parts if folder.exists() else folder.parts
    for i, part in enumerate(parts):
        if part.startswith("models--") and i + 2 < len(parts) and parts[i + 1] == "snapshots":
            repo_id = part[len("models--"):].replace("--", "/")
            return (f"This copy of {repo_id} comes from the model cache: run `holodesk download {repo_id}` to "
                    f"check every file's sha256 and download damaged ones again, or delete {Path(*parts[:i + 1])} "
                    "and download it again.")
    return ""


# ------------------------------------------------------------------------------------ token and terminal


def hub_token(endpoint: str | None = None) -> str | None:
    """The hub token kept in the system keychain for the hub's URL (``holodesk download --login``), or None
    (then huggingface_hub looks at ``HF_TOKEN`` and its own token file). An unusable keychain is logged and
    read as "no token"."""
    from holodesk.errors import SecretStoreError
    from holodesk.secrets import load_api_key

    try:
        return load_api_key(hub_endpoint(endpoint))
    except SecretStoreError as exc:
        log.info("no hub token from the keychain: %s", exc)
        return None


def store_hub_token(token: str, endpoint: str | None = None) -> None:
    """Keep ``token`` in the system keychain for the hub's URL.

    Raises:
        SecretStoreError: when no usable keychain exists (the message says what to do).
    """
    from holodesk.secrets import store_api_key

    store_api_key(hub_endpoint(endpoint), token)


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
