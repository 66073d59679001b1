"""Checkpoint weights read onto the GPU through page-locked host memory.

transformers reads each tensor from the memory-mapped file into pageable host memory and copies it to the
device from there (``core_model_loading``: ``tensor[...]`` then ``.to(device)``, 4 threads): 4.5-5.8 GB/s on
the H200 machine for a checkpoint already in the page cache, whose files read at 13.7 GB/s (run 12 of
``docs/benchmarks.md``). :func:`read_state_dict` reads the same files in large chunks into page-locked
buffers, several readers at once, and copies each chunk's bytes straight into the tensors it covers; the
state dict it returns goes to ``from_pretrained(state_dict=...)``, which takes the device tensors as the
parameters without another copy. Each tensor is its own allocation, as on transformers' path, so its
alignment and the memory used are the same.
"""

from __future__ import annotations

import contextlib
import logging
import threading
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


def read_state_dict(files: Sequence[Path], device: torch.device, *, readers: int = READERS,
                    chunk_bytes: int = CHUNK_BYTES) -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors ``files`` on ``device``, as stored (dtype and shape of the header).

    Each file's data is cut into ``chunk_bytes`` pieces; ``readers`` threads each read a piece into their own
    host buffer (``readinto`` on the file, unbuffered) and copy the bytes of every tensor it covers into that
    tensor, waiting for the copy before reading the next piece. On CUDA the buffers are page-locked and each
    reader copies on its own stream; on the CPU (tests) the same code copies between host tensors.

    Returns:
        checkpoint key -> tensor on ``device``.
    Raises:
        ModelLoadError: a file that is unreadable, shorter than its header says, not a safetensors file (a
            tensor's byte range not its size), or holding a dtype outside :data:`DTYPES` (check with
            :func:`readable` first).
    """
    import torch  # lazy: torch (optional, heavy)

    tensors: dict[str, torch.Tensor] = {}
    jobs: list[tuple[Path, int, int, list[tuple[torch.Tensor, int, int, int]]]] = []
    for f in files:
        entries = sorted(safetensors_header(f).items(), key=lambda kv: kv[1].begin)
        for name, e in entries:
            if e.dtype not in DTYPES:
                raise ModelLoadError(f"{f} holds {name} as {e.dtype}, which the page-locked reader does not map")
            t = torch.empty(e.shape, dtype=getattr(torch, DTYPES[e.dtype]), device=device)
            if e.end - e.begin != t.numel() * t.element_size():
                raise ModelLoadError(f"{f} is not a readable safetensors file: {name} ({e.dtype} {list(e.shape)}) "
                                     f"spans {e.end - e.begin} bytes, not {t.numel() * t.element_size()}")
            tensors[name] = t
        jobs += _chunks(f, [(tensors[n], e) for n, e in entries], chunk_bytes)
    lock = threading.Lock()
    failures: list[BaseException] = []
    cuda = device.type == "cuda"

    def work() -> None:
        try:
            buf = torch.empty(chunk_bytes, dtype=torch.uint8, pin_memory=cuda)
            view = buf.numpy().data  # the buffer's bytes (a memoryview)
            stream = torch.cuda.Stream(device=device) if cuda else None
            while True:
                with lock:
                    if not jobs or failures:
                        break
                    path, start, size, pieces = jobs.pop()
                _read(path, start, size, view)
                with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                    for dst, at, lo, hi in pieces:  # dst is contiguous: reshape is a view of its bytes
                        dst.reshape(-1).view(torch.uint8)[at:at + hi - lo].copy_(buf[lo:hi], non_blocking=cuda)
                if stream is not None:
                    stream.synchronize()  # the buffer is read again next
        except BaseException as exc:  # raised again in the caller's thread
            with lock:
                failures.append(exc)

    threads = [threading.Thread(target=work, name=f"holodesk-weights-{i}", daemon=True)
               for i in range(max(1, min(readers, len(jobs))))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        exc = failures[0]
        if isinstance(exc, ModelLoadError):
            raise exc
        raise ModelLoadError(f"reading the weights failed: {type(exc).__name__}: {exc}") from exc
    return tensors


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
