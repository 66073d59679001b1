"""Triton kernels that read bitsandbytes' storage directly: the matrix-vector products of decode and their ops
``torch.ops.holodesk.gemv_nf4`` / ``gemv_nf4_shfl`` / ``gemv_int8`` / ``gemv_int8_words``, and the int8
dequantisation of prefill,
``torch.ops.holodesk.dequant_int8`` (see :mod:`.quant`; references :func:`.quant.dequantize` and
:func:`.quant.gemv_reference`).

Kept apart, without ``from __future__ import annotations``: ``torch.library.triton_op`` reads the op's
schema from real annotations. Importing this module needs torch and Triton (raises ImportError otherwise).
"""

import torch
import triton
import triton.language as tl

DEQUANT_INT8_TILE = (16, 1024, 4)
""":func:`int8_dequant_kernel`'s tile ``(BLOCK_N rows, BLOCK_K columns, num_warps)``: 16 KiB of int8 in, 32 KiB
of bf16 out a program; each thread reads 8 consecutive bytes of a row at a time."""
DEQUANT_INT8_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
"""The output dtypes of ``torch.ops.holodesk.dequant_int8``: the float32 value rounded once (exactly for
float32 and float64)."""


@triton.jit
def nf4_gemv_kernel(q_ptr, absmax_ptr, code_ptr, absmax2_ptr, code2_ptr, offset_ptr, x_ptr, xw_ptr, y_ptr,  # type: ignore[no-untyped-def]
                    n_rows, n_cols, BLOCKSIZE: tl.constexpr, BLOCKSIZE2: tl.constexpr, DOUBLE: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, X_PAIRS: tl.constexpr):
    """``y[r] = sum_k W[r, k] x[k]`` with ``W`` in bitsandbytes' NF4 layout: the row-major ``[N, K]`` weight
    flattened, two 4-bit indices a byte (the high nibble is the even element), value ``code[index] *
    absmax[element // BLOCKSIZE]``; with ``DOUBLE`` (``compress_statistics``) ``absmax`` holds uint8
    indices and the scale is ``code2[absmax[b]] * absmax2[b // BLOCKSIZE2] + offset``.

    Each program takes ``BLOCK_N`` rows and walks ``K`` in steps of ``BLOCK_K`` elements, held as
    ``[BLOCK_N, BLOCK_K // BLOCKSIZE, BLOCKSIZE // 2]`` bytes so that each quantisation block's scale is
    one value broadcast over its bytes; float32 products accumulate per lane, one reduction at the end.
    ``X_PAIRS`` (bf16 ``x``, ``EVEN_K``): ``xw_ptr`` is ``x`` viewed as int32, one word per byte of the
    weight holding the two activations its nibbles multiply, loaded in the weight's own layout (one
    vector load per thread, repeated across the rows from L1) instead of two strided loads redistributed
    through shared memory; the bf16 halves become float32 by shifting.
    """
    G: tl.constexpr = BLOCK_K // BLOCKSIZE
    HALF: tl.constexpr = BLOCKSIZE // 2
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    rows = tl.where(row_ok, rows, 0)  # rows past the end read row 0 and are not stored
    blocks_per_row = n_cols // BLOCKSIZE
    g = tl.arange(0, G)
    j = tl.arange(0, HALF)
    if DOUBLE:
        offset = tl.load(offset_ptr)
    acc = tl.zeros([BLOCK_N, G, HALF], dtype=tl.float32)
    for k0 in range(0, n_cols, BLOCK_K):
        blk = k0 // BLOCKSIZE + g  # [G] block index within the row
        byte = rows[:, None, None] * (n_cols // 2) + blk[None, :, None] * HALF + j[None, None, :]
        col = blk[:, None] * BLOCKSIZE + 2 * j[None, :]  # [G, HALF] the even element of each byte
        flat = rows[:, None] * blocks_per_row + blk[None, :]  # [BLOCK_N, G] block index in the flat weight
        if X_PAIRS:
            b = tl.load(q_ptr + byte).to(tl.int32)
            pair = blk[:, None] * HALF + j[None, :]  # [G, HALF] the word of x under each byte
            xw = tl.load(tl.broadcast_to(xw_ptr + pair[None, :, :], (BLOCK_N, G, HALF)))
            xe = (xw << 16).to(tl.float32, bitcast=True)  # low half: the even element (little-endian)
            xo = (xw & -65536).to(tl.float32, bitcast=True)
            if DOUBLE:
                a8 = tl.load(absmax_ptr + flat).to(tl.int32)
                scale = tl.load(code2_ptr + a8) * tl.load(absmax2_ptr + flat // BLOCKSIZE2) + offset
            else:
                scale = tl.load(absmax_ptr + flat)
        elif EVEN_K:
            b = tl.load(q_ptr + byte).to(tl.int32)
            xe = tl.load(x_ptr + col).to(tl.float32)[None, :, :]
            xo = tl.load(x_ptr + col + 1).to(tl.float32)[None, :, :]
            if DOUBLE:
                a8 = tl.load(absmax_ptr + flat).to(tl.int32)
                scale = tl.load(code2_ptr + a8) * tl.load(absmax2_ptr + flat // BLOCKSIZE2) + offset
            else:
                scale = tl.load(absmax_ptr + flat)
        else:
            ok = blk < blocks_per_row
            b = tl.load(q_ptr + byte, mask=ok[None, :, None], other=0).to(tl.int32)
            xe = tl.load(x_ptr + col, mask=ok[:, None], other=0.0).to(tl.float32)[None, :, :]
            xo = tl.load(x_ptr + col + 1, mask=ok[:, None], other=0.0).to(tl.float32)[None, :, :]
            if DOUBLE:
                a8 = tl.load(absmax_ptr + flat, mask=ok[None, :], other=0).to(tl.int32)
                scale = tl.load(code2_ptr + a8) * tl.load(absmax2_ptr + flat // BLOCKSIZE2, mask=ok[None, :],
                                                          other=0.0) + offset
                scale = tl.where(ok[None, :], scale, 0.0)
            else:
                scale = tl.load(absmax_ptr + flat, mask=ok[None, :], other=0.0)
        hi = tl.load(code_ptr + (b >> 4))
        lo = tl.load(code_ptr + (b & 15))
        acc += (hi * xe + lo * xo) * scale[:, :, None]
    y = tl.sum(tl.sum(acc, axis=2), axis=1)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def _nf4_shfl_steps(w_ptr, absmax_ptr, absmax2_ptr, code2_ptr, offset_ptr, xw_ptr, table, rows, n_cols,  # type: ignore[no-untyped-def]
                    words_per_row, BLOCKSIZE: tl.constexpr, BLOCKSIZE2: tl.constexpr, DOUBLE: tl.constexpr,
                    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, VEC: tl.constexpr, X16: tl.constexpr):
    """:func:`nf4_shfl_gemv_kernel`'s walk along ``K`` for the rows ``rows [BLOCK_N]``: the float32 partial sums
    ``[BLOCK_N, BLOCK_K // (8 VEC)]`` (one a thread and row); ``X16``: ``x`` is 16-byte aligned.

    The weight is loaded as ``[BLOCK_N, BLOCK_K // 8]`` words, contiguous along the row, so that Triton (3.6
    and 3.9 alike) gives each thread ``VEC`` consecutive words of every row: the threads run along the step,
    the rows repeat in each thread. (A ``[BLOCK_N, T, VEC]`` load spread the rows over the lanes in Triton
    3.6.) Everything else follows that layout: the activations and the scales are read by inline PTX,
    which, unlike ``tl.load``, does not choose a layout of its own."""
    W: tl.constexpr = BLOCK_K // 8  # words of a row a step
    T: tl.constexpr = W // VEC  # threads along a row's step
    word = tl.arange(0, W)
    blocks_per_row = n_cols // BLOCKSIZE
    if DOUBLE:
        offset = tl.load(offset_ptr)
    acc = tl.zeros([BLOCK_N, T], dtype=tl.float32)
    for k0 in range(0, n_cols, BLOCK_K):
        w = tl.load(w_ptr + rows[:, None] * words_per_row + (k0 // 8) + word[None, :])  # [BLOCK_N, W]
        addr = (xw_ptr + 4 * (k0 // 8 + word)).to(tl.int64, bitcast=True)  # [W] pair 4m of word m
        if X16:
            p0, p1, p2, p3 = tl.inline_asm_elementwise("ld.global.nc.v4.b32 {$0, $1, $2, $3}, [$4];",
                                                       "=r,=r,=r,=r,l", [addr],
                                                       dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=True,
                                                       pack=1)
        else:
            p0, p1, p2, p3 = tl.inline_asm_elementwise(
                "ld.global.nc.b32 $0, [$4]; ld.global.nc.b32 $1, [$4+4]; ld.global.nc.b32 $2, [$4+8]; ld.global.nc.b32 $3, [$4+12];",  # noqa: E501
                "=r,=r,=r,=r,l", [addr], dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=True, pack=1)
        s = tl.zeros([BLOCK_N, W], dtype=tl.float32)
        for q in tl.static_range(4):
            pq = p0 if q == 0 else (p1 if q == 1 else (p2 if q == 2 else p3))
            x_odd = (pq & -65536).to(tl.float32, bitcast=True)[None, :]  # high half: element 8m + 2q + 1
            x_even = (pq << 16).to(tl.float32, bitcast=True)[None, :]  # low half: element 8m + 2q
            v_odd = tl.inline_asm_elementwise("shfl.sync.idx.b32 $0, $1, $2, 31, -1;", "=r,r,r",
                                              [table, w >> (8 * q)], dtype=tl.int32, is_pure=True,
                                              pack=1).to(tl.float32, bitcast=True)  # nibble 2q
            v_even = tl.inline_asm_elementwise("shfl.sync.idx.b32 $0, $1, $2, 31, -1;", "=r,r,r",
                                               [table, w >> (8 * q + 4)], dtype=tl.int32, is_pure=True,
                                               pack=1).to(tl.float32, bitcast=True)  # nibble 2q + 1
            s += v_odd * x_odd
            s += v_even * x_even
        blk = (k0 + tl.arange(0, T) * (8 * VEC)) // BLOCKSIZE
        flat = rows[:, None] * blocks_per_row + blk[None, :]  # [BLOCK_N, T] block index in the flat weight
        # a tl.load of the scales takes its own layout (Triton 3.6: rows across lanes), and the partial sums
        # then cross shared memory every step to meet it
        if DOUBLE:
            a8 = tl.inline_asm_elementwise("ld.global.nc.u8 $0, [$1];", "=r,l",
                                           [(absmax_ptr + flat).to(tl.int64, bitcast=True)], dtype=tl.int32,
                                           is_pure=True, pack=1)
            c2 = tl.inline_asm_elementwise("ld.global.nc.f32 $0, [$1];", "=f,l",
                                           [(code2_ptr + a8).to(tl.int64, bitcast=True)], dtype=tl.float32,
                                           is_pure=True, pack=1)
            a2 = tl.inline_asm_elementwise("ld.global.nc.f32 $0, [$1];", "=f,l",
                                           [(absmax2_ptr + flat // BLOCKSIZE2).to(tl.int64, bitcast=True)],
                                           dtype=tl.float32, is_pure=True, pack=1)
            scale = c2 * a2 + offset
        else:
            scale = tl.inline_asm_elementwise("ld.global.nc.f32 $0, [$1];", "=f,l",
                                              [(absmax_ptr + flat).to(tl.int64, bitcast=True)], dtype=tl.float32,
                                              is_pure=True, pack=1)
        acc += tl.sum(tl.reshape(s, [BLOCK_N, T, VEC]), axis=2) * scale
    return acc


@triton.jit
def nf4_shfl_gemv_kernel(w_ptr, absmax_ptr, code_ptr, absmax2_ptr, code2_ptr, offset_ptr, xw_ptr, y_ptr,  # type: ignore[no-untyped-def]
                         n_rows, n_cols, words_per_row, BLOCKSIZE: tl.constexpr, BLOCKSIZE2: tl.constexpr,
                         DOUBLE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, VEC: tl.constexpr):
    """``y[r] = sum_k W[r, k] x[k]`` for bitsandbytes' NF4 weight (layout as :func:`nf4_gemv_kernel`) and bf16
    ``x``, the 16 NF4 values looked up by warp shuffle in float32, exactly as stored.

    ``w_ptr`` is the packed weight as little-endian int32 words, eight indices a word: bits ``4j..4j+3`` hold
    element ``8m + (j ^ 1)`` of word ``m`` (bitsandbytes puts the even element in a byte's high nibble).
    ``xw_ptr`` is ``x`` as int32 pairs (word ``p`` = ``x[2p]`` low half, ``x[2p + 1]`` high half), so word
    ``m``'s pair ``q`` holds the activations of its nibbles ``2q + 1`` (low half) and ``2q`` (high half).
    Every lane holds ``code[lane & 15]`` in a register; a lookup is one ``shfl.sync.idx.b32 d, table, b, 31,
    -1`` of the word shifted right by ``4j`` (PTX ISA, ``shfl.sync``: with ``c = 31``, no segment mask and
    clamp 31, the source lane is ``b[4:0]``, whose value is ``code[b & 15]``: the bits above 4 are ignored
    and bit 4 picks a half-warp holding the same table). Each program takes ``BLOCK_N`` rows; each thread
    holds ``VEC`` consecutive words (``8 VEC`` elements, inside one quantisation block) of every row at the
    same columns, so it loads and widens their activations once for all ``BLOCK_N`` rows (one 16-byte
    ``ld.global.nc.v4`` a word; four 4-byte loads when ``x`` is not 16-byte aligned). Per weight: one
    shuffle, at most one shift, one float32 FMA; per block of a row, one scale. Needs ``n_cols`` a multiple
    of ``BLOCK_K`` and ``BLOCKSIZE`` a multiple of ``8 VEC``; inline PTX, so not in Triton's interpreter.
    ``words_per_row`` is ``n_cols // 8``, passed by the host so that Triton's argument specialisation knows its
    alignment (16-byte weight loads) without ``tl.multiple_of`` on a scalar argument: torch's analysis of which
    arguments a user kernel writes (``identify_mutated_tensors``, torch 2.11) compiles it with the scalar
    arguments as constants, where ``tl.multiple_of`` fails, and it then takes every argument as written.
    """
    pid = tl.program_id(0)
    lane = tl.inline_asm_elementwise("mov.u32 $0, %laneid;", "=r,r", [pid], dtype=tl.int32, is_pure=True, pack=1)
    table = tl.load(code_ptr + (lane & 15)).to(tl.int32, bitcast=True)  # this lane's NF4 value, float32 bits
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    rows = tl.where(row_ok, rows, 0)  # rows past the end read row 0 and are not stored
    if xw_ptr.to(tl.int64, bitcast=True) % 16 == 0:
        acc = _nf4_shfl_steps(w_ptr, absmax_ptr, absmax2_ptr, code2_ptr, offset_ptr, xw_ptr, table, rows, n_cols,
                              words_per_row, BLOCKSIZE, BLOCKSIZE2, DOUBLE, BLOCK_N, BLOCK_K, VEC, True)
    else:
        acc = _nf4_shfl_steps(w_ptr, absmax_ptr, absmax2_ptr, code2_ptr, offset_ptr, xw_ptr, table, rows, n_cols,
                              words_per_row, BLOCKSIZE, BLOCKSIZE2, DOUBLE, BLOCK_N, BLOCK_K, VEC, False)
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def int8_gemv_kernel(w_ptr, scb_ptr, x_ptr, y_ptr, n_rows, n_cols, stride_w,  # type: ignore[no-untyped-def]
                     SCALE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """``y[r] = SCB[r] SCALE sum_k CB[r, k] x[k]``: bitsandbytes' int8 weight (``CB [N, K]`` int8, row
    scales ``SCB [N]`` float32, ``SCALE`` :data:`.quant.INT8_SCALE`) read as stored; ``BLOCK_K``-wide coalesced
    slices of ``BLOCK_N`` rows, float32 products per lane, one reduction and one scale per row at the end."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    rows = tl.where(row_ok, rows, 0)
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, n_cols, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        if EVEN_K:  # x read in the weight's layout (repeated across the rows from L1): no shared-memory round trip
            w = tl.load(w_ptr + rows[:, None] * stride_w + cols[None, :])
            x = tl.load(tl.broadcast_to(x_ptr + cols[None, :], (BLOCK_N, BLOCK_K)))
        else:
            col_ok = cols < n_cols
            w = tl.load(w_ptr + rows[:, None] * stride_w + cols[None, :], mask=col_ok[None, :], other=0)
            x = tl.load(x_ptr + cols, mask=col_ok, other=0.0)[None, :]
        acc += w.to(tl.float32) * x.to(tl.float32)
    y = tl.sum(acc, axis=1) * (tl.load(scb_ptr + rows) * SCALE)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def int8_words_gemv_kernel(w_ptr, scb_ptr, xq_ptr, y_ptr, n_rows, n_cols, words_per_row,  # type: ignore[no-untyped-def]
                           SCALE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``y[r] = SCB[r] SCALE sum_k CB[r, k] x[k]`` as :func:`int8_gemv_kernel`, with no integer-to-float
    conversion instruction: the weight is read as little-endian int32 words (byte ``q`` of word ``m`` is
    ``CB[r, 4m + q]``) and ``x`` as int64 quads (quad ``m`` holds ``x[4m .. 4m + 3]``, bf16, low half first).

    Each byte ``b`` becomes a float by its bits: ``u = b + 128`` (the word xor ``0x80808080``), ``0x4B000000 |
    u`` is the float32 ``2^23 + u`` exactly, and subtracting ``2^23 + 128`` leaves ``b`` exactly. An
    ``I2F`` (what ``.to(tl.float32)`` of an int8 compiles to on sm_90) issues at 16 lanes a clock per SM,
    which an int8 matrix-vector product at the copy floor (about 12-16 weights a clock per SM on an H100)
    nearly fills; the bit operations and the float32 subtraction run on the integer and float pipes (64 and
    128 lanes). Products are exact (an 8-bit integer times a bf16 value) and summed in float32 per lane, one
    reduction and one scale per row at the end. Needs ``n_cols`` a multiple of ``BLOCK_K`` and of 4 (the op
    checks); ``words_per_row`` is ``n_cols // 4``, passed so that Triton's argument specialisation sees its
    alignment (as :func:`nf4_shfl_gemv_kernel`'s). Runs in Triton's interpreter."""
    W: tl.constexpr = BLOCK_K // 4  # words of a row a step
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    rows = tl.where(row_ok, rows, 0)  # rows past the end read row 0 and are not stored
    word = tl.arange(0, W)
    acc = tl.zeros([BLOCK_N, W], dtype=tl.float32)
    for k0 in range(0, n_cols, BLOCK_K):
        w = tl.load(w_ptr + rows[:, None] * words_per_row + (k0 // 4) + word[None, :])  # [BLOCK_N, W] int32
        # x in the weight's layout (repeated across the rows from L1): no shared-memory round trip
        xq = tl.load(tl.broadcast_to(xq_ptr + (k0 // 4) + word[None, :], (BLOCK_N, W)))
        lo = xq.to(tl.int32)  # elements 4m (low half), 4m + 1 (high half)
        hi = (xq >> 32).to(tl.int32)  # elements 4m + 2, 4m + 3
        u = w ^ -2139062144  # 0x80808080: each byte b becomes b + 128, unsigned
        for q in tl.static_range(4):
            f = (((u >> (8 * q)) & 255) | 0x4B000000).to(tl.float32, bitcast=True) - 8388736.0  # 2^23 + 128
            half = lo if q < 2 else hi
            x = (half << 16) if q % 2 == 0 else (half & -65536)
            acc += f * x.to(tl.float32, bitcast=True)
    y = tl.sum(acc, axis=1) * (tl.load(scb_ptr + rows) * SCALE)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def int8_dequant_kernel(cb_ptr, scb_ptr, out_ptr, n_rows, n_cols, stride_w,  # type: ignore[no-untyped-def]
                        SCALE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``out[r, k] = CB[r, k] SCB[r] SCALE`` in float32, in that order (:func:`.quant.dequantize`, bitsandbytes'
    ``int8_vectorwise_dequant``), rounded once to ``out``'s dtype: bitsandbytes' int8 weight (``CB [N, K]``
    int8, row stride ``stride_w`` elements, columns contiguous; row scales ``SCB [N]``; ``SCALE``
    :data:`.quant.INT8_SCALE`) into a contiguous ``out [N, K]``. Program ``(i, j)`` writes the tile of rows
    ``i BLOCK_N ..`` and columns ``j BLOCK_K ..``, masked at the edges (``K`` need not be a multiple of
    ``BLOCK_K``): one read of each weight byte, one write of each output element, coalesced along the row.
    bf16 is rounded on the float32 bits (to nearest, ties to even, as torch's ``.to``), so that Triton's
    interpreter, whose ``.to(tl.bfloat16)`` truncates, computes what the GPU does (``cvt.rn.bf16.f32``); the
    value is finite (int8 times a finite scale), so no NaN needs keeping."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    row_ok = rows < n_rows
    ok = row_ok[:, None] & (cols < n_cols)[None, :]
    rows64 = rows.to(tl.int64)  # element offsets in int64: N K may pass 2^31
    cb = tl.load(cb_ptr + rows64[:, None] * stride_w + cols[None, :], mask=ok, other=0)
    scb = tl.load(scb_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    w = cb.to(tl.float32) * scb[:, None] * SCALE
    if out_ptr.dtype.element_ty == tl.bfloat16:  # to nearest, ties to even, on the bits: the top 16 of float32
        bits = w.to(tl.uint32, bitcast=True)
        bits += 0x7FFF + ((bits >> 16) & 1)
        out = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        out = w.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + rows64[:, None] * n_cols + cols[None, :], out, mask=ok)


@torch.library.triton_op("holodesk::gemv_nf4", mutates_args=())
def gemv_nf4_op(x: torch.Tensor, packed: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor,
                absmax2: torch.Tensor, code2: torch.Tensor, offset: torch.Tensor, n_rows: int, n_cols: int,
                blocksize: int, blocksize2: int, double: bool, block_n: int, block_k: int,
                num_warps: int, x_pairs: bool) -> torch.Tensor:
    """``torch.ops.holodesk.gemv_nf4``: ``x [1, K]`` times the NF4 weight ``[N, K]`` (``packed`` uint8
    ``[N * K / 2, 1]`` and its quantisation state, :class:`.quant.NF4Weight`) -> ``[1, N]`` in ``x``'s
    dtype, by :func:`nf4_gemv_kernel`; ``block_k`` a multiple of ``blocksize``; ``x_pairs`` (bf16 ``x``,
    ``K`` a multiple of ``block_k``) reads ``x`` as int32 pairs.

    Raises:
        ValueError: ``x_pairs`` for an ``x`` that is not bf16 or a ``K`` that ``block_k`` does not divide.
    """
    even = n_cols % block_k == 0
    if x_pairs and (x.dtype != torch.bfloat16 or not even):
        raise ValueError("x_pairs needs bf16 activations and K a multiple of block_k")
    y = torch.empty(1, n_rows, dtype=x.dtype, device=x.device)
    xw = x.view(torch.int32) if x_pairs else x  # the same bytes: word j = (x[2j], x[2j + 1])
    grid = (triton.cdiv(n_rows, block_n),)
    torch.library.wrap_triton(nf4_gemv_kernel)[grid](
        packed, absmax, code, absmax2, code2, offset, x, xw, y, n_rows, n_cols, BLOCKSIZE=blocksize,
        BLOCKSIZE2=blocksize2, DOUBLE=double, BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=even, X_PAIRS=x_pairs,
        num_warps=num_warps)
    return y


@torch.library.triton_op("holodesk::gemv_nf4_shfl", mutates_args=())
def gemv_nf4_shfl_op(x: torch.Tensor, packed: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor,
                     absmax2: torch.Tensor, code2: torch.Tensor, offset: torch.Tensor, n_rows: int, n_cols: int,
                     blocksize: int, blocksize2: int, double: bool, block_n: int, block_k: int,
                     num_warps: int, vec: int) -> torch.Tensor:
    """``torch.ops.holodesk.gemv_nf4_shfl``: bf16 ``x [1, K]`` times the NF4 weight ``[N, K]`` (as
    :func:`gemv_nf4_op`) -> ``[1, N]`` bf16, by :func:`nf4_shfl_gemv_kernel`, each thread reading ``vec``
    words (``8 vec`` values) of a row at a time.

    Raises:
        ValueError: ``x`` not bf16, ``K`` not a multiple of ``block_k``, or ``block_k`` or ``blocksize`` not a
            multiple of ``8 vec`` (a thread's words of a row must lie inside one quantisation block).
    """
    if x.dtype != torch.bfloat16 or n_cols % block_k or block_k % (8 * vec) or blocksize % (8 * vec):
        raise ValueError(f"gemv_nf4_shfl needs bf16 x, K a multiple of block_k and block_k and the blocksize multiples "
                         f"of {8 * vec} (x {x.dtype}, K {n_cols}, block_k {block_k}, blocksize {blocksize})")
    y = torch.empty(1, n_rows, dtype=x.dtype, device=x.device)
    words = packed.reshape(-1).view(torch.int32)  # the same bytes, little-endian words of eight indices
    grid = (triton.cdiv(n_rows, block_n),)
    torch.library.wrap_triton(nf4_shfl_gemv_kernel)[grid](
        words, absmax, code, absmax2, code2, offset, x.view(torch.int32), y, n_rows, n_cols, n_cols // 8,
        BLOCKSIZE=blocksize, BLOCKSIZE2=blocksize2, DOUBLE=double, BLOCK_N=block_n, BLOCK_K=block_k, VEC=vec,
        num_warps=num_warps)
    return y


@torch.library.triton_op("holodesk::gemv_int8", mutates_args=())
def gemv_int8_op(x: torch.Tensor, cb: torch.Tensor, scb: torch.Tensor, scale: float, block_n: int, block_k: int,
                 num_warps: int) -> torch.Tensor:
    """``torch.ops.holodesk.gemv_int8``: ``x [1, K]`` times the int8 weight ``cb [N, K]`` with row scales
    ``scb [N]`` (``W = cb * scb * scale``, ``scale`` :data:`.quant.INT8_SCALE` for bitsandbytes) -> ``[1, N]`` in
    ``x``'s dtype, by :func:`int8_gemv_kernel` (``scale`` compiled in)."""
    n_rows, n_cols = cb.shape
    y = torch.empty(1, n_rows, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n_rows, block_n),)
    torch.library.wrap_triton(int8_gemv_kernel)[grid](
        cb, scb, x, y, n_rows, n_cols, cb.stride(0), SCALE=scale, BLOCK_N=block_n, BLOCK_K=block_k,
        EVEN_K=n_cols % block_k == 0, num_warps=num_warps)
    return y


@torch.library.triton_op("holodesk::gemv_int8_words", mutates_args=())
def gemv_int8_words_op(x: torch.Tensor, cb: torch.Tensor, scb: torch.Tensor, scale: float, block_n: int, block_k: int,
                       num_warps: int) -> torch.Tensor:
    """``torch.ops.holodesk.gemv_int8_words``: bf16 ``x [1, K]`` times the int8 weight ``cb [N, K]`` with row scales
    ``scb [N]`` -> ``[1, N]`` bf16, as :func:`gemv_int8_op`, by :func:`int8_words_gemv_kernel` (no int-to-float
    conversion instruction); ``x`` starting off an 8-byte boundary of its storage is copied first (its
    data pointer is not read: under ``torch.compile`` the op is traced with fake tensors, which have none).

    Raises:
        ValueError: ``x`` not bf16, ``cb`` not contiguous, or ``K`` not a multiple of ``block_k`` and 4.
    """
    n_rows, n_cols = cb.shape
    if x.dtype != torch.bfloat16 or not cb.is_contiguous() or n_cols % block_k or n_cols % 4:
        raise ValueError(f"gemv_int8_words needs bf16 x, a contiguous weight and K a multiple of block_k and 4 "
                         f"(x {x.dtype}, K {n_cols}, block_k {block_k})")
    if x.storage_offset() * x.element_size() % 8:  # the quads are read as int64 (storages start 8-byte aligned)
        x = x.clone()
    y = torch.empty(1, n_rows, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n_rows, block_n),)
    torch.library.wrap_triton(int8_words_gemv_kernel)[grid](
        cb.view(torch.int32), scb, x.view(torch.int64), y, n_rows, n_cols, n_cols // 4, SCALE=scale,
        BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps)
    return y


@torch.library.triton_op("holodesk::dequant_int8", mutates_args=())
def dequant_int8_op(cb: torch.Tensor, scb: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """``torch.ops.holodesk.dequant_int8``: the int8 weight ``cb [N, K]`` (int8, columns contiguous; a row range
    of bitsandbytes' stored ``CB`` is its slice) with row scales ``scb [N]`` (float32) -> ``W = cb * scb * scale``
    ``[N, K]`` in ``dtype``, contiguous, by :func:`int8_dequant_kernel` (``scale`` compiled in): with ``scale``
    :data:`.quant.INT8_SCALE`, bit for bit :func:`.quant.dequantize` of those rows (float32 in bitsandbytes'
    order, one rounding). Reads ``N K`` bytes and writes ``N K`` elements (the torch expression's four kernels
    write and read float32 temporaries).

    Raises:
        ValueError: ``cb`` not a 2-D int8 tensor with contiguous columns, ``scb`` not ``N`` scales, or ``dtype``
            not one of :data:`DEQUANT_INT8_DTYPES`.
    """
    if cb.dtype != torch.int8 or cb.dim() != 2 or (cb.shape[1] > 1 and cb.stride(1) != 1):
        raise ValueError(f"dequant_int8 needs a 2-D int8 weight with contiguous columns, got {cb.dtype} "
                         f"{tuple(cb.shape)} strides {cb.stride()}")
    if scb.shape != (cb.shape[0],):
        raise ValueError(f"dequant_int8 needs one scale a row: {tuple(scb.shape)} scales for {cb.shape[0]} rows")
    if dtype not in DEQUANT_INT8_DTYPES:
        raise ValueError(f"dequant_int8 writes {', '.join(map(str, DEQUANT_INT8_DTYPES))}, not {dtype}")
    n_rows, n_cols = cb.shape
    out = torch.empty(n_rows, n_cols, dtype=dtype, device=cb.device)
    block_n, block_k, num_warps = DEQUANT_INT8_TILE
    grid = (triton.cdiv(n_rows, block_n), triton.cdiv(n_cols, block_k))
    torch.library.wrap_triton(int8_dequant_kernel)[grid](
        cb, scb, out, n_rows, n_cols, cb.stride(0), SCALE=scale, BLOCK_N=block_n, BLOCK_K=block_k,
        num_warps=num_warps)
    return out
