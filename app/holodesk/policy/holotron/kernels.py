"""What ``holodesk doctor`` shows about the local runtime: which Mamba-2 / conv1d kernels transformers'
NemotronH uses and why (:func:`kernel_report`), and how the static decoder was set up at its last load
(:func:`record_decoder`, :func:`last_decoder`).

transformers decides at the import of ``modeling_nemotron_h``: each of ``mamba_chunk_scan_combined``,
``selective_state_update`` (package ``mamba_ssm``), ``causal_conv1d_fn`` / ``causal_conv1d_update``
(package ``causal_conv1d``) comes from its package when the import works, else from a torch reference
(correct, much slower: a 1080p prefill takes 2.3-3.1 s instead of 147 ms on an H200, docs/benchmarks.md).
The Triton-only mamba-ssm build (the one that installs offline) lacks the Mamba-1 extension
``selective_scan_cuda`` that ``import mamba_ssm`` needs; Mamba-2 never calls it, so :func:`prepare_kernels`
registers an empty placeholder module under that name before transformers imports mamba_ssm.

mamba-ssm's scan kernels are ``triton.autotune``d: their first call in a process times every configuration
(about 6 s for Holotron-12B's prefill on an H200, run 10a in docs/benchmarks.md). :func:`prepare_kernels`
turns on Triton's own on-disk cache of those results (``TRITON_CACHE_AUTOTUNING``, read when an autotuned
kernel is defined, i.e. when mamba-ssm is imported) unless the environment sets it; :func:`autotune_cache`
reports it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_NEMOTRON_MODULE = "transformers.models.nemotron_h.modeling_nemotron_h"
_FUNCTIONS = {  # transformers' wrapper name -> the kernel function it tries (hub_kernels mapping)
    "mamba2_chunk_scan": "mamba_chunk_scan_combined", "mamba2_selective_state_update": "selective_state_update",
    "causal_conv1d_fn": "causal_conv1d_fn", "causal_conv1d_update": "causal_conv1d_update",
}
_DISTRIBUTIONS = {"mamba_ssm": "mamba-ssm", "causal_conv1d": "causal-conv1d"}
_state: dict[str, bool | None] = {"placeholder": False, "prepared_before_import": None}
AUTOTUNE_CACHE_ENV = "TRITON_CACHE_AUTOTUNING"
"""Triton's switch for keeping autotuning results on disk (``triton.knobs.autotuning.cache``, Triton >= 3.4),
in its cache folder (``TRITON_CACHE_DIR``, default ``~/.triton/cache``)."""
_MAMBA_TRITON_MODULES = ("ssd_chunk_scan", "ssd_chunk_state", "ssd_state_passing", "ssd_bmm", "ssd_combined",
                         "selective_state_update", "layernorm_gated", "layer_norm")


def prepare_kernels() -> None:
    """Make the Triton-only mamba-ssm importable and its autotuning results cached on disk; call before
    transformers' NemotronH (or mamba-ssm) is imported.

    Sets ``TRITON_CACHE_AUTOTUNING=1`` unless the environment already sets it (a user's ``0`` stays, and
    :func:`autotune_cache` then says what it costs). When ``mamba_ssm`` is installed and
    ``selective_scan_cuda`` is not importable, an empty module is registered under that name. Idempotent;
    never raises.
    """
    if _state["prepared_before_import"] is None:
        _state["prepared_before_import"] = _NEMOTRON_MODULE not in sys.modules
    os.environ.setdefault(AUTOTUNE_CACHE_ENV, "1")
    try:
        if (importlib.util.find_spec("mamba_ssm") is None or "selective_scan_cuda" in sys.modules
                or importlib.util.find_spec("selective_scan_cuda") is not None):
            return
    except (ImportError, ValueError):
        return
    placeholder = types.ModuleType("selective_scan_cuda")
    placeholder.__doc__ = "Placeholder registered by holodesk: Mamba-2 (NemotronH) never calls this extension."
    sys.modules["selective_scan_cuda"] = placeholder
    _state["placeholder"] = True


def _dispatch(fn: Callable[..., object]) -> tuple[object, object] | None:
    """(implementation, torch_function) from the closures of transformers' fallback wrapper
    (``hub_kernels.use_kernel_func_from_hub_with_fallback``), or None when they cannot be found."""
    seen: set[int] = set()
    todo: list[object] = [fn]
    while todo:
        current = todo.pop()
        code, closure = getattr(current, "__code__", None), getattr(current, "__closure__", None)
        if id(current) in seen or code is None or not closure:
            continue
        seen.add(id(current))
        cells = dict(zip(code.co_freevars, closure, strict=False))
        try:
            if "implementation" in cells and "torch_function" in cells:
                return cells["implementation"].cell_contents, cells["torch_function"].cell_contents
            todo.extend(cell.cell_contents for cell in closure if callable(cell.cell_contents))
        except ValueError:  # an empty cell
            continue
    return None


def _package(package: str) -> dict[str, Any]:
    """``installed``, ``version`` and ``import_error`` (None when it imports) of one kernel package."""
    dist = _DISTRIBUTIONS[package]
    try:
        version: str | None = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = None
    if importlib.util.find_spec(package) is None:
        return {"installed": False, "version": version, "import_error": f"{dist} is not installed"}
    try:
        importlib.import_module(package)
    except Exception as exc:  # any import failure is what we report
        return {"installed": True, "version": version, "import_error": f"{type(exc).__name__}: {exc}"}
    return {"installed": True, "version": version, "import_error": None}


def _function(module: object, wrapper: str) -> dict[str, Any]:
    """``live`` and ``implementation`` of one kernel function as transformers' ``module`` dispatches it
    (``live`` None: unknown)."""
    found = _dispatch(getattr(module, wrapper)) if hasattr(module, wrapper) else None
    if found is None:
        why = "transformers not imported" if module is None else "transformers' dispatch could not be inspected"
        return {"live": None, "implementation": f"unknown ({why})"}
    impl, torch_fn = found
    label = f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__qualname__', '?')}"
    live = impl is not torch_fn
    return {"live": live, "implementation": label if live else f"torch reference ({label})"}


def autotune_cache() -> dict[str, Any]:
    """Whether mamba-ssm's autotuned Triton kernels keep their timings on disk, so that a later process skips
    them: ``env`` (``TRITON_CACHE_AUTOTUNING`` as set, or None), ``kernels`` (autotuned kernels found in the
    imported ``mamba_ssm.ops.triton`` modules), ``cached`` (how many of them cache; each reads the switch when
    defined, so a mamba-ssm imported before :func:`prepare_kernels` keeps the switch it saw), ``on`` (every
    one found caches; None when none is imported) and ``detail`` (one line). Never raises."""
    env = os.environ.get(AUTOTUNE_CACHE_ENV)
    tuners = []
    for name in _MAMBA_TRITON_MODULES:
        module = sys.modules.get(f"mamba_ssm.ops.triton.{name}")
        tuners += [v for v in vars(module).values() if hasattr(v, "cache_results") and hasattr(v, "configs")] \
            if module is not None else []
    cached = sum(bool(t.cache_results) for t in tuners)
    on = None if not tuners else cached == len(tuners)
    if on is None:
        detail = (f"mamba-ssm's kernels are not imported in this process; {AUTOTUNE_CACHE_ENV}={env}"
                  if env is not None else f"mamba-ssm's kernels are not imported; {AUTOTUNE_CACHE_ENV} unset")
    elif on:
        detail = f"autotuning results of {cached} mamba-ssm kernels are kept on disk ({AUTOTUNE_CACHE_ENV}={env})"
    else:
        detail = (f"{len(tuners) - cached} of {len(tuners)} mamba-ssm autotuned kernels time every configuration "
                  f"again in each process (about 6 s at a 12B load; {AUTOTUNE_CACHE_ENV}={env}): unset it, or "
                  "import holodesk.policy.holotron before mamba_ssm")
    return {"env": env, "kernels": len(tuners), "cached": cached, "on": on, "detail": detail}


KERNEL_ANALYSIS_FAILURE = "assuming every input is mutated"
"""What torch logs when its analysis of a user Triton kernel (``torch.library.triton_op``, as the ops of
:mod:`.ops` are) cannot find which arguments the kernel writes (torch 2.11: ``Encountered an exception in
identify_mutated_tensors, assuming every input is mutated``; 2.13: ``... identify_accessed_tensors, ...``):
torch then copies every input of that kernel, weights included, before each call of the compiled code."""


class _KernelAnalysisFailures(logging.Handler):
    """Every :data:`KERNEL_ANALYSIS_FAILURE` record of torch's analysis since it was installed, as one line:
    the message's first line and, when torch attached it, the exception that stopped the analysis."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if KERNEL_ANALYSIS_FAILURE not in message:
            return
        line = message.splitlines()[0][:200]
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            line += f" ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]})"
        self.lines.append(line)


