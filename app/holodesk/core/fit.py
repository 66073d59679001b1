"""What fits this machine: the one rule that picks Holotron-12B's precision from free GPU memory.

``holodesk doctor``, the first-run wizard and the Settings precision picker all call these functions, so
they always agree. Pure: the caller measures the GPU (``nvidia-smi``, ``torch.cuda.mem_get_info``) and
passes numbers in.

The needs are measured peaks (docs/benchmarks.md, one H200, 1080p screenshots) plus headroom for the
CUDA context, the episode's growing decoder state and the desktop's own use of the card:

* bf16: 24.56 GiB of weights + up to 1.65 GiB over them during an episode -> 28 GiB free (~30 GB);
* 8bit (LLM.int8): about 14.4 GiB at rest, ~16 GiB at a step -> 18 GiB free;
* 4bit (NF4): 10.74 GiB at a 1080p step -> 12 GiB free.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30

PRECISIONS: tuple[str, ...] = ("bf16", "8bit", "4bit")
"""Settings values of ``precision``, most faithful first (the order :func:`best_precision` tries)."""

NEEDS_FREE_BYTES: dict[str, int] = {"bf16": 28 * GIB, "8bit": 18 * GIB, "4bit": 12 * GIB}
"""Free GPU memory, in bytes, that Holotron-12B needs at each precision (see the module docstring)."""

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


def precision_fits(free_bytes: int | None) -> list[PrecisionFit]:
    """Each precision (most faithful first) with its need and whether it fits ``free_bytes`` of free GPU
    memory (None: no GPU measured, so ``fits`` is None for all)."""
    return [PrecisionFit(p, NEEDS_FREE_BYTES[p], None if free_bytes is None else free_bytes >= NEEDS_FREE_BYTES[p])
            for p in PRECISIONS]


def best_precision(free_bytes: int | None) -> str | None:
    """The most faithful precision that fits ``free_bytes`` of free GPU memory; None when none fits or the
    free memory is unknown (then the local model cannot be recommended on this machine).

    Examples: 80 GiB -> "bf16"; 23 GiB (a 24 GB card with a desktop on it) -> "8bit"; 15 GiB -> "4bit";
    8 GiB -> None.
    """
    for fit in precision_fits(free_bytes):
        if fit.fits:
            return fit.precision
    return None


def explain_precision(free_bytes: int | None, gpu_name: str = "this GPU") -> str:
    """One or two plain sentences saying which precision fits and why (for the wizard, Settings, doctor)."""
    if free_bytes is None:
        return ("No NVIDIA GPU was found, so Holotron-12B cannot run here at a usable speed. Use a server "
                "instead.")
    free = free_bytes / GIB
    best = best_precision(free_bytes)
    if best is None:
        need = NEEDS_FREE_BYTES["4bit"] / GIB
        return (f"{gpu_name} has {free:.1f} GiB free; even the smallest form (4-bit) needs about {need:.0f} GiB. "
                "Use a server instead, or free memory on the card.")
    need = NEEDS_FREE_BYTES[best] / GIB
    text = f"{gpu_name} has {free:.1f} GiB free, so Holotron-12B runs in {best} ({PRECISION_TRADEOFF[best]}; " \
           f"needs about {need:.0f} GiB)."
    if best != "bf16":
        text += f" Full precision (bf16) needs about {NEEDS_FREE_BYTES['bf16'] / GIB:.0f} GiB and does not fit."
    return text


def disk_fits(free_bytes: int) -> bool:
    """True when ``free_bytes`` of free disk space hold the checkpoint plus the margin."""
    return free_bytes >= CHECKPOINT_BYTES + DISK_MARGIN_BYTES
