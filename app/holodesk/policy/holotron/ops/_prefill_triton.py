"""Triton kernels of :mod:`.prefill` (which holds the torch references and the dispatch): prefill's, and the
decode step's residual add and RMSNorm of one row with its op ``torch.ops.holodesk.add_rms_norm``.

Without ``from __future__ import annotations``: ``torch.library.triton_op`` reads the op's schema from real
annotations. Importing this module needs torch and Triton (raises ImportError otherwise); the kernels need a
CUDA device.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def causal_conv1d_kernel(x_ptr, state_ptr, w_ptr, b_ptr, out_ptr,  # type: ignore[no-untyped-def]
                         seq_len, dim, stride_xb, stride_xt, stride_sb, stride_sd, stride_wd, stride_ob,
                         stride_ot,
                         WIDTH: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
                         BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    """One ``[BLOCK_T, BLOCK_D]`` tile of ``out[b, t, d] = act(bias[d] + sum_k w[d, k] * src[t + k + 1 - WIDTH])``
    where ``src[j]`` is ``x[b, j, d]`` for ``j >= 0`` and the stored past ``state[b, d, WIDTH + j]`` for
    ``j < 0``. Products are summed in float32 and the activation is applied before the one rounding."""
    pid_b = tl.program_id(0)
    pid_t = tl.program_id(1)
    pid_d = tl.program_id(2)
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    t_ok = t < seq_len
    d_ok = d < dim
    acc = tl.zeros([BLOCK_T, BLOCK_D], dtype=tl.float32)
    for k in tl.static_range(WIDTH):
        src = t + (k + 1 - WIDTH)
        from_x = (src >= 0) & t_ok
        from_state = (src < 0) & t_ok
        xv = tl.load(x_ptr + pid_b * stride_xb + src[:, None] * stride_xt + d[None, :],
                     mask=from_x[:, None] & d_ok[None, :], other=0.0)
        sv = tl.load(state_ptr + pid_b * stride_sb + d[None, :] * stride_sd + (src + WIDTH)[:, None],
                     mask=from_state[:, None] & d_ok[None, :], other=0.0)
        wv = tl.load(w_ptr + d * stride_wd + k, mask=d_ok, other=0.0)
        acc += (xv.to(tl.float32) + sv.to(tl.float32)) * wv.to(tl.float32)[None, :]
    if HAS_BIAS:
        acc += tl.load(b_ptr + d, mask=d_ok, other=0.0).to(tl.float32)[None, :]
    if SILU:
        acc = acc * tl.sigmoid(acc)
    tl.store(out_ptr + pid_b * stride_ob + t[:, None] * stride_ot + d[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=t_ok[:, None] & d_ok[None, :])


@triton.jit
def relu_square_kernel(x_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """``x = max(x, 0) ** 2`` in place over ``n`` contiguous elements (the square in float32, one rounding)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    x = tl.maximum(x, 0.0)
    tl.store(x_ptr + offs, (x * x).to(x_ptr.dtype.element_ty), mask=ok)


