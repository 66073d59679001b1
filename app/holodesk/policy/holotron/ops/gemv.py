"""Matrix-vector products for one-token decode, chosen per weight shape by timing at load.

A decode step of Holotron-12B is ~90% matrix-vector products (one token against every weight matrix):
``y[1, N] = x[1, K] @ W[N, K]^T``, bound by reading ``W`` from memory. cuBLAS picks its kernel by
heuristics; on one H200 (docs/benchmarks.md) it read the MLP and Mamba weights at about 3.7-4.0 TB/s
in those products. :func:`choose` times, for each weight shape, ``F.linear`` (cuBLASLt, the default) and
a Triton kernel (:mod:`._gemv_triton`: each program reads ``BLOCK_N`` rows of ``W`` in ``BLOCK_K``-wide
coalesced slices, multiplies by ``x`` in float32 and reduces once at the end; no split-K, no atomics,
so the output is deterministic) in several tiles, on the real weights, and keeps the fastest.

Only implementations that run as timed are offered: the Triton kernel is an opaque op
(``torch.ops.holodesk.gemv``) that ``torch.compile`` calls as it is; a ``torch.mv`` variant was dropped
because inside a compiled block inductor rewrote it into a much slower reduction.

Every implementation accumulates in float32 and rounds the result once to the weight dtype, as cuBLAS
does; results differ only in the order of the float32 sums. :func:`choose` rejects any candidate whose
result differs from ``F.linear`` by more than the dtype's rounding (``check_rtol``);
:func:`gemv_reference` is that product written out (float32 sums, one rounding).

Triton is only needed on CUDA; without it (the CPU test environment) only ``"linear"`` exists.

The timing is kept (:class:`KeptChoices`, ``$XDG_STATE_HOME/holodesk/holotron-kernel-choices.json``): a later
load on the same GPU model, with the same torch, Triton and kernel sources, the same candidates and weight shapes,
takes the kept choice after checking its result once, instead of timing every candidate again (a Holotron-12B
engine build took 2.38 s timing them and 1.24-1.47 s with the kept choices on one H100, docs/benchmarks.md run 26).
Deleting the file makes the next load time them again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

Product = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]
"""A matrix-vector implementation: ``(x [1, K], w [N, K]) -> [1, N]``."""

try:  # pragma: no cover - depends on the machine
    from holodesk.policy.holotron.ops import _gemv_triton  # noqa: F401  (registers torch.ops.holodesk.gemv)

    HAVE_TRITON = True
except Exception as _exc:  # CPU-only installs (CI) have no Triton; an old torch has no triton_op
    log.debug("Triton matrix-vector kernel unavailable (%s: %s); F.linear only", type(_exc).__name__, _exc)
    HAVE_TRITON = False


@dataclass(frozen=True)
class Gemv:
    """How one weight shape is multiplied: ``kind`` ``"linear"`` | ``"triton"`` (bf16) | ``"nf4"`` | ``"int8"``
    (:mod:`.quant`) and, for the Triton kernels,
    the tile ``(block_n, block_k, num_warps)``; ``us`` the measured microseconds per product at load;
    ``kept``: taken from :class:`KeptChoices` (timed at an earlier load) rather than timed at this one."""

    kind: str = "linear"
    block_n: int = 0
    block_k: int = 0
    num_warps: int = 0
    us: float = 0.0
    kept: bool = False

    def spec(self) -> tuple[str, int, int, int]:
        """``(kind, block_n, block_k, num_warps)``, the argument :func:`linear` takes."""
        return (self.kind, self.block_n, self.block_k, self.num_warps)

    def label(self) -> str:
        """``"linear"``, or the kernel kind and tile, e.g. ``"triton 8x512/4w"``, ``"nf4 4x512/4w"``."""
        if self.kind == "linear":
            return self.kind
        return f"{self.kind} {self.block_n}x{self.block_k}/{self.num_warps}w"


LINEAR = Gemv()
TRITON_TILES: tuple[tuple[int, int, int], ...] = (
    (4, 512, 4), (8, 512, 4), (8, 256, 4), (16, 256, 4), (8, 1024, 8), (16, 512, 8), (32, 256, 8),
)
"""Triton tiles tried at load ``(BLOCK_N, BLOCK_K, num_warps)``."""


def gemv_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x [B, K] @ w [N, K]^T`` summed in float32 and rounded once to ``w``'s dtype: what every
    implementation of :func:`linear` computes, up to the order of the float32 sums."""
    return (x.float() @ w.float().t()).to(w.dtype)


