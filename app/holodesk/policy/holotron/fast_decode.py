"""Static-state prefill and decoding for transformers' NemotronH (the Holotron-12B language model).

Why: stock ``generate()`` re-enters Python for every layer of every token, allocates the KV cache as it
grows and launches ~1300 small kernels per token, so a decode step on an H200 takes 68-81 ms against a
5.7 ms memory floor (docs/holotron.md, "Measured"). This module keeps every piece of decoder state in
tensors allocated once, so that one decode step is a fixed sequence of kernels over fixed addresses and can
be captured in a CUDA graph at load time and replayed for every token.

State (all preallocated by :class:`StaticLM`, ``B`` = batch, ``L`` = ``max_len``):

* attention layers (6 in Holotron): ``k``/``v`` ``[B, kv_heads, L, head_dim]`` in the model dtype; token
  ``t`` lives at index ``t`` (the model has no positional encoding, so a cached entry never changes);
* Mamba-2 layers (28): ``conv`` ``[B, conv_dim, conv_kernel]`` (model dtype: the last ``conv_kernel``
  inputs of the depthwise causal conv) and ``ssm`` ``[B, heads, head_dim, state]`` float32 (the SSM state,
  the dtype transformers' cache keeps after a chunked scan);
* ``pos`` ``[1]`` int64: the number of tokens already in the state (the next token's index), and the host
  mirror :attr:`StaticLM.length` (so choosing a graph never needs a device sync);
* ``token`` ``[B, 1]`` int64 (decode input), ``logits`` ``[B, vocab]`` float32 (decode output).

Decode step (:meth:`StaticLM.step`): embedding -> for each block ``h += mixer(norm(h))`` -> ``norm_f`` ->
``lm_head`` -> argmax into ``token`` and ``pos += 1``; nothing is allocated outside the graph pool, no
shape depends on host values except the attention window ``W`` (a multiple of ``bucket`` tokens: keys
``[0, W)`` are read, those ``>= pos`` are masked). One graph is captured per window size at load
(:meth:`StaticLM.capture_graphs`) and the replay for the current length is chosen on the host.

The block maths reproduces transformers 5.23 ``modeling_nemotron_h`` (``NemotronHBlock``,
``NemotronHMamba2Mixer`` decode branch, ``NemotronHAttention``): with ``impl="dispatch"`` it calls the very
kernel wrappers the stock mixer calls (``causal_conv1d_update``, ``mamba2_selective_state_update``: the
mamba-ssm Triton kernel when live, else transformers' torch reference), so its output equals stock
decoding up to the order of floating-point sums in attention. ``impl="torch"`` writes the same step in
plain torch ops (no external kernel) so that ``torch.compile`` can fuse the element-wise work around the
matrix-vector products; the recurrence is the one in Mamba-2's reference step (Dao & Gu 2024,
``selective_state_update``): ``dt = softplus(dt + dt_bias)``, ``s = s * exp(dt * A) + dt * B x``,
``y = s C + D x``.

Prefill (:meth:`StaticLM.prefill`) runs chunks of at most ``chunk`` tokens, writing keys and values
straight into the static cache and carrying conv/SSM state across chunks in the static tensors;
activation memory is that of one chunk whatever the prompt length. By default each block runs our fused
path (:mod:`.prefill_ops`: the Mamba-2 chunk branch with a fused causal conv, relu^2 in place, the
residual add fused into the next RMSNorm, one flash call for attention); ``fused_prefill=False`` runs
the stock block modules instead, with conv/SSM state passed through a small adapter
(:class:`_MambaStateView`) that offers the cache methods the stock mixer calls. With ``prefill_bucket``
the chunks are padded in static buffers so the Mamba/MLP segments between attention layers can be
captured as CUDA graphs (:meth:`StaticLM.capture_prefill_graphs`).

Incremental prefill: the token keys of the last prompt are kept with snapshots of the Mamba state at
chosen positions; a new prompt resumes from the latest snapshot that lies within its common prefix with
the previous one (attention entries before that point are reused as they are), so dropping an old
screenshot correctly rebuilds from the snapshot before it.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from holodesk.policy.holotron.gemv import Gemv
from holodesk.policy.holotron.gemv import linear as _lin

log = logging.getLogger(__name__)

_MAMBA, _ATTN, _MLP = "linear_attention", "full_attention", "mlp"


@dataclass
class PrefillReport:
    """What one :meth:`StaticLM.prefill` call did.

    Attributes:
        tokens: prompt length T.
        reused: tokens taken from the previous prompt's state (resume point), 0 for a cold prefill.
        computed: tokens run through the model (``tokens - reused``).
        chunks: number of chunks run.
        snapshots: positions at which Mamba state was saved during this call.
    """

    tokens: int
    reused: int
    computed: int
    chunks: int
    snapshots: list[int] = field(default_factory=list)


class _MambaStateView:
    """The cache interface ``NemotronHMamba2Mixer.forward`` uses, backed by one layer's static tensors.

    The stock mixer asks ``get_conv_state``/``get_recurrent_state`` (None means "no past"), then for a
    chunk of T > 1 tokens calls ``update_conv_state(x)`` and expects the conv input with the stored past
    prepended (it convolves it and keeps the last T outputs), and ``update_recurrent_state(final)`` with
    the scan's final state. A zero past is the same as no past (the conv pads with zeros; a zero initial
    SSM state adds nothing), so the view always reports one.

    Args:
        conv: ``[B, conv_dim, K]`` model dtype, updated in place.
        ssm: ``[B, heads, head_dim, state]`` float32, updated in place.
    """

    def __init__(self, conv: Any, ssm: Any) -> None:
        self.conv = conv
        self.ssm = ssm

    def get_conv_state(self, layer_idx: int, state_idx: int = 0) -> Any:
        return self.conv

    def get_recurrent_state(self, layer_idx: int, state_idx: int = 0) -> Any:
        return self.ssm

    def is_recording_past(self, layer_idx: int) -> bool:
        return False

    def update_conv_state(self, conv_states: Any, layer_idx: int, state_idx: int = 0, **_: Any) -> Any:
        import torch

        full = torch.cat([self.conv, conv_states.to(self.conv.dtype)], dim=-1)
        self.conv.copy_(full[..., -self.conv.shape[-1] :])
        return full

    def update_recurrent_state(self, recurrent_states: Any, layer_idx: int, state_idx: int = 0, **_: Any) -> Any:
        self.ssm.copy_(recurrent_states)
        return self.ssm


def _rms_norm_f32(x: Any, weight32: Any, eps: float, out_dtype: Any) -> Any:
    """``NemotronHRMSNorm``: fp32 ``x * rsqrt(mean(x^2) + eps) * weight`` cast back to ``out_dtype``."""
    import torch

    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (weight32 * xf).to(out_dtype)


def mamba_step_torch(
    x: Any,
    in_w: Any,
    conv_w: Any,
    conv_b: Any,
    dt_bias: Any,
    a_neg: Any,
    d_skip: Any,
    gnorm_w: Any,
    out_w: Any,
    conv_state: Any,
    ssm_state: Any,
    dims: tuple[int, int, int, int, int, int],
    gnorm_eps: float,
    in_how: Any = None,
    out_how: Any = None,
) -> Any:
    """One Mamba-2 mixer decode step in plain torch ops (fusable by ``torch.compile``).

    Args:
        x: ``[B, H]`` normed block input, model dtype.
        in_w: ``in_proj.weight`` ``[I + C + nh, H]``; conv_w ``[C, K]``; conv_b ``[C]`` or None;
            dt_bias ``[nh]``; a_neg ``[nh]`` float32 ``-exp(A_log)``; d_skip ``[nh]``;
            gnorm_w ``[I]`` (gated RMSNorm weight); out_w ``[H, I]``.
        conv_state: ``[B, C, K]`` updated in place (shifted left, new input appended).
        ssm_state: ``[B, nh, hd, n]`` float32 updated in place.
        dims: ``(I, C, nh, hd, groups, n)``: inner width, conv width, heads, head dim, groups, state size.
        gnorm_eps: epsilon of the gated RMSNorm (normalised per group of ``I / groups`` channels).
        in_how, out_how: matrix-vector implementations for ``in_proj`` / ``out_proj``
            (:meth:`holodesk.policy.holotron.gemv.Gemv.spec`; None = ``F.linear``).
    Returns:
        ``[B, H]`` mixer output, model dtype.
    """
    import torch
    import torch.nn.functional as F

    inner, conv_dim, nh, hd, groups, n = dims
    bsz = x.shape[0]
    dtype = x.dtype
    zxbcdt = _lin(x, in_w, in_how)
    gate, xbc, dt = zxbcdt.split([inner, conv_dim, nh], dim=-1)
    window = torch.cat([conv_state[:, :, 1:], xbc.unsqueeze(-1).to(conv_state.dtype)], dim=-1)
    conv_state.copy_(window)
    xbc = (window * conv_w).sum(-1)
    if conv_b is not None:
        xbc = xbc + conv_b
    xbc = F.silu(xbc).to(dtype)
    xs, b, c = xbc.split([inner, groups * n, groups * n], dim=-1)
    dt = F.softplus((dt + dt_bias.to(dt.dtype)).float())  # [B, nh]
    xs = xs.view(bsz, nh, hd).float()
    rep = nh // groups
    b = b.view(bsz, groups, 1, n).expand(bsz, groups, rep, n).reshape(bsz, nh, 1, n).float()
    c = c.view(bsz, groups, 1, n).expand(bsz, groups, rep, n).reshape(bsz, nh, n, 1).float()
    decay = torch.exp(dt * a_neg).view(bsz, nh, 1, 1)
    new_state = ssm_state * decay + (dt.view(bsz, nh, 1, 1) * xs.unsqueeze(-1)) * b
    ssm_state.copy_(new_state)
    y = torch.matmul(new_state, c).squeeze(-1) + xs * d_skip.float().view(1, nh, 1)
    y = y.reshape(bsz, inner)
    # Gated RMSNorm (NemotronHRMSNormGated): y * silu(gate), normalised per group, times weight.
    y = y * F.silu(gate.float())
    yg = y.view(bsz, groups, inner // groups)
    yg = yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + gnorm_eps)
    y = gnorm_w * yg.view(bsz, inner).to(dtype)
    return _lin(y.to(dtype), out_w, out_how)


def mamba_block_torch(
    h: Any, norm32: Any, eps: float, in_w: Any, conv_w: Any, conv_b: Any, dt_bias: Any, a_neg: Any, d_skip: Any,
    gnorm_w: Any, out_w: Any, conv_state: Any, ssm_state: Any, dims: tuple[int, int, int, int, int, int],
    gnorm_eps: float, in_how: Any = None, out_how: Any = None,
) -> Any:
    """``h + mamba(rmsnorm(h))`` for one token, ``h [B, H]`` (``NemotronHBlock`` with a Mamba-2 mixer)."""
    x = _rms_norm_f32(h, norm32, eps, h.dtype)
    return h + mamba_step_torch(x, in_w, conv_w, conv_b, dt_bias, a_neg, d_skip, gnorm_w, out_w, conv_state,
                                ssm_state, dims, gnorm_eps, in_how, out_how)


def mlp_block_torch(h: Any, norm32: Any, eps: float, up_w: Any, down_w: Any, up_how: Any = None,
                    down_how: Any = None) -> Any:
    """``h + down(relu(up(rmsnorm(h)))^2)`` (``NemotronHMLP``, activation ``relu2``), ``h [B, H]``."""
    import torch
    import torch.nn.functional as F

    x = _rms_norm_f32(h, norm32, eps, h.dtype)
    return h + _lin(torch.square(F.relu(_lin(x, up_w, up_how))), down_w, down_how)


def qkv_torch(h: Any, norm32: Any, eps: float, q_w: Any, k_w: Any, v_w: Any, kvh: int, rep: int, hd: int
              ) -> tuple[Any, Any, Any]:
    """Normed projections of one token: q ``[B, kvh, rep, hd]``, k and v ``[B, kvh, 1, hd]``."""
    import torch.nn.functional as F

    bsz = h.shape[0]
    x = _rms_norm_f32(h, norm32, eps, h.dtype)
    q = F.linear(x, q_w).view(bsz, kvh, rep, hd)
    k = F.linear(x, k_w).view(bsz, kvh, 1, hd)
    v = F.linear(x, v_w).view(bsz, kvh, 1, hd)
    return q, k, v


def qkv_fused_torch(h: Any, norm32: Any, eps: float, qkv_w: Any, kvh: int, rep: int, hd: int, how: Any = None
                    ) -> tuple[Any, Any, Any]:
    """As :func:`qkv_torch` with the three weights stacked in ``qkv_w [(kvh*rep + 2*kvh) * hd, H]``: one
    matrix-vector product per token instead of three (the split is a view)."""
    bsz = h.shape[0]
    x = _rms_norm_f32(h, norm32, eps, h.dtype)
    qkv = _lin(x, qkv_w, how)
    q, k, v = qkv.split([kvh * rep * hd, kvh * hd, kvh * hd], dim=-1)
    return q.reshape(bsz, kvh, rep, hd), k.reshape(bsz, kvh, 1, hd), v.reshape(bsz, kvh, 1, hd)


def attn_out_torch(h: Any, o: Any, o_w: Any, how: Any = None) -> Any:
    """``h + o_proj(o)``."""
    return h + _lin(o, o_w, how)


def head_torch(h: Any, normf32: Any, eps: float, lm_w: Any, how: Any = None) -> tuple[Any, Any]:
    """Final norm, ``lm_head`` in float32 logits ``[B, vocab]`` and the greedy token ``[B, 1]``."""
    import torch

    x = _rms_norm_f32(h, normf32, eps, h.dtype)
    logits = _lin(x, lm_w, how).float()
    return logits, torch.argmax(logits, dim=-1, keepdim=True)


class StaticLM:
    """Preallocated-state prefill + decode for a ``NemotronHForCausalLM`` (see the module docstring).

    Args:
        lm: transformers' ``NemotronHForCausalLM`` (the ``language_model`` of the Omni model), eval mode;
            weights may be bf16/fp32 or bitsandbytes-quantised Linear modules (used through their modules).
        max_len: capacity of the attention cache in tokens (prompt + reply).
        batch: batch size B (the policy uses 1).
        bucket: attention window granularity for decode graphs, in tokens.
        chunk: prefill chunk length in tokens (activation memory is that of one chunk).
        impl: ``"dispatch"`` (stock kernel wrappers, equal to stock decoding) or ``"torch"`` (plain ops).
        compile: wrap the per-block step functions in ``torch.compile`` (``impl="torch"`` only).
        snapshot_slots: Mamba-state snapshots kept for incremental prefill, preallocated here (each
            ``28 x 5.3 MiB`` for Holotron), so the memory held between the steps of an episode is constant.
        fuse_qkv: with ``impl="torch"`` on unquantised weights, store each attention layer's q/k/v
            projection weights as one ``[q + k + v, H]`` tensor (the modules' weights become views of it,
            so no memory is added and prefill, which calls the modules, is unchanged) and decode them with
            one matrix-vector product instead of three.
        gemv_select: with ``impl="torch"`` on CUDA, time the matrix-vector implementations of
            :mod:`holodesk.policy.holotron.gemv` on each weight shape of the decode step now (at load) and
            use the fastest (:attr:`gemv`, :attr:`gemv_timings`).
        fused_gated_norm: on CUDA with mamba-ssm, prefill's gated RMSNorm of every Mamba-2 mixer runs as
            mamba-ssm's fused Triton kernel (``layernorm_gated.rmsnorm_fn``, ``norm_before_gate=False``:
            ``w * rmsnorm(y * silu(z))`` per group, as ``NemotronHRMSNormGated``) instead of transformers'
            float32 torch ops (several full-size float32 temporaries per layer).
        fused_prefill: prefill runs each block through :mod:`.prefill_ops` (our Mamba-2 chunk path with a
            fused causal conv, in-place relu^2, and the residual add fused into the next block's RMSNorm;
            one kernel each on CUDA with Triton and mamba-ssm, the same maths in torch elsewhere) instead
            of the stock block modules (``False``: ``NemotronHBlock``'s norm, mixer and add, kept to
            compare against). :attr:`prefill_kernels` says which runs.
        prefill_bucket: with the fused path, > 0 pads each prefill chunk to a multiple of this many rows in
            static buffers (``3 x chunk x hidden`` in the model dtype), runs the Mamba/MLP blocks between
            attention layers as segments that only read the real length from the device, and lets
            :meth:`capture_prefill_graphs` capture them; 0 (default) runs chunks at their own length.
            ``chunk`` must be a multiple of it.

    Changes to ``lm`` (they keep its outputs, up to float rounding, and apply to any later use of it):
    with ``fuse_qkv`` the attention projection weights become views of the fused tensor; with
    ``fused_gated_norm`` each Mamba mixer's ``norm.forward`` is replaced by the fused kernel.
    """

    def __init__(
        self,
        lm: Any,
        *,
        max_len: int,
        batch: int = 1,
        bucket: int = 2048,
        chunk: int = 2048,
        impl: str = "dispatch",
        compile: bool = False,
        snapshot_slots: int = 1,
        fuse_qkv: bool = True,
        gemv_select: bool = True,
        fused_gated_norm: bool = True,
        fused_prefill: bool = True,
        prefill_bucket: int = 0,
    ) -> None:
        import torch
        from transformers.models.nemotron_h import modeling_nemotron_h as mnh

        if impl not in ("dispatch", "torch"):
            raise ValueError(f"impl must be 'dispatch' or 'torch', got {impl!r}")
        if snapshot_slots < 0:
            raise ValueError(f"snapshot_slots must be >= 0, got {snapshot_slots}")
        self.lm = lm
        self.mnh = mnh
        self.impl = impl
        cfg = lm.config
        self.config = cfg
        backbone = lm.model
        self.layers = list(backbone.layers)
        self.kinds = [layer.block_type for layer in self.layers]
        emb = backbone.embeddings.weight
        self.device = emb.device
        self.dtype = emb.dtype
        self.batch = batch
        self.bucket = bucket
        self.chunk = chunk
        self.max_len = int(math.ceil(max_len / bucket) * bucket)
        self.length = 0
        self.keys: list[int] = []
        self.snapshots: dict[int, int] = {}  # token position -> slot index
        self.graphs: dict[int, Any] = {}
        self._pool: Any = None
        dev, dt = self.device, self.dtype

        self.k: dict[int, Any] = {}
        self.v: dict[int, Any] = {}
        self.conv: dict[int, Any] = {}
        self.ssm: dict[int, Any] = {}
        self._consts: dict[int, dict[str, Any]] = {}
        for i, (layer, kind) in enumerate(zip(self.layers, self.kinds, strict=True)):
            mixer = layer.mixer
            if kind == _ATTN:
                shape = (batch, cfg.num_key_value_heads, self.max_len, mixer.head_dim)
                self.k[i] = torch.zeros(shape, dtype=dt, device=dev)
                self.v[i] = torch.zeros(shape, dtype=dt, device=dev)
            elif kind == _MAMBA:
                self.conv[i] = torch.zeros(batch, mixer.conv_dim, mixer.conv_kernel_size, dtype=dt, device=dev)
                self.ssm[i] = torch.zeros(
                    batch, mixer.num_heads, mixer.head_dim, mixer.ssm_state_size, dtype=torch.float32, device=dev
                )
                a_neg = -torch.exp(mixer.A_log.detach().float())
                self._consts[i] = {
                    "a_neg": a_neg,
                    "a_exp": a_neg[:, None, None].expand(-1, mixer.head_dim, mixer.ssm_state_size),
                    "d_exp": mixer.D.detach()[:, None].expand(-1, mixer.head_dim),
                    "dtb_exp": mixer.dt_bias.detach()[:, None].expand(-1, mixer.head_dim),
                    "conv_w": mixer.conv1d.weight.detach().squeeze(1),
                    "dims": (mixer.intermediate_size, mixer.conv_dim, mixer.num_heads, mixer.head_dim,
                             mixer.n_groups, mixer.ssm_state_size),
                }
            elif kind != _MLP:
                raise ValueError(f"block type {kind!r} is not supported by the static decoder")
        self._slots = [
            [(torch.zeros_like(self.conv[i]), torch.zeros_like(self.ssm[i])) for i in sorted(self.conv)]
            for _ in range(snapshot_slots)
        ]
        self._qkv: dict[int, Any] = {}
        if fuse_qkv and impl == "torch":
            self._fuse_qkv()
        self.gemv: dict[str, Gemv] = {}
        self.gemv_timings: dict[str, dict[str, float]] = {}
        if gemv_select and impl == "torch" and dev.type == "cuda":
            self._choose_gemv()
        self.gated_norm = "transformers (torch, float32)"
        if fused_gated_norm and dev.type == "cuda":
            self._install_fused_gated_norm()
        if prefill_bucket < 0 or (prefill_bucket and chunk % prefill_bucket):
            raise ValueError(f"prefill_bucket must be 0 or divide chunk ({chunk}), got {prefill_bucket}")
        self.prefill_bucket = prefill_bucket
        self.prefill_graphs: dict[tuple[int, int], Any] = {}
        self._segs = self._segments()
        self._n_real = torch.zeros(1, dtype=torch.long, device=dev)
        self._pbuf_h: Any = None
        self._pbuf_p: Any = None
        self._pbuf_x: Any = None
        if prefill_bucket:
            self._pbuf_h, self._pbuf_p, self._pbuf_x = (
                torch.zeros(batch, chunk, cfg.hidden_size, dtype=dt, device=dev) for _ in range(3))
        self.set_prefill(fused_prefill)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=dev)
        self.logits = torch.zeros(batch, cfg.vocab_size, dtype=torch.float32, device=dev)
        self._arange = torch.arange(max(self.max_len, chunk), device=dev)
        self._norm32 = [layer.norm.weight.detach().float() for layer in self.layers]
        self._normf32 = backbone.norm_f.weight.detach().float()
        self._raw_fns: dict[str, Any] = {"mamba": mamba_block_torch, "mlp": mlp_block_torch, "qkv": qkv_torch,
                                         "qkv_fused": qkv_fused_torch, "out": attn_out_torch, "head": head_torch}
        self._fns = dict(self._raw_fns)
        self._compiled = bool(compile)
        self.gemv_error: str | None = None
        if compile:
            if impl != "torch":
                raise ValueError("compile=True needs impl='torch'")
            # One compiled graph per block kind: every layer of a kind passes tensors of the same shapes,
            # so each function compiles once (the attention window, a host int, stays outside).
            self._fns = {k: torch.compile(f, dynamic=False, fullgraph=True) for k, f in self._fns.items()}

    # ------------------------------------------------------------------ state helpers
    def _fuse_qkv(self) -> None:
        """One ``[q + k + v, H]`` weight per attention layer; the projection modules get views of it."""
        import torch

        for i, (layer, kind) in enumerate(zip(self.layers, self.kinds, strict=True)):
            if kind != _ATTN:
                continue
            mixer = layer.mixer
            projs = (mixer.q_proj, mixer.k_proj, mixer.v_proj)
            if any(type(p) is not torch.nn.Linear or p.bias is not None for p in projs):
                continue  # quantised or biased projections keep their own modules
            with torch.no_grad():
                fused = torch.cat([p.weight.detach() for p in projs], dim=0)
                start = 0
                for p in projs:
                    rows = p.weight.shape[0]
                    p.weight = torch.nn.Parameter(fused[start : start + rows], requires_grad=False)
                    start += rows
            self._qkv[i] = fused

    def _choose_gemv(self) -> None:
        """Pick the fastest matrix-vector implementation per weight role (:func:`gemv.choose`)."""
        import torch

        from holodesk.policy.holotron import gemv

        mixers = {kind: [layer.mixer for layer, k in zip(self.layers, self.kinds, strict=True) if k == kind]
                  for kind in (_MAMBA, _ATTN, _MLP)}
        groups = {
            "in_proj": [m.in_proj.weight for m in mixers[_MAMBA]],
            "out_proj": [m.out_proj.weight for m in mixers[_MAMBA]],
            "up": [m.up_proj.weight for m in mixers[_MLP]],
            "down": [m.down_proj.weight for m in mixers[_MLP]],
            "qkv": list(self._qkv.values()),
            "o_proj": [m.o_proj.weight for m in mixers[_ATTN]],
            "lm_head": [self.lm.lm_head.weight],
        }
        with torch.no_grad():
            for role, weights in groups.items():
                plain = [w for w in weights if type(w) in (torch.Tensor, torch.nn.Parameter)]
                if not plain or len(plain) != len(weights):
                    continue
                how, timings = gemv.choose(plain)
                self.gemv[role] = how
                self.gemv_timings[role] = timings

    def _how(self, role: str) -> Any:
        how = self.gemv.get(role)
        return how.spec() if how is not None else None

    def _install_fused_gated_norm(self) -> None:
        """Route each Mamba mixer's gated norm through mamba-ssm's Triton kernel (prefill; see ``__init__``)."""
        try:
            from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn
        except Exception:  # mamba-ssm missing or unusable: transformers' torch norm stays
            return
        for layer, kind in zip(self.layers, self.kinds, strict=True):
            if kind != _MAMBA:
                continue
            norm = layer.mixer.norm

            def fused(hidden_states: Any, gate: Any = None, _norm: Any = norm) -> Any:
                shape = hidden_states.shape
                x = hidden_states.reshape(-1, shape[-1])
                z = gate.reshape(-1, shape[-1]) if gate is not None else None
                y = rmsnorm_fn(x if x.stride(-1) == 1 else x.contiguous(), _norm.weight, None,
                               z=None if z is None else (z if z.stride(-1) == 1 else z.contiguous()),
                               eps=_norm.variance_epsilon, group_size=_norm.group_size, norm_before_gate=False)
                return y.reshape(shape)

            norm.forward = fused
        self.gated_norm = "mamba-ssm Triton (ops.triton.layernorm_gated.rmsnorm_fn)"

    def set_prefill(self, fused: bool) -> None:
        """Choose the prefill block path (``fused_prefill`` of ``__init__``) and describe it in
        :attr:`prefill_kernels`; may be called between prefills."""
        from transformers.activations import ReLUSquaredActivation

        from holodesk.policy.holotron.prefill_ops import fused_available

        mixers = [layer.mixer for layer, kind in zip(self.layers, self.kinds, strict=True) if kind == _MAMBA]
        mlps = [layer.mixer for layer, kind in zip(self.layers, self.kinds, strict=True) if kind == _MLP]
        self._relu2 = all(isinstance(m.act_fn, ReLUSquaredActivation) for m in mlps)
        acts = sorted({str(m.activation) for m in mixers} - {"silu"})
        self.fused_prefill = bool(fused) and not acts
        import torch

        self._gqa_flash = (self.fused_prefill and self.device.type == "cuda"
                           and self.dtype in (torch.float16, torch.bfloat16))
        if not fused:
            self.prefill_kernels = "stock blocks (fused_prefill off)"
        elif acts:
            self.prefill_kernels = f"stock blocks (Mamba activation {', '.join(acts)} is not fused)"
        else:
            why = fused_available(self.device)
            self.prefill_kernels = ("fused: Triton causal conv1d + relu^2, mamba-ssm add+RMSNorm" if why is None
                                    else f"holodesk torch path ({why})")
            if self._gqa_flash:
                self.prefill_kernels += "; attention: one flash call over grouped KV heads"
            if self.prefill_bucket:
                self.prefill_kernels += (f"; Mamba/MLP segments as CUDA graphs ({len(self.prefill_graphs)}, padded "
                                         f"to multiples of {self.prefill_bucket} rows)" if self.prefill_graphs
                                         else f"; chunks padded to multiples of {self.prefill_bucket} rows, eager")

    def state_bytes(self) -> int:
        """Bytes of all preallocated decoder state (KV + conv + SSM + snapshot slots + buffers)."""
        tensors = [*self.k.values(), *self.v.values(), *self.conv.values(), *self.ssm.values(), self.logits]
        if self.prefill_bucket:
            tensors += [self._pbuf_h, self._pbuf_p, self._pbuf_x]  # the graphs' pool is not counted here
        tensors += [t for slot in self._slots for pair in slot for t in pair]
        return int(sum(t.numel() * t.element_size() for t in tensors))

    def reset(self) -> None:
        """Forget the prompt: zero conv/SSM state, length 0, no snapshots (KV entries are overwritten)."""
        for t in (*self.conv.values(), *self.ssm.values()):
            t.zero_()
        self.pos.zero_()
        self.length = 0
        self.keys = []
        self.snapshots = {}

    def _snapshot(self, position: int) -> None:
        """Save the Mamba state at ``position`` into a free slot (else the slot of the oldest position)."""
        used = set(self.snapshots.values())
        free = [k for k in range(len(self._slots)) if k not in used]
        if free:
            slot = free[0]
        else:
            oldest = min(self.snapshots)
            slot = self.snapshots.pop(oldest)
        for i, (conv, ssm) in zip(sorted(self.conv), self._slots[slot], strict=True):
            conv.copy_(self.conv[i])
            ssm.copy_(self.ssm[i])
        self.snapshots[position] = slot

    def _restore(self, slot: int) -> None:
        for i, (conv, ssm) in zip(sorted(self.conv), self._slots[slot], strict=True):
            self.conv[i].copy_(conv)
            self.ssm[i].copy_(ssm)

    def window(self, length: int) -> int:
        """Attention window (keys read) for a decode step at ``length`` tokens in state: a bucket multiple."""
        w = int(math.ceil((length + 1) / self.bucket) * self.bucket)
        if w > self.max_len:
            raise ValueError(f"{length + 1} tokens exceed the static cache of {self.max_len}")
        return w

    # ------------------------------------------------------------------ prefill
    def _attn_prefill(self, i: int, mixer: Any, x: Any, start: int) -> Any:
        """Attention over a chunk ``x [B, T, H]`` at positions ``[start, start+T)`` with the cached past.

        Keys/values go straight into the static cache. With the fused prefill on CUDA in half precision
        all heads run in one FlashAttention call that reads the grouped KV heads in place
        (:meth:`_attend_gqa`). Otherwise the ``rep`` query heads sharing a KV head are run
        one KV head at a time against that head's keys expanded ``rep`` times (a 1/kv_heads slice, not a
        repeat of the whole cache), with a causal mask aligned to the bottom right (query ``t`` sees keys
        ``<= start + t``; torch's ``causal_lower_right``, which needs no materialised mask). On CUDA the
        cuDNN backend is excluded: it builds an execution plan per new key length, i.e. per chunk.
        """
        import contextlib

        import torch
        import torch.nn.functional as F
        from torch.nn.attention.bias import causal_lower_right

        bsz, t, _ = x.shape
        hd = mixer.head_dim
        q = mixer.q_proj(x).view(bsz, t, -1, hd).transpose(1, 2)
        k = mixer.k_proj(x).view(bsz, t, -1, hd).transpose(1, 2)
        v = mixer.v_proj(x).view(bsz, t, -1, hd).transpose(1, 2)
        end = start + t
        self.k[i][:, :, start:end].copy_(k)
        self.v[i][:, :, start:end].copy_(v)
        kvh = self.k[i].shape[1]
        rep = mixer.num_key_value_groups
        if self._gqa_flash:
            try:
                return mixer.o_proj(self._attend_gqa(q, i, start, end, mixer.scaling).transpose(1, 2).reshape(
                    bsz, t, -1))
            except RuntimeError as exc:  # flash refused these inputs: keep the per-head loop from now on
                self._gqa_flash = False
                self.prefill_kernels += f"; attention per KV head (flash GQA failed: {str(exc)[:120]})"
                log.warning("prefill attention: flash with grouped KV heads failed (%s); using the per-head loop",
                            exc)
        out = torch.empty_like(q)
        ctx: Any = contextlib.nullcontext()
        if x.device.type == "cuda":
            from torch.nn.attention import SDPBackend, sdpa_kernel

            ctx = sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
        with ctx:
            for g in range(kvh):
                keys = self.k[i][:, g : g + 1, :end].expand(bsz, rep, end, hd).contiguous()
                vals = self.v[i][:, g : g + 1, :end].expand(bsz, rep, end, hd).contiguous()
                qg = q[:, g * rep : (g + 1) * rep]
                if start == 0:
                    og = F.scaled_dot_product_attention(qg, keys, vals, is_causal=True, scale=mixer.scaling)
                else:
                    og = F.scaled_dot_product_attention(
                        qg, keys, vals, attn_mask=causal_lower_right(t, end), scale=mixer.scaling
                    )
                out[:, g * rep : (g + 1) * rep] = og
        out = out.transpose(1, 2).reshape(bsz, t, -1)
        return mixer.o_proj(out)

    def _mamba_prefill(self, i: int, mixer: Any, x: Any, length: Any = None) -> Any:
        """Mamba-2 mixer over a chunk ``x [B, T, H]`` continuing from the static conv/SSM state.

        The maths of ``NemotronHMamba2Mixer.forward``'s chunk branch: ``in_proj`` -> depthwise causal conv
        with SiLU over the ``xBC`` columns (:func:`prefill_ops.causal_conv1d`, fused on CUDA) -> chunked
        scan (transformers' ``mamba2_chunk_scan``: mamba-ssm's ``mamba_chunk_scan_combined`` when live)
        from the stored SSM state -> gated RMSNorm -> ``out_proj``. The conv and SSM states are updated in
        place.

        With ``length`` (a ``[1]`` int64 device tensor) rows from ``length`` on are padding. The step size
        is computed here as the scan would (``max(softplus(dt + dt_bias), time_step_min)`` in float32) and
        set to exactly 0 on padded rows, then passed with the scan's own softplus, bias and clamp off: a
        zero step makes ``exp(dt A) = 1`` and ``dt B x = 0``, so the SSM state leaves the chunk as it was
        after the last real row (masking the raw ``dt`` instead would leave the ``time_step_min`` floor,
        0.001, on padded rows). The conv state is taken at ``length`` too. Real rows never read padded
        ones (both are causal).
        """
        from holodesk.policy.holotron.prefill_ops import causal_conv1d

        consts = self._consts[i]
        bsz, t, _ = x.shape
        inter, conv_dim, heads, hd, groups, n = consts["dims"]
        projected = mixer.in_proj(x)
        gate, xbc, dt = projected.split([inter, conv_dim, heads], dim=-1)
        dt_bias, softplus, limit = mixer.dt_bias, True, mixer.time_step_limit
        if length is not None:
            import torch.nn.functional as F

            dt = F.softplus(dt.float() + mixer.dt_bias.float()).clamp(limit[0], limit[1])
            dt = dt.masked_fill((self._arange[:t] >= length)[None, :, None], 0.0)
            dt_bias, softplus, limit = None, False, (0.0, float("inf"))
        xbc = causal_conv1d(xbc, self.conv[i], consts["conv_w"], mixer.conv1d.bias, silu=True, length=length)
        xs, b, c = xbc.split([inter, groups * n, groups * n], dim=-1)
        out, final = self.mnh.mamba2_chunk_scan(
            xs.view(bsz, t, heads, hd), dt, consts["a_neg"], b.view(bsz, t, groups, n),
            c.view(bsz, t, groups, n), chunk_size=mixer.chunk_size, D=mixer.D, z=None, dt_bias=dt_bias,
            initial_states=self.ssm[i], dt_softplus=softplus, dt_limit=limit, return_final_states=True,
        )
        self.ssm[i].copy_(final)
        y = mixer.norm(out.reshape(bsz, t, -1), gate)
        return mixer.out_proj(y.to(x.dtype))

    def _mlp_prefill(self, mixer: Any, x: Any) -> Any:
        """``down(relu(up(x))^2)`` with the activation in place (:func:`prefill_ops.relu_square_`)."""
        from holodesk.policy.holotron.prefill_ops import relu_square_

        if not self._relu2:
            return mixer(x)
        return mixer.down_proj(relu_square_(mixer.up_proj(x)))

    def _attend_gqa(self, q: Any, i: int, start: int, end: int, scaling: float) -> Any:
        """Attention of ``q [B, heads, T, hd]`` over cached keys ``[0, end)`` in one FlashAttention call that
        reads the grouped KV heads as they are (``enable_gqa``; only the flash backend is allowed, so an
        unsupported input raises instead of running the materialising math backend)."""
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right

        keys, vals = self.k[i][:, :, :end], self.v[i][:, :, :end]
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            if start == 0:
                return F.scaled_dot_product_attention(q, keys, vals, is_causal=True, scale=scaling, enable_gqa=True)
            return F.scaled_dot_product_attention(q, keys, vals, attn_mask=causal_lower_right(q.shape[2], end),
                                                  scale=scaling, enable_gqa=True)

    def _forward_chunk(self, h: Any, start: int) -> Any:
        """Run every block over a chunk ``h [B, T, H]`` at positions ``[start, start + T)``; returns the
        residual stream after the last block (before ``norm_f``)."""
        if not self.fused_prefill:
            return self._forward_chunk_stock(h, start)
        if self.prefill_bucket:
            return self._forward_chunk_padded(h, start)
        from holodesk.policy.holotron.prefill_ops import add_rms_norm

        pending = None
        for i, layer in enumerate(self.layers):
            # h += previous block's output; x = this block's norm(h): one kernel on CUDA.
            x, h = add_rms_norm(pending, h, layer.norm.weight, layer.norm.variance_epsilon)
            pending = self._mixer_prefill(i, x, start)
        return h + pending

    def _mixer_prefill(self, i: int, x: Any, start: int, length: Any = None) -> Any:
        """Block ``i``'s mixer on its normalised input ``x [B, T, H]`` (the fused path); ``length`` is the
        padded path's real length on the device (Mamba blocks only, see :meth:`_mamba_prefill`)."""
        mixer = self.layers[i].mixer
        if self.kinds[i] == _MAMBA:
            return self._mamba_prefill(i, mixer, x, length)
        if self.kinds[i] == _ATTN:
            return self._attn_prefill(i, mixer, x, start)
        return self._mlp_prefill(mixer, x)

    # ------------------------------------------------------------------ padded prefill and its graphs
    def _segments(self) -> list[tuple[list[int], int | None]]:
        """The blocks between attention layers: ``[(non-attention block indices, attention block after
        them or None), ...]``; the last entry has None and may have no blocks."""
        segs: list[tuple[list[int], int | None]] = []
        current: list[int] = []
        for i, kind in enumerate(self.kinds):
            if kind == _ATTN:
                segs.append((current, i))
                current = []
            else:
                current.append(i)
        segs.append((current, None))
        return segs

    def _padded_length(self, t: int) -> int:
        return min(self.chunk, -(-t // self.prefill_bucket) * self.prefill_bucket)

    def _segment(self, k: int, tp: int) -> None:
        """Segment ``k`` of the padded path over the first ``tp`` rows of the static buffers: every block of
        the segment, then the next attention block's add+norm into ``_pbuf_x`` (or, for the last segment,
        the final residual add), the residual stream back into ``_pbuf_h``. Only device values decide
        anything (the real length is ``_n_real``), so it can be captured once per ``(k, tp)``."""
        from holodesk.policy.holotron.prefill_ops import add_rms_norm

        blocks, attn = self._segs[k]
        h = self._pbuf_h[:, :tp]
        pending = None if k == 0 else self._pbuf_p[:, :tp]
        for i in blocks:  # no attention here, so no start position is needed
            norm = self.layers[i].norm
            x, h = add_rms_norm(pending, h, norm.weight, norm.variance_epsilon)
            pending = self._mixer_prefill(i, x, 0, self._n_real)
        if attn is not None:
            norm = self.layers[attn].norm
            x, h = add_rms_norm(pending, h, norm.weight, norm.variance_epsilon)
            self._pbuf_x[:, :tp].copy_(x)
        elif pending is not None:
            h = h + pending
        if h.data_ptr() != self._pbuf_h.data_ptr():
            self._pbuf_h[:, :tp].copy_(h)

    def _forward_chunk_padded(self, h: Any, start: int) -> Any:
        """:meth:`_forward_chunk` with the chunk padded to a multiple of ``prefill_bucket`` rows in static
        buffers: the Mamba/MLP segments between attention layers run as captured CUDA graphs when
        :meth:`capture_prefill_graphs` has made them (else eagerly, the same code), attention runs eagerly
        on the real rows only (its key length changes with ``start``)."""
        t = int(h.shape[1])
        tp = self._padded_length(t)
        self._pbuf_h[:, :t].copy_(h)
        if tp > t:
            self._pbuf_h[:, t:tp].zero_()
        self._n_real.fill_(t)
        for k, (_blocks, attn) in enumerate(self._segs):
            graph = self.prefill_graphs.get((k, tp))
            if graph is not None:
                graph.replay()
            else:
                self._segment(k, tp)
            if attn is not None:
                out = self._attn_prefill(attn, self.layers[attn].mixer, self._pbuf_x[:, :t], start)
                self._pbuf_p[:, :t].copy_(out)
        return self._pbuf_h[:, :t]

    def capture_prefill_graphs(self) -> list[int]:
        """Capture the Mamba/MLP segments of the padded prefill as CUDA graphs, one per segment and padded
        length (multiples of ``prefill_bucket`` up to ``chunk``), in one shared memory pool (they run one
        at a time; their outputs go to static buffers). Each is run once eagerly first (Triton compiles
        and autotunes outside the capture). Prefill launches ~600 kernels per chunk from Python, ~400 of
        them Triton launches whose host cost made the prefill host-bound on slow hosts (docs/benchmarks.md,
        run 5d); a replay launches them all at once. The state is reset afterwards. Returns the padded
        lengths captured. CUDA and ``prefill_bucket`` only.
        """
        import torch

        if self.device.type != "cuda" or not self.prefill_bucket or not self.fused_prefill:
            raise RuntimeError("prefill graphs need CUDA, the fused prefill path and prefill_bucket > 0")
        lengths = list(range(self.prefill_bucket, self.chunk + 1, self.prefill_bucket))
        pool = torch.cuda.graph_pool_handle()
        graphs: dict[tuple[int, int], Any] = {}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.no_grad(), torch.cuda.stream(side):
                self._pbuf_h.zero_()
                self._pbuf_p.zero_()
                # longest first: Triton autotunes mamba-ssm's scan and norm kernels on their first call, with
                # keys that ignore the length, so the first call must be a full chunk (run 5e captured the
                # shortest first, and the 2048-row chunk scan then ran at 1.9x its time with a config tuned
                # for 128 rows)
                for tp in reversed(lengths):
                    self._n_real.fill_(tp)
                    for k in range(len(self._segs)):
                        self._segment(k, tp)  # compile / autotune for this shape
                        graph = torch.cuda.CUDAGraph()
                        graph.capture_begin(pool=pool)
                        try:
                            self._segment(k, tp)
                        finally:
                            graph.capture_end()
                        graphs[(k, tp)] = graph
        finally:
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            self.reset()
        self.prefill_graphs = graphs
        self.set_prefill(self.fused_prefill)
        return lengths

    def drop_prefill_graphs(self) -> None:
        """Forget the prefill graphs and padding (back to chunks at their own length) and free the buffers."""
        self.prefill_graphs = {}
        self.prefill_bucket = 0
        self._pbuf_h = self._pbuf_p = self._pbuf_x = None
        self.set_prefill(self.fused_prefill)

    def _forward_chunk_stock(self, h: Any, start: int) -> Any:
        """:meth:`_forward_chunk` through the stock block norms and mixers (``fused_prefill=False``)."""
        for i, (layer, kind) in enumerate(zip(self.layers, self.kinds, strict=True)):
            residual = h
            x = layer.norm(h.to(layer.norm.weight.dtype))
            if kind == _MAMBA:
                view = _MambaStateView(self.conv[i], self.ssm[i])
                x = layer.mixer(x, cache_params=view)
            elif kind == _ATTN:
                x = self._attn_prefill(i, layer.mixer, x, start)
            else:
                x = layer.mixer(x)
            h = residual + x
        return h

    def resume_point(self, keys: Sequence[int]) -> int:
        """Tokens of a prompt with these ``keys`` that :meth:`prefill` would take from the current state.

        It is the latest snapshot position inside the common prefix of ``keys`` and the previous prompt's
        keys (0 when none). A caller can use it to embed only the tail (``embeds_offset``), e.g. to skip
        the vision tower for screenshots whose tokens are already in the state.
        """
        if not self.keys:
            return 0
        lcp = 0
        for a, b in zip(self.keys, keys, strict=False):
            if a != int(b):
                break
            lcp += 1
        usable = [p for p in self.snapshots if p <= lcp and p < len(keys)]
        return max(usable) if usable else 0

    def prefill(
        self,
        inputs_embeds: Any,
        keys: Sequence[int] | None = None,
        *,
        snapshot_at: Sequence[int] = (),
        embeds_offset: int = 0,
    ) -> tuple[Any, PrefillReport]:
        """Run the prompt into the static state and return the last position's logits.

        Args:
            inputs_embeds: ``[B, T - embeds_offset, H]`` embeddings of prompt tokens
                ``[embeds_offset, T)`` (image rows already merged), model dtype.
            keys: one int per prompt token (``T`` of them) identifying its content (token id, or a hash
                of the image and tile row for image tokens). With keys, the common prefix with the
                previous prompt is reused from the latest snapshot inside it (:meth:`resume_point`);
                without keys the prefill is cold.
            snapshot_at: positions (token counts) after which to save the Mamba state for later reuse,
                into the preallocated slots (``snapshot_slots``; when all are taken the oldest position
                is overwritten, so the latest ones are kept). Each costs a chunk boundary.
            embeds_offset: first token that ``inputs_embeds`` covers; must not exceed the resume point.
        Returns:
            (logits ``[B, vocab]`` float32 of the last prompt token, :class:`PrefillReport`).
        Raises:
            ValueError: the prompt does not fit ``max_len``, or ``embeds_offset`` is past the resume point.
        """
        import torch

        total = int(inputs_embeds.shape[1]) + embeds_offset
        if keys is not None and len(keys) != total:
            raise ValueError(f"{len(keys)} keys for a prompt of {total} tokens")
        if total + 1 > self.max_len:
            raise ValueError(f"prompt of {total} tokens does not fit the static cache of {self.max_len}")
        new_keys = [int(k) for k in keys] if keys is not None else []
        resume = self.resume_point(new_keys) if keys is not None else 0
        if embeds_offset > resume:
            raise ValueError(f"embeddings start at token {embeds_offset} but the state resumes at {resume}")
        kept = {p: s for p, s in self.snapshots.items() if p <= resume}
        if resume:
            self._restore(kept[resume])
        else:
            for t in (*self.conv.values(), *self.ssm.values()):
                t.zero_()
        self.snapshots = kept
        wanted = sorted({int(p) for p in snapshot_at if resume < int(p) <= total}) if self._slots else []
        taken: list[int] = []
        bounds = [*range(resume, total, self.chunk), total]
        cuts = sorted(set(bounds) | set(wanted))
        h_last = None
        chunks = 0
        with torch.no_grad():
            for a, b in itertools.pairwise(cuts):
                h = self._forward_chunk(inputs_embeds[:, a - embeds_offset : b - embeds_offset], a)
                chunks += 1
                if b in wanted and self._slots:
                    self._snapshot(b)
                    taken.append(b)
                h_last = h[:, -1:]
            assert h_last is not None
            hidden = self.lm.model.norm_f(h_last)
            logits = self.lm.lm_head(hidden).float()[:, -1]
        self.length = total
        self.pos.fill_(total)
        self.keys = new_keys
        return logits, PrefillReport(total, resume, total - resume, chunks, taken)

    # ------------------------------------------------------------------ decode
    def _mamba_decode(self, i: int, mixer: Any, x: Any) -> Any:
        """Mamba-2 decode step for ``x [B, 1, H]`` mirroring ``NemotronHMamba2Mixer.forward``'s T=1 branch."""
        consts = self._consts[i]
        bsz = x.shape[0]
        mnh = self.mnh
        projected = mixer.in_proj(x)
        gate, xbc, dt = projected.split([mixer.intermediate_size, mixer.conv_dim, mixer.num_heads], dim=-1)
        xbc = mnh.causal_conv1d_update(
            xbc.transpose(1, 2), self.conv[i], consts["conv_w"], mixer.conv1d.bias, activation=mixer.activation
        ).transpose(1, 2)
        gs = mixer.n_groups * mixer.ssm_state_size
        xs, b, c = xbc.split([mixer.intermediate_size, gs, gs], dim=-1)
        y = mnh.mamba2_selective_state_update(
            self.ssm[i],
            xs.reshape(bsz, mixer.num_heads, mixer.head_dim),
            dt.transpose(1, 2).expand(-1, -1, mixer.head_dim),
            consts["a_exp"],
            b.reshape(bsz, mixer.n_groups, mixer.ssm_state_size),
            c.reshape(bsz, mixer.n_groups, mixer.ssm_state_size),
            consts["d_exp"],
            z=None,
            dt_bias=consts["dtb_exp"],
            dt_softplus=True,
        )
        y = mixer.norm(y.view(bsz, 1, -1), gate)
        return mixer.out_proj(y.to(x.dtype))

    def _attend(self, i: int, q: Any, k: Any, v: Any, window: int, scaling: float) -> Any:
        """Write one token's ``k``/``v`` ``[B, kvh, 1, hd]`` at ``pos`` and attend ``q [B, kvh, rep, hd]``
        over keys ``[0, window)`` (those ``> pos`` masked). Returns ``[B, kvh * rep * hd]``.

        GQA without copying keys: the ``rep`` query heads sharing a KV head are ``rep`` query rows of that
        head (head ``h`` uses KV head ``h // rep``, as transformers' ``repeat_kv``). The arithmetic is
        transformers' ``eager_attention_forward``: scores by a model-dtype matmul, softmax in float32, cast
        back, matmul with the values. Plain matmuls spread the key length over the whole GPU, where a
        fused attention kernel gives 8 x 5 query rows a handful of thread blocks.
        """
        import torch

        bsz = q.shape[0]
        self.k[i].index_copy_(2, self.pos, k)
        self.v[i].index_copy_(2, self.pos, v)
        keys = self.k[i][:, :, :window]
        scores = torch.matmul(q, keys.transpose(2, 3)) * scaling
        scores = scores.float().masked_fill(self._arange[:window] > self.pos, float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(q.dtype)
        out = torch.matmul(probs, self.v[i][:, :, :window])
        return out.reshape(bsz, -1)

    def _attn_decode(self, i: int, mixer: Any, x: Any, window: int) -> Any:
        """Attention for one new token ``x [B, 1, H]`` through the stock projection modules."""
        bsz = x.shape[0]
        hd = mixer.head_dim
        kvh = self.k[i].shape[1]
        rep = mixer.num_key_value_groups
        q = mixer.q_proj(x).view(bsz, kvh, rep, hd)
        k = mixer.k_proj(x).view(bsz, 1, kvh, hd).transpose(1, 2)
        v = mixer.v_proj(x).view(bsz, 1, kvh, hd).transpose(1, 2)
        out = self._attend(i, q, k, v, window, mixer.scaling)
        return mixer.o_proj(out.view(bsz, 1, -1))

    def _step_body(self, window: int) -> None:
        """The captured work: ``token`` -> ``logits``, next greedy ``token``, ``pos += 1`` (no host sync)."""
        import torch

        if self.impl == "torch":
            self._step_body_torch(window)
            return
        h = self.lm.model.embeddings(self.token)
        for i, (layer, kind) in enumerate(zip(self.layers, self.kinds, strict=True)):
            residual = h
            x = layer.norm(h.to(layer.norm.weight.dtype))
            if kind == _MAMBA:
                x = self._mamba_decode(i, layer.mixer, x)
            elif kind == _ATTN:
                x = self._attn_decode(i, layer.mixer, x, window)
            else:
                x = layer.mixer(x)
            h = residual + x
        h = self.lm.model.norm_f(h)
        self.logits.copy_(self.lm.lm_head(h)[:, -1].float())
        self.token.copy_(torch.argmax(self.logits, dim=-1, keepdim=True))
        self.pos.add_(1)

    def _step_body_torch(self, window: int) -> None:
        """``impl="torch"``: each block is one call of a (compiled) function of its tensors, so that the
        norm, the residual add and the element-wise work fuse around the matrix-vector products."""
        fns = self._fns
        h = self.lm.model.embeddings(self.token)[:, 0]  # [B, H]
        for i, (layer, kind) in enumerate(zip(self.layers, self.kinds, strict=True)):
            eps = float(layer.norm.variance_epsilon)
            mixer = layer.mixer
            if kind == _MAMBA:
                c = self._consts[i]
                h = fns["mamba"](
                    h, self._norm32[i], eps, mixer.in_proj.weight, c["conv_w"], mixer.conv1d.bias, mixer.dt_bias,
                    c["a_neg"], mixer.D, mixer.norm.weight, mixer.out_proj.weight, self.conv[i], self.ssm[i],
                    c["dims"], float(mixer.norm.variance_epsilon), self._how("in_proj"), self._how("out_proj"),
                )
            elif kind == _MLP:
                h = fns["mlp"](h, self._norm32[i], eps, mixer.up_proj.weight, mixer.down_proj.weight,
                               self._how("up"), self._how("down"))
            else:
                kvh = self.k[i].shape[1]
                if i in self._qkv:
                    q, k, v = fns["qkv_fused"](h, self._norm32[i], eps, self._qkv[i], kvh,
                                               mixer.num_key_value_groups, mixer.head_dim, self._how("qkv"))
                else:
                    q, k, v = fns["qkv"](h, self._norm32[i], eps, mixer.q_proj.weight, mixer.k_proj.weight,
                                         mixer.v_proj.weight, kvh, mixer.num_key_value_groups, mixer.head_dim)
                o = self._attend(i, q, k, v, window, mixer.scaling)
                h = fns["out"](h, o, mixer.o_proj.weight, self._how("o_proj"))
        logits, token = fns["head"](h, self._normf32, float(self.lm.model.norm_f.variance_epsilon),
                                    self.lm.lm_head.weight, self._how("lm_head"))
        self.logits.copy_(logits)
        self.token.copy_(token)
        self.pos.add_(1)

    def capture_graphs(self, windows: Sequence[int] | None = None, warmup: int = 2) -> list[int]:
        """Capture one CUDA graph of the decode step per attention window (at load, before any prompt).

        Warm-up runs (which compile Triton / inductor kernels) and captures mutate the state, so the state
        is reset afterwards. Returns the captured window sizes. CUDA only.
        """
        import torch

        if self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        try:
            return self._capture(windows, warmup)
        except Exception as exc:
            if not any(how.kind != "linear" for how in self.gemv.values()):
                raise
            # The chosen matrix-vector kernels would not compile or capture here: say so, drop them
            # (F.linear everywhere, the configuration measured before they existed) and capture again.
            log.warning(
                "decode graphs with the chosen matrix-vector kernels failed (%s: %s); using F.linear",
                type(exc).__name__, str(exc)[:200])
            self.gemv_error = f"{type(exc).__name__}: {str(exc)[:200]}"
            self.gemv = {}
            self.graphs = {}
            torch._dynamo.reset()
            if self._compiled:
                self._fns = {k: torch.compile(f, dynamic=False, fullgraph=True) for k, f in self._raw_fns.items()}
            return self._capture(windows, warmup)

    def _capture(self, windows: Sequence[int] | None, warmup: int) -> list[int]:
        import torch

        sizes = sorted(set(windows or range(self.bucket, self.max_len + 1, self.bucket)))
        self.reset()
        self._pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(stream):
            for w in sizes:
                for _ in range(warmup):
                    self.pos.zero_()
                    self._step_body(w)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        with torch.no_grad():
            for w in reversed(sizes):
                self.pos.zero_()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self._pool):
                    self._step_body(w)
                self.graphs[w] = graph
        torch.cuda.synchronize()
        self.reset()
        self.token.zero_()
        self.logits.zero_()
        return sizes

    def step(self) -> Any:
        """Decode one token: consume ``token``, write ``logits`` and the next greedy ``token``.

        Replays the captured graph for the current window when there is one, else runs eagerly.
        Returns the ``logits`` buffer ``[B, vocab]`` (overwritten by the next step).

        Constrained decoding (a grammar mask per token): after ``step()`` mask ``logits`` on the host side,
        pick the token and ``token.copy_(chosen)`` before the next ``step()``; the in-graph greedy choice
        is only a default that the next replay reads from ``token``.
        """
        import torch

        window = self.window(self.length)
        graph = self.graphs.get(window)
        if graph is not None:
            graph.replay()
        else:
            with torch.no_grad():
                self._step_body(window)
        self.length += 1
        return self.logits

    def generate(self, first_logits: Any, max_new_tokens: int, eos_token_id: int | None = None,
                 check_every: int = 8) -> list[list[int]]:
        """Greedy decoding after :meth:`prefill`.

        Args:
            first_logits: ``[B, vocab]`` logits returned by :meth:`prefill`.
            max_new_tokens: tokens to produce (the first is argmax of ``first_logits``).
            eos_token_id: stop once every row produced it (checked every ``check_every`` tokens, so
                the only host syncs are those checks); tokens after EOS are cut from the result.
        Returns:
            ``B`` lists of token ids.
        """
        import torch

        first = torch.argmax(first_logits, dim=-1, keepdim=True)
        produced = [first]
        self.token.copy_(first)
        for n in range(1, max_new_tokens):
            self.step()
            produced.append(self.token.clone())
            if eos_token_id is not None and n % check_every == 0:
                seq = torch.cat(produced, dim=1)
                if bool((seq == eos_token_id).any(dim=1).all()):
                    break
        # The last produced token is not yet in the state: the next step would consume it.
        rows = torch.cat(produced, dim=1).tolist()
        if eos_token_id is not None:
            rows = [r[: r.index(eos_token_id) + 1] if eos_token_id in r else r for r in rows]
        return rows
