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
* errors: :class:`~holodesk.download.errors.DownloadError` with ``kind`` (one of
  :data:`~holodesk.download.errors.KINDS`) and ``advice`` for the user.

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
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NoReturn, cast

from holodesk.core.units import format_bytes
from holodesk.download.cache import (
    MODEL_PATTERNS,
    clean_orphans,
    default_cache_dir,
    free_bytes,
    link_into_snapshot,
    partial_path,
    repo_folder,
)
from holodesk.download.errors import DownloadError, cancelled_error, classify, disk_full_error, status_of
from holodesk.download.hub import DEFAULT_STALL_TIMEOUT_S, DownloadPlan, PlannedFile, hub_endpoint, plan_download
from holodesk.download.progress import DownloadProgress, ProgressCallback
from holodesk.errors import ModelLoadError

log = logging.getLogger(__name__)

DEFAULT_RETRY_BUDGET = 5


DAMAGED_COPIES_TOLERATED = 1
"""Damaged copies of one file fetched again (within the retry budget); the next damaged copy ends the
download: the same wrong bytes twice come from the source (a broken mirror or proxy), not from the transfer,
and fetching gigabytes more cannot fix that."""


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


def _fetch_file(job: _Job, plan: DownloadPlan, item: PlannedFile, headers: dict[str, str], budget: int) -> None:
    """Download one file into its partial file, verify it, move it into the cache (worker thread)."""
    # lazy: start-up time (huggingface_hub's modules load in about 0.1 s; the tray imports this module)
    from huggingface_hub.file_download import hf_hub_url

    folder = plan.repo_folder
    partial = partial_path(folder, item.etag)
    partial.parent.mkdir(parents=True, exist_ok=True)
    file_lock = _lock_file(job, folder, item)
    with job.lock:
        job.partial = partial
    url = hf_hub_url(plan.repo_id, item.name, revision=plan.commit, endpoint=plan.endpoint)
    try:
        blob = folder / "blobs" / item.etag
        if blob.exists() and blob.stat().st_size == item.size:  # another download finished it meanwhile
            link_into_snapshot(folder, plan.commit, plan.revision, item.name, item.etag)
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
    from filelock import FileLock, Timeout  # lazy: start-up time (as above; filelock about 0.04 s)

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
    from huggingface_hub import constants  # lazy: start-up time (as above)
    from huggingface_hub.file_download import http_get  # lazy: start-up time (as above)

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
            link_into_snapshot(folder, plan.commit, plan.revision, item.name, item.etag)
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
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) or status_of(exc) is not None:
                if status_of(exc) == 416:  # the server has fewer bytes than the listing says
                    _spend_retry(job, budget, _truncated(item, partial))
                    continue
                if (status_of(exc) or 0) >= 500:
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
    from tqdm.auto import tqdm  # lazy: start-up time (as above; tqdm about 0.06 s)

    class _Silent(tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return _Silent


def _run_job(job: _Job, repo_id: str, revision: str, cache_dir: Path, token: str | None, endpoint: str,
             patterns: Sequence[str], budget: int, verify_cached: bool, stall_timeout_s: float,
             before_weights: Callable[[Path], None] | None = None) -> None:
    from huggingface_hub.utils import build_hf_headers  # lazy: start-up time (as above)

    started = time.monotonic()
    try:
        plan = plan_download(repo_id, revision=revision, cache_dir=cache_dir, token=token, endpoint=endpoint,
                             patterns=patterns, timeout_s=stall_timeout_s)
        job.touch()
        job.check()
        folder = plan.repo_folder
        keep = {partial_path(folder, f.etag).name for f in plan.files if not f.cached}
        clean_orphans(folder, keep)
        probe, free = free_bytes(folder)
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
        cancel: when set, the call raises :class:`~holodesk.download.errors.DownloadCancelled` within ~0.1 s;
            the partial file stays a resumable prefix.
        token: hub token; None lets huggingface_hub find one (``HF_TOKEN``, its token file).
        endpoint: hub URL; default ``HF_ENDPOINT`` or https://huggingface.co.
        patterns: file patterns to download (default :data:`~holodesk.download.cache.MODEL_PATTERNS`).
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
                raise cancelled_error(repo_id, folder)
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


def _raise_worker_error(job: _Job, exc: BaseException, repo_id: str, endpoint: str, folder: Path, *,
                        token_given: bool) -> NoReturn:
    """Raise the error for the exception ``exc`` that ended ``job``'s worker.

    Raises:
        DownloadError: kind "unstable", "truncated" or "corrupt" once the retry budget is spent, else the
            kind :func:`~holodesk.download.errors.classify` gives (chained to ``exc``).
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
        raise cancelled_error(repo_id, folder)
    if isinstance(exc, ModelLoadError):  # the before_weights check refused the checkpoint
        raise exc
    raise classify(exc, repo_id, endpoint, folder, token_given=token_given) from exc