_analysis_failures = _KernelAnalysisFailures()


def torch_kernel_analysis_logger() -> logging.Logger:
    """The logger torch's analysis of user Triton kernels writes to: the ``log`` of
    ``torch._higher_order_ops.triton_kernel_wrap`` (torch 2.11-2.13: the ``torch._dynamo`` logger, not one
    named after the module), else ``torch._dynamo``."""
    try:
        from torch._higher_order_ops import triton_kernel_wrap  # lazy: torch (optional, heavy)

        logger = getattr(triton_kernel_wrap, "log", None)
        if isinstance(logger, logging.Logger):
            return logger
    except ImportError:
        pass
    return logging.getLogger("torch._dynamo")


def watch_kernel_analysis() -> int:
    """Listen, for the rest of the process, to torch's analysis of user Triton kernels (idempotent) and return
    how many failures it has logged so far: :func:`kernel_analysis_failures` of that count lists the ones
    after. Process-wide, because torch analyses a kernel whenever it compiles a call to it: at load, and again
    at any recompile during the steps."""
    logger = torch_kernel_analysis_logger()
    if _analysis_failures not in logger.handlers:
        logger.addHandler(_analysis_failures)
    return len(_analysis_failures.lines)


def kernel_analysis_failures(since: int = 0) -> list[str]:
    """The distinct failures of torch's kernel analysis logged after the first ``since`` (a count from
    :func:`watch_kernel_analysis`), in order: each one a kernel whose every input torch copies at every call,
    a slow path the caller must report."""
    return list(dict.fromkeys(_analysis_failures.lines[since:]))


