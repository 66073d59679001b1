"""The changes Holodesk makes to a loaded Holotron model, once, at load (docs/holotron-runtime.md, "How loading
works", step 8): each attention layer's q/k/v projection weights in one buffer (:func:`lay_out_qkv`; the checkpoint
keys to read into one: :func:`qkv_groups`), and the vision layer scales of factor 1 passed through
(:func:`skip_unit_layer_scales`). The modules stay transformers' own; the values do not change."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from holodesk.policy.holotron.checkpoint import CheckpointInfo


def lay_out_qkv(model: Any, before_copy: Callable[[], object] | None = None) -> int:
    """Move the q/k/v projection weights of every attention mixer of ``model``'s language model into one
    contiguous ``[q_rows + k_rows + v_rows, hidden]`` buffer, each projection's Parameter a view of its
    rows (same Parameter objects, same values; only the storage changes). Projections that are not plain
    ``torch.nn.Linear`` without bias (bitsandbytes modules, biased layers) keep their own storage; those
    already in one buffer so (:func:`.blocks.fused_qkv_weight`: read so by :func:`.stream.start_reading`,
    :func:`qkv_groups`) are left as they are. ``before_copy`` is called before the first copy (which reads the
    weights' values).

    Returns:
        the number of attention layers laid out (already or now).
    """
    import torch  # lazy: torch (optional, heavy)

    from holodesk.policy.holotron.blocks import fused_qkv_weight  # lazy: the runtime's blocks import torch

    count = 0
    names = ("q_proj", "k_proj", "v_proj")
    for module in model.language_model.modules():
        projs = [getattr(module, name) for name in names] if all(hasattr(module, n) for n in names) else []
        if not projs or any(type(p) is not torch.nn.Linear or p.bias is not None for p in projs):
            continue
        count += 1
        if fused_qkv_weight(module) is not None:
            continue
        if before_copy is not None:
            before_copy()
            before_copy = None
        with torch.no_grad():
            buffer = torch.cat([p.weight for p in projs], dim=0)
            start = 0
            for p in projs:
                rows = p.weight.shape[0]
                p.weight.data = buffer[start : start + rows]
                start += rows
    return count


QKV_KEY = re.compile(r"^(language_model\..+\.)q_proj\.weight$")
"""A checkpoint key of an attention layer's q projection weight; its k and v keys replace ``q_proj``."""


def qkv_groups(info: CheckpointInfo) -> list[tuple[str, str, str]]:
    """The checkpoint keys ``(q, k, v)`` of each language-model attention layer whose q/k/v projections are
    unbiased weights: what :func:`lay_out_qkv` puts in one buffer, for :func:`.stream.start_reading` to read
    there in the first place."""
    out = []
    for key in sorted(info.shapes):
        m = QKV_KEY.match(key)
        if m is None:
            continue
        keys = tuple(f"{m.group(1)}{p}_proj.weight" for p in "qkv")
        if all(k in info.shapes for k in keys) and not any(f"{m.group(1)}{p}_proj.bias" in info.shapes for p in "qkv"):
            out.append((keys[0], keys[1], keys[2]))
    return out


def skip_unit_layer_scales(model: Any) -> int:
    """Make each vision layer scale whose factor is exactly 1 pass its input through.

    C-RADIO has no layer scale; transformers' RADIO layer keeps the module with a factor of ones
    (``layerscale_value`` 1.0) and multiplies by it twice a layer: 64 element-wise passes over every tile's
    rows, 1.9 ms of a 1080p frame's 31 ms of vision on an H200 (docs/benchmarks.md, runs 13 and 14). Such a module
    is replaced by one that keeps its ``lambda1`` Parameter (the same state dict) and returns its input: the
    same values bit for bit, as ``x * 1.0`` is ``x``. A scale with any other factor is kept.

    Returns:
        the number of layer scales replaced.
    """
    import torch  # lazy: torch (optional, heavy)

    class UnitScale(torch.nn.Module):
        """A layer scale of ones: its parameter kept, its multiply skipped."""

        def __init__(self, lambda1: torch.nn.Parameter) -> None:
            super().__init__()
            self.lambda1 = lambda1

        def forward(self, hidden_state: torch.Tensor) -> torch.Tensor:
            return hidden_state

    count = 0
    for parent in list(model.vision_model.modules()):
        for name, child in list(parent.named_children()):
            scale = getattr(child, "lambda1", None)
            if type(child).__name__ == "RadioLayerScale" and isinstance(scale, torch.nn.Parameter) \
                    and bool(torch.all(scale == 1)):
                setattr(parent, name, UnitScale(scale))
                count += 1
    return count


__all__ = ["QKV_KEY", "lay_out_qkv", "qkv_groups", "skip_unit_layer_scales"]
