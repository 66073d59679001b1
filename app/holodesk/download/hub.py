"""The model hub as the download manager asks it: its URL, the token kept for it in the keychain, and the plan
of a download (the file list with sizes and hashes, compared with the cache) before its first byte."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from holodesk.download.cache import (
    MODEL_PATTERNS,
    default_cache_dir,
    free_bytes,
    partial_path,
    record_listing,
    repo_folder,
)
from holodesk.download.errors import DownloadError, classify
from holodesk.errors import SecretStoreError

log = logging.getLogger(__name__)

DEFAULT_STALL_TIMEOUT_S = 30.0
"""Seconds without a byte (or any other sign of progress) before a download gives up; also the hub's
listing request's timeout, plus 5 s."""


REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
"""A Hugging Face repo id, ``owner/name``."""


def hub_endpoint(endpoint: str | None = None) -> str:
    """``endpoint``, else ``HF_ENDPOINT``, else huggingface_hub's default, without a trailing slash."""
    # lazy: start-up time (huggingface_hub's modules load in about 0.1 s; the tray imports this module)
    from huggingface_hub import constants

    return (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_token(endpoint: str | None = None) -> str | None:
    """The hub token kept in the system keychain for the hub's URL (``holodesk download --login``), or None
    (then huggingface_hub looks at ``HF_TOKEN`` and its own token file). An unusable keychain is logged and
    read as "no token"."""
    # lazy: the keychain (keyring) loads only when a token is needed; a local model imports this module (field case F19)
    from holodesk.secrets import load_api_key

    try:
        return load_api_key(hub_endpoint(endpoint))
    except SecretStoreError as exc:
        log.info("no hub token from the keychain: %s", exc)
        return None


def store_hub_token(token: str, endpoint: str | None = None) -> None:
    """Keep ``token`` in the system keychain for the hub's URL.

    Raises:
        SecretStoreError: when no usable keychain exists (the message says what to do).
    """
    from holodesk.secrets import store_api_key  # lazy: the keychain, as in hub_token

    store_api_key(hub_endpoint(endpoint), token)


@dataclass(frozen=True)
class PlannedFile:
    """One file of the plan.

    Attributes:
        name: path in the repo (``"model-00001-of-00002.safetensors"``).
        size: bytes, from the hub's listing.
        sha256: hex sha256 for LFS files, None for small git files.
        blob_id: git blob id (sha1 of ``"blob <size>\\0" + content``) from the listing.
        cached: True when the snapshot already holds the file with the listed size.
        partial_bytes: bytes already in ``blobs/<etag>.incomplete`` from an earlier run.
    """

    name: str
    size: int
    sha256: str | None
    blob_id: str
    cached: bool
    partial_bytes: int

    @property
    def etag(self) -> str:
        """The blob's name in the cache (the library's convention: sha256 for LFS files, else git id)."""
        return self.sha256 or self.blob_id


@dataclass(frozen=True)
class DownloadPlan:
    """What a download will do, known before its first byte.

    Attributes:
        repo_id, revision: as asked; commit: the commit the revision points at.
        endpoint: the hub's base URL.
        repo_folder: the repo's folder in the hub cache (``.../models--owner--name``).
        files: every file to have after the download.
        total_bytes: sum of the files' sizes; missing_bytes: what still has to come over the network.
        free_bytes: free space on the cache's disk when planned.
    """

    repo_id: str
    revision: str
    commit: str
    endpoint: str
    repo_folder: Path
    files: tuple[PlannedFile, ...]
    total_bytes: int
    missing_bytes: int
    free_bytes: int

    @property
    def snapshot(self) -> Path:
        """The folder the model is loaded from once downloaded."""
        return self.repo_folder / "snapshots" / self.commit


def plan_download(repo_id: str, *, revision: str = "main", cache_dir: str | Path | None = None,
                  token: str | None = None, endpoint: str | None = None,
                  patterns: Sequence[str] = MODEL_PATTERNS, timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
                  ) -> DownloadPlan:
    """Ask the hub for the file list (sizes, sha256) of ``repo_id`` at ``revision`` and compare it with
    the cache; checks nothing on disk beyond sizes and reads no file.

    Raises:
        DownloadError: not_found, gated, auth, server, offline (see :func:`~holodesk.download.errors.classify`).
    """
    from huggingface_hub import HfApi  # lazy: start-up time (as above)
    from huggingface_hub.utils import filter_repo_objects  # lazy: start-up time (as above)

    base = hub_endpoint(endpoint)
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = repo_folder(repo_id, cache)
    try:
        info = HfApi(endpoint=base).model_info(repo_id, revision=revision, files_metadata=True, token=token,
                                                timeout=timeout_s + 5.0)
    except Exception as exc:
        raise classify(exc, repo_id, base, folder, token_given=bool(token)) from exc
    commit = str(info.sha or revision)
    files: list[PlannedFile] = []
    siblings = list(filter_repo_objects(info.siblings or [], allow_patterns=list(patterns),
                                        key=lambda s: s.rfilename))
    for s in siblings:
        size = int(s.lfs.size if s.lfs else (s.size or 0))
        sha = str(s.lfs.sha256) if s.lfs else None
        blob_id = str(s.blob_id or "")
        if not sha and not blob_id:
            raise DownloadError("server", f"the hub's listing of {repo_id} gives no hash for {s.rfilename}",
                                "The file cannot be verified; try again later.", repo_id=repo_id, folder=folder)
        etag = sha or blob_id
        pointer = folder / "snapshots" / commit / s.rfilename
        cached = pointer.exists() and (folder / "blobs" / etag).exists() and pointer.stat().st_size == size
        partial = partial_path(folder, etag)
        partial_bytes = partial.stat().st_size if partial.exists() and not cached else 0
        files.append(PlannedFile(s.rfilename, size, sha, blob_id, cached, min(partial_bytes, size)))
    record_listing(folder, commit, info.siblings or [])
    total = sum(f.size for f in files)
    missing = sum(f.size - f.partial_bytes for f in files if not f.cached)
    _, free = free_bytes(folder)
    return DownloadPlan(repo_id, revision, commit, base, folder, tuple(files), total, missing, free)