def linear(x: torch.Tensor, w: torch.Tensor, how: tuple[str, int, int, int] | None = None, *,
           relu_square: bool = False) -> torch.Tensor:
    """``F.linear(x, w)`` for ``x [B, K]``, ``w [N, K]`` -> ``[B, N]``, through ``how`` when ``x`` is one
    row (``[1, K]``); with ``relu_square`` of ``relu(x)^2`` (``x``'s dtype) instead of ``x``.

    Args:
        how: :meth:`Gemv.spec` of the chosen implementation (a plain tuple, so that ``torch.compile``
            specialises on it), or None for ``F.linear``.
        relu_square: the Triton kernel squares as it reads ``x`` (no separate pass); elsewhere
            ``torch.square(F.relu(x))`` first. The same values either way.
    Raises:
        ValueError: the kind in ``how`` is unknown.
    """
    # lazy (here and below): torch (optional, heavy)
    import torch
    import torch.nn.functional as F

    if how is None or how[0] == "linear" or x.dim() != 2 or x.shape[0] != 1:
        return F.linear(torch.square(F.relu(x)) if relu_square else x, w)
    if how[0] == "triton":
        return torch.ops.holodesk.gemv(x, w, how[1], how[2], how[3], relu_square)
    raise ValueError(f"unknown matrix-vector implementation {how[0]!r}")


_CYCLES_PER_US: list[float] = []


def _cycles_per_us() -> float:
    """GPU clock cycles per microsecond, measured once with ``torch.cuda._sleep`` (a spin kernel)."""
    import torch  # lazy: torch (optional, heavy)

    if not _CYCLES_PER_US:
        cycles = 2_000_000
        torch.cuda._sleep(cycles // 10)  # load the kernel
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _CYCLES_PER_US.append(cycles / max(start.elapsed_time(end) * 1000.0, 1.0))
    return _CYCLES_PER_US[0]


def _time_us(fn: Product, weights: Sequence[torch.Tensor], x: torch.Tensor, rounds: int = 5) -> float:
    """Median over ``rounds`` of the mean microseconds per product, cycling through ``weights`` (distinct
    matrices, as in a decode step, so the L2 cache does not hold the weight between products).

    GPU time only, as in the decode graph where the products run back to back: each round is queued
    behind a spin kernel that outlasts twice the host's time to launch it, so the products start one
    after another on the GPU. Timed eagerly without it, a candidate's host-side launch cost (60-90 us
    for the registered Triton op on a slow host, more than the kernel) decided the choice. No CUDA
    graph is captured here: timing graphs left about 94 MiB allocated after loading.
    """
    # lazy (here and below): kept (GPU runtime, not re-checked this session); standard library: could move to the top
    import statistics
    import time

    import torch  # lazy: torch (optional, heavy)

    for w in weights[:2]:  # compile / autotune first
        fn(x, w)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for w in weights:
        fn(x, w)
    host_us = (time.perf_counter() - t0) * 1e6
    torch.cuda.synchronize()
    spin = int(_cycles_per_us() * (2.0 * host_us + 200.0))
    samples = []
    for _ in range(rounds):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(spin)
        start.record()
        for w in weights:
            fn(x, w)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / len(weights))
    return statistics.median(samples)