@triton.jit
def step_size_kernel(dt_ptr, bias_ptr, length_ptr, out_ptr,  # type: ignore[no-untyped-def]
                     rows, heads, stride_db, stride_dt, stride_ob, stride_ot, lo, hi,
                     BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    """One ``[BLOCK_T, BLOCK_H]`` tile of the Mamba-2 step size ``out[b, t, h] = clamp(softplus(dt[b, t, h] +
    bias[h]), lo, hi)`` in float32 for ``t < length`` (``length_ptr``: one int64 on the device) and exactly 0
    for the padded rows after it. softplus as mamba-ssm's Triton kernels compute it for the scan
    (``ops/triton/softplus.py``, Triton 3: ``log(exp(x) + 1)``, ``x`` itself above 20); torch's ``log1p`` form
    differs from it by at most about 1e-4 relative, where ``exp(x)`` is small next to 1."""
    pid_b = tl.program_id(0)
    pid_t = tl.program_id(1)
    t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    h = tl.arange(0, BLOCK_H)
    n = tl.load(length_ptr)
    h_ok = h < heads
    ok = (t < rows)[:, None] & h_ok[None, :]
    x = tl.load(dt_ptr + pid_b * stride_db + t[:, None] * stride_dt + h[None, :], mask=ok, other=0.0).to(tl.float32)
    x = x + tl.load(bias_ptr + h, mask=h_ok, other=0.0).to(tl.float32)[None, :]
    step = tl.where(x > 20.0, x, tl.log(tl.exp(x) + 1.0))
    step = tl.minimum(tl.maximum(step, lo), hi)
    step = tl.where((t < n)[:, None], step, 0.0)
    tl.store(out_ptr + pid_b * stride_ob + t[:, None] * stride_ot + h[None, :], step, mask=ok)


@triton.jit
def conv_state_kernel(x_ptr, state_ptr, length_ptr,  # type: ignore[no-untyped-def]
                      dim, stride_xb, stride_xt, stride_sb, stride_sd,
                      WIDTH: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_D: tl.constexpr):
    """Channels ``[BLOCK_D]`` of ``state[b, :, j] = src[length - WIDTH + j]`` for ``j < WIDTH``, where ``src[i]``
    is ``x[b, i, :]`` for ``i >= 0`` and the stored past ``state[b, :, WIDTH + i]`` for ``i < 0`` (``length_ptr``:
    one int64 on the device; rows of ``x`` from it on are padding and never read). A program reads every value
    it needs before any of its threads writes (a barrier between), and no two programs share a channel, so
    the state is updated in place."""
    pid_b = tl.program_id(0)
    pid_d = tl.program_id(1)
    d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    j = tl.arange(0, BLOCK_W)
    n = tl.load(length_ptr)
    src = n - WIDTH + j
    d_ok = d < dim
    j_ok = j < WIDTH
    from_x = (src >= 0) & j_ok
    from_state = (src < 0) & j_ok
    xv = tl.load(x_ptr + pid_b * stride_xb + src[None, :] * stride_xt + d[:, None],
                 mask=d_ok[:, None] & from_x[None, :], other=0.0)
    sv = tl.load(state_ptr + pid_b * stride_sb + d[:, None] * stride_sd + (src + WIDTH)[None, :],
                 mask=d_ok[:, None] & from_state[None, :], other=0.0)
    new = tl.where(from_x[None, :], xv.to(state_ptr.dtype.element_ty), sv)
    # a thread may store a column another thread of the program reads (lengths below WIDTH): every read first
    tl.debug_barrier()
    tl.store(state_ptr + pid_b * stride_sb + d[:, None] * stride_sd + j[None, :], new,
             mask=d_ok[:, None] & j_ok[None, :])


@triton.jit
def add_rms_norm_row_kernel(h_ptr, pending_ptr, w_ptr, s_ptr, x_ptr, eps,  # type: ignore[no-untyped-def]
                            stride_h, stride_p, stride_s, stride_x,
                            COLS: tl.constexpr, BLOCK: tl.constexpr):
    """Row ``program_id(0)``: ``s = h + pending`` summed in float32 and rounded to ``s``'s dtype (as torch adds
    two 16-bit tensors), then ``x = w * (s * rsqrt(mean(s^2) + eps))`` in float32, rounded once. The whole row
    is loaded at once (``BLOCK >= COLS``): one trip to memory for ``h``, ``pending`` and ``w`` together."""
    b = tl.program_id(0)
    k = tl.arange(0, BLOCK)
    ok = k < COLS
    s = (tl.load(h_ptr + b * stride_h + k, mask=ok, other=0.0).to(tl.float32)
         + tl.load(pending_ptr + b * stride_p + k, mask=ok, other=0.0).to(tl.float32)).to(s_ptr.dtype.element_ty)
    w = tl.load(w_ptr + k, mask=ok, other=0.0).to(tl.float32)
    tl.store(s_ptr + b * stride_s + k, s, mask=ok)
    sf = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(sf * sf, axis=0) / COLS + eps)
    tl.store(x_ptr + b * stride_x + k, (w * (sf * rstd)).to(x_ptr.dtype.element_ty), mask=ok)


@torch.library.triton_op("holodesk::add_rms_norm", mutates_args=())
def add_rms_norm_op(h: torch.Tensor, pending: torch.Tensor, weight: torch.Tensor,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.ops.holodesk.add_rms_norm``: ``(s, x)`` for ``h``, ``pending`` ``[B, H]`` (last dimension
    contiguous) and ``weight`` ``[H]`` by :func:`add_rms_norm_row_kernel`, one program a row, both new
    contiguous ``[B, H]`` tensors in ``h``'s dtype; an op that runs eagerly and that ``torch.compile`` calls as it
    is and CUDA graphs capture."""
    rows, cols = h.shape
    s = torch.empty(rows, cols, dtype=h.dtype, device=h.device)
    x = torch.empty(rows, cols, dtype=h.dtype, device=h.device)
    block = triton.next_power_of_2(cols)
    torch.library.wrap_triton(add_rms_norm_row_kernel)[(rows,)](
        h, pending, weight, s, x, eps, h.stride(0), pending.stride(0), s.stride(0), x.stride(0),
        COLS=cols, BLOCK=block, num_warps=max(1, min(32, block // 256)))
    return s, x
