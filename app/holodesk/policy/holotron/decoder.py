"""Static prefill and greedy decoding for transformers' NemotronH (the Holotron-12B language model).

Stock ``generate()`` re-enters Python for every layer of every token, grows its KV cache and launches
~1300 small kernels per token (68-81 ms per token on an H200 against a 5.7 ms memory floor,
docs/benchmarks.md). :class:`StaticDecoder` keeps every piece of decoder state in tensors allocated once
(:class:`~.state.DecoderState`), so a decode step is a fixed sequence of kernels over fixed addresses,
captured in a CUDA graph at load and replayed for every token. It never changes the model: it reads its
weights and calls its embedding, final norm and head modules.

Decode (:meth:`StaticDecoder.step`): embedding -> per block one function of :mod:`.blocks` (compiled
with ``torch.compile`` when every projection is a plain weight) -> ``norm_f`` -> ``lm_head`` -> argmax into
``token``, ``pos += 1``. Attention reads keys ``[0, W)`` with ``W`` the window (:meth:`.DecoderState.window`);
one graph per window.

Prefill (:meth:`StaticDecoder.prefill`): chunks of at most ``chunk`` tokens, each padded to a multiple of
``prefill_bucket`` rows in static buffers. The Mamba/MLP blocks between two attention layers form a segment
that reads the real length from the device (padded rows get a zero SSM step, the conv state is taken at the
real length), so each (segment, padded length) is one CUDA graph; attention runs eagerly on the real rows,
one SDPA call over the grouped KV heads (flash on CUDA in half precision, the math backend elsewhere),
writing keys and values into the static cache. Mamba state snapshots at chosen positions let the next
prompt resume from its common prefix with this one.

Graphs of both kinds are captured by :meth:`StaticDecoder.capture` into one cache and one memory pool. A
failure there falls back once, at load, to the next simpler configuration (chosen matrix-vector kernels ->
``F.linear``; compiled blocks -> plain torch; graphs -> eager), logged and kept in ``notes``.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from holodesk.policy.holotron import blocks
from holodesk.policy.holotron.ops import gemv, prefill
from holodesk.policy.holotron.state import ATTENTION, MAMBA, MLP, DecoderState

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from transformers import NemotronHForCausalLM

log = logging.getLogger(__name__)


@dataclasses.dataclass
class PrefillReport:
    """What one :meth:`StaticDecoder.prefill` did: prompt ``tokens``, ``reused`` from the previous prompt's
    state (the resume point), ``computed`` (``tokens - reused``), ``chunks`` run, and the positions whose
    Mamba state was saved (``snapshots``)."""

    tokens: int
    reused: int
    computed: int
    chunks: int
    snapshots: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Setup:
    """How decode runs: blocks ``compiled``, matrix-vector ``gemv`` per weight role, decode ``graphs``."""

    compiled: bool
    gemv: dict[str, gemv.Gemv]
    graphs: bool

    def simpler(self) -> Setup | None:
        """The next configuration to try when this one fails at load, or None."""
        if any(how.kind != "linear" for how in self.gemv.values()):
            return dataclasses.replace(self, gemv={})
        if self.compiled:
            return dataclasses.replace(self, compiled=False)
        if self.graphs:
            return dataclasses.replace(self, graphs=False)
        return None

    def label(self) -> str:
        kernels = "chosen matrix-vector kernels" if any(h.kind != "linear" for h in self.gemv.values()) else "F.linear"
        return f"{'compiled' if self.compiled else 'plain torch'} blocks, {kernels}, " + (
            "CUDA graphs" if self.graphs else "eager")


def fused_qkv_weight(mixer: torch.nn.Module) -> torch.Tensor | None:
    """The ``[q + k + v, H]`` weight of an attention mixer whose unbiased ``q_proj``/``k_proj``/``v_proj``
    weights are adjacent row blocks of one contiguous buffer (the loader lays them out so), as a view of
    that buffer; None otherwise (e.g. quantised modules, or separately allocated weights)."""
    import torch

    projs = [mixer.get_submodule(name) for name in ("q_proj", "k_proj", "v_proj")]
    linear: list[torch.nn.Linear] = []
    for p in projs:
        if not isinstance(p, torch.nn.Linear) or type(p) is not torch.nn.Linear or p.bias is not None:
            return None
        linear.append(p)
    q, k, v = (p.weight for p in linear)
    if not all(w.is_contiguous() and w.dtype == q.dtype and w.shape[1] == q.shape[1] for w in (q, k, v)):
        return None
    if len({w.untyped_storage().data_ptr() for w in (q, k, v)}) != 1:
        return None
    if k.storage_offset() != q.storage_offset() + q.numel() or v.storage_offset() != k.storage_offset() + k.numel():
        return None
    rows = q.shape[0] + k.shape[0] + v.shape[0]
    return q.detach().as_strided((rows, q.shape[1]), (q.shape[1], 1), q.storage_offset())


def _weight(module: torch.nn.Module) -> torch.Tensor | torch.nn.Module:
    """A projection as :func:`.blocks.project` takes it: the weight of an unbiased ``nn.Linear``, else the
    module itself (bitsandbytes' quantised layers, biased layers)."""
    import torch

    if isinstance(module, torch.nn.Linear) and type(module) is torch.nn.Linear and module.bias is None:
        return module.weight.detach()
    return module


class StaticDecoder:
    """Static prefill + greedy decode of a ``NemotronHForCausalLM`` (see the module docstring).

    Args:
        lm: transformers' ``NemotronHForCausalLM`` in eval mode; projections may be bitsandbytes modules
            (called as modules; the blocks are then not compiled).
        max_len: tokens the static cache holds (prompt + reply), rounded up to ``bucket``.
        chunk: prefill chunk length in tokens (activation memory is that of one chunk).
        bucket: attention-window granularity of decode (one graph per window), in tokens.
        prefill_bucket: prefill chunks are padded to multiples of this many rows; must divide ``chunk``.
        eager: no ``torch.compile``, no CUDA graphs, ``F.linear`` projections: the same code run eagerly
            (always so off CUDA).
        snapshot_slots: Mamba-state snapshots kept for resuming (:class:`~.state.DecoderState`).
    Raises:
        ValueError: ``prefill_bucket`` does not divide ``chunk``; a block the decoder cannot run.
    """

    def __init__(self, lm: NemotronHForCausalLM, *, max_len: int, chunk: int = 2048, bucket: int = 2048,
                 prefill_bucket: int = 128, eager: bool = False, snapshot_slots: int = 1) -> None:
        import torch
        from transformers.activations import ReLUSquaredActivation

        if prefill_bucket <= 0 or chunk % prefill_bucket:
            raise ValueError(f"prefill_bucket must divide chunk ({chunk}), got {prefill_bucket}")
        self.lm = lm
        self.state = DecoderState(lm, max_len=max_len, bucket=bucket, snapshot_slots=snapshot_slots)
        self.layers = list(lm.model.layers)
        self.kinds = self.state.kinds
        for layer, kind in zip(self.layers, self.kinds, strict=True):
            if (kind == MAMBA and layer.mixer.activation != "silu") or (
                    kind == MLP and not isinstance(layer.mixer.act_fn, ReLUSquaredActivation)):
                raise ValueError(f"a {kind} block with another activation is not supported; use decoder 'stock'")
        emb = lm.model.embeddings.weight
        self.device, self.dtype = emb.device, emb.dtype
        self.chunk, self.max_len, self.prefill_bucket = chunk, self.state.max_len, prefill_bucket
        self.eager = eager or self.device.type != "cuda"
        self.notes: list[str] = []
        self.graphs: dict[tuple[int, ...], torch.cuda.CUDAGraph] = {}  # (window,) or (segment, rows)
        self._pool: Any = None
        dev, batch, hidden = self.device, 1, lm.config.hidden_size
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=dev)
        self.logits = torch.zeros(batch, lm.config.vocab_size, dtype=torch.float32, device=dev)
        self._pbuf_h, self._pbuf_p, self._pbuf_x = (
            torch.zeros(batch, chunk, hidden, dtype=self.dtype, device=dev) for _ in range(3))
        self._n_real = torch.zeros(1, dtype=torch.long, device=dev)
        self._arange = torch.arange(max(self.max_len, chunk), device=dev)
        self._segs = self._segments()
        self._args = [self._block_args(i) for i in range(len(self.layers))]
        self._head_args = (lm.model.norm_f.weight.detach().float(), float(lm.model.norm_f.variance_epsilon),
                           _weight(lm.lm_head))
        self._out = {i: (_weight(layer.mixer.o_proj), float(layer.mixer.scaling))
                     for i, layer in enumerate(self.layers) if self.kinds[i] == ATTENTION}
        self.plain = all(isinstance(w, torch.Tensor) for ws in self._weights().values() for w in ws)
        self.gemv_timings: dict[str, dict[str, float]] = {}
        chosen = {} if self.eager or not self.plain else self._choose_gemv()
        self.setup = Setup(compiled=False, gemv={}, graphs=False)
        self._apply(Setup(compiled=not self.eager and self.plain, gemv=chosen, graphs=not self.eager))

    # ------------------------------------------------------------------ set-up
    def _block_args(self, i: int) -> tuple[Any, ...]:
        """The tensors (and static ints) block ``i``'s decode function takes after ``h``."""
        import torch

        layer, kind, st = self.layers[i], self.kinds[i], self.state
        m = layer.mixer
        norm = (layer.norm.weight.detach().float(), float(layer.norm.variance_epsilon))
        if kind == MAMBA:
            dims = (m.intermediate_size, m.conv_dim, m.num_heads, m.head_dim, m.n_groups, m.ssm_state_size)
            a_neg = -torch.exp(m.A_log.detach().float())
            return (*norm, _weight(m.in_proj), m.conv1d.weight.detach().squeeze(1), m.conv1d.bias, m.dt_bias.detach(),
                    a_neg, m.D.detach(), m.norm.weight.detach(), _weight(m.out_proj), st.conv[i], st.ssm[i], dims,
                    float(m.norm.variance_epsilon))
        if kind == MLP:
            return (*norm, _weight(m.up_proj), _weight(m.down_proj))
        fused = fused_qkv_weight(m)
        proj = (fused, None, None) if fused is not None else (_weight(m.q_proj), _weight(m.k_proj), _weight(m.v_proj))
        return (*norm, *proj, st.k[i].shape[1], m.num_key_value_groups, m.head_dim)

    def _weights(self) -> dict[str, list[Any]]:
        """The decode step's projections by role (the gemv choice is made per role)."""
        roles: dict[str, list[Any]] = {r: [] for r in ("in_proj", "out_proj", "up", "down", "qkv", "o_proj")}
        for i, kind in enumerate(self.kinds):
            a = self._args[i]
            if kind == MAMBA:
                roles["in_proj"].append(a[2])
                roles["out_proj"].append(a[9])
            elif kind == MLP:
                roles["up"].append(a[2])
                roles["down"].append(a[3])
            else:
                roles["qkv"] += [a[2]] if a[3] is None else [a[2], a[3], a[4]]
                roles["o_proj"].append(self._out[i][0])
        roles["lm_head"] = [self._head_args[2]]
        return roles

    def _choose_gemv(self) -> dict[str, gemv.Gemv]:
        """Time the matrix-vector implementations per weight role on the real weights (:func:`.ops.gemv.choose`);
        the three separate q/k/v products (no fused weight) keep ``F.linear``."""
        import torch

        chosen: dict[str, gemv.Gemv] = {}
        fused = all(self._args[i][3] is None for i, k in enumerate(self.kinds) if k == ATTENTION)
        with torch.no_grad():
            for role, weights in self._weights().items():
                if weights and (role != "qkv" or fused):
                    chosen[role], self.gemv_timings[role] = gemv.choose(weights)
        return chosen

    def _apply(self, setup: Setup) -> None:
        """Make ``setup`` the running configuration (compiling the block functions if it says so)."""
        import torch

        if self.setup.compiled and not setup.compiled:
            torch._dynamo.reset()
        fns: dict[str, Any] = dict(blocks.BLOCK_FUNCTIONS)
        if setup.compiled:  # one graph per block kind: every layer of a kind passes the same shapes
            fns = {k: torch.compile(f, dynamic=False, fullgraph=True) for k, f in fns.items()}
        self._fns = fns
        self._how = {role: how.spec() for role, how in setup.gemv.items()}
        self.setup = setup

    def _note(self, text: str) -> None:
        log.warning("static decoder: %s", text)
        self.notes.append(text)

    def capture(self) -> None:
        """Capture the decode graphs (one per attention window) and the prefill segment graphs (one per
        segment and padded length), at load; does nothing when eager. A decode configuration that fails
        is replaced by the next simpler one (:meth:`Setup.simpler`) until one works; prefill graphs that
        fail leave prefill eager (same code). Each fallback is logged and added to :attr:`notes`. The
        state is reset afterwards."""
        if self.eager:
            return
        setup: Setup | None = self.setup
        while setup is not None and setup.graphs:
            try:
                self._apply(setup)
                self._capture_decode()
                break
            except Exception as exc:
                self._drop_graphs(decode=True)
                nxt = setup.simpler()
                self._note(f"decode with {setup.label()} failed at load ({type(exc).__name__}: {str(exc)[:200]}); "
                           f"using {nxt.label() if nxt else 'nothing simpler'}")
                setup = nxt
        if setup is not None and setup != self.setup:
            self._apply(setup)
        try:
            self._capture_prefill()
        except Exception as exc:
            self._drop_graphs(decode=False)
            self._note(f"prefill graphs could not be captured ({type(exc).__name__}: {str(exc)[:200]}); "
                       "prefill launches its kernels from Python")

    def _drop_graphs(self, *, decode: bool) -> None:
        self.graphs = {k: g for k, g in self.graphs.items() if (len(k) == 1) != decode}
        self.state.reset()

    def _graph(self, fn: Callable[..., None], *args: int) -> torch.cuda.CUDAGraph:
        """Capture ``fn(*args)`` as a CUDA graph in the decoder's pool (after it has run eagerly)."""
        import torch

        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            fn(*args)
        return graph

    def _capture_decode(self) -> None:
        import torch

        sizes = range(self.state.bucket, self.max_len + 1, self.state.bucket)
        self.state.reset()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):
            for w in sizes:
                for _ in range(2):  # compile and autotune outside the capture
                    self.state.pos.zero_()
                    self._step_body(w)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        with torch.no_grad():
            for w in reversed(sizes):
                self.state.pos.zero_()
                self.graphs[(w,)] = self._graph(self._step_body, w)
        torch.cuda.synchronize()
        self.state.reset()
        self.token.zero_()
        self.logits.zero_()

    def _capture_prefill(self) -> None:
        """Longest padded length first: Triton autotunes mamba-ssm's scan and norm kernels on their first
        call with keys that ignore the length, so the first call must be a full chunk."""
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        try:
            with torch.no_grad():
                self._pbuf_h.zero_()
                self._pbuf_p.zero_()
                for rows in range(self.chunk, 0, -self.prefill_bucket):
                    self._n_real.fill_(rows)
                    for k in range(len(self._segs)):
                        with torch.cuda.stream(side):
                            self._segment(k, rows)
                        torch.cuda.current_stream().wait_stream(side)
                        self.graphs[(k, rows)] = self._graph(self._segment, k, rows)
        finally:
            torch.cuda.synchronize()
            self.state.reset()

    # ------------------------------------------------------------------ decode
    def _attend(self, i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                scaling: float) -> torch.Tensor:
        """Write one token's ``k``/``v`` ``[B, kvh, 1, hd]`` at ``pos`` and attend ``q [B, kvh, rep, hd]``
        over keys ``[0, window)`` (those after ``pos`` masked); returns ``[B, kvh * rep * hd]``.

        The ``rep`` query heads sharing a KV head are ``rep`` query rows of it (head ``h`` uses KV head
        ``h // rep``, transformers' ``repeat_kv``), so no key is copied; the arithmetic is transformers'
        ``eager_attention_forward`` (model-dtype scores, float32 softmax). Plain matmuls spread the key
        length over the whole GPU, where a fused attention kernel would give 40 query rows a few blocks.
        """
        import torch

        st = self.state
        st.k[i].index_copy_(2, st.pos, k)
        st.v[i].index_copy_(2, st.pos, v)
        scores = torch.matmul(q, st.k[i][:, :, :window].transpose(2, 3)) * scaling
        scores = scores.float().masked_fill(self._arange[:window] > st.pos, float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1).to(q.dtype), st.v[i][:, :, :window])
        return out.reshape(q.shape[0], -1)

    def _step_body(self, window: int) -> None:
        """The captured work: ``token`` -> ``logits``, the greedy ``token``, ``pos += 1`` (no host sync)."""
        fns, how = self._fns, self._how.get
        h = self.lm.model.embeddings(self.token)[:, 0]  # [B, H]
        for i, kind in enumerate(self.kinds):
            a = self._args[i]
            if kind == MAMBA:
                h = fns["mamba"](h, *a, how("in_proj"), how("out_proj"))
            elif kind == MLP:
                h = fns["mlp"](h, *a, how("up"), how("down"))
            else:
                o_w, scaling = self._out[i]
                q, k, v = fns["qkv"](h, *a, how("qkv"))
                h = fns["out"](h, self._attend(i, q, k, v, window, scaling), o_w, how("o_proj"))
        logits, token = fns["head"](h, *self._head_args, how("lm_head"))
        self.logits.copy_(logits)
        self.token.copy_(token)
        self.state.pos.add_(1)

    def step(self) -> torch.Tensor:
        """Decode one token: consume ``token``, write ``logits`` ``[B, vocab]`` float32 (returned; the buffer
        is overwritten by the next step) and the greedy next ``token``. Replays the window's graph when
        captured. For constrained decoding, pick the token from ``logits`` and ``token.copy_()`` it before
        the next call."""
        import torch

        st = self.state
        window = st.window(st.length)
        graph = self.graphs.get((window,))
        if graph is not None:
            graph.replay()
        else:
            with torch.no_grad():
                self._step_body(window)
        st.length += 1
        return self.logits

    # ------------------------------------------------------------------ prefill
    def _segments(self) -> list[tuple[list[int], int | None]]:
        """The blocks between attention layers: ``[(non-attention block indices, the attention block after
        them or None), ...]``; the last entry has None and may have no blocks."""
        segs: list[tuple[list[int], int | None]] = []
        current: list[int] = []
        for i, kind in enumerate(self.kinds):
            if kind == ATTENTION:
                segs.append((current, i))
                current = []
            else:
                current.append(i)
        segs.append((current, None))
        return segs

    def _mamba_prefill(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Mamba-2 mixer over padded rows ``x [B, T, H]`` (real: the first ``_n_real``), continuing from the
        static conv/SSM state, which it updates in place.

        ``NemotronHMamba2Mixer``'s chunk branch: ``in_proj`` -> causal conv with SiLU over the ``xBC``
        columns (:func:`.ops.prefill.causal_conv1d`, state taken at the real length) -> chunked scan
        (transformers' ``mamba2_chunk_scan``: mamba-ssm's ``mamba_chunk_scan_combined`` when live) -> gated
        RMSNorm (:func:`.ops.prefill.gated_rms_norm`) -> ``out_proj``. The step size is computed here as the
        scan would (``max(softplus(dt + dt_bias), time_step_min)`` in float32) and set to exactly 0 on padded
        rows, so ``exp(dt A) = 1`` and ``dt B x = 0`` there: the state leaves the chunk as the last real row
        left it (masking the raw ``dt`` would leave the ``time_step_min`` floor on padded rows).
        """
        import torch.nn.functional as F
        from transformers.models.nemotron_h import modeling_nemotron_h as mnh

        m = self.layers[i].mixer
        a = self._args[i]
        bsz, t, _ = x.shape
        inner, conv_dim, heads, hd, groups, n = a[12]
        gate, xbc, dt = blocks.project(x, a[2]).split([inner, conv_dim, heads], dim=-1)
        lo, hi = m.time_step_limit
        dt = F.softplus(dt.float() + a[5].float()).clamp(lo, hi)
        dt = dt.masked_fill((self._arange[:t] >= self._n_real)[None, :, None], 0.0)
        xbc = prefill.causal_conv1d(xbc, a[10], a[3], a[4], silu=True, length=self._n_real)
        xs, b, c = xbc.split([inner, groups * n, groups * n], dim=-1)
        out, final = mnh.mamba2_chunk_scan(
            xs.view(bsz, t, heads, hd), dt, a[6], b.view(bsz, t, groups, n), c.view(bsz, t, groups, n),
            chunk_size=m.chunk_size, D=a[7], z=None, dt_bias=None, initial_states=a[11], dt_softplus=False,
            dt_limit=(0.0, float("inf")), return_final_states=True)
        a[11].copy_(final)
        y = prefill.gated_rms_norm(out.reshape(bsz, t, -1), gate, a[8], a[13], inner // groups)
        return blocks.project(y.to(x.dtype), a[9])

    def _attn_prefill(self, i: int, x: torch.Tensor, start: int) -> torch.Tensor:
        """Attention of the real rows ``x [B, T, H]`` at positions ``[start, start + T)`` over the cached past:
        keys and values go into the static cache, then one SDPA call over the grouped KV heads with a causal
        mask aligned to the bottom right (query ``t`` sees keys ``<= start + t``). Flash only on CUDA in half
        precision (an input it refuses raises rather than run a slower backend); the math backend elsewhere.
        """
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right

        st, (_, _, q_w, k_w, v_w, kvh, rep, hd) = self.state, self._args[i]
        bsz, t, _ = x.shape
        if k_w is None:
            q, k, v = blocks.project(x, q_w).split([kvh * rep * hd, kvh * hd, kvh * hd], dim=-1)
        else:
            q, k, v = blocks.project(x, q_w), blocks.project(x, k_w), blocks.project(x, v_w)
        end = start + t
        st.k[i][:, :, start:end].copy_(k.view(bsz, t, kvh, hd).transpose(1, 2))
        st.v[i][:, :, start:end].copy_(v.view(bsz, t, kvh, hd).transpose(1, 2))
        flash = self.device.type == "cuda" and self.dtype in (torch.float16, torch.bfloat16)
        mask = {"is_causal": True} if start == 0 else {"attn_mask": causal_lower_right(t, end)}
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION] if flash else [SDPBackend.MATH]):
            out = F.scaled_dot_product_attention(q.view(bsz, t, kvh * rep, hd).transpose(1, 2), st.k[i][:, :, :end],
                                                 st.v[i][:, :, :end], scale=self._out[i][1], enable_gqa=True, **mask)
        return blocks.project(out.transpose(1, 2).reshape(bsz, t, -1), self._out[i][0])

    def _segment(self, k: int, rows: int) -> None:
        """Segment ``k`` over the first ``rows`` rows of the pad buffers: each of its blocks, then the next
        attention block's add + norm into ``_pbuf_x`` (or, after the last segment, the final residual add),
        the residual stream back into ``_pbuf_h``. Only device values decide anything (the real length is
        ``_n_real``), so one CUDA graph per ``(k, rows)`` replays it for any real length."""
        blks, attn = self._segs[k]
        h = self._pbuf_h[:, :rows]
        pending = None if k == 0 else self._pbuf_p[:, :rows]
        for i in blks:
            norm32, eps = self._args[i][:2]
            x, h = prefill.add_rms_norm(pending, h, norm32.to(self.dtype), eps)
            if self.kinds[i] == MAMBA:
                pending = self._mamba_prefill(i, x)
            else:
                pending = blocks.project(prefill.relu_square_(blocks.project(x, self._args[i][2])), self._args[i][3])
        if attn is not None:
            norm32, eps = self._args[attn][:2]
            x, h = prefill.add_rms_norm(pending, h, norm32.to(self.dtype), eps)
            self._pbuf_x[:, :rows].copy_(x)
        elif pending is not None:
            h = h + pending
        if h.data_ptr() != self._pbuf_h.data_ptr():
            self._pbuf_h[:, :rows].copy_(h)

    def _forward_chunk(self, h: torch.Tensor, start: int) -> torch.Tensor:
        """Every block over a chunk ``h [B, T, H]`` at positions ``[start, start + T)``, padded to a multiple
        of ``prefill_bucket`` rows: segments replayed from their graphs when captured (else run, the same
        code), attention eagerly on the real rows. Returns the residual stream before ``norm_f``
        (``[B, T, H]``, a view of a static buffer)."""
        t = int(h.shape[1])
        rows = min(self.chunk, -(-t // self.prefill_bucket) * self.prefill_bucket)
        self._pbuf_h[:, :t].copy_(h)
        self._pbuf_h[:, t:rows].zero_()
        self._n_real.fill_(t)
        for k, (_blks, attn) in enumerate(self._segs):
            graph = self.graphs.get((k, rows))
            if graph is not None:
                graph.replay()
            else:
                self._segment(k, rows)
            if attn is not None:
                self._pbuf_p[:, :t].copy_(self._attn_prefill(attn, self._pbuf_x[:, :t], start))
        return self._pbuf_h[:, :t]

    def prefill(self, inputs_embeds: torch.Tensor, keys: Sequence[int] | None = None, *,
                snapshot_at: Sequence[int] = (), embeds_offset: int = 0) -> tuple[torch.Tensor, PrefillReport]:
        """Run a prompt into the state (resuming from the previous one where ``keys`` allow) and return the
        last position's logits.

        Args:
            inputs_embeds: ``[B, T - embeds_offset, H]`` embeddings of prompt tokens ``[embeds_offset, T)``
                (image rows merged), model dtype.
            keys: one int per prompt token (``T``) identifying its content; the common prefix with the previous
                prompt is taken from the latest snapshot inside it (:meth:`.DecoderState.resume_point`).
                None: a cold prefill.
            snapshot_at: positions after which to save the Mamba state (into the preallocated slots; the
                oldest is overwritten when all are taken). Each costs a chunk boundary.
            embeds_offset: first token ``inputs_embeds`` covers; at most the resume point.
        Returns:
            (logits ``[B, vocab]`` float32 of the last prompt token, :class:`PrefillReport`).
        Raises:
            ValueError: ``keys`` and the prompt differ in length, the prompt does not fit ``max_len``, or
                ``embeds_offset`` is past the resume point.
        """
        import torch

        st = self.state
        total = int(inputs_embeds.shape[1]) + embeds_offset
        if keys is not None and len(keys) != total:
            raise ValueError(f"{len(keys)} keys for a prompt of {total} tokens")
        if total + 1 > self.max_len:
            raise ValueError(f"prompt of {total} tokens does not fit the static cache of {self.max_len}")
        new_keys = [int(k) for k in keys] if keys is not None else []
        resume = st.resume_point(new_keys) if keys is not None else 0
        if embeds_offset > resume:
            raise ValueError(f"embeddings start at token {embeds_offset} but the state resumes at {resume}")
        st.restore(resume)
        wanted = sorted({int(p) for p in snapshot_at if resume < int(p) <= total}) if st.snapshot_slots else []
        cuts = sorted({*range(resume, total, self.chunk), total, *wanted})
        with torch.no_grad():
            for a, b in itertools.pairwise(cuts):
                h = self._forward_chunk(inputs_embeds[:, a - embeds_offset : b - embeds_offset], a)
                if b in wanted:
                    st.snapshot(b)
            logits = self.lm.lm_head(self.lm.model.norm_f(h[:, -1:])).float()[:, -1]
        st.length, st.keys = total, new_keys
        st.pos.fill_(total)
        return logits, PrefillReport(total, resume, total - resume, len(cuts) - 1, wanted)

    # ------------------------------------------------------------------ facts
    def nbytes(self) -> int:
        """Bytes of preallocated state and buffers (the graphs' pool is not counted)."""
        extra = (self.token, self.logits, self._pbuf_h, self._pbuf_p, self._pbuf_x)
        return self.state.nbytes() + sum(t.numel() * t.element_size() for t in extra)

    def describe(self) -> dict[str, Any]:
        """What runs, for logs, ``holodesk doctor`` and the bench: decode configuration, graphs, kernels,
        sizes and the load-time fallbacks (``notes``)."""
        why = prefill.fused_available(self.device)
        decode = self.setup.label() + ("" if self.plain else " (quantised projections run as their modules, "
                                       "so the blocks are not compiled)")
        return {
            "decoder": "static",
            "eager": self.eager,
            "decode": decode,
            "gemv": {role: how.label() for role, how in self.setup.gemv.items()},
            "decode_graphs": sorted(k[0] for k in self.graphs if len(k) == 1),
            "prefill": ("Triton causal conv1d + relu^2, mamba-ssm add+RMSNorm and gated RMSNorm" if why is None
                        else f"torch references ({why})") + f"; chunks of {self.chunk} padded to multiples of "
                       f"{self.prefill_bucket} rows; {sum(len(k) == 2 for k in self.graphs)} segment graphs",
            "max_len": self.max_len,
            "state_bytes": self.nbytes(),
            "notes": list(self.notes),
        }


__all__ = ["PrefillReport", "Setup", "StaticDecoder", "fused_qkv_weight"]
