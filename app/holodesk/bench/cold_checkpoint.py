"""The random checkpoint ``holodesk bench --cold-start`` measures (:mod:`holodesk.bench.cold_start`, part 1):
written once into a folder, reused by later runs of the same size and seed, its tokenizer swapped in place.

The cold-start child imports this module before it times its imports, so its top imports only the standard
library, the page-cache helpers and the error type; the checkpoint writers are imported when called.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from holodesk.bench import page_cache
from holodesk.errors import HolodeskError

MARKER = ".holodesk-cold-start.json"
"""Written last into a checkpoint folder this bench wrote: size, seed and every file with its size."""
FULL_BYTES_NEEDED = 25 * 2**30
"""Free disk the full-size checkpoint needs (24.5 GiB of weights, the rest small files), rounded up."""


def default_folder(tiny: bool) -> Path:
    """Where the checkpoint is written without ``--cold-start-dir``."""
    return Path(tempfile.gettempdir()) / f"holodesk-cold-start-{'tiny' if tiny else 'full'}"


def checkpoint_files(folder: Path) -> list[Path]:
    """The regular files of ``folder`` (symbolic links resolved, as in a hub cache); hidden files (such as
    :data:`MARKER` and a writer's temporary files) left out."""
    return sorted(f.resolve() for f in folder.iterdir() if not f.name.startswith(".") and f.resolve().is_file())


def _marker(folder: Path, size: str, seed: int) -> dict[str, Any]:
    return {"size": size, "seed": seed,
            "files": {f.name: f.stat().st_size for f in checkpoint_files(folder)}}


def prepare_checkpoint(folder: Path, *, tiny: bool, seed: int, device: str, tokenizer: str = "test") -> dict[str, Any]:
    """Write the random checkpoint into ``folder`` unless this bench already wrote the same one there, with the
    ``tokenizer`` ``"test"`` (the tiny test tokenizer) or ``"tekken"`` (the stand-in with Holotron's 131,072 ids,
    full size only: :func:`use_tokenizer`, which changes only the tokenizer files and the files naming token ids).

    Returns:
        ``{"folder", "size", "written" (bool), "write_s" (None when reused), "bytes", "files", "tokenizer"}``.
    Raises:
        HolodeskError: the disk has too little free space for the full-size checkpoint; ``"tekken"`` with
            ``tiny``; ``"tekken"`` without mistral-common's data file.
    """
    # lazy: the cold-start child imports this module and times its imports; it needs none of these
    from holodesk.bench.model import write_full_checkpoint
    from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint  # lazy: as above

    if tiny and tokenizer != "test":
        raise HolodeskError(f"--tokenizer {tokenizer} needs the full-size checkpoint (131,072 ids); the tiny one "
                            "has 512", hint="Leave out --tiny, or use --tokenizer test.")
    size = "tiny" if tiny else "full"
    marker = folder / MARKER
    reuse, kept = False, "test"
    if marker.exists():
        try:
            mark = json.loads(marker.read_text())
            kept = mark.pop("tokenizer", "test")
            reuse = mark == _marker(folder, size, seed)
        except (OSError, ValueError, AttributeError):
            reuse = False
    write_s = None
    if not reuse:
        kept = "test"
        marker.unlink(missing_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        # the writer replaces the folder's weight files: their space counts as free
        free = shutil.disk_usage(folder).free + sum(f.stat().st_size for f in folder.glob("model*.safetensors"))
        if not tiny and free < FULL_BYTES_NEEDED:
            raise HolodeskError(f"{folder} has {free / 2**30:.1f} GiB free; the full-size checkpoint needs "
                                f"{FULL_BYTES_NEEDED / 2**30:.0f} GiB",
                                hint="Pass --cold-start-dir on a local disk with more free space.")
        t0 = time.perf_counter()
        if tiny:
            write_tiny_checkpoint(folder, seed=seed, preprocessor=True)
        else:
            write_full_checkpoint(folder, seed=seed, device=device)
        page_cache.flush(checkpoint_files(folder))
        write_s = round(time.perf_counter() - t0, 2)
    if tokenizer != kept:
        marker.unlink(missing_ok=True)
        use_tokenizer(folder, tokenizer)
    if not reuse or tokenizer != kept:
        marker.write_text(json.dumps({**_marker(folder, size, seed), "tokenizer": tokenizer}))
    files = checkpoint_files(folder)
    return {"folder": str(folder), "size": size, "written": not reuse, "write_s": write_s,
            "bytes": sum(f.stat().st_size for f in files), "files": len(files), "tokenizer": tokenizer}


def use_tokenizer(folder: Path, tokenizer: str) -> None:
    """Give the full-size checkpoint in ``folder`` the ``tokenizer`` (``"test"`` or ``"tekken"``): its tokenizer
    files, and config.json and generation_config.json (:func:`~holodesk.bench.tiny_checkpoint.write_token_configs`)
    with that tokenizer's ids; the weights stay (the vocabulary is 131,072 rows either way). The files are flushed.

    Raises:
        HolodeskError: ``"tekken"`` without mistral-common's data file; another name.
    """
    # lazy (here and below): as in prepare_checkpoint
    from holodesk.bench.model import full_config_for
    from holodesk.bench.stand_in_tokenizer import write_tekken_tokenizer
    from holodesk.bench.tiny_checkpoint import write_token_configs, write_tokenizer
    from holodesk.policy.holotron.loader import load_tokenizer

    if tokenizer == "tekken":
        write_tekken_tokenizer(folder)
    elif tokenizer == "test":
        write_tokenizer(folder)
    else:
        raise HolodeskError(f"unknown tokenizer {tokenizer!r}", hint="Use --tokenizer test or tekken.")
    ids = load_tokenizer(folder).get_vocab()
    write_token_configs(folder, full_config_for(ids), ids)
    page_cache.flush(checkpoint_files(folder))
