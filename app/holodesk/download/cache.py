"""The hub cache as huggingface_hub lays it out (``models--owner--name/{blobs,snapshots/<commit>,refs,trees}``):
where a repo's files, partial files and listing live, what is already there, and how a file is linked into a
snapshot, so that ``snapshot_download(..., local_files_only=True)`` and transformers find the files."""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MODEL_PATTERNS = ("*.json", "*.safetensors", "*.jinja", "tokenizer*", "*.model", "*.txt")
"""Files of a model repo that Holodesk downloads (weights, configs, tokenizer)."""


ORPHAN_AGE_S = 600.0
"""A partial file nobody planned and nobody wrote to for this long is deleted."""


def default_cache_dir() -> Path:
    """The hub cache folder huggingface_hub uses (``HF_HUB_CACHE``, else ``HF_HOME/hub``)."""
    # lazy: start-up time (huggingface_hub's modules load in about 0.1 s; the tray imports this module)
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser()


def repo_folder(repo_id: str, cache_dir: Path) -> Path:
    """``cache_dir/models--owner--name``."""
    from huggingface_hub.file_download import repo_folder_name  # lazy: start-up time (as above)

    return cache_dir / repo_folder_name(repo_id=repo_id, repo_type="model")


def partial_path(folder: Path, etag: str) -> Path:
    return folder / "blobs" / f"{etag}.incomplete"


def free_bytes(path: Path) -> tuple[Path, int]:
    """The nearest existing folder at or above ``path`` and its free bytes."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe, shutil.disk_usage(probe).free


def clean_orphans(folder: Path, keep: set[str]) -> list[Path]:
    """Delete partial files in ``folder/blobs`` that no planned file continues and that nobody wrote to
    for :data:`ORPHAN_AGE_S` (killed runs of other revisions, the library's per-process temp files)."""
    removed: list[Path] = []
    blobs = folder / "blobs"
    if not blobs.is_dir():
        return removed
    now = time.time()
    for path in blobs.glob("*.incomplete"):
        if path.name in keep:
            continue
        try:
            if now - path.stat().st_mtime < ORPHAN_AGE_S:
                continue
            path.unlink()
            removed.append(path)
        except OSError:
            continue
    for path in removed:
        log.info("removed the orphan partial file %s", path)
    return removed


def link_into_snapshot(folder: Path, commit: str, revision: str, name: str, etag: str) -> None:
    blob = folder / "blobs" / etag
    pointer = folder / "snapshots" / commit / name
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    except OSError:  # file systems without symlinks: a copy, as huggingface_hub does
        shutil.copyfile(blob, pointer)
    if revision != commit:
        refs = folder / "refs"
        refs.mkdir(parents=True, exist_ok=True)
        (refs / revision).write_text(commit)


def record_listing(folder: Path, commit: str, siblings: Sequence[Any]) -> None:
    """Keep the commit's file listing where huggingface_hub looks for it (``trees/<commit>.json``), so that
    ``snapshot_download(local_files_only=True)`` refuses a snapshot with files missing instead of returning
    it. Only logged when this huggingface_hub has no tree cache."""
    try:
        from huggingface_hub._tree_cache import TreeCacheEntry, write_tree_cache  # lazy: start-up time (as above)
    except ImportError:
        log.info("this huggingface_hub keeps no tree listing; a partly downloaded snapshot is not detected")
        return
    entries = {
        str(s.rfilename): TreeCacheEntry(size=int(s.size or 0), blob_id=str(s.blob_id or ""),
                                         lfs_sha256=str(s.lfs.sha256) if s.lfs else None,
                                         lfs_size=int(s.lfs.size) if s.lfs else None)
        for s in siblings
    }
    folder.mkdir(parents=True, exist_ok=True)
    write_tree_cache(str(folder), commit, entries)


def cached_snapshot(repo_id: str, *, revision: str = "main", cache_dir: str | Path | None = None,
                    patterns: Sequence[str] = MODEL_PATTERNS) -> Path | None:
    """The cached snapshot folder of ``repo_id`` (no network), or None when it is not complete."""
    from huggingface_hub import snapshot_download  # lazy: start-up time (as above)

    try:
        return Path(str(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir,
                                          allow_patterns=list(patterns), local_files_only=True)))
    except Exception:
        return None


def cache_repair_advice(folder: Path) -> str:
    """For a load failure in ``folder``: when it is a hub-cache snapshot, how to check and fetch its files
    again; else ""."""
    parts = folder.resolve().parts if folder.exists() else folder.parts
    for i, part in enumerate(parts):
        if part.startswith("models--") and i + 2 < len(parts) and parts[i + 1] == "snapshots":
            repo_id = part[len("models--"):].replace("--", "/")
            return (f"This copy of {repo_id} comes from the model cache: run `holodesk download {repo_id}` to "
                    f"check every file's sha256 and download damaged ones again, or delete {Path(*parts[:i + 1])} "
                    "and download it again.")
    return ""