@contextlib.contextmanager
def kernel_analysis_warnings() -> Iterator[list[str]]:
    """The distinct failures of torch's kernel analysis logged while the block runs (:func:`kernel_analysis_failures`
    since its start); the list is filled when the block ends, also when it raises."""
    since = watch_kernel_analysis()
    lines: list[str] = []
    try:
        yield lines
    finally:
        lines.extend(kernel_analysis_failures(since))


def kernel_report(*, import_transformers: bool = True) -> dict[str, Any]:
    """Which kernel path transformers' NemotronH takes in this process, as a JSON-able dict:
    ``fast_path`` (Mamba-2 scan and state update from mamba-ssm, on CUDA), ``summary`` (one line),
    ``torch`` (version), ``cuda`` (``available``, ``device``), ``packages`` (``installed``, ``version``,
    ``import_error`` per package), ``quantized_decode`` (:func:`quant_decode_report`),
    ``selective_scan_cuda_placeholder``, ``prepared_before_transformers`` (None: never prepared),
    ``autotune_cache`` (:func:`autotune_cache`), ``functions`` (``live``, ``implementation`` per kernel) and
    ``reasons`` (why something is not live).

    Args:
        import_transformers: import transformers' NemotronH module to inspect its dispatch; when False and
            it is not imported yet, only the packages are checked.
    """
    prepare_kernels()
    reasons: list[str] = []
    report: dict[str, Any] = {"fast_path": False, "summary": "", "cuda": {"available": False, "device": None},
                              "selective_scan_cuda_placeholder": bool(_state["placeholder"]),
                              "prepared_before_transformers": _state["prepared_before_import"], "reasons": reasons}
    try:
        import torch  # lazy: torch (optional, heavy)

        report["torch"] = torch.__version__
        if torch.cuda.is_available():
            report["cuda"] = {"available": True, "device": torch.cuda.get_device_name(0)}
    except ImportError:
        reasons.append("torch is not installed")
    if not report["cuda"]["available"]:
        reasons.append("no CUDA device: the mamba-ssm Triton kernels only run on NVIDIA GPUs")
    packages = report["packages"] = {name: _package(name) for name in _DISTRIBUTIONS}
    for name, consequence in (("mamba_ssm", ""),
                              ("causal_conv1d", " (conv1d then runs as F.conv1d: correct and cheap)")):
        if packages[name]["import_error"]:
            reasons.append(f"{_DISTRIBUTIONS[name]}: {packages[name]['import_error']}{consequence}")
    module = sys.modules.get(_NEMOTRON_MODULE)
    if module is None and import_transformers:
        try:
            module = importlib.import_module(_NEMOTRON_MODULE)
        except Exception as exc:
            reasons.append(f"transformers' NemotronH could not be imported: {type(exc).__name__}: {exc}")
    if _state["prepared_before_import"] is False and _state["placeholder"]:
        reasons.append("transformers' NemotronH was imported before the selective_scan_cuda placeholder was "
                       "registered; import holodesk.policy.holotron before transformers' nemotron_h")
    functions = report["functions"] = {kernel: _function(module, wrapper) for wrapper, kernel in _FUNCTIONS.items()}
    report["fast_path"] = bool(functions["mamba_chunk_scan_combined"]["live"]
                               and functions["selective_state_update"]["live"] and report["cuda"]["available"])
    conv = "; conv1d from causal-conv1d" if functions["causal_conv1d_fn"]["live"] else "; conv1d via F.conv1d"
    report["quantized_decode"] = quant_decode_report(cuda=bool(report["cuda"]["available"]))
    report["autotune_cache"] = autotune_cache()
    if report["autotune_cache"]["on"] is False:
        reasons.append(report["autotune_cache"]["detail"])
    report["summary"] = ("Mamba-2 kernels live (mamba-ssm Triton)" + conv if report["fast_path"] else
                         "Mamba-2 runs on transformers' torch fallback (slow): "
                         + (reasons[0] if reasons else "mamba-ssm kernels not picked up"))
    return report


