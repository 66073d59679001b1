"""The page cache around a set of files, for the cold-start bench: flush, drop, residency, read bandwidth.

* :func:`drop` evicts the files' pages: ``/proc/sys/vm/drop_caches`` (the whole page cache; root only)
  when it can be written, and always ``posix_fadvise(POSIX_FADV_DONTNEED)`` per file (clean pages of
  that file, no root needed). Dirty pages cannot be dropped, so :func:`flush` (``fsync``) comes first.
* :func:`resident_fraction` says how much of the files is in the page cache: ``mincore(2)`` over a
  read-only shared mapping of each file (Linux; None where the call is missing or refused).
* :func:`read_seconds` reads the files through as the file-read floor (:func:`holodesk.policy.weights.read_through`:
  ``threads`` readers, one file at a time each, 64 MiB ``readinto`` calls into a reused buffer, no data kept).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import time
from collections.abc import Sequence
from pathlib import Path

from holodesk.policy.weights import READERS, read_through

DROP_CACHES = Path("/proc/sys/vm/drop_caches")
_LOW_BIT = bytes(b & 1 for b in range(256))


def flush(files: Sequence[Path]) -> None:
    """``fsync`` every file, so that its pages are clean and can be dropped."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def drop(files: Sequence[Path], *, system: bool = True) -> dict[str, str]:
    """Evict ``files`` from the page cache (module docstring); call :func:`flush` after writing them.

    Args:
        system: also try ``drop_caches`` (the whole machine's page cache, the Python libraries included);
            False drops only ``files``.
    Returns:
        ``{"method": "drop_caches + fadvise" | "fadvise", "why": ...}``: what was used, and in words why
        ``drop_caches`` was not (not root, or the write failed).
    """
    why = ""
    used_drop_caches = False
    if not system:
        why = "not asked for (--cold-start-drop files)"
    elif os.geteuid() != 0:
        why = "not root: /proc/sys/vm/drop_caches needs root"
    else:
        try:
            os.sync()
            DROP_CACHES.write_text("1\n")
            used_drop_caches = True
        except OSError as exc:
            why = f"writing {DROP_CACHES} failed: {exc}"
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return {"method": "drop_caches + fadvise" if used_drop_caches else "fadvise", "why": why}


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    return libc


def resident_fraction(files: Sequence[Path]) -> float | None:
    """Fraction of the files' pages in the page cache (0..1, by ``mincore(2)``), or None when it cannot
    be read here (no libc, the call failed)."""
    libc = _libc()
    if libc is None:
        return None
    page = mmap.PAGESIZE
    resident = total = 0
    for f in files:
        size = f.stat().st_size
        if size == 0:
            continue
        pages = -(-size // page)
        fd = os.open(f, os.O_RDONLY)
        try:
            addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr is None or addr == ctypes.c_void_p(-1).value:
                return None
            try:
                vec = (ctypes.c_ubyte * pages)()
                if libc.mincore(addr, size, vec) != 0:
                    return None
                resident += bytes(vec).translate(_LOW_BIT).count(1)  # bit 0: the page is resident
            finally:
                libc.munmap(addr, size)
        finally:
            os.close(fd)
        total += pages
    return resident / total if total else None


def read_seconds(files: Sequence[Path], threads: int = READERS) -> float:
    """Wall seconds to read every byte of ``files`` with ``threads`` readers
    (:func:`holodesk.policy.weights.read_through`).

    Raises:
        OSError: a file cannot be read, or changed while it was read.
    """
    t0 = time.perf_counter()
    read = read_through(files, threads=threads)
    seconds = time.perf_counter() - t0
    expected = sum(f.stat().st_size for f in files)
    if read != expected:
        raise OSError(f"read {read} bytes of {expected}: a file changed while it was read")
    return seconds


def filesystem(path: Path) -> str:
    """The filesystem type ``path`` lives on (the longest mount point above it in /proc/mounts, the last
    one mounted there), or "unknown"."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    target = str(path.resolve())
    best, kind = "", "unknown"
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):  # a later mount on the same point hides the earlier
            best, kind = point, parts[2]
    return kind
