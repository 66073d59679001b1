"""Triton matrix-vector kernels that read bitsandbytes' storage directly, and their ops
``torch.ops.holodesk.gemv_nf4`` / ``torch.ops.holodesk.gemv_int8`` (see :mod:`.quant`; references
:func:`.quant.dequantize` and :func:`.quant.gemv_reference`).

Kept apart, without ``from __future__ import annotations``: ``torch.library.triton_op`` reads the op's
schema from real annotations. Importing this module needs torch and Triton (raises ImportError otherwise).
"""

import struct

import torch
import triton
import triton.language as tl


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


# NF4 lookup in registers (PTX ``prmt``, byte permute). The 16 NF4 values, rounded to bf16, are two byte
# planes of four 32-bit words each (:func:`nf4_lut`): ``lut[0:4]`` the low bytes of entries 0-15 (four a
# word, entry 0 in byte 0), ``lut[4:8]`` the high bytes; they are immediates in the kernel's PTX. One ``prmt``
# picks a byte for each of four codes from a pair of words (8 entries; a nibble's low 3 bits select), a second
# from the other pair, a third keeps per code the one its bit 3 names; the two planes are then interleaved
# into bf16 pairs in the activations' element order.
_LOOKUP_PTX = """and.b32 s, $W, 0x77777777;
shr.u32 m, $W, 1;
and.b32 m, m, 0x44444444;
or.b32 m, m, 0x32103210;
shr.u32 s2, s, 16;
shr.u32 m2, m, 16;
prmt.b32 la, L0, L1, s;
prmt.b32 lb, L2, L3, s;
prmt.b32 lo, la, lb, m;
prmt.b32 ha, H0, H1, s;
prmt.b32 hb, H2, H3, s;
prmt.b32 hi, ha, hb, m;
prmt.b32 p0, lo, hi, 0x4051;
prmt.b32 p1, lo, hi, 0x6273;
prmt.b32 la, L0, L1, s2;
prmt.b32 lb, L2, L3, s2;
prmt.b32 lo, la, lb, m2;
prmt.b32 ha, H0, H1, s2;
prmt.b32 hb, H2, H3, s2;
prmt.b32 hi, ha, hb, m2;
prmt.b32 p2, lo, hi, 0x4051;
prmt.b32 p3, lo, hi, 0x6273;
"""
"""The lookup of one int32 weight word ``$W`` (bytes b0..b3 little-endian; byte i holds element 2i in its high
nibble and 2i+1 in its low nibble) into ``p0..p3``: bf16 pairs of elements 0,1 / 2,3 / 4,5 / 6,7, the even
element in the low half, as the activations' int32 words hold them. The selector nibbles of ``s`` run e1, e0,
e3, e2 (then e5, e4, e7, e6 after the shift); ``0x4051`` / ``0x6273`` put (e0, e1) / (e2, e3) in order, low
byte before high byte."""


def _nf4_ptx(lut: tuple[int, ...], dot: bool) -> str:
    """The inline PTX of :func:`nf4_lut_gemv_kernel` for the byte planes ``lut`` (eight unsigned 32-bit words,
    :func:`nf4_lut`).

    ``dot`` False: ``$4`` a weight word -> ``$0..$3`` its four bf16 pairs (:data:`_LOOKUP_PTX`). ``dot`` True:
    ``$1`` a weight word and ``$2..$5`` the activations' four bf16 pairs under it -> ``$0``, float32 bits of
    the word's dot product: the eight products summed by ``fma.rn.bf16x2`` (each product and each of the three
    sums per half rounded to bf16), the two halves added in float32.
    """
    body = _LOOKUP_PTX.replace("$W", "$1" if dot else "$4")
    for name, word in zip(("L0", "L1", "L2", "L3", "H0", "H1", "H2", "H3"), lut, strict=True):
        body = body.replace(name, f"0x{word:08x}")
    regs = ".reg .b32 s, m, s2, m2, la, lb, lo, ha, hb, hi, p0, p1, p2, p3"
    if not dot:
        return "{\n" + regs + ";\n" + body + "mov.b32 $0, p0;\nmov.b32 $1, p1;\nmov.b32 $2, p2;\nmov.b32 $3, p3;\n}"
    return ("{\n" + regs + ", acc, e, o, z;\n.reg .f32 fe, fo;\n" + body
            + "mov.b32 z, 0;\nfma.rn.bf16x2 acc, p0, $2, z;\nfma.rn.bf16x2 acc, p1, $3, acc;\n"
            "fma.rn.bf16x2 acc, p2, $4, acc;\nfma.rn.bf16x2 acc, p3, $5, acc;\nshl.b32 e, acc, 16;\n"
            "and.b32 o, acc, 0xffff0000;\nmov.b32 fe, e;\nmov.b32 fo, o;\nadd.f32 fe, fe, fo;\nmov.b32 $0, fe;\n}")


