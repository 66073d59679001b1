"""The files a local model's start reads besides its weights: recorded at one start, read ahead at the next.

A start with a cold page cache (after a reboot) reads about 2 GB besides the weights: shared libraries (torch's,
CUDA's, Triton's), thousands of compiled Python modules and the compile caches (Triton's, inductor's), most of
them a small read at a time. Beside the weights' read each of those small reads waits behind it: on an H100
machine the static engine's setup took 13.1 s beside the read with those files cold and 3.2 s with them in the
page cache (docs/benchmarks.md, run 30). :func:`read_ahead` asks the kernel to read every file of the last
start's list (``posix_fadvise(POSIX_FADV_WILLNEED)``, one thread, in the list's order: mapped files first)
before the runtime's imports begin, so that they arrive at the disk's bandwidth ahead of the weights;
:class:`Recording` makes that list at the first successful load of a process (a later one finds the runtime
imported and would keep a thinner list): every regular file the process has mapped when the load ends
(``/proc/self/maps``) and every file Python opened for reading while it ran (an audit hook,
:func:`sys.addaudithook`), weights left out (the checkpoint's files, a hub cache's blobs, weight-file suffixes,
any file over :data:`MAX_FILE_BYTES`).

The list is ``$XDG_STATE_HOME/holodesk/start-files.json`` (:func:`list_path`; deleting it only makes the next
start read without it). Linux only (``/proc``, ``posix_fadvise``); elsewhere both do nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import sys
import threading
from pathlib import Path
from typing import Any

from holodesk.core.units import format_bytes

log = logging.getLogger(__name__)

MAX_BYTES = 8 << 30
"""At most this many bytes of files are kept in the list (in order): a list is a hint, and a wrong one (e.g. large
files some other part of the process opened during the load) must not cost a start more than a few seconds."""

MAX_FILE_BYTES = 2 << 30
"""A larger file is never listed: weights in a form the other rules miss, not a library or a cache entry."""

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt")
"""Files with these suffixes are never listed: weights (of this model or another), which the load reads itself."""

_RECORDINGS: list[Recording] = []
_HOOKED = False
_HOOK_LOCK = threading.Lock()
_READ_AHEAD_THREADS: set[int] = set()  # their opens are not the load's
_SAVED = False  # a list was kept by this process (its first successful load)
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


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
        _READ_AHEAD_THREADS.add(threading.get_ident())
        try:
            for path in self.files:
                try:
                    fd = os.open(path, os.O_RDONLY)
                except OSError:  # gone since it was recorded (e.g. a cache entry replaced): nothing to read
                    continue
                try:
                    size = os.fstat(fd).st_size
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
                    self.advised += 1
                    self.bytes += size
                except OSError:
                    pass
                finally:
                    os.close(fd)
        finally:
            _READ_AHEAD_THREADS.discard(threading.get_ident())


def _kept_files(path: Path) -> list[str]:
    """The paths of the list at ``path``.

    Raises:
        FileNotFoundError: there is no list.
        OSError: it cannot be read.
        ValueError: it is not ``{"files": [path, ...]}`` (JSON).
    """
    kept = json.loads(path.read_text())
    files = kept.get("files") if isinstance(kept, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ValueError("not a list of paths under 'files'")
    return files


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
        files = _kept_files(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("the list of files the last start read (%s) is unreadable, so this start reads without it: %s",
                    path, exc)
        return None
    thread = ReadAhead(files)
    thread.start()
    log.info("reading ahead the %d files the last start read besides its weights (%s)", len(files), path)
    return thread


def describe(path: Path | None = None) -> str:
    """The list at ``path`` (default :func:`list_path`) in words, for ``holodesk doctor``: how many of its files
    exist and their size, or why a start reads without one."""
    if not _supported():
        return "not on this system: the start reads its files as it needs them (Linux only)"
    path = list_path() if path is None else path
    try:
        files = _kept_files(path)
    except FileNotFoundError:
        return (f"none kept yet ({path}): the next start reads its libraries and caches as it needs them, slower "
                "with a cold page cache; a successful load keeps one")
    except (OSError, ValueError) as exc:
        return f"unreadable ({path}: {exc}): the next start reads without it; the next successful load replaces it"
    sizes = []
    for name in files:
        with contextlib.suppress(OSError):
            sizes.append(os.stat(name).st_size)
    return (f"{len(sizes)} files ({format_bytes(sum(sizes))}) the last start read besides its weights are read "
            f"ahead before the next start's imports ({path})")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """The audit hook: a file opened for reading (``open``: path, mode, flags) while a recording runs, by any
    thread but a :class:`ReadAhead`'s. It must never raise (an exception would fail the ``open`` itself)."""
    if event != "open" or not _RECORDINGS:
        return
    try:
        path, mode, flags = args
        if not isinstance(path, str) or threading.get_ident() in _READ_AHEAD_THREADS:
            return
        if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITING):
            return
        path = os.path.abspath(path)
        for recording in _RECORDINGS:
            recording.opened.append(path)
    except Exception:  # a hint lost, never an open failed
        pass


