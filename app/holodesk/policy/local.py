"""The local policy for a checkpoint: the one place that decides which runtime loads it.

:func:`load_local_policy` reads the checkpoint's ``config.json`` and dispatches by its family
(:func:`holodesk.policy.native.families.family_of`): Holotron-12B to
:class:`~holodesk.policy.holotron.HolotronPolicy` (Holodesk's static decoder), Holo2, Holo3 / Holo3.1 and
Holotron-3-Nano to :class:`~holodesk.policy.native.NativePolicy` (transformers' own classes), anything else
to a :class:`~holodesk.errors.ModelLoadError` naming what is supported.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from typing_extensions import Unpack

from holodesk.errors import ModelLoadError
from holodesk.policy.native.families import check_checkpoint_before_weights, read_family
from holodesk.policy.source import resolve_source
from holodesk.policy.start_files import Recording, read_ahead

if TYPE_CHECKING:
    from holodesk.policy.base import Policy
    from holodesk.policy.generation import GenerationOptions
    from holodesk.policy.local_core import CheckpointLoading


def load_local_policy(
    source: str | Path,
    options: GenerationOptions | None = None,
    *,
    quantization: str | None = None,
    decoder: str = "static",
    **loading: Unpack[CheckpointLoading],
) -> Policy:
    """Load ``source`` (a checkpoint folder or a hub repo id) with the runtime of its family.

    Before the runtime is imported the files the last start read besides its weights are read ahead, and the files
    the process's first successful load reads are recorded for the next start (:mod:`holodesk.policy.start_files`;
    a failed load records nothing).

    Args:
        source: checkpoint folder, or ``owner/name`` on the hub (downloaded only with a CUDA GPU).
        options: how replies are generated (:class:`~holodesk.policy.generation.GenerationOptions`), passed
            unchanged to the policy; None: its defaults.
        quantization: None, ``"8bit"`` or ``"4bit"``: Holotron-12B only (bitsandbytes).
        decoder: ``"static"`` or ``"stock"``: Holotron-12B's decoder (the native families always use
            transformers' ``generate`` with a static cache).
        loading: dtype, device, progress, attn_implementation, cancel
            (:class:`~holodesk.policy.local_core.CheckpointLoading`): how the weights are loaded (both runtimes'
            loaders); progress and cancel reach the download too.
    Raises:
        ModelLoadError: the local model runtime (PyTorch, transformers) is not installed
            (:func:`require_runtime`), an unsupported or unreadable checkpoint (the message lists the supported
            families), quantization asked for a native family, or the chosen runtime's load errors.
    """
    read_ahead()  # before the imports: the files the last start read besides its weights (start_files)
    with Recording() as recording:
        policy, folder = _load(source, options, quantization=quantization, decoder=decoder, **loading)
    recording.save(exclude=folder)
    return policy


def _load(source: str | Path, options: GenerationOptions | None, *, quantization: str | None, decoder: str,
          **loading: Unpack[CheckpointLoading]) -> tuple[Policy, Path]:
    """:func:`load_local_policy`'s load (same arguments): the policy and the checkpoint folder."""
    require_runtime()
    device, progress, cancel = loading.get("device"), loading.get("progress"), loading.get("cancel")
    if device is None:
        import torch  # lazy: torch (optional, heavy)

        on_gpu = torch.cuda.is_available()
    else:
        on_gpu = str(device).startswith("cuda")
    folder = resolve_source(source, progress=progress, download=on_gpu, cancel=cancel,
                            before_weights=check_checkpoint_before_weights)
    family = read_family(folder)
    if family.runtime == "holotron":
        # lazy: the Holotron runtime imports torch (optional, heavy)
        from holodesk.policy.holotron import HolotronPolicy

        return HolotronPolicy.load(folder, options, quantization=quantization, decoder=decoder, **loading), folder
    if quantization is not None:
        raise ModelLoadError(f"{quantization} weights are offered for Holotron-12B only, not for {family.models}",
                             hint="Choose bf16 precision for this model.")
    from holodesk.policy.native import NativePolicy  # lazy: the native runtime imports torch and transformers

    return NativePolicy.load(folder, options, **loading), folder


def runtime_missing() -> str | None:
    """Why the local model's runtime (torch and transformers, the ``local`` extra) cannot be imported, or
    None when it can."""
    try:  # lazy (here and below): the probe of the optional runtime; importing it is the check
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def require_runtime() -> None:
    """Check that the local model's runtime can be imported (:func:`runtime_missing`).

    Raises:
        ModelLoadError: it cannot; the message names the missing module and the hint says what to do (a
            server or a replay file in the setup wizard, or the install that brings the runtime).
    """
    missing = runtime_missing()
    if missing is not None:
        raise ModelLoadError(
            f"the local model cannot run here: the local runtime is not installed ({missing})",
            hint="Use a server or a replay file instead (the setup wizard: `holodesk`, then Setup wizard...; or "
            "`holodesk run TASK --endpoint URL --model NAME`); with an NVIDIA GPU, install the runtime: "
            "pip install 'holodesk[local]' (`bash installers/holodesk.sh` does it).")


__all__ = ["load_local_policy", "require_runtime", "runtime_missing"]
