"""Checkpoint weights read onto the GPU through page-locked host memory.

transformers reads each tensor from the memory-mapped file into pageable host memory and copies it to the
device from there (``core_model_loading``: ``tensor[...]`` then ``.to(device)``, 4 threads): 4.5-5.8 GB/s on
the H200 machine for a checkpoint already in the page cache, whose files read at 13.7 GB/s (run 12 of
``docs/benchmarks.md``). :func:`start_reading` reads the same files in large chunks into page-locked
buffers, several readers at once, and copies each chunk's bytes straight into the tensors it covers; its
tensors exist from the start, so the state dict can go to ``from_pretrained(state_dict=...)`` (which takes the
device tensors as the parameters without another copy) while the readers still fill it (:class:`Reading`;
:func:`read_state_dict` waits for the end). Each tensor is its own allocation, as on transformers' path, so its
alignment and the memory used are the same, except groups of tensors asked for in one buffer.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from holodesk.errors import ModelLoadError
from holodesk.policy.holotron.checkpoint import TensorEntry, safetensors_header

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

READERS = 8
"""Threads reading chunks at once (each holds one page-locked chunk): 22.9 GB/s from the page cache on the H200
machine against 14.5 GB/s with 4 (run 12d)."""
READERS_BESIDE = 2
"""Of :data:`READERS`, those that read at once while the caller has not yet waited (:meth:`Reading.wait`): a
load builds the model and the static engine beside the read, and that work's own small reads (libraries
imported on first use, compiled kernels, the tokenizer) queue on the same disk behind every large read in
flight; all :data:`READERS` read once the caller waits."""
CHUNK_BYTES = 64 << 20
"""Bytes a reader reads and copies at a time."""
DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I64": "int64", "I32": "int32",
          "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}
"""safetensors dtype names -> torch dtype names this reader handles."""


def readable(files: Sequence[Path]) -> str | None:
    """None when :func:`read_state_dict` reads every tensor of ``files``, else why not, in words (a dtype it
    does not map).

    Raises:
        ModelLoadError: a file that is not a readable safetensors file.
    """
    for f in files:
        odd = sorted({e.dtype for e in safetensors_header(f).values()} - set(DTYPES))
        if odd:
            return f"{f.name} holds tensors of dtype {', '.join(odd)}"
    return None


class Reading:
    """Checkpoint weights on their way to the device: :func:`start_reading`'s reader threads writing into
    :attr:`tensors`, which exist (allocated, shapes and dtypes final) from the start, their values complete only
    once :meth:`wait` has returned.

    Attributes:
        tensors: checkpoint key -> tensor on the device, as stored (dtype and shape of the header).
    """

    def __init__(self, tensors: dict[str, torch.Tensor],
                 jobs: list[tuple[Path, int, int, list[tuple[torch.Tensor, int, int, int]]]], device: torch.device,
                 readers: int, chunk_bytes: int, beside: int) -> None:
        self.tensors = tensors
        self._jobs = jobs[::-1]  # taken from the end: each file from its start, in order
        readers = max(1, min(readers, len(jobs)))
        self._turns = threading.Semaphore(max(1, min(beside, readers)))  # readers reading at once
        self._more = readers - max(1, min(beside, readers))  # turns given when the caller waits
        self._lock = threading.Lock()
        self._failures: list[BaseException] = []
        self._stop = False
        self._started = time.perf_counter()
        self._ended, self._ended_wall = self._started, time.time()
        self._seconds: float | None = None
        self._threads = [threading.Thread(target=self._work, args=(device, chunk_bytes), name=f"holodesk-weights-{i}",
                                          daemon=True) for i in range(readers)]
        for thread in self._threads:
            thread.start()

    def _work(self, device: torch.device, chunk_bytes: int) -> None:
        """One reader: take the next job, read it into this thread's buffer, copy its pieces, until none is left."""
        import torch  # lazy: torch (optional, heavy)

        cuda = device.type == "cuda"
        try:
            buf = torch.empty(chunk_bytes, dtype=torch.uint8, pin_memory=cuda)
            view = buf.numpy().data  # the buffer's bytes (a memoryview)
            stream = torch.cuda.Stream(device=device) if cuda else None
            while True:
                with self._turns:
                    with self._lock:
                        if not self._jobs or self._failures or self._stop:
                            break
                        path, start, size, pieces = self._jobs.pop()
                    _read(path, start, size, view)
                with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                    for dst, at, lo, hi in pieces:  # dst is contiguous: reshape is a view of its bytes
                        dst.reshape(-1).view(torch.uint8)[at:at + hi - lo].copy_(buf[lo:hi], non_blocking=cuda)
                if stream is not None:
                    stream.synchronize()  # the buffer is read again next
        except BaseException as exc:  # raised again by wait()
            with self._lock:
                self._failures.append(exc)
        finally:
            with self._lock:
                self._ended = max(self._ended, time.perf_counter())
                self._ended_wall = max(self._ended_wall, time.time())

    def done(self) -> bool:
        """Whether every reader has ended (the values complete, a failure waiting for :meth:`wait`, or the read
        stopped by :meth:`cancel`)."""
        return not any(t.is_alive() for t in self._threads)

    @property
    def ended_at(self) -> float:
        """``time.perf_counter()`` when the last reader ended (meaningful once :meth:`wait` has returned)."""
        return self._ended

    @property
    def ended_wall(self) -> float:
        """``time.time()`` when the last reader ended (meaningful once :meth:`wait` has returned)."""
        return self._ended_wall

    def _drop(self) -> None:
        """Let go of the tensors (the whole checkpoint on the device) after a failure or a stop: their values are
        not the checkpoint's, and the failure kept here would otherwise hold them as long as it lives."""
        with self._lock:
            self.tensors = {}
            self._jobs.clear()

    def _hurry(self) -> None:
        """Let every reader read at once from now on (:data:`READERS_BESIDE` until then)."""
        with self._lock:
            more, self._more = self._more, 0
        for _ in range(more):
            self._turns.release()

    def wait(self) -> float:
        """Wait for the last byte, every reader reading from now on; idempotent.

        Returns:
            seconds from the start of the reading to the end of its last reader.
        Raises:
            ModelLoadError: a file that is unreadable or shorter than its header says (or any other failure of a
                reader, e.g. out of device memory, worded as a load error), or the read stopped by :meth:`cancel`
                before its end; again at each call.
        """
        self._hurry()
        for thread in self._threads:
            thread.join()
        if self._stop and (self._jobs or not self.tensors):
            self._drop()
            raise ModelLoadError("the weights' read was stopped before its end")
        if self._failures:
            self._drop()
            exc = self._failures[0]
            if isinstance(exc, ModelLoadError):
                raise exc
            raise ModelLoadError(f"reading the weights failed: {type(exc).__name__}: {exc}") from exc
        if self._seconds is None:
            self._seconds = self._ended - self._started
        return self._seconds

    def cancel(self) -> None:
        """Stop after the pieces being read now, wait for the readers and let go of the tensors (a load that failed
        on the way; :meth:`wait` then raises)."""
        with self._lock:
            self._stop = True
        self._hurry()
        for thread in self._threads:
            thread.join()
        self._drop()