def choose(weights: Sequence[torch.Tensor], *, check_rtol: float | None = None) -> tuple[Gemv, dict[str, float]]:
    """Time every implementation on these same-shape weights ``[N, K]`` (CUDA) and return the fastest.

    Args:
        weights: the matrices of one shape that a decode step multiplies (e.g. the 28 Mamba ``in_proj``).
        check_rtol: relative error (L2) a candidate may show against ``F.linear``; default 1e-2 for
            16-bit weights, 1e-5 for float32.
    Returns:
        (the fastest correct :class:`Gemv` with its time, microseconds per product of every candidate
        that ran by :meth:`Gemv.label`); ``(LINEAR, {})`` off CUDA.
    """
    # lazy (here and below): torch (optional, heavy)
    import torch
    import torch.nn.functional as F

    w0 = weights[0]
    if not isinstance(w0, torch.Tensor) or w0.device.type != "cuda" or w0.dim() != 2:
        return LINEAR, {}
    rtol = check_rtol if check_rtol is not None else (1e-5 if w0.dtype == torch.float32 else 1e-2)
    gen = torch.Generator(device=w0.device).manual_seed(0)
    x = torch.randn(1, w0.shape[1], generator=gen, device=w0.device, dtype=w0.dtype)
    ref = F.linear(x, w0).float()
    candidates: list[tuple[Gemv, Product]] = [(LINEAR, F.linear)]
    if HAVE_TRITON:
        for bn, bk, nw in TRITON_TILES:
            if bk <= 2 * w0.shape[1]:
                tile = Gemv("triton", bn, bk, nw)
                candidates.append((tile, functools.partial(linear, how=tile.spec())))
    return fastest(candidates, weights, x, ref, rtol, tuple(w0.shape))


def _matches(fn: Any, x: torch.Tensor, w: Any, ref: torch.Tensor) -> float:
    """Relative L2 error of ``fn(x, w)`` against ``ref`` (float32); raises what ``fn`` raises."""
    out = fn(x, w).float()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def fastest(candidates: Sequence[tuple[Gemv, Any]], weights: Sequence[Any], x: torch.Tensor, ref: torch.Tensor,
            rtol: float, shape: tuple[int, ...], *, kept: KeptChoices | None = None) -> tuple[Gemv, dict[str, float]]:
    """The fastest of ``candidates`` ``(kernel, fn)`` whose ``fn(x, weights[0])`` is within ``rtol`` (relative L2)
    of ``ref`` (float32), timed over ``weights`` (:func:`_time_us`); a candidate that fails to run or to match
    is logged (with ``shape``) and left out. Returns (the fastest :class:`Gemv` with its microseconds, the
    microseconds of every candidate that ran by label); ``(LINEAR, {})`` when none ran.

    ``kept`` (default :class:`KeptChoices` in the state folder): the choice timed at an earlier load for the same
    device, versions, kernel sources, candidates, weight format, shape and count is returned (``Gemv.kept``)
    once its result matches ``ref``; else every candidate is timed and the choice kept for the next load."""
    kept = KeptChoices() if kept is None else kept
    labels = [how.label() for how, _ in candidates]
    key = choice_key(labels, weights, x, shape)
    hit = kept.get(key)
    if hit is not None:
        choice, timings = hit
        fn = dict((how.label(), f) for how, f in candidates).get(choice.label())
        try:
            err = None if fn is None else _matches(fn, x, weights[0], ref)
        except Exception as exc:
            err, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "not a candidate now" if fn is None else f"relative error {err:.2e}"
        if err is not None and err <= rtol:
            log.info("matrix-vector %s for %s: kept from an earlier load (%s)", choice.label(), shape, kept.path)
            return Gemv(choice.kind, choice.block_n, choice.block_k, choice.num_warps, choice.us, kept=True), timings
        log.warning("matrix-vector %s for %s kept in %s is not used (%s); timing every candidate again",
                    choice.label(), shape, kept.path, why)
    best, best_us, timings = LINEAR, float("inf"), {}
    for how, fn in candidates:
        try:
            err = _matches(fn, x, weights[0], ref)
            if not err <= rtol:
                log.warning("matrix-vector %s for %s rejected: relative error %.2e", how.label(), shape, err)
                continue
            us = _time_us(fn, weights, x)
        except Exception as exc:  # a tile Triton cannot compile here, or no cuBLAS kernel for the shape
            log.warning("matrix-vector %s for %s unavailable: %s", how.label(), shape, exc)
            continue
        timings[how.label()] = round(us, 2)
        if us < best_us:
            best, best_us = how, us
    if not timings:
        return LINEAR, {}
    choice = Gemv(best.kind, best.block_n, best.block_k, best.num_warps, round(best_us, 2))
    kept.put(key, choice, timings)
    return choice, timings


