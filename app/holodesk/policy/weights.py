"""A local checkpoint's weight files: which they are, reading them through, and reading them ahead of the load.

A start with a cold page cache first imports the model runtime (torch, transformers: CPU-bound, 7.6-8.5 s on
the H100 machine with bytecode, docs/benchmarks.md "what a start's imports cost") and then reads the weights
(disk-bound: about 24 GB for Holotron-12B in bf16). :func:`prefetching` overlaps the two: before the imports it
starts readers that read the weight files through into the page cache, so the loader, which reads the same
files (page-locked readers or transformers' memory map), then finds most of their pages cached. It reads only
files that fit in :data:`MEMORY_SHARE` of the memory the kernel reports available, in the order the index
lists them, so it cannot push the rest of the machine out of memory; what it leaves to the loader is logged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from holodesk.errors import ModelLoadError

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 2**20
"""Bytes per ``readinto`` call of :func:`read_through`."""
READERS = 4
"""Threads of :func:`read_through` (one file at a time each), as the bench's read floor uses."""
MEMORY_SHARE = 0.5
"""Share of ``MemAvailable`` (``/proc/meminfo``) that :class:`Prefetch` may fill with weight files."""


def weight_files(folder: Path) -> tuple[Path, ...]:
    """The safetensors files of a checkpoint folder: those ``model.safetensors.index.json`` maps to, in the
    order it first names them; else ``model.safetensors``; else every ``*.safetensors``, sorted.

    Raises:
        ModelLoadError: the index cannot be read, has no weight map or names missing files; no safetensors
            file at all.
    """
    index = folder / "model.safetensors.index.json"
    if index.exists():
        try:
            data = json.loads(index.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelLoadError(f"{index} could not be read: {exc}") from None
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelLoadError(f"{index} has no weight_map")
        files = tuple(folder / n for n in dict.fromkeys(str(v) for v in weight_map.values()))
        absent = [f.name for f in files if not f.exists()]
        if absent:
            raise ModelLoadError(
                f"{len(absent)} weight file(s) listed in {index.name} are missing: {', '.join(absent[:5])}",
                hint="The download may be incomplete; fetch the checkpoint again.",
            )
        return files
    single = folder / "model.safetensors"
    if single.exists():
        return (single,)
    found = tuple(sorted(folder.glob("*.safetensors")))
    if found:
        return found
    raise ModelLoadError(
        f"no .safetensors weights in {folder}",
        hint="Holodesk loads safetensors checkpoints only (no .bin / pickle files).",
    )


def read_through(files: Sequence[Path], *, threads: int = READERS, stop: threading.Event | None = None,
                 on_read: Callable[[int], None] | None = None) -> int:
    """Read every byte of ``files`` (:data:`READ_CHUNK` ``readinto`` calls into one reused buffer per reader,
    unbuffered; nothing is kept), ``threads`` readers, one file at a time each; stop early once ``stop`` is set.
    ``on_read(bytes)`` is called after each call, from the reader's thread.

    Returns:
        bytes read.
    Raises:
        OSError: a file cannot be opened or read.
    """

    def read_one(f: Path) -> int:
        n = 0
        if stop is not None and stop.is_set():
            return n
        buf = bytearray(max(1, min(READ_CHUNK, f.stat().st_size)))
        view = memoryview(buf)
        with open(f, "rb", buffering=0) as fh:
            while got := fh.readinto(view):
                n += got
                if on_read is not None:
                    on_read(got)
                if stop is not None and stop.is_set():
                    break
        return n

    if not files:
        return 0
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(files)))) as pool:
        return sum(pool.map(read_one, files))


