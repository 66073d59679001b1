"""Where a checkpoint comes from: a local folder, or a model of the registry (:mod:`holodesk.policy.models`) or
any ``owner/name`` repo fetched by the download manager (:func:`holodesk.download.manager.download_model`), with
a complete cached copy used when the hub cannot be reached."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from holodesk.download.cache import cached_snapshot
from holodesk.download.errors import DownloadError
from holodesk.download.hub import REPO_ID, hub_token
from holodesk.download.manager import download_model
from holodesk.errors import ModelLoadError
from holodesk.policy.models import MODELS, find_model, hub_id_for

log = logging.getLogger(__name__)


def hub_repo(name: str, *, folder: bool = False) -> str:
    """The Hugging Face repo id ``name`` designates: a registry model's hub id for its key or served name
    (:func:`holodesk.policy.models.hub_id_for`), else ``name`` itself when it is ``owner/name``.

    Raises:
        ModelLoadError: ``name`` is neither (e.g. a mistyped short name); the hint lists the registry's
            models. ``folder``: the message also says that no such folder exists (a checkpoint source).
    """
    text = hub_id_for(name)
    if REPO_ID.match(text):
        return text
    what = "an existing folder, " if folder else ""
    raise ModelLoadError(
        f"{name!r} is neither {what}a model Holodesk lists nor a Hugging Face repo id (owner/name)",
        hint="The listed models: " + ", ".join(spec.key for spec in MODELS) + ".",
    )


def resolve_source(source: str | Path, *, progress: Callable[[str, float | None], None] | None = None,
                   download: bool = True, cancel: threading.Event | None = None,
                   before_weights: Callable[[Path, str], None] | None = None) -> Path:
    """Turn a checkpoint source (a folder, or a hub repo id) into a local folder.

    A path that exists is used as is. A model of the registry named by its key (``holo2-8b``) becomes its
    hub id (:func:`holodesk.policy.models.hub_id_for`). Otherwise ``owner/name`` is treated as a Hugging
    Face repo id and
    fetched by :func:`~holodesk.download.manager.download_model` (safetensors, configs, tokenizer files;
    resumed, sha256-checked, ``progress("Downloading owner/name: 1.2 GB of 25.0 GB ...", fraction)``,
    stopped by ``cancel``); when the hub is unreachable, stuck or failing, a complete cached copy is used
    instead. With ``download=False`` only the cache is looked at. ``before_weights(folder, repo_id)`` runs once
    the configs are in and before any weight is fetched (``before_weights`` of
    :func:`~holodesk.download.manager.download_model`).

    Raises:
        ModelLoadError: when the path does not exist and is not a repo id, or (``download=False``) when
            the repo is not cached.
        DownloadError: (a ModelLoadError) when the download fails and no cached copy exists, or when the
            repo id, its access or the disk is the problem; its ``advice`` says what to do.
    """
    path = Path(source).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{path} is a file; give the checkpoint folder")
        return path
    text = hub_repo(str(source), folder=True)
    try:  # lazy: huggingface_hub loads only for a download; this import also checks that it is installed
        import huggingface_hub  # noqa: F401 - the transport of this module
    except ImportError:
        raise ModelLoadError(
            "huggingface_hub is not installed, so a repo id cannot be downloaded",
            hint="Install holodesk[local] or give a local checkpoint folder.",
        ) from None
    if not download:
        cached = cached_snapshot(text)
        if cached is None:
            spec = find_model(text)
            size = f"{spec.download_bytes / 1e9:.1f} GB of weights" if spec is not None else "its weights"
            raise ModelLoadError(
                f"checkpoint {text} is not on this machine, and it is not downloaded for a machine without a "
                f"CUDA GPU ({size} that would run far too slowly on the CPU)",
                hint=("Give a local checkpoint folder to run on the CPU anyway."
                      + no_gpu_advice(spec.display_name if spec is not None else text)).strip(),
            )
        return cached
    try:
        result = download_model(
            text,
            progress=(lambda p: progress(p.describe(), p.fraction)) if progress is not None else None,
            cancel=cancel,
            token=hub_token(),
            before_weights=(lambda folder: before_weights(folder, text)) if before_weights is not None else None,
        )
        return result.folder
    except DownloadError as exc:
        cached = cached_snapshot(text) if exc.kind in ("offline", "server", "stalled", "unstable") else None
        if cached is None:
            raise
        log.warning("%s; using the cached copy of %s", exc.message, text)
        return cached


def no_gpu_advice(model: str = "the local model") -> str:
    """A sentence for load errors on machines without an NVIDIA GPU (no ``nvidia-smi``), where ``model`` (a
    name people read, e.g. ``Holo2-8B``) cannot be used in practice and a remote server is the way; empty
    where a GPU exists."""
    if shutil.which("nvidia-smi"):
        return ""
    return (f" No NVIDIA GPU was found on this machine, and {model} needs one to run at a usable speed: "
            "use a remote server instead (Settings > Basic > Server URL, or holodesk run --endpoint URL "
            "--model NAME).")
