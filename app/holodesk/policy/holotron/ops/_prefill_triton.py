"""Triton kernels for prefill (see :mod:`.prefill`, which holds the torch references and the dispatch).

Importing this module needs Triton (raises ImportError otherwise); the kernels need a CUDA device.
"""

from __future__ import annotations

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
