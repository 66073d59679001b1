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

The list also names the model that load read (its source as given, its folder, its weight files,
:func:`holodesk.policy.weights.weight_files`). A start that loads the same source again reads those files through
the page cache from its first moment (:func:`holodesk.policy.weights.read_through`, after asking for the other
files), so that the weights' read, which otherwise begins after the imports, goes on beside them; the load then
finds most of its bytes in memory. Files whose pages are already in memory are not read again (sampled:
:func:`_resident`); nothing is read when the bytes left to read would not fit the memory available
(:data:`MEMORY_RESERVE` kept free), or when a hub model's ``main`` revision changed since (its old snapshot).

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
from holodesk.errors import ModelLoadError
from holodesk.policy.weights import read_through, weight_files

log = logging.getLogger(__name__)

MAX_BYTES = 8 << 30
"""At most this many bytes of files are kept in the list (in order): a list is a hint, and a wrong one (e.g. large
files some other part of the process opened during the load) must not cost a start more than a few seconds."""

MAX_FILE_BYTES = 2 << 30
"""A larger file is never listed: weights in a form the other rules miss, not a library or a cache entry."""

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt")
"""Files with these suffixes are never listed: weights (of this model or another), which the load reads itself."""

MEMORY_RESERVE = 4 << 30
"""Bytes of memory left available when the weights are read ahead: the process's own (CUDA, torch, the loader's
page-locked buffers) must not push the weights read ahead out of the page cache before the load reads them."""

WEIGHT_READERS = 4
"""Threads reading the weights ahead (:func:`holodesk.policy.weights.read_through`); 0: the weights are not read
ahead. Beside the imports every reader's requests queue ahead of the imports' own small reads."""

FILES_WHOLE = False
"""Whether the other files are read whole first (:func:`holodesk.policy.weights.read_through`, as many readers as
:data:`WEIGHT_READERS`, at least one), rather than asked for (``POSIX_FADV_WILLNEED``, which the kernel may cut
short for a large file and does not wait for)."""

RESIDENT_SAMPLES = 8
"""Pages sampled per weight file (evenly spaced) to tell whether it is already in the page cache."""

_RECORDINGS: list[Recording] = []
_HOOKED = False
_HOOK_LOCK = threading.Lock()
_THREAD_NAME = "holodesk-read-ahead"  # the read ahead's threads: their opens are not the load's
_SAVED = False  # a list was kept by this process (its first successful load)
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def list_path() -> Path:
    """``$XDG_STATE_HOME/holodesk/start-files.json`` (platformdirs' user state folder)."""
    import platformdirs  # lazy: only a load needs it

    return Path(platformdirs.user_state_dir("holodesk")) / "start-files.json"


def _supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "posix_fadvise")


