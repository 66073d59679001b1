"""H Company's model families run with transformers' own classes (no remote code): Holo2 (Qwen3-VL),
Holo3 / Holo3.1 (Qwen3.5, Qwen3.5-MoE) and Holotron-3-Nano (Nemotron-H Omni with MoE blocks).

Importing this package needs neither torch nor transformers; they are imported when a model is loaded.

Public API:

* :data:`FAMILIES`, :func:`read_family`, :func:`family_of` — which family a checkpoint is and which runtime
  runs it (:mod:`holodesk.policy.native.families`, pure Python).
* :class:`NativePolicy` — ``NativePolicy.load(source, ...)`` then ``propose(observation)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from holodesk.policy.native.families import FAMILIES, NATIVE_FAMILIES, Family, family_of, read_family

if TYPE_CHECKING:
    from holodesk.policy.native.policy import LoadedNative, NativePolicy, load_native

__all__ = ["FAMILIES", "NATIVE_FAMILIES", "Family", "LoadedNative", "NativePolicy", "family_of", "load_native",
           "read_family"]

_LAZY = {"NativePolicy": "holodesk.policy.native.policy", "LoadedNative": "holodesk.policy.native.policy",
         "load_native": "holodesk.policy.native.policy"}


def __getattr__(name: str) -> Any:
    """Import the torch-dependent parts on first use (PEP 562)."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib  # lazy: kept (GPU runtime, not re-checked this session); standard library: could move to the top

    return getattr(importlib.import_module(module_name), name)