class Recording:
    """The files Python opens for reading from :meth:`__enter__` to :meth:`__exit__` (a context manager), and
    those mapped when :meth:`save` runs; :meth:`save` writes them as the next start's list. The audit hook is added
    to the process once, at the first recording (Python cannot remove one); between recordings it returns at
    once."""

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
        opened while recording, in order, each once; regular files only, and no weights: none of ``exclude`` (a
        checkpoint folder; compared by inode, so hub snapshot links and their blobs alike), none under a hub
        cache's ``blobs`` folder beside it, no :data:`WEIGHT_SUFFIXES`, nothing over :data:`MAX_FILE_BYTES`;
        at most :data:`MAX_BYTES` in all.

        Raises:
            OSError: ``exclude`` cannot be listed.
        """
        skip = set()  # the checkpoint's files, by inode
        for entry in exclude.rglob("*") if exclude.is_dir() else ():
            if entry.is_file():
                st = entry.stat()
                skip.add((st.st_dev, st.st_ino))
        roots = [str(exclude) + os.sep, os.path.realpath(exclude) + os.sep]
        if exclude.parent.name == "snapshots":  # a hub cache snapshot: <repo>/snapshots/<commit>
            roots.append(str(exclude.parent.parent / "blobs") + os.sep)
        out: list[str] = []
        seen: set[str] = set()
        total = 0
        for path in [*_mapped(), *self.opened]:
            if path in seen:
                continue
            seen.add(path)
            if path.startswith((*roots, "/dev/", "/proc/", "/sys/")) or path.endswith(WEIGHT_SUFFIXES):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in skip or st.st_size > MAX_FILE_BYTES:
                continue
            if total + st.st_size > MAX_BYTES:
                continue
            total += st.st_size
            out.append(path)
        return out

    def save(self, exclude: Path, path: Path | None = None) -> list[str]:
        """Write :meth:`files` as the list at ``path`` (default :func:`list_path`), replacing the last one, at the
        process's first call only (:data:`_SAVED`). Never raises: a failure is logged (the next start reads
        without a list, or with the last one). Returns the files written (none when nothing was)."""
        global _SAVED
        if not _supported() or _SAVED:
            return []
        path = list_path() if path is None else path
        try:
            files = self.files(exclude)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"files": files}))
            tmp.replace(path)
        except Exception as exc:  # the list is a hint: a load never fails for it
            log.warning("could not keep the list of files this start read (%s): %s: %s", path, type(exc).__name__,
                        exc)
            return []
        _SAVED = True
        return files


def _mapped() -> list[str]:
    """The files mapped into this process (``/proc/self/maps``), in the order listed, each once."""
    names: dict[str, None] = {}
    try:
        with open("/proc/self/maps", "rb") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith(b"/"):
                    names[os.fsdecode(fields[5].rstrip(b"\n"))] = None
    except OSError:
        return []
    return list(names)


__all__ = ["MAX_BYTES", "MAX_FILE_BYTES", "WEIGHT_SUFFIXES", "ReadAhead", "Recording", "describe", "list_path",
           "read_ahead"]
