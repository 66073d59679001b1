"""The maths of each NemotronH block as plain functions of tensors: one decode step, one prefill chunk.

The static decoder (:mod:`.decoder`) holds the tensors and calls these. Decode: one call per block and token
(``*_block``, :func:`mamba_in`, :func:`mamba_out`, :func:`qkv`, :func:`attn_out`, :func:`head`; compiled with
``torch.compile``, which fuses the element-wise work around the matrix-vector products where kernels of our own
do not take it), :func:`attend`, and on CUDA the Mamba-2 mixer's own kernels (:mod:`.ops.mamba_step`). A
block's function returns its output without adding it to the residual stream; the next one adds it in the
kernel of its own RMSNorm (:func:`.ops.prefill.add_rms_norm_row`), so no block spends a kernel on the add.
Prefill: :func:`mamba_chunk` and :func:`attention_chunk` over a chunk of rows, with the kernels of
:mod:`.ops.prefill`. Shapes: ``h [B, H]`` the residual stream of one token, ``x [B, T, H]`` a chunk's
normed rows, model dtype.

The maths is transformers 5.23 ``modeling_nemotron_h`` (``NemotronHBlock``, ``NemotronHMamba2Mixer``'s
one-token branch, ``NemotronHMLP`` with ``relu2``, ``NemotronHAttention``); the Mamba-2 recurrence of one token
is in :mod:`.ops.mamba_step`.

A projection ``w`` is a plain weight ``[N, K]`` multiplied as :func:`.ops.gemv.linear` chooses (``how``),
a bitsandbytes weight as stored (:class:`.ops.quant.NF4Weight` / :class:`.ops.quant.Int8Weight`, decode
only) multiplied by :func:`.ops.quant.linear`, or a module (bitsandbytes' quantised ``Linear`` for
prefill, or one with a bias) that is called as it is (:func:`project`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from holodesk.policy.holotron.ops import prefill, quant
from holodesk.policy.holotron.ops.gemv import linear
from holodesk.policy.holotron.ops.mamba_step import MambaDims, mamba_step_reference

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    Weight = torch.Tensor | quant.QuantWeight | Callable[[torch.Tensor], torch.Tensor]
    How = tuple[str, int, int, int] | None


def project(x: torch.Tensor, w: Weight, how: How = None, *, relu_square: bool = False) -> torch.Tensor:
    """``x @ w^T`` for a plain weight ``w [N, K]`` or a quantised one (:mod:`.ops.quant`), through ``how``
    (:meth:`.ops.gemv.Gemv.spec`), else ``w(x)`` (a module). ``x [B, K]`` -> ``[B, N]``, or ``[..., K]`` ->
    ``[..., N]`` for several rows (prefill). With ``relu_square`` the product is of ``relu(x)^2`` (the MLP's
    activation; a plain weight's Triton matrix-vector kernel applies it as it reads ``x``).

    bitsandbytes' int8 layers are multiplied weight-only, also where they come as modules (prefill, the eager
    decode): their storage dequantised and multiplied in ``x``'s dtype (:func:`.ops.quant.matmul`), never
    through the module's LLM.int8 forward, which quantises the activations, decomposes outliers, syncs with
    the host (it cannot be captured in a CUDA graph) and disagrees with the weight-only decode kernel."""
    # lazy (here and below): torch (optional, heavy)
    import torch
    import torch.nn.functional as F

    if isinstance(w, torch.Tensor):
        return linear(x, w, how, relu_square=relu_square)
    if relu_square:
        x = torch.square(F.relu(x))
    if not isinstance(w, (quant.NF4Weight, quant.Int8Weight)):
        stored = quant.quant_weight(w) if _is_int8_module(w) else None
        if stored is None:
            return w(x)
        w = stored
    if x.dim() == 2 and x.shape[0] == 1:
        return quant.linear(x, w, how)
    return quant.matmul(x, w)


def _is_int8_module(w: object) -> bool:
    """True for a bitsandbytes ``Linear8bitLt`` (checked by class name: bitsandbytes is optional)."""
    return type(w).__name__ == "Linear8bitLt"


def fused_qkv_weight(mixer: torch.nn.Module) -> torch.Tensor | None:
    """The ``[q + k + v, H]`` weight of an attention mixer whose unbiased ``q_proj``/``k_proj``/``v_proj``
    weights are adjacent row blocks of one contiguous buffer (the loader lays them out so), as a view of
    that buffer; None otherwise (e.g. quantised modules, or separately allocated weights)."""
    import torch  # lazy: torch (optional, heavy)

    projs = [mixer.get_submodule(name) for name in ("q_proj", "k_proj", "v_proj")]
    mods: list[torch.nn.Linear] = []
    for p in projs:
        if not isinstance(p, torch.nn.Linear) or type(p) is not torch.nn.Linear or p.bias is not None:
            return None
        mods.append(p)
    q, k, v = (p.weight for p in mods)
    if not all(w.is_contiguous() and w.dtype == q.dtype and w.shape[1] == q.shape[1] for w in (q, k, v)):
        return None
    if len({w.untyped_storage().data_ptr() for w in (q, k, v)}) != 1:
        return None
    if k.storage_offset() != q.storage_offset() + q.numel() or v.storage_offset() != k.storage_offset() + k.numel():
        return None
    rows = q.shape[0] + k.shape[0] + v.shape[0]
    return q.detach().as_strided((rows, q.shape[1]), (q.shape[1], 1), q.storage_offset())


def weight_of(module: torch.nn.Module, *, quantized: bool = False
              ) -> torch.Tensor | quant.QuantWeight | torch.nn.Module:
    """A projection as :func:`project` takes it: the weight of an unbiased ``nn.Linear``; with ``quantized``,
    the storage of an unbiased bitsandbytes NF4 / int8 layer (:func:`.ops.quant.quant_weight`, the same
    tensors, for the decode kernels); else the module itself (bitsandbytes' layers called as they are,
    biased layers)."""
    import torch  # lazy: torch (optional, heavy)

    if isinstance(module, torch.nn.Linear) and type(module) is torch.nn.Linear and module.bias is None:
        return module.weight.detach()
    if quantized:
        stored = quant.quant_weight(module)
        if stored is not None:
            return stored
    return module


def mamba_in(h: torch.Tensor, pending: torch.Tensor | None, norm32: torch.Tensor, eps: float, in_w: Weight,
             in_how: How = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, in_proj(rmsnorm(s)))`` with ``s = h + pending`` (:func:`.ops.prefill.add_rms_norm_row`): a Mamba-2
    block's first part, ``[B, H]`` and ``[B, I + C + nh]``; :func:`.ops.mamba_step.mamba_step` takes the second."""
    h, x = prefill.add_rms_norm_row(h, pending, norm32, eps)
    return h, project(x, in_w, in_how)


