"""In-process Holotron-12B runtime: native transformers classes, no remote code (docs/holotron-runtime.md).

Importing this package needs neither torch nor transformers; they are imported when a model is loaded.

Public API:

* :func:`plan_tiling` (and :func:`tile_grid`, :func:`image_tiles`, :func:`image_token_count`) — the tiling
  rule, pure Python.
* :class:`HolotronPolicy` — ``HolotronPolicy.load(source, ...)`` then ``propose(observation)``.
* :func:`kernel_report` — which Mamba-2 / conv1d kernels transformers' NemotronH will use, and why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from holodesk.policy.holotron.tiling import (
    MAX_TILES,
    TILE_SIZE,
    TOKENS_PER_TILE,
    Tiling,
    image_tiles,
    image_token_count,
    plan_tiling,
    tile_grid,
)

if TYPE_CHECKING:
    from holodesk.policy.holotron.kernels import kernel_report
    from holodesk.policy.holotron.policy import HolotronPolicy

__all__ = ["MAX_TILES", "TILE_SIZE", "TOKENS_PER_TILE", "HolotronPolicy", "Tiling", "image_tiles", "image_token_count",
           "kernel_report", "plan_tiling", "tile_grid"]

_LAZY = {"HolotronPolicy": "holodesk.policy.holotron.policy", "kernel_report": "holodesk.policy.holotron.kernels"}


def __getattr__(name: str) -> Any:
    """Import the torch-dependent parts on first use (PEP 562)."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib  # lazy: kept (GPU runtime, not re-checked this session); standard library: could move to the top

    return getattr(importlib.import_module(module_name), name)
