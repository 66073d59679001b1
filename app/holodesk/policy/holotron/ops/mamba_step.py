"""The Mamba-2 mixer of one decode token after ``in_proj``, in two kernels.

Between its two projections a NemotronH Mamba-2 block's decode step is element-wise work and one pass over the
float32 SSM state (``[heads, head_dim, state]``: 5.0 MiB a layer for Holotron-12B, read and written). Compiled
by ``torch.compile`` from the torch maths (:func:`mamba_step_reference`) it ran as five kernels a layer, 13.4 us
together on an H200, the state pass 6.2 us of it (docs/benchmarks.md, run 8b's profile). :func:`mamba_step`
does it in two (:mod:`._mamba_step_triton`): one program per head and ``BLOCK_P`` rows of it convolves its
channels, updates its tile of the state and gates the output; one program per group then normalises: 7.2 + 2.3 us
a layer (run 13d's profile; the state's bytes alone need 2.6 us at 4 TB/s).

The maths is transformers 5.23 ``NemotronHMamba2Mixer``'s one-token branch (``causal_conv1d_update``,
``selective_state_update`` with ``dt_softplus``, ``NemotronHRMSNormGated`` with ``norm_before_gate=False``):
``xBC = silu(conv(state + xBC))``, ``dt = softplus(dt + dt_bias)``, ``s = s exp(dt A) + dt x B``,
``y = s C + D x``, ``out = w * rmsnorm_per_group(y silu(z))``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from holodesk.policy.holotron.ops.prefill import gated_rms_norm_reference

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

MambaDims = tuple[int, int, int, int, int, int]
"""``(I, C, nh, hd, groups, n)``: inner width, conv width (``I + 2 groups n``), heads, head dim, groups, state
size."""

try:  # pragma: no cover - depends on the machine
    from holodesk.policy.holotron.ops import _mamba_step_triton as _kernels

    HAVE_TRITON = True
except Exception as _exc:  # no Triton: the torch reference only
    log.debug("Triton Mamba-2 step kernels unavailable (%s: %s)", type(_exc).__name__, _exc)
    _kernels = None  # type: ignore[assignment]
    HAVE_TRITON = False

BLOCK_P = 16
"""Head rows per program of the state pass (Holotron-12B: 128 heads x 5 = 640 programs of 16 x 128 floats)."""
NUM_WARPS = 4
"""Warps per program of the state pass."""


def mamba_step_reference(zx: torch.Tensor, conv_w: torch.Tensor, conv_b: torch.Tensor | None, dt_bias: torch.Tensor,
                         a_neg: torch.Tensor, d_skip: torch.Tensor, norm_w: torch.Tensor, conv_state: torch.Tensor,
                         ssm_state: torch.Tensor, dims: MambaDims, eps: float) -> torch.Tensor:
    """:func:`mamba_step` in torch ops (model-dtype conv and step as the stock module computes them, float32
    state and norm); also what the compiled decode fuses where the kernels are not used."""
    # lazy (here and below): torch (optional, heavy)
    import torch
    import torch.nn.functional as F

    inner, conv_dim, nh, hd, groups, n = dims
    bsz = zx.shape[0]
    dtype = zx.dtype
    gate, xbc, dt = zx.split([inner, conv_dim, nh], dim=-1)
    window = torch.cat([conv_state[:, :, 1:], xbc.unsqueeze(-1).to(conv_state.dtype)], dim=-1)
    conv_state.copy_(window)
    xbc = (window * conv_w).sum(-1)
    if conv_b is not None:
        xbc = xbc + conv_b
    xs, b, c = F.silu(xbc).to(dtype).split([inner, groups * n, groups * n], dim=-1)
    dt = F.softplus((dt + dt_bias.to(dt.dtype)).float())  # [B, nh]
    xs = xs.view(bsz, nh, hd).float()
    rep = nh // groups
    b = b.view(bsz, groups, 1, n).expand(bsz, groups, rep, n).reshape(bsz, nh, 1, n).float()
    c = c.view(bsz, groups, 1, n).expand(bsz, groups, rep, n).reshape(bsz, nh, 1, n).float()
    decay = torch.exp(dt * a_neg).view(bsz, nh, 1, 1)
    new_state = ssm_state * decay + (dt.view(bsz, nh, 1, 1) * xs.unsqueeze(-1)) * b
    ssm_state.copy_(new_state)
    # s C as a product and a sum over the state (not a matmul): compiled, the update, the store and this
    # reduction are one kernel that reads the state once
    y = ((new_state * c).sum(-1) + xs * d_skip.float().view(1, nh, 1)).reshape(bsz, inner)
    return gated_rms_norm_reference(y, gate, norm_w, eps, inner // groups)


def kernels_apply(zx: torch.Tensor, conv_w: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor) -> bool:
    """Whether :func:`mamba_step_triton` takes these tensors: Triton importable, CUDA tensors (or the
    interpreter's CPU ones), a float32 SSM state, and every tensor contiguous in its last dim."""
    import torch  # lazy: torch (optional, heavy)

    return (HAVE_TRITON and zx.is_cuda and ssm_state.dtype == torch.float32 and ssm_state.is_contiguous()
            and zx.stride(-1) == 1 and conv_state.stride(-1) == 1 and conv_w.stride(-1) == 1)


def mamba_step(zx: torch.Tensor, conv_w: torch.Tensor, conv_b: torch.Tensor | None, dt_bias: torch.Tensor,
               a_neg: torch.Tensor, d_skip: torch.Tensor, norm_w: torch.Tensor, conv_state: torch.Tensor,
               ssm_state: torch.Tensor, dims: MambaDims, eps: float) -> torch.Tensor:
    """One token through a Mamba-2 mixer after its ``in_proj``: the input of ``out_proj``.

    Args:
        zx: ``[B, I + C + nh]`` ``in_proj``'s output: gate ``z``, ``xBC``, raw ``dt`` (model dtype).
        conv_w: ``[C, K]`` depthwise taps; conv_b: ``[C]`` or None.
        dt_bias: ``[nh]``; a_neg: ``[nh]`` float32 ``-exp(A_log)``; d_skip: ``[nh]``.
        norm_w: ``[I]`` the gated RMSNorm's weight (model dtype); eps: its epsilon (per group of ``I / groups``).
        conv_state: ``[B, C, K]`` model dtype, updated in place (shifted left, the new ``xBC`` appended).
        ssm_state: ``[B, nh, hd, n]`` float32, updated in place.
        dims: :data:`MambaDims`.
    Returns:
        ``[B, I]`` in ``norm_w``'s dtype. On CUDA with Triton two kernels (:func:`mamba_step_triton`), else
        :func:`mamba_step_reference`; the two differ by the order of float32 sums and where the conv's and
        the norm's intermediate values are rounded to the model dtype (the tests bound it).
    """
    if kernels_apply(zx, conv_w, conv_state, ssm_state):
        return mamba_step_triton(zx, conv_w, conv_b, dt_bias, a_neg, d_skip, norm_w, conv_state, ssm_state, dims,
                                 eps)
    return mamba_step_reference(zx, conv_w, conv_b, dt_bias, a_neg, d_skip, norm_w, conv_state, ssm_state, dims, eps)


def mamba_step_triton(zx: torch.Tensor, conv_w: torch.Tensor, conv_b: torch.Tensor | None, dt_bias: torch.Tensor,
                      a_neg: torch.Tensor, d_skip: torch.Tensor, norm_w: torch.Tensor, conv_state: torch.Tensor,
                      ssm_state: torch.Tensor, dims: MambaDims, eps: float, *, block_p: int = BLOCK_P,
                      num_warps: int = NUM_WARPS) -> torch.Tensor:
    """:func:`mamba_step` by the two Triton kernels (CUDA tensors, or CPU tensors under Triton's interpreter);
    arguments as there, ``ssm_state`` contiguous; ``block_p`` head rows and ``num_warps`` warps a program of the
    state pass.

    Raises:
        ValueError: the tensors' shapes disagree with ``dims``, or ``nh`` is not a multiple of ``groups``.
    """
    import torch  # lazy: torch (optional, heavy)

    inner, conv_dim, nh, hd, groups, n = dims
    bsz = zx.shape[0]
    width = conv_state.shape[-1]
    if (tuple(zx.shape) != (bsz, inner + conv_dim + nh) or tuple(conv_state.shape) != (bsz, conv_dim, width)
            or tuple(ssm_state.shape) != (bsz, nh, hd, n) or tuple(conv_w.shape) != (conv_dim, width)
            or conv_dim != inner + 2 * groups * n or inner != nh * hd or nh % groups):
        raise ValueError(f"Mamba-2 step shapes disagree with dims {dims}: zx {tuple(zx.shape)}, conv state "
                         f"{tuple(conv_state.shape)}, SSM state {tuple(ssm_state.shape)}, conv weight "
                         f"{tuple(conv_w.shape)}")
    gated = torch.empty(bsz, inner, dtype=torch.float32, device=zx.device)
    out = torch.empty(bsz, inner, dtype=norm_w.dtype, device=zx.device)
    block_n = max(16, 1 << (n - 1).bit_length())
    block_w = max(2, 1 << (width - 1).bit_length())
    _kernels.mamba_step_kernel[(bsz, nh, (hd + block_p - 1) // block_p)](
        zx, conv_state, conv_w, conv_b if conv_b is not None else conv_w, dt_bias, a_neg, d_skip, ssm_state, gated,
        zx.stride(0), conv_state.stride(0), conv_state.stride(1), conv_w.stride(0), ssm_state.stride(0),
        gated.stride(0),
        INNER=inner, CONV_DIM=conv_dim, HEADS=nh, HEAD_DIM=hd, GROUPS=groups, STATE=n, WIDTH=width,
        HAS_BIAS=conv_b is not None, BLOCK_P=block_p, BLOCK_N=block_n, BLOCK_W=block_w, num_warps=num_warps)
    _kernels.mamba_step_norm_kernel[(bsz, groups)](
        gated, norm_w, out, zx, conv_state, float(eps),
        gated.stride(0), out.stride(0), zx.stride(0), conv_state.stride(0), conv_state.stride(1),
        INNER=inner, GROUPS=groups, STATE=n, WIDTH=width, BLOCK_G=max(16, 1 << (inner // groups - 1).bit_length()),
        BLOCK_N=block_n, BLOCK_W=block_w, num_warps=4)
    return out


__all__ = ["BLOCK_P", "HAVE_TRITON", "NUM_WARPS", "MambaDims", "kernels_apply", "mamba_step", "mamba_step_reference",
           "mamba_step_triton"]
