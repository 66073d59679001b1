"""The files a local model's start reads besides its weights: recorded at one start, read ahead at the next.

A start with a cold page cache (after a reboot) reads about 2 GB besides the weights: shared libraries (torch's,
CUDA's, Triton's), thousands of compiled Python modules and the compile caches (Triton's, inductor's), most of
them a small read at a time. Beside the weights' read each of those small reads waits behind it: on an H100
machine the static engine's setup took 13.1 s beside the read with those files cold and 3.2 s with them in the
page cache (docs/benchmarks.md, run 30). :func:`read_ahead` asks the kernel to read every file of the last
start's list (``posix_fadvise(POSIX_FADV_WILLNEED)``, one thread, in the list's order: mapped files first)
before the imports begin, so that they arrive at the disk's bandwidth ahead of the weights; :class:`Recording`
makes that list while a load runs: every regular file the process maps (``/proc/self/maps``) or Python opens
(an audit hook, :func:`sys.addaudithook`), the checkpoint's own files left out.

The list is ``$XDG_STATE_HOME/holodesk/start-files.json`` (:func:`list_path`; deleting it only makes the next
start read without it). Linux only (``/proc``, ``posix_fadvise``); elsewhere both do nothing.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_BYTES = 8 << 30
"""At most this many bytes of files are kept in the list (the first ones, in order): a list is a hint, and a wrong
one (e.g. a large file some other part of the process opened during the load) must not cost a start more than a
few seconds of reading."""

_RECORDINGS: list[Recording] = []
_HOOKED = False
_HOOK_LOCK = threading.Lock()


def list_path() -> Path:
    """``$XDG_STATE_HOME/holodesk/start-files.json`` (platformdirs' user state folder)."""
    import platformdirs  # lazy: only a load needs it

    return Path(platformdirs.user_state_dir("holodesk")) / "start-files.json"


def _supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "posix_fadvise")


class ReadAhead(threading.Thread):
    """The thread of :func:`read_ahead`: ``advised`` files asked for so far, of ``listed``, their ``bytes``."""

    def __init__(self, files: list[str]) -> None:
        super().__init__(name="holodesk-read-ahead", daemon=True)
        self.files = files
        self.listed = len(files)
        self.advised = 0
        self.bytes = 0

    def run(self) -> None:
        for path in self.files:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:  # gone since it was recorded (e.g. a cache entry replaced): nothing to read
                continue
            try:
                self.bytes += os.fstat(fd).st_size
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                self.advised += 1
            except OSError:
                pass
            finally:
                os.close(fd)


def read_ahead(path: Path | None = None) -> ReadAhead | None:
    """Start asking the kernel to read every file of the list at ``path`` (default :func:`list_path`) into the page
    cache, in order, from a daemon thread; returns at once.

    Returns:
        the started :class:`ReadAhead`, or None: no list (the first start), an unreadable one (logged), or not
        Linux.
    """
    if not _supported():
        return None
    path = list_path() if path is None else path
    try:
        files = json.loads(path.read_text())["files"]
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise ValueError("'files' is not a list of paths")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("the list of files the last start read (%s) is unreadable, so this start reads without it: %s",
                    path, exc)
        return None
    thread = ReadAhead(files)
    thread.start()
    log.info("reading ahead the %d files the last start read besides its weights (%s)", len(files), path)
    return thread


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _RECORDINGS and args and isinstance(args[0], str):
        for recording in _RECORDINGS:
            recording.opened.append(args[0])


class Recording:
    """The files the process maps or opens from :meth:`__enter__` to :meth:`__exit__` (a context manager);
    :meth:`save` writes them as the next start's list. The audit hook is added to the process once, at the first
    recording (Python cannot remove one); between recordings it returns at once."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    def __enter__(self) -> Recording:
        global _HOOKED
        if _supported():
            with _HOOK_LOCK:
                if not _HOOKED:
                    sys.addaudithook(_audit)
                    _HOOKED = True
                _RECORDINGS.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with _HOOK_LOCK:
            if self in _RECORDINGS:
                _RECORDINGS.remove(self)

    def files(self, exclude: Path) -> list[str]:
        """The files to read ahead: those mapped now (``/proc/self/maps``: the shared libraries, first), then those
        opened while recording, in order, each once; regular files only, none of ``exclude`` (a checkpoint folder:
        the weights are read by the load itself; hub snapshot links are followed to their blobs), at most
        :data:`MAX_BYTES` in all."""
        skip = {os.path.realpath(p) for p in exclude.rglob("*") if p.is_file()} if exclude.is_dir() else set()
        roots = (str(exclude) + os.sep, os.path.realpath(exclude) + os.sep)
        out: list[str] = []
        seen: set[str] = set()
        total = 0
        for path in [*_mapped(), *self.opened]:
            if path in seen:
                continue
            seen.add(path)
            if path.startswith(roots) or path.startswith(("/dev/", "/proc/", "/sys/")):
                continue
            try:
                if not os.path.isfile(path) or os.path.realpath(path) in skip:
                    continue
                size = os.path.getsize(path)
            except OSError:
                continue
            if total + size > MAX_BYTES:
                log.info("the start's list of files to read ahead stops at %d files: %.1f GB", len(out), total / 1e9)
                break
            total += size
            out.append(path)
        return out

    def save(self, exclude: Path, path: Path | None = None) -> list[str]:
        """Write :meth:`files` as the list at ``path`` (default :func:`list_path`), replacing the last one; a failure
        to write is logged (the next start reads without a list). Returns the files written."""
        if not _supported():
            return []
        files = self.files(exclude)
        path = list_path() if path is None else path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps({"files": files}))
            tmp.replace(path)
        except OSError as exc:
            log.warning("could not keep the list of files this start read (%s): %s", path, exc)
        return files


def _mapped() -> list[str]:
    """The files mapped into this process (``/proc/self/maps``), in the order listed, each once."""
    names: dict[str, None] = {}
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith("/"):
                    names[fields[5].rstrip("\n")] = None
    except OSError:
        return []
    return list(names)


__all__ = ["MAX_BYTES", "ReadAhead", "Recording", "list_path", "read_ahead"]