def quant_decode_report(*, cuda: bool) -> dict[str, Any]:
    """Whether 8-bit / 4-bit decode can read bitsandbytes' storage through the Triton matrix-vector kernels
    (:mod:`.ops.quant`), and 8-bit prefill dequantise through its Triton kernel: ``bitsandbytes`` (version or
    None), ``triton_kernels`` (they import), ``live`` (both, on CUDA) and ``detail`` (one line). Never raises."""
    try:
        version: str | None = importlib.metadata.version("bitsandbytes")
    except importlib.metadata.PackageNotFoundError:
        version = None
    try:
        # lazy: kept (GPU runtime, not re-checked this session); a failing import is reported by the except below
        from holodesk.policy.holotron.ops import quant

        kernels, why = quant.HAVE_TRITON, "Triton or torch.library.triton_op is missing"
    except Exception as exc:  # torch itself missing or broken
        kernels, why = False, f"{type(exc).__name__}: {exc}"
    live = bool(version and kernels and cuda)
    if live:
        detail = (f"NF4 / int8 decode reads bitsandbytes {version} storage through Triton kernels; int8 prefill "
                  "dequantises in one Triton kernel")
    elif version is None:
        detail = "bitsandbytes is not installed (pip install 'holodesk[quant]'): no 8-bit / 4-bit weights"
    elif not kernels:
        detail = (f"the quantised Triton kernels are unavailable ({why}): 8-bit / 4-bit decode calls "
                  "bitsandbytes' modules and 8-bit prefill dequantises in torch")
    else:
        detail = "no CUDA device: bitsandbytes' 8-bit / 4-bit weights need one"
    return {"bitsandbytes": version, "triton_kernels": kernels, "live": live, "detail": detail}


def decoder_record_path() -> Path:
    """Where the last static decoder built on this machine is described (``$XDG_STATE_HOME/holodesk``)."""
    # lazy: kept (GPU runtime, not re-checked this session); a core dependency: could move to the top
    import platformdirs

    return Path(platformdirs.user_state_dir("holodesk")) / "holotron-decoder.json"


def record_decoder(description: dict[str, Any], *, checkpoint: str | None = None) -> None:
    """Keep ``description`` (``StaticEngine.describe()``, with the time, this process's id and the ``checkpoint``
    folder loaded) for :func:`last_decoder`, so that ``holodesk doctor``, another process, shows the load-time
    fallbacks and whose they are. A write failure is logged only."""
    path = decoder_record_path()
    about = {"recorded": time.strftime("%Y-%m-%d %H:%M:%S"), "pid": os.getpid(), "checkpoint": checkpoint}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**about, **description}, default=str))
    except OSError as exc:
        log.warning("Holotron: the decoder description could not be kept in %s: %s", path, exc)


def last_decoder() -> dict[str, Any] | None:
    """What :func:`record_decoder` kept last, or None when no static decoder was built here yet.

    Raises:
        OSError, ValueError: the record exists but cannot be read (doctor reports it).
    """
    path = decoder_record_path()
    return dict(json.loads(path.read_text())) if path.exists() else None
