"""Matrix-vector products for one-token decode on bitsandbytes' quantised weights, read as stored.

A quantised load keeps bitsandbytes' storage (``Linear4bit`` NF4, ``Linear8bitLt`` int8). For decode,
:func:`quant_weight` names that storage without copying it (:class:`NF4Weight`, :class:`Int8Weight`: the
module's own tensors) and :func:`linear` multiplies one token by it through a Triton kernel
(:mod:`._quant_triton`) that dequantises in registers:

* NF4 (bitsandbytes ``quantize_4bit``): the row-major ``[N, K]`` weight flattened, two 4-bit indices a
  byte, the high nibble first; value ``code[index] * absmax[element // blocksize]`` (``blocksize`` 64 by
  default); with ``compress_statistics`` the ``absmax`` are uint8 indices and each scale is
  ``code2[absmax[b]] * absmax2[b // blocksize2] + offset`` (``blocksize2`` 256). As
  ``bitsandbytes.functional.dequantize_4bit`` computes it.
* int8 weight-only (``Int8Params``): ``W = CB * SCB / 127`` per row (``CB [N, K]`` int8, ``SCB [N]``
  float32), as ``bitsandbytes.functional.int8_vectorwise_dequant``; not LLM.int8's activation
  quantisation and outlier split, which a single row gains nothing from.

The kernels accumulate in float32 and round once to the activation dtype. :func:`choose` times their tiles
on the real weights at load, as :func:`.gemv.choose` does for bf16, and rejects any tile whose result differs
from the dequantise-and-multiply reference (:func:`gemv_reference`, plain torch, also the CPU path) by more
than bf16 rounding. The ops (``torch.ops.holodesk.gemv_nf4`` / ``gemv_int8``) are opaque to
``torch.compile`` and captured in CUDA graphs like ``torch.ops.holodesk.gemv``.

Passes of several rows (prefill) multiply by the dequantised weight (:func:`matmul`); on CUDA an int8 weight is
dequantised by ``torch.ops.holodesk.dequant_int8``, one kernel, bit for bit :func:`dequantize`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from holodesk.policy.holotron.ops.gemv import LINEAR, Gemv, fastest

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

INT8_SCALE = 7.874015718698502e-3
"""``1 / 127`` as bitsandbytes writes it (``int8_vectorwise_dequant``): an int8 weight is ``W = CB * SCB *
INT8_SCALE``, multiplied in float32 in that order (:func:`dequantize`; the int8 ops of :mod:`._quant_triton`
take it as their ``scale``)."""

try:  # pragma: no cover - depends on the machine
    from holodesk.policy.holotron.ops import _quant_triton  # noqa: F401  (registers the ops)

    HAVE_TRITON = True
    _TRITON_MISSING = ""
except Exception as _exc:  # CPU-only installs (CI) may lack Triton; an old torch has no triton_op
    _TRITON_MISSING = f"{type(_exc).__name__}: {_exc}"
    log.debug("Triton quantised matrix-vector kernels unavailable (%s)", _TRITON_MISSING)
    HAVE_TRITON = False


class NF4Weight(NamedTuple):
    """A bitsandbytes NF4 weight ``[rows, cols]`` as stored (the ``Params4bit`` data and its
    ``quant_state``, not copied). Without double quantisation ``absmax2``/``code2`` repeat ``absmax``/``code``
    and ``offset`` is a zero (the kernel does not read them)."""

    packed: torch.Tensor  # uint8 [rows * cols / 2, 1]
    absmax: torch.Tensor  # float32 [rows * cols / blocksize], or uint8 indices into code2 when double
    code: torch.Tensor  # float32 [16], the NF4 values
    absmax2: torch.Tensor  # float32 [ceil(blocks / blocksize2)] when double
    code2: torch.Tensor  # float32 [256] when double (bitsandbytes' dynamic map)
    offset: torch.Tensor  # float32 [] added to every dequantised absmax when double
    rows: int
    cols: int
    blocksize: int
    blocksize2: int
    double: bool


class Int8Weight(NamedTuple):
    """A bitsandbytes int8 weight as stored: ``cb [N, K]`` int8 (the ``Int8Params`` data) and its row scales
    ``scb [N]`` float32; ``W = cb * scb / 127``."""

    cb: torch.Tensor
    scb: torch.Tensor


QuantWeight = NF4Weight | Int8Weight
QUANT_KINDS = ("nf4", "nf4-pairs", "nf4-shfl", "int8", "int8-words")
"""The :attr:`.gemv.Gemv.kind` of the kernels here: ``"nf4-pairs"`` is the NF4 kernel reading bf16
activations as int32 pairs (:func:`._quant_triton.nf4_gemv_kernel`'s ``X_PAIRS``: no shared-memory
round trip per step; compiled for sm_90 it has no barrier in its loop, the other variant four);
``"nf4-shfl"`` looks the NF4 values up by warp shuffle (:func:`._quant_triton.nf4_shfl_gemv_kernel`, inline
PTX: CUDA only, not in Triton's interpreter); ``"int8-words"`` reads an int8 weight as 32-bit words and turns each
byte into a float by its bits, with no int-to-float conversion instruction
(:func:`._quant_triton.int8_words_gemv_kernel`: bf16 activations, ``K`` a multiple of the step)."""

NF4_TILES: tuple[tuple[int, int, int], ...] = (
    (4, 1024, 4), (8, 512, 4), (16, 256, 4), (8, 1024, 8), (16, 512, 8), (32, 256, 8), (4, 512, 4), (16, 128, 4),
)
"""NF4 tiles tried at load ``(BLOCK_N, BLOCK_K elements, num_warps)``, each with both activation reads where
they apply (:func:`tiles`); most give each thread 16 weight bytes a step; a tile must fit ``BLOCK_K <= 2 K``,
so the 128-wide one serves small models too."""
NF4_SHFL_TILES: tuple[tuple[int, int, int], ...] = (
    (4, 1024, 1), (8, 1024, 1), (2, 1024, 1), (8, 1024, 2), (16, 1024, 4), (16, 1024, 2), (4, 2048, 2), (8, 512, 1),
)
"""``"nf4-shfl"`` tiles ``(BLOCK_N, BLOCK_K elements, num_warps)``; ``K`` must be a multiple of ``BLOCK_K``
(:func:`shfl_fits`). Triton spreads ``BLOCK_K / (8 NF4_SHFL_VEC)`` threads along the step and the rest of the
program's threads over its rows: e.g. ``8x1024/2w`` gives each warp four rows."""
NF4_SHFL_VEC = 4
"""Words (eight NF4 indices each) a thread of ``"nf4-shfl"`` reads of a row at a time: one 16-byte load."""
INT8_TILES: tuple[tuple[int, int, int], ...] = (
    (4, 1024, 4), (8, 512, 4), (8, 1024, 8), (16, 512, 8), (16, 256, 4), (32, 256, 8), (16, 128, 4),
)
"""int8 tiles tried at load ``(BLOCK_N, BLOCK_K, num_warps)``."""


def quant_weight(module: Any) -> QuantWeight | None:
    """The storage of a bitsandbytes ``Linear4bit`` (NF4, uint8 storage) or ``Linear8bitLt`` (int8 weights,
    no fp16 copy) without bias, as the kernels read it; None for anything else (a plain or biased layer,
    FP4, a layout the kernels do not read). No tensor is copied."""
    import torch  # lazy: torch (optional, heavy)

    try:
        import bitsandbytes as bnb  # lazy: bitsandbytes (optional, heavy)
    except ImportError:
        return None
    if getattr(module, "bias", None) is not None:
        return None
    if isinstance(module, bnb.nn.Linear4bit):
        qs = getattr(module.weight, "quant_state", None)
        data = module.weight.data
        if qs is None or qs.quant_type != "nf4" or data.dtype != torch.uint8 or len(qs.shape) != 2:
            return None
        rows, cols = int(qs.shape[0]), int(qs.shape[1])
        if cols % qs.blocksize or rows * cols >= 2**31:
            return None
        if qs.nested:
            s2 = qs.state2
            offset = qs.offset if isinstance(qs.offset, torch.Tensor) else torch.tensor(float(qs.offset))
            return NF4Weight(data, qs.absmax, qs.code, s2.absmax, s2.code, offset.to(data.device).float().reshape(()),
                             rows, cols, int(qs.blocksize), int(s2.blocksize), True)
        zero = torch.zeros((), dtype=torch.float32, device=data.device)
        return NF4Weight(data, qs.absmax, qs.code, qs.absmax, qs.code, zero, rows, cols, int(qs.blocksize), 1, False)
    if isinstance(module, bnb.nn.Linear8bitLt):
        cb = module.weight.data
        scb = getattr(module.weight, "SCB", None)
        if scb is None:  # moved to the module's state by its first forward (init_8bit_state)
            scb = getattr(module.state, "SCB", None)
        if cb.dtype != torch.int8 or cb.dim() != 2 or scb is None or not cb.is_contiguous():
            return None
        return Int8Weight(cb, scb)
    return None


def shape(w: QuantWeight) -> tuple[int, int]:
    """``(N, K)`` of the weight ``w`` multiplies by."""
    if isinstance(w, NF4Weight):
        return w.rows, w.cols
    return int(w.cb.shape[0]), int(w.cb.shape[1])


def nbytes(w: QuantWeight) -> int:
    """Bytes a product with ``w`` reads from its storage (packed weight and scales; the code tables)."""
    if isinstance(w, NF4Weight):
        ts = [w.packed, w.absmax, w.code] + ([w.absmax2, w.code2, w.offset] if w.double else [])
    else:
        ts = [w.cb, w.scb]
    return sum(t.numel() * t.element_size() for t in ts)


def dequantize(w: QuantWeight, dtype: torch.dtype | None = None, rows: tuple[int, int] | None = None
               ) -> torch.Tensor:
    """The weight's rows ``[r0, r1)`` (default all ``N``) ``[r1 - r0, K]`` in float32 (or ``dtype``), written
    out in torch from the storage."""
    import torch  # lazy: torch (optional, heavy)

    r0, r1 = rows if rows is not None else (0, shape(w)[0])
    if isinstance(w, Int8Weight):
        out = w.cb[r0:r1].float() * w.scb[r0:r1].float().view(-1, 1) * INT8_SCALE  # bitsandbytes' order
        return out if dtype is None else out.to(dtype)
    per_row = w.cols // w.blocksize  # quantisation blocks per row (cols is a multiple of blocksize)
    b = w.packed.reshape(-1)[r0 * w.cols // 2 : r1 * w.cols // 2]
    idx = torch.stack([(b >> 4).long(), (b & 15).long()], dim=-1).reshape(-1)
    values = w.code.float()[idx].view(-1, w.blocksize)
    first, last = r0 * per_row, r1 * per_row  # the flat block indices of these rows
    if w.double:
        nested = torch.arange(first, last, device=b.device) // w.blocksize2
        scale = (w.code2.float()[w.absmax.reshape(-1)[first:last].long()] * w.absmax2.float().reshape(-1)[nested]
                 + w.offset.float())
    else:
        scale = w.absmax.float().reshape(-1)[first:last]
    out = (values * scale.view(-1, 1)).view(r1 - r0, w.cols)
    return out if dtype is None else out.to(dtype)


def gemv_reference(x: torch.Tensor, w: QuantWeight, chunk_rows: int = 1024) -> torch.Tensor:
    """``x [B, K] @ W^T`` with ``W`` dequantised in float32, summed in float32 and rounded once to ``x``'s
    dtype: what the kernels compute, up to the order of the float32 sums. ``W`` is dequantised
    ``chunk_rows`` rows at a time, so the temporaries stay small (tile checks at load, 12B shapes)."""
    import torch  # lazy: torch (optional, heavy)

    n = shape(w)[0]
    xf = x.float()
    parts = [xf @ dequantize(w, rows=(r, min(n, r + chunk_rows))).t() for r in range(0, n, chunk_rows)]
    return torch.cat(parts, dim=-1).to(x.dtype)


def matmul(x: torch.Tensor, w: QuantWeight, chunk_rows: int = 4096) -> torch.Tensor:
    """``x [..., K] @ W^T`` -> ``[..., N]`` in ``x``'s dtype for passes of several rows (prefill, a jump-forward
    pass): ``W`` dequantised ``chunk_rows`` output rows at a time (float32, as :func:`dequantize`, then
    rounded to ``x``'s dtype) and multiplied by cuBLAS (``F.linear``). Weight-only: the activations are not
    quantised (bitsandbytes' ``Linear8bitLt`` forward would quantise them, LLM.int8).

    An int8 weight on CUDA is dequantised by ``torch.ops.holodesk.dequant_int8`` (one kernel: reads each weight
    byte once and writes the chunk in ``x``'s dtype, bit for bit :func:`dequantize`); without Triton, or off
    CUDA, by :func:`dequantize` in torch (temporaries: one chunk of ``W`` in float32 and in ``x``'s dtype; on
    CUDA logged once, :func:`_int8_prefill_in_torch`)."""
    # lazy (here and below): torch (optional, heavy)
    import torch
    import torch.nn.functional as F

    n = shape(w)[0]
    fused = w if isinstance(w, Int8Weight) and w.cb.device.type == "cuda" else None
    if fused is not None and not HAVE_TRITON:
        _int8_prefill_in_torch()
        fused = None
    parts = []
    for r0 in range(0, n, chunk_rows):
        r1 = min(n, r0 + chunk_rows)
        chunk = (dequantize(w, x.dtype, rows=(r0, r1)) if fused is None else
                 torch.ops.holodesk.dequant_int8(fused.cb[r0:r1], fused.scb[r0:r1], INT8_SCALE, x.dtype))
        parts.append(F.linear(x, chunk))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


@functools.cache
def _int8_prefill_in_torch() -> None:
    """Log, once, that int8 prefill on CUDA dequantises in torch (Triton missing: :data:`HAVE_TRITON`; ``holodesk
    doctor`` shows it through :func:`.kernels.quant_decode_report`)."""
    log.warning("int8 prefill dequantises its weights in torch (four kernels and a float32 copy a chunk): the "
                "Triton kernels of ops/_quant_triton.py did not import (%s)", _TRITON_MISSING)


def linear(x: torch.Tensor, w: QuantWeight, how: tuple[str, int, int, int] | None = None) -> torch.Tensor:
    """``x [B, K] @ W^T`` -> ``[B, N]`` in ``x``'s dtype; through the kernel ``how`` (:meth:`.gemv.Gemv.spec`
    of kind ``"nf4"`` / ``"int8"``) when ``x`` is one row, else :func:`gemv_reference`.

    Raises:
        ValueError: ``how`` names a kernel of the other format or an unknown one.
    """
    import torch  # lazy: torch (optional, heavy)

    if how is None or how[0] == "linear" or x.dim() != 2 or x.shape[0] != 1:
        return gemv_reference(x, w)
    _, bn, bk, nw = how
    if how[0] == "nf4-shfl" and isinstance(w, NF4Weight):
        return torch.ops.holodesk.gemv_nf4_shfl(x.contiguous(), w.packed, w.absmax, w.code, w.absmax2, w.code2,
                                                w.offset, w.rows, w.cols, w.blocksize, w.blocksize2, w.double, bn, bk,
                                                nw, NF4_SHFL_VEC)
    if how[0] in ("nf4", "nf4-pairs") and isinstance(w, NF4Weight):
        return torch.ops.holodesk.gemv_nf4(x.contiguous(), w.packed, w.absmax, w.code, w.absmax2, w.code2, w.offset,
                                           w.rows, w.cols, w.blocksize, w.blocksize2, w.double, bn, bk, nw,
                                           how[0] == "nf4-pairs")
    if how[0] == "int8" and isinstance(w, Int8Weight):
        return torch.ops.holodesk.gemv_int8(x.contiguous(), w.cb, w.scb, INT8_SCALE, bn, bk, nw)
    if how[0] == "int8-words" and isinstance(w, Int8Weight):
        return torch.ops.holodesk.gemv_int8_words(x.contiguous(), w.cb, w.scb, INT8_SCALE, bn, bk, nw)
    raise ValueError(f"matrix-vector implementation {how[0]!r} does not read a {type(w).__name__}")


def shfl_fits(w: NF4Weight, tile: tuple[int, int, int]) -> bool:
    """Whether ``"nf4-shfl"`` reads ``w`` at ``tile`` ``(BLOCK_N, BLOCK_K, num_warps)``: ``K`` a multiple of
    ``BLOCK_K``, and ``BLOCK_K`` and the blocksize multiples of a thread's ``8 NF4_SHFL_VEC`` values (which then
    lie inside one quantisation block)."""
    per_thread = 8 * NF4_SHFL_VEC
    return w.cols % tile[1] == 0 and tile[1] % per_thread == 0 and w.blocksize % per_thread == 0


def tiles(w: QuantWeight, dtype: torch.dtype | None = None, *, shuffle: bool = True) -> list[Gemv]:
    """The kernel tiles that fit ``w`` and activations of ``dtype`` (default bfloat16; unchosen, untimed):
    NF4 steps hold whole quantisation blocks; ``"nf4-pairs"`` and ``"int8-words"`` need bf16 and ``K`` a
    multiple of the step; ``"nf4-shfl"`` (inline PTX, left out with ``shuffle=False``: Triton's interpreter
    cannot run it) needs bf16 and :func:`shfl_fits`."""
    import torch  # lazy: torch (optional, heavy)

    k = shape(w)[1]
    bf16 = (dtype or torch.bfloat16) == torch.bfloat16
    if isinstance(w, NF4Weight):
        fit = [(bn, bk, nw) for bn, bk, nw in NF4_TILES if bk % w.blocksize == 0 and bk <= 2 * k]
        shfl = [Gemv("nf4-shfl", *t) for t in NF4_SHFL_TILES if shuffle and bf16 and shfl_fits(w, t)]
        pairs = [Gemv("nf4-pairs", bn, bk, nw) for bn, bk, nw in fit if bf16 and k % bk == 0]
        return shfl + pairs + [Gemv("nf4", bn, bk, nw) for bn, bk, nw in fit]
    words = [Gemv("int8-words", bn, bk, nw) for bn, bk, nw in INT8_TILES
             if bf16 and k % bk == 0 and w.cb.is_contiguous()]  # every step is a multiple of 4
    return words + [Gemv("int8", bn, bk, nw) for bn, bk, nw in INT8_TILES if bk <= 2 * k]


def choose(weights: Sequence[QuantWeight], *, dtype: torch.dtype | None = None,
           check_rtol: float = 1e-2) -> tuple[Gemv, dict[str, float]]:
    """Time every kernel tile on these weights (one format, same ``K``; CUDA) and return the fastest.

    Args:
        weights: the quantised matrices of one role that a decode step multiplies.
        dtype: the activations' dtype (default bfloat16).
        check_rtol: relative error (L2) a tile may show against :func:`gemv_reference` (bf16 rounding).
    Returns:
        (the fastest correct tile with its time, microseconds per product of every tile that ran by
        :meth:`.gemv.Gemv.label`); ``(LINEAR, {})`` off CUDA, without Triton, or when no tile ran: the
        caller then keeps bitsandbytes' modules.
    """
    import torch  # lazy: torch (optional, heavy)

    w0 = weights[0]
    dev = w0.packed.device if isinstance(w0, NF4Weight) else w0.cb.device
    if dev.type != "cuda" or not HAVE_TRITON:
        return LINEAR, {}
    gen = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(1, shape(w0)[1], generator=gen, device=dev, dtype=dtype or torch.bfloat16)
    ref = gemv_reference(x, w0).float()
    candidates = [(tile, functools.partial(linear, how=tile.spec())) for tile in tiles(w0, x.dtype)]
    return fastest(candidates, weights, x, ref, check_rtol, shape(w0))


__all__ = ["HAVE_TRITON", "INT8_SCALE", "INT8_TILES", "NF4_SHFL_TILES", "NF4_SHFL_VEC", "NF4_TILES", "QUANT_KINDS",
           "Int8Weight", "NF4Weight", "QuantWeight", "choose", "dequantize", "gemv_reference", "linear", "matmul",
           "nbytes", "quant_weight", "shape", "shfl_fits", "tiles"]
