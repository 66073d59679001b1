"""Cases shared by tests/policy/holotron/test_ops_prefill.py and its Triton-interpreter child process: the padded
chunk's step-size and conv-state kernels (:func:`~holodesk.policy.holotron.ops.prefill.step_size_triton`,
:func:`~holodesk.policy.holotron.ops.prefill.set_conv_state_triton`) against their torch references, on CPU
tensors or CUDA ones, and the decode step's add + RMSNorm kernel (``torch.ops.holodesk.add_rms_norm``) against
the definition. :func:`interpreted` returns what it measured as JSON-able values."""

from __future__ import annotations

from typing import Any

import torch

from holodesk.policy.holotron.ops import prefill as prefill_ops

STEP_LIMITS = ((0.001, float("inf")), (0.0, float("inf")), (0.01, 3.0))
"""``dt_limit`` values: NemotronH's ``(time_step_min, inf)``, no floor, and a finite ceiling."""


def step_size_cases(device: str, dtype: torch.dtype, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per ``rows x heads, length, dt_limit``: whether the padded rows are exactly 0, and the worst excess of
    ``|kernel - reference|`` over ``1e-4 |reference|`` (the kernel's ``log(exp(x) + 1)`` against torch's
    ``log1p``). ``dt`` is a column slice of a wider tensor (strided rows), as in ``in_proj``'s output."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, dict[str, Any]] = {}
    for rows, heads in ((40, 8), (9, 128), (130, 5)):
        wide = (torch.randn(2, rows, heads + 30, generator=gen) * 8).to(device=device, dtype=dtype)
        dt = wide[:, :, 30:]
        bias = torch.randn(heads, generator=gen).to(device=device, dtype=dtype)
        for length in sorted({1, rows // 2 + 1, rows}):
            n = torch.tensor([length], device=device)
            for limit in STEP_LIMITS:
                got = prefill_ops.step_size_triton(dt, bias, n, limit)
                want = prefill_ops.step_size_reference(dt, bias, n, limit)
                out[f"{rows}x{heads} length {length} limit {limit}"] = {
                    "shape_dtype_equal": got.shape == want.shape and got.dtype == want.dtype == torch.float32,
                    "padding_zero": bool(torch.equal(got[:, length:], torch.zeros_like(got[:, length:]))),
                    "excess": float(((got - want).abs() - 1e-4 * want.abs()).max()),
                }
    return out


def conv_state_cases(device: str, dtype: torch.dtype, seed: int = 0) -> dict[str, bool]:
    """Per ``width, rows, length``: whether the kernel leaves the state the reference leaves, bit for bit
    (``x`` a column slice with strided rows; lengths below the width take part of the stored past)."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, bool] = {}
    for width in (4, 3, 2):
        for rows in (1, 5, 9, 40):
            wide = torch.randn(2, rows, 70, generator=gen).to(device=device, dtype=dtype)
            x = wide[:, :, 10:60]
            state = torch.randn(2, 50, width, generator=gen).to(device=device, dtype=dtype)
            for length in range(1, rows + 1):
                got, want = state.clone(), state.clone()
                n = torch.tensor([length], device=device)
                prefill_ops.set_conv_state_triton(got, x, n)
                prefill_ops.set_conv_state_reference(want, x, n)
                out[f"width {width} rows {rows} length {length}"] = bool(torch.equal(got, want))
    return out


ROW_NORM_SHAPES = ((1, 5120), (2, 40), (3, 1000))
"""``[rows, H]`` of the add + RMSNorm cases: Holotron-12B's decode row, and widths that are not powers of two."""


def add_rms_norm_row_cases(device: str, dtype: torch.dtype, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per ``[rows, H]``: the kernel's ``s`` against ``h + pending`` in ``dtype`` (bit for bit), and the worst
    error of its ``x`` and of :func:`~holodesk.policy.holotron.ops.prefill.add_rms_norm_reference`'s, each
    relative to the largest ``|x|`` of the float64 definition (``w * s / sqrt(mean(s^2) + eps)`` of the rounded
    sum). ``h`` and ``pending`` are column slices of wider tensors (strided rows); ``w`` is float32."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, dict[str, Any]] = {}
    for rows, width in ROW_NORM_SHAPES:
        h = torch.randn(rows, width + 24, generator=gen).to(device=device, dtype=dtype)[:, 8:8 + width]
        pending = (torch.randn(rows, width + 8, generator=gen) * 3).to(device=device, dtype=dtype)[:, 4:4 + width]
        w = (torch.rand(width, generator=gen) + 0.5).to(device)
        s, x = torch.ops.holodesk.add_rms_norm(h, pending, w, 1e-5)
        want_s = h + pending
        s64 = want_s.double()
        want = w.double() * s64 / torch.sqrt(s64.pow(2).mean(-1, keepdim=True) + 1e-5)
        ref, _ = prefill_ops.add_rms_norm_reference(pending, h, w, 1e-5)
        scale = float(want.abs().max())
        out[f"{rows}x{width}"] = {
            "s_equal": bool(torch.equal(s, want_s)),
            "shape_dtype": [list(x.shape), str(x.dtype)] == [[rows, width], str(dtype)] and x.is_contiguous(),
            "kernel": float((x.double() - want).abs().max()) / scale,
            "reference": float((ref.double() - want).abs().max()) / scale,
        }
    return out


def interpreted() -> dict[str, Any]:
    """What the child process measures under ``TRITON_INTERPRET=1`` (CPU tensors), float32 and bfloat16."""
    torch.set_num_threads(1)
    return {str(dtype): {"step_size": step_size_cases("cpu", dtype), "conv_state": conv_state_cases("cpu", dtype),
                         "add_rms_norm_row": add_rms_norm_row_cases("cpu", dtype)}
            for dtype in (torch.float32, torch.bfloat16)}
