"""What fits this machine: the one rule that says which precision of a policy model fits free GPU memory.

``holodesk doctor``, the first-run wizard and the Settings model and precision pickers all call these
functions, so they always agree. Pure: the caller measures the GPU (``nvidia-smi``,
``torch.cuda.mem_get_info``) and passes numbers in; the model's parameter count comes from the model
registry (:mod:`holodesk.policy.models`).

The rule (:func:`needs_free_bytes`): free GPU memory needed =
``parameters x BYTES_PER_PARAMETER[precision] + WORKING_SET_BYTES``, rounded up to a whole GiB.

* ``BYTES_PER_PARAMETER``: bf16 2.0 (the checkpoint as stored); 8bit 1.15 and 4bit 0.7 (bitsandbytes
  quantises the large linear layers only: embeddings, norms, vision tower and SSM parameters stay bf16,
  and the quantised layers carry scales, so the average is above 1 and 0.5 bytes).
* ``WORKING_SET_BYTES`` (3 GiB): the CUDA context, one 1080p step's activations, the episode's growing
  decoder state and the desktop's own use of the card.

It is calibrated on the one model measured here, Holotron-12B (docs/benchmarks.md, one H200, 1080p
screenshots: 24.56 GiB of bf16 weights + up to 1.65 GiB over them during an episode; 8bit about 14.4
GiB at rest; NF4 10.74 GiB at a 1080p step), for which it gives 28 / 18 / 12 GiB. For every other model
it is an estimate from the parameter count, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30

PRECISIONS: tuple[str, ...] = ("bf16", "8bit", "4bit")
"""Settings values of ``precision``, most faithful first (the order :func:`best_precision` tries)."""

BYTES_PER_PARAMETER: dict[str, float] = {"bf16": 2.0, "8bit": 1.15, "4bit": 0.7}
"""Average bytes of GPU memory per parameter at each precision (see the module docstring)."""

WORKING_SET_BYTES = 3 * GIB
"""GPU memory beyond the weights: CUDA context, a 1080p step, the episode's decoder state, the desktop."""

HOLOTRON_12B_PARAMETERS = 13_190_000_000
"""Parameters of Holotron-12B as stored: its 24.56 GiB of bf16 weights / 2 bytes (the model card rounds to
12.6B for the language model and vision tower it names; the hub lists 13B)."""