_KERNEL_SOURCES = ("_gemv_triton.py", "_quant_triton.py")
"""The kernel files (beside this module) whose contents are part of a kept choice's key."""


def choice_key(labels: Sequence[str], weights: Sequence[Any], x: torch.Tensor, shape: tuple[int, ...]) -> str:
    """The key of one choice in :class:`KeptChoices`: the device's name and compute capability, torch's and
    Triton's versions, a digest of the kernel sources, the candidates' labels, the weights' type, ``shape``,
    dtype (a tensor) or fields other than tensors (a stored quantised weight: sizes, block sizes) and count, and
    ``x``'s dtype."""
    import torch  # lazy: torch (optional, heavy)

    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in _KERNEL_SOURCES:
        path = here / name
        digest.update(path.read_bytes() if path.exists() else b"-")
    try:
        import triton  # lazy: Triton (CUDA installs only)

        triton_version = triton.__version__
    except ImportError:
        triton_version = "none"
    w0 = weights[0]
    if isinstance(w0, torch.Tensor):
        form: Any = str(w0.dtype)
    else:  # a NamedTuple of stored tensors and their sizes
        form = {k: v for k, v in w0._asdict().items() if not isinstance(v, torch.Tensor)}
    device = x.device
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        cc = "{}.{}".format(*torch.cuda.get_device_capability(device))
    else:
        name, cc = device.type, "-"
    return json.dumps([name, cc, torch.__version__, triton_version, digest.hexdigest()[:16], list(labels),
                       type(w0).__name__, list(shape), form, len(weights), str(x.dtype)], default=str)


class KeptChoices:
    """The matrix-vector choices timed at earlier loads, one JSON file (:func:`kept_choices_path` by default):
    ``{key: {"choice": Gemv fields, "timings": {label: us}, "timed": "YYYY-MM-DD HH:MM:SS"}}`` keyed by
    :func:`choice_key`. An unreadable file is logged and treated as empty (the next write replaces it); a
    failed write is logged only: the next load times again."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or kept_choices_path()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("matrix-vector choices in %s are unreadable (%s); timing every candidate", self.path, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> tuple[Gemv, dict[str, float]] | None:
        """The kept (choice, timings) under ``key``, or None."""
        entry: Any = self._read().get(key)
        try:
            choice = Gemv(**{k: v for k, v in entry["choice"].items() if k != "kept"})
            timings = {str(k): float(v) for k, v in entry["timings"].items()}
        except (TypeError, KeyError, AttributeError, ValueError):
            return None
        return choice, timings

    def put(self, key: str, choice: Gemv, timings: dict[str, float]) -> None:
        """Keep ``choice`` and its ``timings`` under ``key`` (the file rewritten whole, through a temporary file)."""
        data = self._read()
        data[key] = {"choice": {k: v for k, v in asdict(choice).items() if k != "kept"}, "timings": timings,
                     "timed": time.strftime("%Y-%m-%d %H:%M:%S")}
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")  # one per process: two loads at once do not mix
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(self.path)
        except OSError as exc:
            log.warning("matrix-vector choices could not be kept in %s: %s", self.path, exc)


def kept_choices_path() -> Path:
    """``$XDG_STATE_HOME/holodesk/holotron-kernel-choices.json`` (platformdirs' user state folder)."""
    import platformdirs  # lazy: imported by the load only

    return Path(platformdirs.user_state_dir("holodesk")) / "holotron-kernel-choices.json"


__all__ = ["HAVE_TRITON", "LINEAR", "TRITON_TILES", "Gemv", "KeptChoices", "choice_key", "choose", "fastest",
           "gemv_reference", "kept_choices_path", "linear"]
