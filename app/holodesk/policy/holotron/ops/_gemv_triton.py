"""The Triton matrix-vector kernel and its ``torch.ops.holodesk.gemv`` op (see :mod:`.gemv`; reference
:func:`.gemv.gemv_reference`).

Kept apart, without ``from __future__ import annotations``: ``torch.library.triton_op`` reads the op's
schema from real annotations. Importing this module needs torch and Triton (raises ImportError otherwise).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def gemv_kernel(w_ptr, x_ptr, y_ptr, n_rows, n_cols, stride_w,  # type: ignore[no-untyped-def]
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, RELU_SQ: tl.constexpr):
    """``y[r] = sum_k W[r, k] * x[k]`` for the ``BLOCK_N`` rows of this program: ``BLOCK_K``-wide coalesced
    slices of each row, float32 products accumulated per lane, one reduction at the end. With ``RELU_SQ``
    ``x`` is first replaced by ``relu(x)^2`` rounded to its dtype (the MLP's activation, as a separate
    element-wise pass would store it), so the activation needs no kernel of its own."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n_rows
    acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, n_cols, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        if EVEN_K:
            w = tl.load(w_ptr + rows[:, None] * stride_w + cols[None, :], mask=row_ok[:, None], other=0.0)
            x = tl.load(x_ptr + cols)
        else:
            col_ok = cols < n_cols
            w = tl.load(w_ptr + rows[:, None] * stride_w + cols[None, :],
                        mask=row_ok[:, None] & col_ok[None, :], other=0.0)
            x = tl.load(x_ptr + cols, mask=col_ok, other=0.0)
        if RELU_SQ:
            xf = tl.maximum(x.to(tl.float32), 0.0)
            x = (xf * xf).to(x_ptr.dtype.element_ty)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=row_ok)


@torch.library.triton_op("holodesk::gemv", mutates_args=())
def gemv_op(x: torch.Tensor, w: torch.Tensor, block_n: int, block_k: int, num_warps: int,
            relu_square: bool = False) -> torch.Tensor:
    """``torch.ops.holodesk.gemv``: ``x [1, K] @ w [N, K]^T`` -> ``[1, N]`` in ``w``'s dtype by
    :func:`gemv_kernel` (with ``relu_square``, of ``relu(x)^2``), as an op that runs eagerly and that
    ``torch.compile`` traces and CUDA graphs capture."""
    n_rows, n_cols = w.shape
    y = torch.empty(1, n_rows, dtype=w.dtype, device=w.device)
    grid = (triton.cdiv(n_rows, block_n),)
    torch.library.wrap_triton(gemv_kernel)[grid](
        w, x, y, n_rows, n_cols, w.stride(0), BLOCK_N=block_n, BLOCK_K=block_k,
        EVEN_K=n_cols % block_k == 0, RELU_SQ=relu_square, num_warps=num_warps)
    return y
