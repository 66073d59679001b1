"""One decode step of each NemotronH block for one token, as plain torch functions of tensors.

The static decoder (:mod:`.decoder`) calls one of these per block and token, compiled with
``torch.compile`` so that the norm, the residual add and the element-wise work fuse around the
matrix-vector products. Shapes: ``h [B, H]`` the residual stream, model dtype.

The maths is transformers 5.23 ``modeling_nemotron_h`` (``NemotronHBlock``, ``NemotronHMamba2Mixer``'s
one-token branch, ``NemotronHMLP`` with ``relu2``, ``NemotronHAttention``); the Mamba-2 recurrence is the
reference step of Dao & Gu 2024 (``selective_state_update``): ``dt = softplus(dt + dt_bias)``,
``s = s * exp(dt * A) + dt * B x``, ``y = s C + D x``.

A projection ``w`` is either a plain weight ``[N, K]`` multiplied as :func:`.ops.gemv.linear` chooses
(``how``), or a module (bitsandbytes' quantised ``Linear``, or one with a bias) that is called as it is
(:func:`project`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from holodesk.policy.holotron.ops.gemv import linear
from holodesk.policy.holotron.ops.prefill import gated_rms_norm_reference, rms_norm_reference

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    Weight = torch.Tensor | Callable[[torch.Tensor], torch.Tensor]
    How = tuple[str, int, int, int] | None

MambaDims = tuple[int, int, int, int, int, int]
"""``(I, C, nh, hd, groups, n)``: inner width, conv width, heads, head dim, groups, state size."""


def project(x: torch.Tensor, w: Weight, how: How = None) -> torch.Tensor:
    """``x @ w^T`` for a plain weight ``w [N, K]`` (through ``how``, :meth:`.ops.gemv.Gemv.spec`), else
    ``w(x)`` (a module). ``x [B, K]`` -> ``[B, N]``."""
    import torch

    if isinstance(w, torch.Tensor):
        return linear(x, w, how)
    return w(x)


def mamba_block(h: torch.Tensor, norm32: torch.Tensor, eps: float, in_w: Weight, conv_w: torch.Tensor,
                conv_b: torch.Tensor | None, dt_bias: torch.Tensor, a_neg: torch.Tensor, d_skip: torch.Tensor,
                gnorm_w: torch.Tensor, out_w: Weight, conv_state: torch.Tensor, ssm_state: torch.Tensor,
                dims: MambaDims, gnorm_eps: float, in_how: How = None, out_how: How = None) -> torch.Tensor:
    """``h + mamba(rmsnorm(h))`` for one token.

    Args:
        norm32: the block norm's weight in float32; in_w ``in_proj`` ``[I + C + nh, H]``; conv_w
            ``[C, K]``; conv_b ``[C]`` or None; dt_bias ``[nh]``; a_neg ``[nh]`` float32 ``-exp(A_log)``;
            d_skip ``[nh]``; gnorm_w ``[I]`` (gated RMSNorm weight); out_w ``out_proj`` ``[H, I]``.
        conv_state: ``[B, C, K]`` updated in place (shifted left, new input appended).
        ssm_state: ``[B, nh, hd, n]`` float32 updated in place.
        gnorm_eps: epsilon of the gated RMSNorm (normalised per group of ``I / groups`` channels).
    """
    import torch
    import torch.nn.functional as F

    inner, conv_dim, nh, hd, groups, n = dims
    bsz = h.shape[0]
    dtype = h.dtype
    zxbcdt = project(rms_norm_reference(h, norm32, eps), in_w, in_how)
    gate, xbc, dt = zxbcdt.split([inner, conv_dim, nh], dim=-1)
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
    c = c.view(bsz, groups, 1, n).expand(bsz, groups, rep, n).reshape(bsz, nh, n, 1).float()
    decay = torch.exp(dt * a_neg).view(bsz, nh, 1, 1)
    new_state = ssm_state * decay + (dt.view(bsz, nh, 1, 1) * xs.unsqueeze(-1)) * b
    ssm_state.copy_(new_state)
    y = (torch.matmul(new_state, c).squeeze(-1) + xs * d_skip.float().view(1, nh, 1)).reshape(bsz, inner)
    y = gated_rms_norm_reference(y, gate, gnorm_w, gnorm_eps, inner // groups)
    return h + project(y, out_w, out_how)


def mlp_block(h: torch.Tensor, norm32: torch.Tensor, eps: float, up_w: Weight, down_w: Weight,
              up_how: How = None, down_how: How = None) -> torch.Tensor:
    """``h + down(relu(up(rmsnorm(h)))^2)`` (``NemotronHMLP``, activation ``relu2``)."""
    import torch
    import torch.nn.functional as F

    x = rms_norm_reference(h, norm32, eps)
    return h + project(torch.square(F.relu(project(x, up_w, up_how))), down_w, down_how)


def qkv(h: torch.Tensor, norm32: torch.Tensor, eps: float, q_w: Weight, k_w: Weight | None, v_w: Weight | None,
        kvh: int, rep: int, hd: int, how: How = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Normed projections of one token: q ``[B, kvh, rep, hd]``, k and v ``[B, kvh, 1, hd]``.

    With ``k_w`` and ``v_w`` None, ``q_w`` is the fused ``[(kvh*rep + 2*kvh) * hd, H]`` weight
    (:func:`.decoder.fused_qkv_weight`): one matrix-vector product through ``how``, split by views.
    """
    bsz = h.shape[0]
    x = rms_norm_reference(h, norm32, eps)
    if k_w is None or v_w is None:
        q, k, v = project(x, q_w, how).split([kvh * rep * hd, kvh * hd, kvh * hd], dim=-1)
    else:
        q, k, v = project(x, q_w), project(x, k_w), project(x, v_w)
    return q.reshape(bsz, kvh, rep, hd), k.reshape(bsz, kvh, 1, hd), v.reshape(bsz, kvh, 1, hd)


def attn_out(h: torch.Tensor, o: torch.Tensor, o_w: Weight, how: How = None) -> torch.Tensor:
    """``h + o_proj(o)``, ``o [B, heads * hd]``."""
    return h + project(o, o_w, how)


def head(h: torch.Tensor, normf32: torch.Tensor, eps: float, lm_w: Weight, how: How = None
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Final norm, ``lm_head`` in float32 logits ``[B, vocab]`` and the greedy token ``[B, 1]`` int64."""
    import torch

    logits = project(rms_norm_reference(h, normf32, eps), lm_w, how).float()
    return logits, torch.argmax(logits, dim=-1, keepdim=True)


BLOCK_FUNCTIONS = {"mamba": mamba_block, "mlp": mlp_block, "qkv": qkv, "out": attn_out, "head": head}
"""The functions a decode step calls, by role (compiled together by the decoder)."""