def needs_free_bytes(parameters: int, precision: str) -> int:
    """Free GPU memory, in bytes (a whole number of GiB), that a model of ``parameters`` parameters needs at
    ``precision`` ("bf16", "8bit" or "4bit"): the rule of the module docstring.

    Raises:
        ValueError: unknown precision, or ``parameters`` not positive.
    """
    if precision not in BYTES_PER_PARAMETER:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if parameters <= 0:
        raise ValueError(f"parameters must be positive, got {parameters}")
    need = parameters * BYTES_PER_PARAMETER[precision] + WORKING_SET_BYTES
    return -(-int(need) // GIB) * GIB


NEEDS_FREE_BYTES: dict[str, int] = {p: needs_free_bytes(HOLOTRON_12B_PARAMETERS, p) for p in PRECISIONS}
"""Free GPU memory, in bytes, that Holotron-12B needs at each precision (28, 18 and 12 GiB)."""

PRECISION_TRADEOFF: dict[str, str] = {
    "bf16": "full precision: the model as trained, fastest",
    "8bit": "8-bit (LLM.int8): close to full precision, but several times slower per step",
    "4bit": "4-bit (NF4): fast and small, slightly less accurate",
}
"""One plain-words line per precision, for the wizard and the Settings picker."""

CHECKPOINT_BYTES = 26_400_000_000
"""Download size of the Holotron-12B checkpoint (bf16 safetensors, 24.56 GiB of weights; every
precision loads the same files and quantises on the GPU)."""

DISK_MARGIN_BYTES = 1 * GIB
"""Free disk space kept beyond the checkpoint itself (temporary files during the download)."""


@dataclass(frozen=True)
class PrecisionFit:
    """Whether one precision fits a GPU.

    Attributes:
        precision: "bf16", "8bit" or "4bit".
        needs_bytes: free GPU memory it needs, bytes.
        fits: True when ``free_bytes >= needs_bytes``; None when the free memory is unknown.
    """

    precision: str
    needs_bytes: int
    fits: bool | None


def precision_fits(free_bytes: int | None, parameters: int = HOLOTRON_12B_PARAMETERS) -> list[PrecisionFit]:
    """Each precision (most faithful first) with the need of a model of ``parameters`` parameters
    (default Holotron-12B) and whether it fits ``free_bytes`` of free GPU memory (None: no GPU measured,
    so ``fits`` is None for all)."""
    fits = []
    for p in PRECISIONS:
        need = needs_free_bytes(parameters, p)
        fits.append(PrecisionFit(p, need, None if free_bytes is None else free_bytes >= need))
    return fits


RECOMMENDED_ORDER = ("bf16", "4bit")
"""The precisions :func:`best_precision` recommends, in order: full precision when it fits, else 4-bit.
8-bit is never recommended: it is close to bf16 in accuracy but several times slower per step than 4-bit
(it stays available in Settings)."""


def best_precision(free_bytes: int | None, parameters: int = HOLOTRON_12B_PARAMETERS) -> str | None:
    """The precision to recommend for a model of ``parameters`` parameters (default Holotron-12B) on
    ``free_bytes`` of free GPU memory: the first of :data:`RECOMMENDED_ORDER` that fits; None when none fits
    or the free memory is unknown (then the local model cannot be recommended on this machine).

    Examples for Holotron-12B: 80 GiB -> "bf16"; 23 GiB (a 24 GB card with a desktop on it) -> "4bit"
    (8-bit would fit but is several times slower); 15 GiB -> "4bit"; 8 GiB -> None.
    """
    fits = {fit.precision: fit.fits for fit in precision_fits(free_bytes, parameters)}
    return next((p for p in RECOMMENDED_ORDER if fits.get(p)), None)


def explain_precision(free_bytes: int | None, gpu_name: str = "this GPU", *, model: str = "Holotron-12B",
                      parameters: int = HOLOTRON_12B_PARAMETERS) -> str:
    """One or two plain sentences saying which precision of ``model`` (``parameters`` parameters) fits and
    why (for the wizard, Settings, doctor)."""
    if free_bytes is None:
        return (f"No NVIDIA GPU was found, so {model} cannot run here at a usable speed. Use a server "
                "instead.")
    free = free_bytes / GIB
    best = best_precision(free_bytes, parameters)
    if best is None:
        need = needs_free_bytes(parameters, "4bit") / GIB
        return (f"{gpu_name} has {free:.1f} GiB free; even the smallest form of {model} (4-bit) needs about "
                f"{need:.0f} GiB. Use a server or a smaller model instead, or free memory on the card.")
    need = needs_free_bytes(parameters, best) / GIB
    text = f"{gpu_name} has {free:.1f} GiB free, so {model} runs in {best} ({PRECISION_TRADEOFF[best]}; " \
           f"needs about {need:.0f} GiB)."
    if best != "bf16":
        text += f" Full precision (bf16) needs about {needs_free_bytes(parameters, 'bf16') / GIB:.0f} GiB and " \
                "does not fit."
        if free_bytes >= needs_free_bytes(parameters, "8bit"):
            text += " 8-bit fits too, but is several times slower per step."
    return text


def disk_fits(free_bytes: int, checkpoint_bytes: int = CHECKPOINT_BYTES) -> bool:
    """True when ``free_bytes`` of free disk space hold a checkpoint of ``checkpoint_bytes`` (default
    Holotron-12B's) plus the margin."""
    return free_bytes >= checkpoint_bytes + DISK_MARGIN_BYTES