class ReadAhead(threading.Thread):
    """The thread of :func:`read_ahead`. Files: ``advised`` asked for so far, of ``listed``, their ``bytes``. Then
    the weights (``weights``: the recorded files when this start loads the recorded source, else empty):
    ``weights_bytes`` to read (those not already in memory), ``weights_read`` so far, ``weights_skipped`` why
    none are read (None when they are, or when none were recorded for this source). :meth:`stop` ends the
    weights' read after each reader's current call."""

    def __init__(self, files: list[str], weights: list[str]) -> None:
        super().__init__(name=_THREAD_NAME, daemon=True)
        self.files = files
        self.listed = len(files)
        self.advised = 0
        self.bytes = 0
        self.weights = weights
        self.weights_bytes = 0
        self.weights_read = 0
        self.weights_skipped: str | None = None
        self._halt = threading.Event()
        self._count_lock = threading.Lock()

    def run(self) -> None:
        if FILES_WHOLE:
            self._read_files()
        else:
            self._advise_files()
        if self.weights and WEIGHT_READERS > 0:
            self._read_weights()

    def _read_files(self) -> None:
        """Read every listed file that exists whole (``advised``, ``bytes``: those read)."""
        present = []
        for name in self.files:
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.stat(name).st_mode):
                    present.append(Path(name))
        try:
            self.bytes = read_through(present, threads=max(1, WEIGHT_READERS), name=_THREAD_NAME)
            self.advised = len(present)
        except OSError as exc:  # one file went away meanwhile: the imports read what they need themselves
            log.info("the start's files were not all read ahead: %s", exc)

    def _advise_files(self) -> None:
        """Ask the kernel for every listed file that exists (``advised``, ``bytes``: those asked for)."""
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

    def _read_weights(self) -> None:
        """Read the weight files not already in memory, when they fit it (else say why in ``weights_skipped``)."""
        todo: list[Path] = []
        for name in self.weights:
            path = Path(name)
            try:
                if not _resident(path):
                    todo.append(path)
                    self.weights_bytes += path.stat().st_size
            except OSError as exc:
                self.weights_skipped = f"{name} cannot be read ({exc})"
                log.info("the weights are not read ahead: %s", self.weights_skipped)
                return
        available = _memory_available()
        if available is not None and self.weights_bytes > available - MEMORY_RESERVE:
            self.weights_skipped = (f"{format_bytes(self.weights_bytes)} to read and {format_bytes(available)} of "
                                    f"memory available ({format_bytes(MEMORY_RESERVE)} kept free): read ahead, they "
                                    "could leave the page cache before the load reads them")
            log.info("the weights are not read ahead: %s", self.weights_skipped)
            return
        if todo:
            log.info("reading ahead %s of the weights of the last start's model", format_bytes(self.weights_bytes))
        try:
            read_through(todo, threads=WEIGHT_READERS, on_read=self._count, stop=self._halt, name=_THREAD_NAME)
        except OSError as exc:  # the load reads them itself, and says so if it cannot
            self.weights_skipped = f"the read ahead failed ({exc})"
            log.info("the weights' read ahead ended: %s", self.weights_skipped)

    def _count(self, n: int) -> None:
        with self._count_lock:
            self.weights_read += n

    def stop(self) -> None:
        """End the weights' read ahead (each reader after its current call); the load reads the rest itself."""
        self._halt.set()