def start_reading(files: Sequence[Path], device: torch.device, *, groups: Sequence[Sequence[str]] = (),
                  readers: int = READERS, beside: int | None = None, chunk_bytes: int = CHUNK_BYTES) -> Reading:
    """Allocate every tensor of the safetensors ``files`` on ``device`` and start reading them in: returns at once,
    with the reader threads running (:class:`Reading`; its :meth:`~Reading.wait` gives the values).

    Each file's data is cut into ``chunk_bytes`` pieces, read in file order; ``readers`` threads each read a
    piece into their own host buffer (``readinto`` on the file, unbuffered) and copy the bytes of every tensor it
    covers into that tensor, waiting for the copy before reading the next piece; only ``beside`` of them
    (default :data:`READERS_BESIDE`) read at once until :meth:`Reading.wait` is called. On CUDA the buffers are
    page-locked and each reader copies on its own stream; on the CPU (tests) the same code copies between host
    tensors. Each tensor is its own allocation, as on transformers' path, except the keys of each of ``groups``:
    those are adjacent views of one allocation, in the group's order (when they are all in ``files``, 2-D, of one
    dtype and one row length; otherwise each is its own), so that a layout wanting them in one buffer needs no
    copy. The tensors are zeros until read: what runs beside the read (the static engine's build, its kernel
    checks against ``F.linear``, its warm-up) meets finite values, never the NaN that reused memory can hold.

    Raises:
        ModelLoadError: a file that is not a readable safetensors file (a tensor's byte range not its size), or
            holding a dtype outside :data:`DTYPES` (check with :func:`readable` first); the failures of reading
            itself are raised by :meth:`Reading.wait`.
    """
    import torch  # lazy: torch (optional, heavy)

    headers = {f: sorted(safetensors_header(f).items(), key=lambda kv: kv[1].begin) for f in files}
    entries = {name: e for items in headers.values() for name, e in items}
    for f, items in headers.items():
        for name, e in items:
            if e.dtype not in DTYPES:
                raise ModelLoadError(f"{f} holds {name} as {e.dtype}, which the page-locked reader does not map")
            size = math.prod(e.shape) * getattr(torch, DTYPES[e.dtype]).itemsize
            if e.end - e.begin != size:
                raise ModelLoadError(f"{f} is not a readable safetensors file: {name} ({e.dtype} {list(e.shape)}) "
                                     f"spans {e.end - e.begin} bytes, not {size}")
    tensors: dict[str, torch.Tensor] = {}
    for group in groups:
        members = [entries[k] for k in group if k in entries]
        if len(members) != len(group) or any(len(e.shape) != 2 for e in members) \
                or len({(e.dtype, e.shape[1]) for e in members}) != 1:
            continue
        rows = [e.shape[0] for e in members]
        buffer = torch.zeros(sum(rows), members[0].shape[1], dtype=getattr(torch, DTYPES[members[0].dtype]),
                             device=device)
        tensors.update(zip(group, buffer.split(rows), strict=True))
    for items in headers.values():
        for name, e in items:
            if name not in tensors:
                tensors[name] = torch.zeros(e.shape, dtype=getattr(torch, DTYPES[e.dtype]), device=device)
    jobs = [job for f, items in headers.items() for job in _chunks(f, [(tensors[n], e) for n, e in items], chunk_bytes)]
    return Reading(tensors, jobs, device, readers, chunk_bytes, READERS_BESIDE if beside is None else beside)