def available_memory() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes, or None where it cannot be read (not Linux)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class Prefetch:
    """Background readers that read ``files`` into the page cache (:func:`read_through`), started at once.

    Args:
        files: the weight files, in the order the loader reads them.
        budget: bytes it may read: the files are taken in order while their total stays within it; the rest
            is left to the loader (None: no bound).
    Attributes:
        files: the files it reads; left: the files it leaves to the loader; planned_bytes: their size;
            seconds: wall seconds of the reading (None while it runs); error: why the reading stopped, in
            words, or "".
    """

    def __init__(self, files: Sequence[Path], *, budget: int | None) -> None:
        sizes = [(f, f.stat().st_size) for f in files]
        taken: list[Path] = []
        total = 0
        for f, size in sizes:
            if budget is not None and total + size > budget:
                break
            taken.append(f)
            total += size
        self.files = tuple(taken)
        self.left = tuple(f for f, _ in sizes[len(taken):])
        self.planned_bytes = total
        self.seconds: float | None = None
        self.error = ""
        self._so_far = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="holodesk-weights-prefetch", daemon=True)
        self._thread.start()

    def _count(self, n: int) -> None:
        with self._lock:
            self._so_far += n

    def bytes_so_far(self) -> int:
        """Bytes the readers have read until now."""
        with self._lock:
            return self._so_far

    def _run(self) -> None:
        try:
            read_through(self.files, stop=self._stop, on_read=self._count)
        except OSError as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        self.seconds = time.perf_counter() - self._started

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the readers to stop after their current chunk and wait for them (at most ``timeout`` s)."""
        self._stop.set()
        self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the readers to finish (at most ``timeout`` s); returns whether they have."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def describe(self) -> str:
        """What it read, in words (for the log and the cold-start bench)."""
        gb = 1e9
        done = "still reading" if self.seconds is None else f"{self.bytes_so_far() / gb:.2f} GB in {self.seconds:.2f} s"
        words = f"read ahead {len(self.files)} weight file(s), {self.planned_bytes / gb:.2f} GB: {done}"
        if self.left:
            words += (f"; {len(self.left)} file(s) left to the load (beyond {MEMORY_SHARE:.0%} of the memory "
                      "available at start)")
        if self.error:
            words += f"; stopped: {self.error}"
        return words


def local_folder(source: str | Path) -> Path | None:
    """The folder ``source`` (a checkpoint folder, a registry key or a hub repo id) already is on this machine,
    without any network: the folder itself, or the complete cached snapshot; None otherwise."""
    # lazy: source.py loads the download stack (huggingface_hub), needed by the load that follows anyway
    from holodesk.policy.source import resolve_source

    try:
        return resolve_source(source, download=False)
    except ModelLoadError:
        return None


@contextlib.contextmanager
def prefetching(source: str | Path) -> Iterator[Prefetch | None]:
    """Read the weights of ``source`` ahead (:class:`Prefetch`, within :data:`MEMORY_SHARE` of the available
    memory) while the body runs, when it is on this machine already (:func:`local_folder`; a download puts
    the files in the page cache itself); the readers are stopped when the body ends, and what they read is
    logged. Yields the :class:`Prefetch`, or None when nothing is read ahead (the reason is logged)."""
    folder = local_folder(source)
    if folder is None:
        log.info("weights read ahead: no (%s is not on this machine yet)", source)
        yield None
        return
    try:
        files = weight_files(folder)
    except ModelLoadError as exc:  # the load names the problem itself
        log.info("weights read ahead: no (%s)", exc.message)
        yield None
        return
    available = available_memory()
    try:
        prefetch = Prefetch(files, budget=None if available is None else int(available * MEMORY_SHARE))
    except OSError as exc:  # a file went away: the load names the problem itself
        log.info("weights read ahead: no (%s)", exc)
        yield None
        return
    try:
        yield prefetch
    finally:
        prefetch.stop()
        log.info("weights of %s: %s", folder, prefetch.describe())


__all__ = ["MEMORY_SHARE", "READERS", "READ_CHUNK", "Prefetch", "available_memory", "local_folder", "prefetching",
           "read_through", "weight_files"]