def _resident(path: Path) -> bool:
    """Whether ``path``'s sampled pages (:data:`RESIDENT_SAMPLES`, evenly spaced) are all in the page cache: a
    read of each that may not wait for the disk (``preadv`` with ``RWF_NOWAIT``, Linux 4.14). False when that
    cannot be told (the flag or the file system does not support it).

    Raises:
        OSError: the file cannot be opened.
    """
    flag = getattr(os, "RWF_NOWAIT", None)
    if flag is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        page = bytearray(4096)
        for k in range(RESIDENT_SAMPLES):
            offset = (size * k // RESIDENT_SAMPLES) & ~4095
            if offset >= size:
                continue
            try:
                os.preadv(fd, [page], offset, flag)
            except OSError:  # EAGAIN: on the disk; EOPNOTSUPP: cannot tell
                return False
        return True
    finally:
        os.close(fd)


def _memory_available() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None when it cannot be read)."""
    try:
        with open("/proc/meminfo", "rb") as info:
            for line in info:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _kept(path: Path) -> tuple[list[str], dict[str, Any] | None]:
    """The list at ``path``: its paths and its ``weights`` entry (``{"source", "folder", "files"}``; None when it
    has none).

    Raises:
        FileNotFoundError: there is no list.
        OSError: it cannot be read.
        ValueError: it is not ``{"files": [path, ...], "weights": {...}?}`` (JSON).
    """
    kept = json.loads(path.read_text())
    files = kept.get("files") if isinstance(kept, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ValueError("not a list of paths under 'files'")
    weights = kept.get("weights")
    if weights is not None and not (
            isinstance(weights, dict) and isinstance(weights.get("source"), str)
            and isinstance(weights.get("folder"), str) and isinstance(weights.get("files"), list)
            and all(isinstance(f, str) for f in weights["files"])):
        raise ValueError("'weights' is not {source, folder, files}")
    return files, weights


def _weights_for(weights: dict[str, Any] | None, source: str | os.PathLike[str] | None) -> list[str]:
    """The recorded weight files when ``source`` is the recorded source (compared as given) and, for a hub
    snapshot, the revision ``main`` still points at it; else none."""
    if weights is None or source is None or os.fspath(source) != weights["source"]:
        return []
    folder = Path(weights["folder"])
    if folder.parent.name == "snapshots":
        main = folder.parent.parent / "refs" / "main"
        with contextlib.suppress(OSError):
            if main.read_text().strip() != folder.name:
                log.info("the weights are not read ahead: the hub's main revision of %s changed since", source)
                return []
    return list(weights["files"])


def read_ahead(source: str | os.PathLike[str] | None = None, path: Path | None = None) -> ReadAhead | None:
    """Start reading ahead, from a daemon thread, what the list at ``path`` (default :func:`list_path`) names: the
    kernel asked for every file, in order, then the weights when ``source`` is the model the list recorded
    (:class:`ReadAhead`); returns at once.

    Returns:
        the started :class:`ReadAhead`, or None: no list (the first start), an unreadable one (logged), or not
        Linux.
    """
    if not _supported():
        return None
    path = list_path() if path is None else path
    try:
        files, weights = _kept(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("the list of files the last start read (%s) is unreadable, so this start reads without it: %s",
                    path, exc)
        return None
    thread = ReadAhead(files, _weights_for(weights, source))
    thread.start()
    log.info("reading ahead the %d files the last start read besides its weights (%s)%s", len(files), path,
             ", then its weights" if thread.weights else "")
    return thread


def describe(path: Path | None = None) -> str:
    """The list at ``path`` (default :func:`list_path`) in words, for ``holodesk doctor``: how many of its files
    exist and their size, the model whose weights are read ahead, or why a start reads without one."""
    if not _supported():
        return "not on this system: the start reads its files as it needs them (Linux only)"
    path = list_path() if path is None else path
    try:
        files, weights = _kept(path)
    except FileNotFoundError:
        return (f"none kept yet ({path}): the next start reads its libraries and caches as it needs them, slower "
                "with a cold page cache; a successful load keeps one")
    except (OSError, ValueError) as exc:
        return f"unreadable ({path}: {exc}): the next start reads without it; the next successful load replaces it"
    sizes = []
    for name in files:
        with contextlib.suppress(OSError):
            sizes.append(os.stat(name).st_size)
    text = (f"{len(sizes)} files ({format_bytes(sum(sizes))}) the last start read besides its weights are read "
            f"ahead before the next start's imports ({path})")
    if weights is not None:
        size = 0
        for name in weights["files"]:
            with contextlib.suppress(OSError):
                size += os.stat(name).st_size
        available = _memory_available()
        text += (f"; then, when the next start loads {weights['source']} again, its {len(weights['files'])} weight "
                 f"files ({format_bytes(size)}) not already in memory, beside the imports"
                 + ("" if available is None else f", if they fit the memory available (now "
                    f"{format_bytes(available)}, {format_bytes(MEMORY_RESERVE)} kept free)"))
    return text


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """The audit hook: a file opened for reading (``open``: path, mode, flags) while a recording runs, by any
    thread but the read ahead's (:class:`ReadAhead` and its weights' readers). It must never raise (an exception
    would fail the ``open`` itself)."""
    if event != "open" or not _RECORDINGS:
        return
    try:
        path, mode, flags = args
        if not isinstance(path, str) or threading.current_thread().name == _THREAD_NAME:
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

    def save(self, exclude: Path, path: Path | None = None, *, source: str | os.PathLike[str] | None = None
             ) -> list[str]:
        """Write :meth:`files` as the list at ``path`` (default :func:`list_path`), replacing the last one, at the
        process's first call only (:data:`_SAVED`); with ``source`` (the model as the load was given it, whose
        folder is ``exclude``) also its weight files (:func:`~holodesk.policy.weights.weight_files`), for the next
        start that loads it. Never raises: a failure is logged (the next start reads without a list, or with the
        last one). Returns the files written (none when nothing was)."""
        global _SAVED
        if not _supported() or _SAVED:
            return []
        path = list_path() if path is None else path
        try:
            files = self.files(exclude)
            kept: dict[str, Any] = {"files": files}
            if source is not None:
                try:
                    kept["weights"] = {"source": os.fspath(source), "folder": str(exclude),
                                       "files": [str(f) for f in weight_files(exclude)]}
                except ModelLoadError as exc:  # the next start reads its weights as the load needs them
                    log.info("the weights of %s are not listed for the next start: %s", source, exc)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(kept))
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


__all__ = ["FILES_WHOLE", "MAX_BYTES", "MAX_FILE_BYTES", "MEMORY_RESERVE", "RESIDENT_SAMPLES", "WEIGHT_READERS",
           "WEIGHT_SUFFIXES", "ReadAhead", "Recording", "describe", "list_path", "read_ahead"]