def read_state_dict(files: Sequence[Path], device: torch.device, *, readers: int = READERS,
                    chunk_bytes: int = CHUNK_BYTES) -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors ``files`` on ``device``, as stored (dtype and shape of the header): the
    reading of :func:`start_reading`, waited for.

    Returns:
        checkpoint key -> tensor on ``device``.
    Raises:
        ModelLoadError: as :func:`start_reading` and :meth:`Reading.wait`.
    """
    reading = start_reading(files, device, readers=readers, chunk_bytes=chunk_bytes)
    reading.wait()
    return reading.tensors


def _read(path: Path, start: int, size: int, into: memoryview) -> None:
    """Bytes ``start``..``start + size`` of ``path`` into ``into[:size]``.

    Raises:
        ModelLoadError: the file ends before them (truncated).
        OSError: the file cannot be read.
    """
    with path.open("rb", buffering=0) as fh:
        fh.seek(start)
        got = 0
        while got < size:
            n = fh.readinto(into[got:size])
            if not n:
                raise ModelLoadError(f"{path} ended at byte {start + got}; its header says {start + size}: the file "
                                     "is truncated", hint="Download the checkpoint again.")
            got += n


def _chunks(path: Path, entries: list[tuple[torch.Tensor, TensorEntry]], chunk_bytes: int
            ) -> list[tuple[Path, int, int, list[tuple[torch.Tensor, int, int, int]]]]:
    """``path``'s data as reads of at most ``chunk_bytes``: ``(path, file offset, bytes, pieces)``, each piece
    ``(tensor, byte offset in the tensor, begin, end)`` with ``begin``..``end`` the piece's bytes in the read."""
    if not entries:
        return []
    first, last = entries[0][1].begin, max(e.end for _, e in entries)
    out = []
    for start in range(first, last, chunk_bytes):
        stop = min(start + chunk_bytes, last)
        pieces = [(t, max(e.begin, start) - e.begin, max(e.begin, start) - start, min(e.end, stop) - start)
                  for t, e in entries if e.begin < stop and e.end > start]
        out.append((path, start, stop - start, pieces))
    return out
