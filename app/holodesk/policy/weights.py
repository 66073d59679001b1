"""A local checkpoint's weight files: which they are (:func:`weight_files`, the loader's and the bench's one
list), and reading them through the page cache (:func:`read_through`, the bench's read floor).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from holodesk.errors import ModelLoadError

READ_CHUNK = 64 * 2**20
"""Bytes per ``readinto`` call of :func:`read_through`."""
READERS = 4
"""Threads of :func:`read_through` (one file at a time each), as the bench's read floor uses."""


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


def read_through(files: Sequence[Path], *, threads: int = READERS,
                 on_read: Callable[[int], None] | None = None) -> int:
    """Read every byte of ``files`` (:data:`READ_CHUNK` ``readinto`` calls into one reused buffer per reader,
    unbuffered; nothing is kept), ``threads`` readers, one file at a time each.
    ``on_read(bytes)`` is called after each call, from the reader's thread.

    Returns:
        bytes read.
    Raises:
        OSError: a file cannot be opened or read.
    """

    def read_one(f: Path) -> int:
        n = 0
        buf = bytearray(max(1, min(READ_CHUNK, f.stat().st_size)))
        view = memoryview(buf)
        with open(f, "rb", buffering=0) as fh:
            while got := fh.readinto(view):
                n += got
                if on_read is not None:
                    on_read(got)
        return n

    if not files:
        return 0
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(files)))) as pool:
        return sum(pool.map(read_one, files))


__all__ = ["READERS", "READ_CHUNK", "read_through", "weight_files"]
