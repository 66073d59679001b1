"""Triton kernels of the Mamba-2 decode step (see :mod:`.mamba_step`, which holds the torch reference and the
dispatch).

Importing this module needs Triton (raises ImportError otherwise); the kernels need a CUDA device, or Triton's
interpreter on CPU tensors (the tests).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _conv_window(state_ptr, new_ptr, c, c_ok, j, stride_c, WIDTH: tl.constexpr):  # type: ignore[no-untyped-def]
    """``[len(c), BLOCK_W]`` window of conv channels ``c``: the stored inputs ``state[c, 1:WIDTH]`` then the
    new input ``new[c]`` in column ``WIDTH - 1`` (the conv state after this token); columns past ``WIDTH`` 0."""
    old = tl.load(state_ptr + c[:, None] * stride_c + (j[None, :] + 1),
                  mask=c_ok[:, None] & (j[None, :] + 1 < WIDTH), other=0.0)
    new = tl.load(new_ptr + c, mask=c_ok, other=0.0)
    return tl.where(j[None, :] == WIDTH - 1, new[:, None], old)


@triton.jit
def _conv_silu(window, w_ptr, b_ptr, c, c_ok, j, stride_wc, WIDTH: tl.constexpr,  # type: ignore[no-untyped-def]
               HAS_BIAS: tl.constexpr):
    """``silu(bias[c] + sum_j w[c, j] * window[:, j])`` in float32, ``[len(c)]``."""
    w = tl.load(w_ptr + c[:, None] * stride_wc + j[None, :], mask=c_ok[:, None] & (j[None, :] < WIDTH), other=0.0)
    acc = tl.sum(window.to(tl.float32) * w.to(tl.float32), axis=1)
    if HAS_BIAS:
        acc += tl.load(b_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
    return acc * tl.sigmoid(acc)


@triton.jit
def mamba_step_kernel(zx_ptr, conv_ptr, conv_w_ptr, conv_b_ptr, dt_bias_ptr, a_neg_ptr, d_ptr,  # type: ignore[no-untyped-def]
                      ssm_ptr, gated_ptr,
                      stride_zx, stride_conv_b, stride_conv_c, stride_wc, stride_ssm_b, stride_gated,
                      INNER: tl.constexpr, CONV_DIM: tl.constexpr, HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                      GROUPS: tl.constexpr, STATE: tl.constexpr, WIDTH: tl.constexpr, HAS_BIAS: tl.constexpr,
                      BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr):
    """Rows ``[p0, p0 + BLOCK_P)`` of head ``h`` (program ``(b, h, p0 / BLOCK_P)``) through one Mamba-2 token.

    ``zx [B, INNER + CONV_DIM + HEADS]`` is ``in_proj``'s output ``(gate z, xBC, dt)``. This program convolves
    its ``x`` channels (and writes their conv state, after a barrier: the state is shifted in place) and its
    group's ``B``/``C`` channels (read only: other programs of the group read the same stored inputs, so
    :func:`mamba_step_norm_kernel` writes those), takes
    ``dt = softplus(dt + dt_bias)``, updates its ``[BLOCK_P, STATE]`` tile of the float32 SSM state
    ``s = s exp(dt A) + dt x B`` and writes ``gated = (s C + D x) silu(z)`` in float32. The conv outputs and
    ``dt + dt_bias`` are rounded to ``zx``'s dtype, where the stock module stores them."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    p = tl.program_id(2) * BLOCK_P + tl.arange(0, BLOCK_P)
    p_ok = p < HEAD_DIM
    g = h // (HEADS // GROUPS)
    j = tl.arange(0, BLOCK_W)
    nn = tl.arange(0, BLOCK_N)
    n_ok = nn < STATE
    dtype = zx_ptr.dtype.element_ty
    zx = zx_ptr + b * stride_zx
    conv = conv_ptr + b * stride_conv_b

    cx = h * HEAD_DIM + p  # this program's x channels (of xBC)
    window = _conv_window(conv, zx + INNER, cx, p_ok, j, stride_conv_c, WIDTH)
    x = _conv_silu(window, conv_w_ptr, conv_b_ptr, cx, p_ok, j, stride_wc, WIDTH, HAS_BIAS).to(dtype).to(tl.float32)
    cb = INNER + g * STATE + nn
    bv = _conv_silu(_conv_window(conv, zx + INNER, cb, n_ok, j, stride_conv_c, WIDTH), conv_w_ptr, conv_b_ptr, cb,
                    n_ok, j, stride_wc, WIDTH, HAS_BIAS).to(dtype).to(tl.float32)
    cc = INNER + (GROUPS + g) * STATE + nn
    cv = _conv_silu(_conv_window(conv, zx + INNER, cc, n_ok, j, stride_conv_c, WIDTH), conv_w_ptr, conv_b_ptr, cc,
                    n_ok, j, stride_wc, WIDTH, HAS_BIAS).to(dtype).to(tl.float32)

    dt = (tl.load(zx + INNER + CONV_DIM + h).to(tl.float32) + tl.load(dt_bias_ptr + h).to(tl.float32)).to(dtype)
    dt = dt.to(tl.float32)
    dt = tl.where(dt > 20.0, dt, tl.log(1.0 + tl.exp(dt)))  # softplus, torch's threshold
    decay = tl.exp(dt * tl.load(a_neg_ptr + h).to(tl.float32))

    tile = ssm_ptr + b * stride_ssm_b + (h * HEAD_DIM + p[:, None]) * STATE + nn[None, :]
    ok = p_ok[:, None] & n_ok[None, :]
    s = tl.load(tile, mask=ok, other=0.0)
    s = s * decay + (dt * x)[:, None] * bv[None, :]
    tl.store(tile, s, mask=ok)
    y = tl.sum(s * cv[None, :], axis=1) + x * tl.load(d_ptr + h).to(tl.float32)
    z = tl.load(zx + cx, mask=p_ok, other=0.0).to(tl.float32)
    tl.store(gated_ptr + b * stride_gated + cx, y * (z * tl.sigmoid(z)), mask=p_ok)
    # The shifted window goes where it was read from, and a thread may store a column that another thread of
    # the program (or a replica of its value in another warp) has yet to read: every read first.
    tl.debug_barrier()
    tl.store(conv + cx[:, None] * stride_conv_c + j[None, :], window, mask=p_ok[:, None] & (j[None, :] < WIDTH))


