"""Which Mamba-2 / conv1d kernels transformers' NemotronH uses, and why (for ``holodesk doctor``).

transformers decides at the import of ``transformers.models.nemotron_h.modeling_nemotron_h``: each of
``mamba_chunk_scan_combined``, ``selective_state_update`` (package ``mamba_ssm``) and ``causal_conv1d_fn``
/ ``causal_conv1d_update`` (package ``causal_conv1d``) is taken from its package when the import works,
and otherwise silently replaced by a torch reference (correct, much slower: a 1080p prefill takes
2.3-3.1 s instead of 147 ms on an H200 and needs 22 GiB more memory, docs/holotron.md).

The Triton-only mamba-ssm build (``MAMBA_SKIP_CUDA_BUILD=TRUE``, the only one that installs offline)
lacks the Mamba-1 extension ``selective_scan_cuda`` that ``import mamba_ssm`` needs. Mamba-2 never
calls it, so :func:`prepare_kernels` registers an empty placeholder module under that name before
transformers imports mamba_ssm (the workaround documented in docs/holotron.md).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import types
from typing import Any

_NEMOTRON_MODULE = "transformers.models.nemotron_h.modeling_nemotron_h"
_PLACEHOLDER_ATTR = "__holodesk_placeholder__"

# transformers' wrapper name -> (package, kernel function) it tries, per its hub_kernels mapping.
_FUNCTIONS = {
    "mamba2_chunk_scan": ("mamba_ssm", "mamba_chunk_scan_combined"),
    "mamba2_selective_state_update": ("mamba_ssm", "selective_state_update"),
    "causal_conv1d_fn": ("causal_conv1d", "causal_conv1d_fn"),
    "causal_conv1d_update": ("causal_conv1d", "causal_conv1d_update"),
}

_state: dict[str, Any] = {"placeholder": False, "prepared_before_import": None}


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def prepare_kernels() -> None:
    """Make the Triton-only mamba-ssm importable; call before transformers' NemotronH is imported.

    When ``mamba_ssm`` is installed and ``selective_scan_cuda`` is not importable, an empty module is
    registered under that name (marked as a placeholder so :func:`kernel_report` can say so). Does
    nothing when mamba-ssm is absent or complete. Idempotent; never raises.
    """
    if _state["prepared_before_import"] is None:
        _state["prepared_before_import"] = _NEMOTRON_MODULE not in sys.modules
    try:
        if importlib.util.find_spec("mamba_ssm") is None:
            return
        if "selective_scan_cuda" in sys.modules:
            return
        if importlib.util.find_spec("selective_scan_cuda") is not None:
            return
    except (ImportError, ValueError):
        return
    placeholder = types.ModuleType("selective_scan_cuda")
    placeholder.__doc__ = (
        "Placeholder registered by holodesk: the Triton-only mamba-ssm build has no Mamba-1 CUDA "
        "extension, which Mamba-2 (NemotronH) never calls."
    )
    setattr(placeholder, _PLACEHOLDER_ATTR, True)
    sys.modules["selective_scan_cuda"] = placeholder
    _state["placeholder"] = True


def _find_dispatch(fn: Any) -> tuple[Any, Any] | None:
    """Find (implementation, torch_function) in the closure of transformers' fallback wrapper.

    ``use_kernel_func_from_hub_with_fallback`` (transformers.integrations.hub_kernels) closes over both;
    the implementation is the torch function itself when the package import failed.
    """
    seen: set[int] = set()
    todo = [fn]
    while todo:
        current = todo.pop()
        if id(current) in seen or not callable(current):
            continue
        seen.add(id(current))
        code = getattr(current, "__code__", None)
        closure = getattr(current, "__closure__", None)
        if code is not None and closure:
            cells = dict(zip(code.co_freevars, closure, strict=False))
            if "implementation" in cells and "torch_function" in cells:
                try:
                    return cells["implementation"].cell_contents, cells["torch_function"].cell_contents
                except ValueError:
                    return None
            for cell in closure:
                try:
                    todo.append(cell.cell_contents)
                except ValueError:
                    continue
        wrapped = getattr(current, "__wrapped__", None)
        if wrapped is not None:
            todo.append(wrapped)
    return None


def _package_status(package: str) -> dict[str, Any]:
    dist = {"mamba_ssm": "mamba-ssm", "causal_conv1d": "causal-conv1d"}[package]
    status: dict[str, Any] = {"installed": False, "version": _dist_version(dist), "import_error": None}
    if importlib.util.find_spec(package) is None:
        status["import_error"] = f"{dist} is not installed"
        return status
    status["installed"] = True
    try:
        importlib.import_module(package)
    except Exception as exc:  # any import failure is what we report
        status["import_error"] = f"{type(exc).__name__}: {exc}"
    return status


def kernel_report(*, import_transformers: bool = True) -> dict[str, Any]:
    """Report which kernel path transformers' NemotronH takes in this process.

    Args:
        import_transformers: import transformers' NemotronH module to inspect its dispatch (after
            :func:`prepare_kernels`); when False and it is not imported yet, only package checks are done.
    Returns:
        A JSON-able dict::

            {"fast_path": bool,              # Mamba-2 scan + state update from mamba-ssm, and CUDA present
             "summary": str,                 # one line for the log / doctor
             "cuda": {"available": bool, "device": str | None},
             "packages": {"mamba_ssm": {...}, "causal_conv1d": {...}},   # installed, version, import_error
             "selective_scan_cuda_placeholder": bool,
             "prepared_before_transformers": bool | None,  # prepare_kernels ran before NemotronH was
                                                           # imported (None: never prepared)
             "functions": {name: {"live": bool | None, "implementation": str}},
             "reasons": [str, ...]}          # why something is not live
    """
    prepare_kernels()
    reasons: list[str] = []
    report: dict[str, Any] = {
        "fast_path": False,
        "summary": "",
        "cuda": {"available": False, "device": None},
        "packages": {},
        "selective_scan_cuda_placeholder": bool(_state["placeholder"]),
        "prepared_before_transformers": _state["prepared_before_import"],
        "functions": {},
        "reasons": reasons,
    }
    try:
        import torch

        report["torch"] = torch.__version__
        if torch.cuda.is_available():
            report["cuda"] = {"available": True, "device": torch.cuda.get_device_name(0)}
    except ImportError:
        reasons.append("torch is not installed")
    if not report["cuda"]["available"]:
        reasons.append("no CUDA device: the mamba-ssm Triton kernels only run on NVIDIA GPUs")
    for package in ("mamba_ssm", "causal_conv1d"):
        report["packages"][package] = _package_status(package)
    if report["packages"]["mamba_ssm"]["import_error"]:
        reasons.append("mamba-ssm: " + report["packages"]["mamba_ssm"]["import_error"])
    if report["packages"]["causal_conv1d"]["import_error"]:
        reasons.append(
            "causal-conv1d: " + report["packages"]["causal_conv1d"]["import_error"]
            + " (conv1d then runs as F.conv1d: correct and cheap)"
        )

    module = sys.modules.get(_NEMOTRON_MODULE)
    if module is None and import_transformers:
        try:
            module = importlib.import_module(_NEMOTRON_MODULE)
        except Exception as exc:
            reasons.append(f"transformers' NemotronH could not be imported: {type(exc).__name__}: {exc}")
    if _state["prepared_before_import"] is False and _state["placeholder"]:
        reasons.append(
            "transformers' NemotronH was imported before the selective_scan_cuda placeholder was "
            "registered; import holodesk.policy.holotron before transformers' nemotron_h"
        )
    for wrapper, (package, kernel) in _FUNCTIONS.items():
        entry: dict[str, Any] = {"live": None, "implementation": "unknown (transformers not imported)"}
        fn = getattr(module, wrapper, None) if module is not None else None
        if fn is not None:
            found = _find_dispatch(fn)
            if found is None:
                ok = report["packages"][package]["installed"] and not report["packages"][package]["import_error"]
                entry = {
                    "live": ok,
                    "implementation": f"{package}.{kernel} (inferred: transformers' dispatch not inspectable)"
                    if ok
                    else "torch reference (inferred)",
                }
            else:
                impl, torch_fn = found
                live = impl is not torch_fn
                name = f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__qualname__', '?')}"
                entry = {"live": live, "implementation": name if live else f"torch reference ({name})"}
        report["functions"][kernel] = entry

    scan = report["functions"]["mamba_chunk_scan_combined"]["live"]
    step = report["functions"]["selective_state_update"]["live"]
    report["fast_path"] = bool(scan and step and report["cuda"]["available"])
    conv = report["functions"]["causal_conv1d_fn"]["live"]
    if report["fast_path"]:
        report["summary"] = "Mamba-2 kernels live (mamba-ssm Triton)" + (
            "; conv1d from causal-conv1d" if conv else "; conv1d via F.conv1d"
        )
    else:
        report["summary"] = "Mamba-2 runs on transformers' torch fallback (slow): " + (
            reasons[0] if reasons else "mamba-ssm kernels not picked up"
        )
    return report