def mamba_out(y: torch.Tensor, out_w: Weight, out_how: How = None) -> torch.Tensor:
    """``out_proj(y)``, ``y [B, I]`` (:func:`.ops.mamba_step.mamba_step`'s output): a Mamba-2 block's output,
    which the next block adds. A function of its own, not :func:`attn_out`: compiled, each keeps one graph per
    model (``torch.compile`` counts recompilations per function)."""
    return project(y, out_w, out_how)


def mamba_block(h: torch.Tensor, pending: torch.Tensor | None, norm32: torch.Tensor, eps: float, in_w: Weight,
                out_w: Weight, conv_w: torch.Tensor, conv_b: torch.Tensor | None, dt_bias: torch.Tensor,
                a_neg: torch.Tensor, d_skip: torch.Tensor, gnorm_w: torch.Tensor, conv_state: torch.Tensor,
                ssm_state: torch.Tensor, dims: MambaDims, gnorm_eps: float, in_how: How = None,
                out_how: How = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One token through a Mamba-2 block in torch ops: ``(s, out_proj(mix(in_proj(rmsnorm(s)))))`` with
    ``s = h + pending`` (:func:`mamba_in`); the next block adds the second to the first. ``mix`` is
    :func:`.ops.mamba_step.mamba_step_reference` (what ``torch.compile`` fuses when the decoder does not run
    the step's own kernels: :attr:`.decoder.Setup.fused_step`).

    Args:
        norm32: the block norm's weight in float32; in_w ``in_proj`` ``[I + C + nh, H]``; out_w ``out_proj``
            ``[H, I]``; the rest as :func:`.ops.mamba_step.mamba_step` takes them (conv_w ``[C, K]``,
            conv_b ``[C]`` or None, dt_bias ``[nh]``, a_neg ``[nh]`` float32 ``-exp(A_log)``, d_skip ``[nh]``,
            gnorm_w ``[I]``, conv_state ``[B, C, K]`` and ssm_state ``[B, nh, hd, n]`` float32 updated in
            place, gnorm_eps per group of ``I / groups`` channels).
    """
    h, zx = mamba_in(h, pending, norm32, eps, in_w, in_how)
    y = mamba_step_reference(zx, conv_w, conv_b, dt_bias, a_neg, d_skip, gnorm_w, conv_state, ssm_state, dims,
                             gnorm_eps)
    return h, project(y, out_w, out_how)


def mlp_block(h: torch.Tensor, pending: torch.Tensor | None, norm32: torch.Tensor, eps: float, up_w: Weight,
              down_w: Weight, up_how: How = None, down_how: How = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, down(relu(up(rmsnorm(s)))^2))`` with ``s = h + pending`` (``NemotronHMLP``, activation
    ``relu2``)."""
    h, x = prefill.add_rms_norm_row(h, pending, norm32, eps)
    return h, project(project(x, up_w, up_how), down_w, down_how, relu_square=True)


def qkv(h: torch.Tensor, pending: torch.Tensor | None, norm32: torch.Tensor, eps: float, q_w: Weight,
        k_w: Weight | None, v_w: Weight | None, kvh: int, rep: int, hd: int, how: How = None
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The residual stream ``s = h + pending`` (:func:`.ops.prefill.add_rms_norm_row`) and the normed projections
    of one token: ``(s, q [B, kvh, rep, hd], k [B, kvh, 1, hd], v [B, kvh, 1, hd])``.

    With ``k_w`` and ``v_w`` None, ``q_w`` is the fused ``[(kvh*rep + 2*kvh) * hd, H]`` weight
    (:func:`fused_qkv_weight`): one matrix-vector product through ``how``, split by views; else three
    products through ``how`` (one quantised kernel tile serves the three shapes).
    """
    h, x = prefill.add_rms_norm_row(h, pending, norm32, eps)
    bsz = h.shape[0]
    if k_w is None or v_w is None:
        q, k, v = project(x, q_w, how).split([kvh * rep * hd, kvh * hd, kvh * hd], dim=-1)
    else:
        q, k, v = project(x, q_w, how), project(x, k_w, how), project(x, v_w, how)
    return h, q.reshape(bsz, kvh, rep, hd), k.reshape(bsz, kvh, 1, hd), v.reshape(bsz, kvh, 1, hd)


def attn_out(o: torch.Tensor, o_w: Weight, how: How = None) -> torch.Tensor:
    """``o_proj(o)``, ``o [B, heads * hd]``: the attention block's output, which the next block adds."""
    return project(o, o_w, how)


def head(h: torch.Tensor, pending: torch.Tensor | None, normf32: torch.Tensor, eps: float, lm_w: Weight,
         how: How = None) -> torch.Tensor:
    """Final norm of ``h + pending`` (:func:`.ops.prefill.add_rms_norm_row`) and ``lm_head``: float32 logits
    ``[B, vocab]``.

    The token is chosen by the caller outside ``torch.compile`` (:func:`.runtime.decode_loop`, with eager
    ``torch.argmax``): compiled, the argmax over Holotron-12B's 131,072 logits was one thread block's
    reduction, 31 us a decode step on an H200 (docs/benchmarks.md, run 13a), where torch's own kernel spreads
    it over the GPU."""
    _, x = prefill.add_rms_norm_row(h, pending, normf32, eps)
    return project(x, lm_w, how).float()


def future_keys(pos: torch.Tensor, arange: torch.Tensor, window: int) -> torch.Tensor:
    """``[window]`` bool, True for the keys after ``pos`` (``[1]`` int64; ``arange``: ``0 .. L-1`` on the
    device): the mask :func:`attend` applies, the same for every attention layer of a step (computed once)."""
    return arange[:window] > pos


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           pos: torch.Tensor, future: torch.Tensor, window: int, scaling: float) -> torch.Tensor:
    """Write one token's ``k``/``v`` ``[B, kvh, 1, hd]`` at ``pos`` (``[1]`` int64) into the caches
    ``[B, kvh, L, hd]`` and attend ``q [B, kvh, rep, hd]`` over keys ``[0, window)``, those after ``pos``
    masked (``future``: :func:`future_keys`). Returns ``[B, kvh * rep * hd]``.

    The ``rep`` query heads sharing a KV head are ``rep`` query rows of it (head ``h`` uses KV head
    ``h // rep``, transformers' ``repeat_kv``), so no key is copied; the arithmetic is transformers'
    ``eager_attention_forward`` (model-dtype scores, float32 softmax). Plain matmuls spread the key length
    over the whole GPU, where a fused attention kernel would give the few query rows a few thread blocks.
    """
    import torch  # lazy: torch (optional, heavy)

    k_cache.index_copy_(2, pos, k)
    v_cache.index_copy_(2, pos, v)
    scores = torch.matmul(q, k_cache[:, :, :window].transpose(2, 3)) * scaling
    scores = scores.float().masked_fill(future, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1).to(q.dtype), v_cache[:, :, :window])
    return out.reshape(q.shape[0], -1)


def mamba_chunk(x: torch.Tensor, in_w: Weight, out_w: Weight, conv_w: torch.Tensor, conv_b: torch.Tensor | None,
                dt_bias: torch.Tensor, a_neg: torch.Tensor, d_skip: torch.Tensor, gnorm_w: torch.Tensor,
                conv_state: torch.Tensor, ssm_state: torch.Tensor, dims: MambaDims, gnorm_eps: float, *,
                length: torch.Tensor, chunk_size: int,
                dt_limit: tuple[float, float]) -> torch.Tensor:
    """Mamba-2 mixer over the normed rows ``x [B, T, H]`` of which the first ``length`` (``[1]`` int64 on
    the device) are real, continuing from ``conv_state``/``ssm_state`` (updated in place; arguments as
    :func:`mamba_block`). Returns ``[B, T, H]`` (padded rows: garbage).

    ``NemotronHMamba2Mixer``'s chunk branch: ``in_proj`` -> causal conv with SiLU over the ``xBC`` columns
    (:func:`.ops.prefill.causal_conv1d`, state taken at ``length``) -> chunked scan (transformers'
    ``mamba2_chunk_scan``: mamba-ssm's ``mamba_chunk_scan_combined`` when live) -> gated RMSNorm
    (:func:`.ops.prefill.gated_rms_norm`) -> ``out_proj``. The step is computed here as the scan would
    (``clamp(softplus(dt + dt_bias), *dt_limit)`` in float32, :func:`.ops.prefill.step_size`) and set to
    exactly 0 on padded rows, so ``exp(dt A) = 1`` and ``dt B x = 0`` there and the state leaves the chunk as
    the last real row left it (masking the raw ``dt`` would leave the ``time_step_min`` floor on padded rows).
    """
    from transformers.models.nemotron_h import modeling_nemotron_h as mnh  # lazy: transformers (optional, heavy)

    inner, conv_dim, heads, hd, groups, n = dims
    bsz, t, _ = x.shape
    gate, xbc, dt = project(x, in_w).split([inner, conv_dim, heads], dim=-1)
    dt = prefill.step_size(dt, dt_bias, length, dt_limit)
    xbc = prefill.causal_conv1d(xbc, conv_state, conv_w, conv_b, silu=True, length=length)
    xs, b, c = xbc.split([inner, groups * n, groups * n], dim=-1)
    out, final = mnh.mamba2_chunk_scan(
        xs.view(bsz, t, heads, hd), dt, a_neg, b.view(bsz, t, groups, n), c.view(bsz, t, groups, n),
        chunk_size=chunk_size, D=d_skip, z=None, dt_bias=None, initial_states=ssm_state, dt_softplus=False,
        dt_limit=(0.0, float("inf")), return_final_states=True)
    ssm_state.copy_(final)
    y = prefill.gated_rms_norm(out.reshape(bsz, t, -1), gate, gnorm_w, gnorm_eps, inner // groups)
    return project(y.to(x.dtype), out_w)


def attention_chunk(x: torch.Tensor, q_w: Weight, k_w: Weight | None, v_w: Weight | None, kvh: int, rep: int,
                    hd: int, *, k_cache: torch.Tensor, v_cache: torch.Tensor, start: int, o_w: Weight,
                    scaling: float) -> torch.Tensor:
    """Attention of the real rows ``x [B, T, H]`` at positions ``[start, start + T)`` over the cached past
    (projections as :func:`qkv`): keys and values go into the caches, then one SDPA call over the grouped KV
    heads with a causal mask aligned to the bottom right (query ``t`` sees keys ``<= start + t``). Flash only
    on CUDA in half precision (an input it refuses raises rather than run a slower backend); the math
    backend elsewhere. Returns ``[B, T, H]``."""
    # lazy (here and below): torch (optional, heavy)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    bsz, t, _ = x.shape
    if k_w is None or v_w is None:
        q, k, v = project(x, q_w).split([kvh * rep * hd, kvh * hd, kvh * hd], dim=-1)
    else:
        q, k, v = project(x, q_w), project(x, k_w), project(x, v_w)
    end = start + t
    k_cache[:, :, start:end].copy_(k.view(bsz, t, kvh, hd).transpose(1, 2))
    v_cache[:, :, start:end].copy_(v.view(bsz, t, kvh, hd).transpose(1, 2))
    flash = x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)
    mask: dict[str, Any] = {"is_causal": True} if start == 0 else {"attn_mask": causal_lower_right(t, end)}
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION] if flash else [SDPBackend.MATH]):
        out = F.scaled_dot_product_attention(q.view(bsz, t, kvh * rep, hd).transpose(1, 2), k_cache[:, :, :end],
                                             v_cache[:, :, :end], scale=scaling, enable_gqa=True, **mask)
    return project(out.transpose(1, 2).reshape(bsz, t, -1), o_w)


BLOCK_FUNCTIONS = {"mamba": mamba_block, "mamba_in": mamba_in, "mamba_out": mamba_out, "mlp": mlp_block, "qkv": qkv,
                   "out": attn_out, "head": head}
"""The functions a decode step calls, by role (compiled together by the decoder)."""