@triton.jit
def mamba_step_norm_kernel(gated_ptr, norm_w_ptr, out_ptr, zx_ptr, conv_ptr, eps,  # type: ignore[no-untyped-def]
                           stride_gated, stride_out, stride_zx, stride_conv_b, stride_conv_c,
                           INNER: tl.constexpr, GROUPS: tl.constexpr, STATE: tl.constexpr, WIDTH: tl.constexpr,
                           BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_W: tl.constexpr):
    """Group ``g`` (program ``(b, g)``) after :func:`mamba_step_kernel`: ``out = w * rmsnorm(gated)`` over the
    group's ``INNER / GROUPS`` channels (float32 inside; normalised values rounded to ``out``'s dtype, then
    times ``w``, as ``NemotronHRMSNormGated``), and the conv state of the group's ``B``/``C`` channels."""
    b = tl.program_id(0)
    g = tl.program_id(1)
    size: tl.constexpr = INNER // GROUPS
    k = g * size + tl.arange(0, BLOCK_G)
    k_ok = tl.arange(0, BLOCK_G) < size
    v = tl.load(gated_ptr + b * stride_gated + k, mask=k_ok, other=0.0)
    normed = (v * tl.rsqrt(tl.sum(v * v, axis=0) / size + eps)).to(out_ptr.dtype.element_ty)
    w = tl.load(norm_w_ptr + k, mask=k_ok, other=0.0)
    tl.store(out_ptr + b * stride_out + k, (w.to(tl.float32) * normed.to(tl.float32)).to(out_ptr.dtype.element_ty),
             mask=k_ok)

    j = tl.arange(0, BLOCK_W)
    nn = tl.arange(0, BLOCK_N)
    n_ok = nn < STATE
    zx = zx_ptr + b * stride_zx + INNER
    conv = conv_ptr + b * stride_conv_b
    cb = INNER + g * STATE + nn
    cc = INNER + (GROUPS + g) * STATE + nn
    window_b = _conv_window(conv, zx, cb, n_ok, j, stride_conv_c, WIDTH)
    window_c = _conv_window(conv, zx, cc, n_ok, j, stride_conv_c, WIDTH)
    tl.debug_barrier()  # every read before any thread stores (as in mamba_step_kernel)
    ok = n_ok[:, None] & (j[None, :] < WIDTH)
    tl.store(conv + cb[:, None] * stride_conv_c + j[None, :], window_b, mask=ok)
    tl.store(conv + cc[:, None] * stride_conv_c + j[None, :], window_c, mask=ok)

