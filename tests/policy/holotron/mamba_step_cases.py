"""Cases shared by tests/policy/holotron/test_ops_mamba_step.py and its Triton-interpreter child process: the
Mamba-2 decode step's kernels (:func:`~holodesk.policy.holotron.ops.mamba_step.mamba_step_triton`) and its torch
reference, each run over a few tokens from the same state and measured against the same maths in float64.
:func:`interpreted` returns what it measured as JSON-able values."""

from __future__ import annotations

from typing import Any

import torch

from holodesk.policy.holotron.ops import mamba_step as ms

DIMS = ((8, 16, 2, 16, 4, True), (6, 20, 3, 12, 4, False), (2, 24, 1, 40, 3, True), (4, 80, 2, 128, 4, True))
"""``(heads, head_dim, groups, state, conv width, conv bias)``: head dims that are and are not multiples of
:data:`~holodesk.policy.holotron.ops.mamba_step.BLOCK_P`, state sizes that are and are not powers of two, conv
widths 4 and 3, with and without the conv bias."""

HOLOTRON_12B = (128, 80, 8, 128, 4, True)
"""Holotron-12B's Mamba-2 mixer (Nemotron-Nano-12B-v2)."""


def _error(got: torch.Tensor, exact: torch.Tensor) -> float:
    """Relative L2 error of ``got`` against ``exact``."""
    return float((got.double() - exact).norm() / exact.norm())


def run(heads: int, head_dim: int, groups: int, state: int, width: int, bias: bool, *, device: str,
        dtype: torch.dtype, tokens: int = 3, batch: int = 2, seed: int = 0) -> list[dict[str, Any]]:
    """``tokens`` steps of the kernels and of the reference from one random state (``zx`` a column slice of a
    wider tensor: strided rows), and of the reference in float64 from the same inputs. Per token: whether the
    two conv states are equal bit for bit, and the relative L2 errors against float64 of the output and of the
    SSM state, ``(kernels, reference)``."""
    gen = torch.Generator().manual_seed(seed)

    def draw(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * scale

    inner = heads * head_dim
    conv_dim = inner + 2 * groups * state
    dims = (inner, conv_dim, heads, head_dim, groups, state)
    params = {"conv_w": draw(conv_dim, width, scale=0.5), "conv_b": draw(conv_dim, scale=0.1) if bias else None,
              "dt_bias": draw(heads), "a_neg": -torch.exp(draw(heads)), "d_skip": draw(heads),
              "norm_w": 1.0 + 0.1 * draw(inner)}
    conv0, ssm0 = draw(batch, conv_dim, width), draw(batch, heads, head_dim, state)

    def cast(t: torch.Tensor | None, to: torch.dtype) -> torch.Tensor | None:
        return None if t is None else t.to(device=device, dtype=to)

    model = {k: cast(v, torch.float32 if k == "a_neg" else dtype) for k, v in params.items()}
    exact = {k: cast(v, torch.float64) for k, v in model.items()}  # the same (rounded) values
    states = {name: (conv0.to(device=device, dtype=dtype, copy=True), ssm0.to(device, copy=True))
              for name in ("kernels", "reference")}
    exact_state = (conv0.to(dtype).to(device=device, dtype=torch.float64), ssm0.to(device, torch.float64))
    out: list[dict[str, Any]] = []
    for _ in range(tokens):
        zx = draw(batch, inner + conv_dim + heads + 5, scale=2.0).to(device=device, dtype=dtype)[:, 5:]
        args = (model["conv_w"], model["conv_b"], model["dt_bias"], model["a_neg"], model["d_skip"], model["norm_w"])
        got = ms.mamba_step_triton(zx, *args, *states["kernels"], dims, 1e-5)
        want = ms.mamba_step_reference(zx, *args, *states["reference"], dims, 1e-5)
        best = ms.mamba_step_reference(zx.double(), exact["conv_w"], exact["conv_b"], exact["dt_bias"], exact["a_neg"],
                                       exact["d_skip"], exact["norm_w"], *exact_state, dims, 1e-5).double()
        out.append({
            "conv_equal": bool(torch.equal(states["kernels"][0], states["reference"][0])),
            "dtype": str(got.dtype), "shape": list(got.shape),
            "out": (_error(got, best), _error(want, best)),
            "ssm": (_error(states["kernels"][1], exact_state[1]), _error(states["reference"][1], exact_state[1])),
        })
    return out


def interpreted() -> dict[str, Any]:
    """What the child process measures under ``TRITON_INTERPRET=1`` (CPU tensors), float32 and bfloat16."""
    torch.set_num_threads(1)
    return {str(dtype): {str(d): run(*d, device="cpu", dtype=dtype) for d in DIMS}
            for dtype in (torch.float32, torch.bfloat16)}