NF4_VALUES: tuple[float, ...] = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)
"""The 16 NF4 values bitsandbytes stores as ``quant_state.code`` (``bitsandbytes.functional.get_4bit_type("nf4")``,
the NormalFloat4 quantiles of QLoRA, Dettmers et al. 2023), as float32 reads them."""


def nf4_lut(values: tuple[float, ...]) -> tuple[int, ...]:
    """The 16 values rounded from float32 to bf16 (to nearest, ties to even), as two byte planes: eight unsigned
    32-bit words, the low bytes of entries 0-3, 4-7, 8-11, 12-15 (entry ``4 i + b`` in byte ``b`` of word ``i``),
    then the high bytes likewise.

    Raises:
        ValueError: not 16 values.
    """
    if len(values) != 16:
        raise ValueError(f"an NF4 code table holds 16 values, not {len(values)}")
    bits = []
    for v in values:
        f = struct.unpack("<I", struct.pack("<f", v))[0]
        bits.append(((f + 0x7FFF + ((f >> 16) & 1)) >> 16) & 0xFFFF)
    low = [sum((bits[4 * i + b] & 0xFF) << (8 * b) for b in range(4)) for i in range(4)]
    high = [sum((bits[4 * i + b] >> 8) << (8 * b) for b in range(4)) for i in range(4)]
    return tuple(low + high)


NF4_LUT = nf4_lut(NF4_VALUES)
"""The byte planes the lookup kernels hold as immediates: they read weights whose ``code`` is :data:`NF4_VALUES`."""
_NF4_PAIRS_PTX = tl.constexpr(_nf4_ptx(NF4_LUT, dot=False))
_NF4_DOT8_PTX = tl.constexpr(_nf4_ptx(NF4_LUT, dot=True))


@triton.jit
def _nf4_load(qw_ptr, absmax_ptr, code2_ptr, absmax2_ptr, offset, row, k0, words_per_row, blocks_per_row,  # type: ignore[no-untyped-def]
              BLOCKSIZE: tl.constexpr, BLOCKSIZE2: tl.constexpr, DOUBLE: tl.constexpr, BLOCK_K: tl.constexpr):
    """One row's words of the step at element ``k0`` (int32 ``[G, WPB]``: ``G = BLOCK_K // BLOCKSIZE``
    quantisation blocks of ``WPB = BLOCKSIZE // 8`` words) and their blocks' float32 scales ``[G]``."""
    G: tl.constexpr = BLOCK_K // BLOCKSIZE
    WPB: tl.constexpr = BLOCKSIZE // 8
    blk = k0 // BLOCKSIZE + tl.arange(0, G)
    wi = blk[:, None] * WPB + tl.arange(0, WPB)[None, :]
    w = tl.load(qw_ptr + tl.multiple_of(row * words_per_row, 8) + wi)  # a row is whole blocks of 8+ words
    flat = row * blocks_per_row + blk
    if DOUBLE:
        a8 = tl.load(absmax_ptr + flat).to(tl.int32)
        scale = tl.load(code2_ptr + a8) * tl.load(absmax2_ptr + flat // BLOCKSIZE2) + offset
    else:
        scale = tl.load(absmax_ptr + flat)
    return w, scale


@triton.jit
def _nf4_dot(w, scale, xw, xf, F32: tl.constexpr):  # type: ignore[no-untyped-def]
    """``[G, WPB]`` float32: each weight word ``w`` dequantised in registers (:data:`NF4_LUT`, the PTX of
    :func:`_nf4_ptx`) and multiplied by its activations, summed per word, times its block's ``scale``
    (``[G]``). ``xw``: the four int32 words of bf16 pairs under each weight word; ``xf``: the same eight
    activations as float32 (read when ``F32``)."""
    if F32:  # bf16 pairs out of the lookup, products and sums in float32
        p0, p1, p2, p3 = tl.inline_asm_elementwise(_NF4_PAIRS_PTX, "=r,=r,=r,=r,r", [w],
                                                   dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=True,
                                                   pack=1)
        x0, x1, x2, x3, x4, x5, x6, x7 = xf
        part = ((p0 << 16).to(tl.float32, bitcast=True) * x0 + (p0 & -65536).to(tl.float32, bitcast=True) * x1
                + (p1 << 16).to(tl.float32, bitcast=True) * x2 + (p1 & -65536).to(tl.float32, bitcast=True) * x3
                + (p2 << 16).to(tl.float32, bitcast=True) * x4 + (p2 & -65536).to(tl.float32, bitcast=True) * x5
                + (p3 << 16).to(tl.float32, bitcast=True) * x6 + (p3 & -65536).to(tl.float32, bitcast=True) * x7)
    else:  # products and the word's sums in bf16 pairs (fma.rn.bf16x2), the two halves added in float32
        xa, xb, xc, xd = xw
        part = tl.inline_asm_elementwise(_NF4_DOT8_PTX, "=r,r,r,r,r,r", [w, xa, xb, xc, xd],
                                         dtype=tl.int32, is_pure=True, pack=1).to(tl.float32, bitcast=True)
    return part * scale[:, None]


@triton.jit
def nf4_lut_gemv_kernel(qw_ptr, absmax_ptr, code2_ptr, absmax2_ptr, offset_ptr, xw_ptr, y_ptr,  # type: ignore[no-untyped-def]
                        n_rows, n_cols, BLOCKSIZE: tl.constexpr, BLOCKSIZE2: tl.constexpr, DOUBLE: tl.constexpr,
                        ROWS: tl.constexpr, BLOCK_K: tl.constexpr, F32: tl.constexpr, STAGES: tl.constexpr):
    """``y[r] = sum_k W[r, k] x[k]`` with ``W`` in bitsandbytes' NF4 layout (as :func:`nf4_gemv_kernel`), the
    weight read as int32 words (eight 4-bit indices each) and the NF4 values looked up in registers
    (:data:`NF4_LUT`, :func:`_nf4_ptx`) instead of from memory: for weights whose ``code`` is
    :data:`NF4_VALUES`. bf16 ``x`` read as int32 pairs (``xw_ptr``); ``K`` a
    multiple of ``BLOCK_K``, itself a multiple of ``BLOCKSIZE`` (a multiple of 8).

    Each program takes ``ROWS`` (1, 2 or 4) consecutive rows; a step of ``BLOCK_K`` elements is held as
    ``[BLOCK_K // BLOCKSIZE, BLOCKSIZE // 8]`` words, so one scale per quantisation block broadcasts over its
    words, and the step's activations are read once for all the rows. With ``STAGES`` > 1 Triton pipelines
    the loop: the loads of the next ``STAGES - 1`` steps are issued as asynchronous copies to shared memory
    before this step's arithmetic. Each word's eight products with the bf16-rounded NF4 values are summed in
    float32 (``F32``) or in bf16 pairs (:func:`_nf4_ptx`), then times the block's float32 scale into float32
    accumulators; one reduction per row at the end, rounded to ``y``'s dtype. Rows past ``n_rows`` compute
    row ``n_rows - 1`` and are not stored."""
    G: tl.constexpr = BLOCK_K // BLOCKSIZE
    WPB: tl.constexpr = BLOCKSIZE // 8
    pid = tl.program_id(0)
    r0 = pid * ROWS
    last = n_rows - 1
    words_per_row = n_cols // 8
    blocks_per_row = n_cols // BLOCKSIZE
    wi = tl.arange(0, G)[:, None] * WPB + tl.arange(0, WPB)[None, :]  # [G, WPB] the word within a step
    offset = tl.load(offset_ptr) if DOUBLE else 0.0
    ra = tl.minimum(r0, last)
    rb = tl.minimum(r0 + 1, last)
    rc = tl.minimum(r0 + 2, last)
    rd = tl.minimum(r0 + 3, last)
    acc_a = tl.zeros([G, WPB], dtype=tl.float32)
    acc_b = tl.zeros([G, WPB], dtype=tl.float32)
    acc_c = tl.zeros([G, WPB], dtype=tl.float32)
    acc_d = tl.zeros([G, WPB], dtype=tl.float32)
    for k0 in tl.range(0, n_cols, BLOCK_K, num_stages=STAGES):
        xo = 4 * (k0 // 8 + wi)  # the first of the four x words under each weight word
        xa = tl.load(xw_ptr + xo)
        xb = tl.load(xw_ptr + xo + 1)
        xc = tl.load(xw_ptr + xo + 2)
        xd = tl.load(xw_ptr + xo + 3)
        xw = (xa, xb, xc, xd)
        xf = ((xa << 16).to(tl.float32, bitcast=True), (xa & -65536).to(tl.float32, bitcast=True),
              (xb << 16).to(tl.float32, bitcast=True), (xb & -65536).to(tl.float32, bitcast=True),
              (xc << 16).to(tl.float32, bitcast=True), (xc & -65536).to(tl.float32, bitcast=True),
              (xd << 16).to(tl.float32, bitcast=True), (xd & -65536).to(tl.float32, bitcast=True))
        w, sc = _nf4_load(qw_ptr, absmax_ptr, code2_ptr, absmax2_ptr, offset, ra, k0, words_per_row, blocks_per_row,
                          BLOCKSIZE, BLOCKSIZE2, DOUBLE, BLOCK_K)
        acc_a += _nf4_dot(w, sc, xw, xf, F32)
        if ROWS >= 2:
            w, sc = _nf4_load(qw_ptr, absmax_ptr, code2_ptr, absmax2_ptr, offset, rb, k0, words_per_row,
                              blocks_per_row, BLOCKSIZE, BLOCKSIZE2, DOUBLE, BLOCK_K)
            acc_b += _nf4_dot(w, sc, xw, xf, F32)
        if ROWS >= 4:
            w, sc = _nf4_load(qw_ptr, absmax_ptr, code2_ptr, absmax2_ptr, offset, rc, k0, words_per_row,
                              blocks_per_row, BLOCKSIZE, BLOCKSIZE2, DOUBLE, BLOCK_K)
            acc_c += _nf4_dot(w, sc, xw, xf, F32)
            w, sc = _nf4_load(qw_ptr, absmax_ptr, code2_ptr, absmax2_ptr, offset, rd, k0, words_per_row,
                              blocks_per_row, BLOCKSIZE, BLOCKSIZE2, DOUBLE, BLOCK_K)
            acc_d += _nf4_dot(w, sc, xw, xf, F32)
    out = y_ptr.dtype.element_ty
    tl.store(y_ptr + r0, tl.sum(tl.sum(acc_a, axis=1), axis=0).to(out), mask=r0 <= last)
    if ROWS >= 2:
        tl.store(y_ptr + r0 + 1, tl.sum(tl.sum(acc_b, axis=1), axis=0).to(out), mask=r0 + 1 <= last)
    if ROWS >= 4:
        tl.store(y_ptr + r0 + 2, tl.sum(tl.sum(acc_c, axis=1), axis=0).to(out), mask=r0 + 2 <= last)
        tl.store(y_ptr + r0 + 3, tl.sum(tl.sum(acc_d, axis=1), axis=0).to(out), mask=r0 + 3 <= last)


@triton.jit
def int8_gemv_kernel(w_ptr, scb_ptr, x_ptr, y_ptr, n_rows, n_cols, stride_w,  # type: ignore[no-untyped-def]
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """``y[r] = SCB[r] / 127 * sum_k CB[r, k] x[k]``: bitsandbytes' int8 weight (``CB [N, K]`` int8, row
    scales ``SCB [N]`` float32) read as stored; ``BLOCK_K``-wide coalesced slices of ``BLOCK_N`` rows,
    float32 products per lane, one reduction and one scale per row at the end."""
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
    y = tl.sum(acc, axis=1) * (tl.load(scb_ptr + rows) * 7.874015718698502e-3)  # 1/127 as bitsandbytes writes it
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=row_ok)


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


@torch.library.triton_op("holodesk::gemv_int8", mutates_args=())
def gemv_int8_op(x: torch.Tensor, cb: torch.Tensor, scb: torch.Tensor, block_n: int, block_k: int,
                 num_warps: int) -> torch.Tensor:
    """``torch.ops.holodesk.gemv_int8``: ``x [1, K]`` times the int8 weight ``cb [N, K]`` with row scales
    ``scb [N]`` (``W = cb * scb / 127``) -> ``[1, N]`` in ``x``'s dtype, by :func:`int8_gemv_kernel`."""
    n_rows, n_cols = cb.shape
    y = torch.empty(1, n_rows, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n_rows, block_n),)
    torch.library.wrap_triton(int8_gemv_kernel)[grid](
        cb, scb, x, y, n_rows, n_cols, cb.stride(0), BLOCK_N=block_n, BLOCK_K=block_k,
        EVEN_K=n_cols % block_k == 0, num_warps=num_warps)
    return y


@torch.library.triton_op("holodesk::gemv_nf4_lut", mutates_args=())
def gemv_nf4_lut_op(x: torch.Tensor, packed: torch.Tensor, absmax: torch.Tensor, absmax2: torch.Tensor,
                    code2: torch.Tensor, offset: torch.Tensor, n_rows: int, n_cols: int,
                    blocksize: int, blocksize2: int, double: bool, rows: int, block_k: int, num_warps: int,
                    stages: int, f32: bool) -> torch.Tensor:
    """``torch.ops.holodesk.gemv_nf4_lut``: bf16 ``x [1, K]`` times the NF4 weight ``[N, K]`` (``packed`` uint8
    ``[N * K / 2, 1]`` and its quantisation state, ``code`` :data:`NF4_VALUES`) -> ``[1, N]`` bf16, by
    :func:`nf4_lut_gemv_kernel` with ``rows`` rows
    a program and a loop pipelined ``stages`` deep; ``K`` a multiple of ``block_k``, itself a multiple of
    ``blocksize``.

    Raises:
        ValueError: ``x`` not bf16, ``K`` not a multiple of ``block_k`` or ``rows`` not 1, 2 or 4.
    """
    if x.dtype != torch.bfloat16 or n_cols % block_k or block_k % blocksize or rows not in (1, 2, 4):
        raise ValueError("the NF4 lookup kernel needs bf16 activations, K a multiple of block_k (a multiple of "
                         "the blocksize) and 1, 2 or 4 rows a program")
    y = torch.empty(1, n_rows, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n_rows, rows),)
    torch.library.wrap_triton(nf4_lut_gemv_kernel)[grid](
        packed.view(-1).view(torch.int32), absmax, code2, absmax2, offset, x.view(torch.int32), y, n_rows, n_cols,
        BLOCKSIZE=blocksize, BLOCKSIZE2=blocksize2, DOUBLE=double, ROWS=rows, BLOCK_K=block_k, F32=f32,
        STAGES=stages, num_warps=num_warps)
    return y
