"""Static prefill and greedy decoding for transformers' NemotronH (the Holotron-12B language model).

:class:`StaticDecoder` keeps all decoder state in tensors allocated once (:class:`~.state.DecoderState`), so a
decode step is a fixed sequence of kernels over fixed addresses, recorded as a CUDA graph and replayed
per token (stock ``generate()`` launches ~1300 small kernels from Python per token). It never changes the
model: it reads its weights and calls its embedding, final norm and head modules.

Decode (:meth:`StaticDecoder.step`): embedding -> one :mod:`.blocks` function per block (compiled when every
projection is a plain weight; a Mamba-2 block's mixer between its projections by its own kernels,
:mod:`.ops.mamba_step`, where :attr:`Setup.fused_step`) -> ``norm_f`` -> ``lm_head`` into ``logits``,
``pos += 1`` (the caller chooses the next token from ``logits`` and writes it into ``token``); one graph per
attention window (:meth:`.DecoderState.window`). Prefill (:meth:`StaticDecoder.prefill`): chunks of at most
``chunk`` tokens padded to multiples of ``prefill_bucket`` rows in static buffers (a short pass, such as
jump-forward's :meth:`StaticDecoder.extend`, to the smallest of
:attr:`StaticDecoder.short_rows` that holds it); the Mamba/MLP blocks between two attention layers form a
segment that reads the real length from the device, one CUDA graph per (segment, padded length); attention runs
eagerly on the real rows (:func:`.blocks.attention_chunk`).
Mamba-state snapshots let the next prompt resume.

Graphs are recorded on first use (:meth:`StaticDecoder._run`), all in one cache and one memory pool: a window
or (segment, padded length) without a graph runs eagerly (the real computation, which also compiles and
autotunes what it needs), then its graph is recorded without executing anything, and later uses replay it.
:meth:`StaticDecoder.capture` applies this at load to the shapes the warm-up needs (the given decode windows,
and a full chunk, the first prefill call); a failure there falls back once, at load, to the next simpler configuration
(:meth:`Setup.simpler`), and a failure to record a graph later leaves that shape eager; each is logged and
kept in ``notes``. The shapes not recorded yet can also be recorded ahead of their first use, between steps
(:meth:`StaticDecoder.pending_graphs`, :meth:`StaticDecoder.record_ahead`, from a thread of their own:
:meth:`.StaticEngine.start_recording_ahead`); a recording ahead that fails leaves its shape to its first use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from holodesk.policy.holotron import blocks
from holodesk.policy.holotron.blocks import fused_qkv_weight, weight_of
from holodesk.policy.holotron.ops import gemv, mamba_step, prefill, quant
from holodesk.policy.holotron.state import ATTENTION, MAMBA, MLP, DecoderState, Embeddings, PrefillReport

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import torch
    from torch.cuda.graphs import _POOL_HANDLE
    from transformers import NemotronHForCausalLM

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Setup:
    """How decode runs: blocks ``compiled``, matrix-vector ``gemv`` per weight role, decode ``graphs``;
    ``quantized``: the model's projections are bitsandbytes modules (decode reads their storage through the
    :mod:`.ops.quant` kernels when ``gemv`` names them, else calls the modules, uncompiled); ``fused_step``:
    each Mamba-2 mixer between its projections runs :func:`.ops.mamba_step.mamba_step`'s two kernels (else
    its torch maths, compiled with the block when ``compiled``)."""

    compiled: bool
    gemv: dict[str, gemv.Gemv]
    graphs: bool
    quantized: bool = False
    fused_step: bool = False

    def kernels(self) -> bool:
        """Whether any matrix-vector product runs a chosen kernel rather than ``F.linear``."""
        return any(how.kind != "linear" for how in self.gemv.values())

    def quant_kernels(self) -> bool:
        """Whether decode reads quantised storage through the :mod:`.ops.quant` kernels."""
        return any(how.kind in quant.QUANT_KINDS for how in self.gemv.values())

    def simpler(self) -> Setup:
        """The next configuration to try when this one fails at load (without our kernels; then plain torch;
        then eager; eager plain torch with F.linear / bitsandbytes' modules: itself)."""
        if self.kernels() or self.fused_step:
            return dataclasses.replace(self, gemv={}, fused_step=False, compiled=self.compiled and not self.quantized)
        return dataclasses.replace(self, compiled=False) if self.compiled else dataclasses.replace(self, graphs=False)

    def label(self) -> str:  # e.g. "compiled blocks, F.linear, CUDA graphs"
        kernels = "chosen matrix-vector kernels" if self.kernels() else "F.linear"
        if self.quant_kernels():
            kernels += " (quantised weights read as bitsandbytes stores them)"
        elif self.quantized:
            kernels += " (bitsandbytes modules called as they are)"
        if self.fused_step:
            kernels += ", Mamba-2 step kernels"
        run = "CUDA graphs" if self.graphs else "eager"
        return f"{'compiled' if self.compiled else 'plain torch'} blocks, {kernels}, {run}"


class StaticDecoder:
    """Static prefill + greedy decode of a ``NemotronHForCausalLM`` (see the module docstring).

    Args:
        lm: ``NemotronHForCausalLM`` in eval mode; for bitsandbytes NF4 / int8 projections decode reads their
            storage through the :mod:`.ops.quant` kernels (compiled and captured like bf16) and prefill calls
            the modules (dequantise + bf16 GEMM); where no kernel serves, decode calls the modules uncompiled.
        max_len: tokens of the static cache (prompt + reply); chunk: prefill chunk in tokens; bucket: decode
            window granularity in tokens; prefill_bucket: chunks are padded to multiples of it (divides chunk),
            shorter passes to a power of two from 8 below it (:attr:`short_rows`).
        eager: no ``torch.compile``, no CUDA graphs, ``F.linear``: the same code run eagerly (always off CUDA);
        snapshot_slots: Mamba-state snapshots kept for resuming (:class:`~.state.DecoderState`).
    Raises:
        ValueError: ``prefill_bucket`` does not divide ``chunk``; a block the decoder cannot run.
    """

    def __init__(self, lm: NemotronHForCausalLM, *, max_len: int, chunk: int = 2048, bucket: int = 2048,
                 prefill_bucket: int = 128, eager: bool = False, snapshot_slots: int = 1) -> None:
        import torch  # lazy: torch (optional, heavy)
        from transformers.activations import ReLUSquaredActivation  # lazy: transformers (optional, heavy)

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
        self.device, self.dtype = self.state.pos.device, lm.model.embeddings.weight.dtype
        self.chunk, self.max_len, self.prefill_bucket = chunk, self.state.max_len, prefill_bucket
        #: padded lengths of passes shorter than ``prefill_bucket`` (8, 16, 32, 64 for the default 128)
        self.short_rows = [1 << k for k in range(3, 16) if 1 << k < prefill_bucket]
        self.eager = eager or self.device.type != "cuda"
        self.notes: list[str] = []
        self.capture_seconds: dict[str, float] = {}  # "decode" / "prefill": wall seconds of capture()
        self.graphs: dict[tuple[int, ...], torch.cuda.CUDAGraph] = {}  # (window,) or (segment, rows)
        #: (graph key, wall seconds to record it) of each graph recorded on first use after capture(), in order
        self.lazy_captures: list[tuple[tuple[int, ...], float]] = []
        self._recording: set[str] = set()  # "decode" / "prefill": kinds recorded on first use (set by capture())
        self._uncaptured: set[tuple[int, ...]] = set()  # keys whose recording failed: they stay eager
        #: graph key -> wall seconds to record it ahead of its first use (:meth:`record_ahead`), in order; None
        #: where that failed (the shape is left to its first use)
        self.recorded_ahead: dict[tuple[int, ...], float | None] = {}
        self._pool: tuple[_POOL_HANDLE, torch.cuda.Stream] | None = None  # graphs' memory pool, capture stream
        dev, batch, hidden = self.device, 1, lm.config.hidden_size
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=dev)
        self.logits = torch.zeros(batch, lm.config.vocab_size, dtype=torch.float32, device=dev)
        self._pbuf_h, self._pbuf_p, self._pbuf_x = (
            torch.zeros(batch, chunk, hidden, dtype=self.dtype, device=dev) for _ in range(3))
        self._n_real, self._arange = (torch.zeros(1, dtype=torch.long, device=dev),
                                      torch.arange(max(self.max_len, chunk), device=dev))
        #: tensors derived from the weights at build, each with its recipe (:meth:`_derive`, :meth:`weights_written`)
        self._derived: list[tuple[torch.Tensor, Callable[[], torch.Tensor]]] = []
        self._segs: list[tuple[list[int], int | None]] = [([], None)]  # (Mamba/MLP blocks, attention after)
        for i, kind in enumerate(self.kinds):
            if kind == ATTENTION:
                self._segs[-1:] = [(self._segs[-1][0], i), ([], None)]
            else:
                self._segs[-1][0].append(i)
        self._args = [self._block_args(i) for i in range(len(self.layers))]  # prefill: modules as they are
        self._qargs = [self._stored(a) for a in self._args]  # decode: bitsandbytes storage in place of modules
        # the blocks' norm weights in the model dtype (prefill); the head's arguments (decode)
        self._norms, self._head_args = [layer.norm.weight.detach() for layer in self.layers], (
            self._derive(lambda: lm.model.norm_f.weight.detach().float()), float(lm.model.norm_f.variance_epsilon),
            weight_of(lm.lm_head))
        self._out = {i: (weight_of(layer.mixer.o_proj), float(layer.mixer.scaling))
                     for i, layer in enumerate(self.layers) if self.kinds[i] == ATTENTION}
        self._qout = {i: self._stored(o) for i, o in self._out.items()}
        self._dargs, self._dout = self._args, self._out  # what decode reads (set by _apply)
        roles = self._weights(self._args, self._out)
        self.plain = all(isinstance(w, torch.Tensor) for ws in roles.values() for w in ws)
        qroles = self._weights(self._qargs, self._qout)
        stored = (quant.NF4Weight, quant.Int8Weight)
        quantized = any(isinstance(w, stored) for ws in qroles.values() for w in ws)
        fused = all(self._args[i][3] is None for i, k in enumerate(self.kinds) if k == ATTENTION)
        self.gemv_timings: dict[str, dict[str, float]] = {}
        chosen: dict[str, gemv.Gemv] = {}
        for role, ws in qroles.items():  # timed on the real weights (separate bf16 q/k/v products keep F.linear)
            if self.eager:
                break
            if all(isinstance(w, torch.Tensor) for w in ws) and (role != "qkv" or fused):
                chosen[role], self.gemv_timings[role] = gemv.choose([w for w in ws if isinstance(w, torch.Tensor)])
            elif all(isinstance(w, stored) for w in ws) and len({type(w) for w in ws}) == 1:
                chosen[role], self.gemv_timings[role] = quant.choose(
                    [w for w in ws if isinstance(w, stored)], dtype=self.dtype)
        # the quantised decode is compiled only when a kernel reads every projection's storage
        served = all(all(isinstance(w, torch.Tensor) for w in ws) or chosen.get(role, gemv.LINEAR).kind
                     in quant.QUANT_KINDS for role, ws in qroles.items())
        if quantized and not served:
            log.warning("static decoder: no quantised matrix-vector kernel for some projections (%s); decode calls "
                        "bitsandbytes' modules, uncompiled", ", ".join(
                            r for r, ws in qroles.items() if not all(isinstance(w, torch.Tensor) for w in ws)
                            and chosen.get(r, gemv.LINEAR).kind not in quant.QUANT_KINDS))
            chosen = {r: h for r, h in chosen.items() if h.kind not in quant.QUANT_KINDS}
        compiled = not self.eager and (self.plain or (quantized and served))
        self.setup = Setup(compiled=False, gemv={}, graphs=False)
        self._apply(Setup(compiled=compiled, gemv=chosen, graphs=not self.eager, quantized=quantized,
                          fused_step=not self.eager and mamba_step.HAVE_TRITON))

    def _block_args(self, i: int) -> tuple[Any, ...]:
        """The tensors (and static ints) block ``i``'s decode function takes after ``h``."""
        import torch  # lazy: torch (optional, heavy)

        layer, kind, st = self.layers[i], self.kinds[i], self.state
        m = layer.mixer
        norm = (self._derive(lambda: layer.norm.weight.detach().float()), float(layer.norm.variance_epsilon))
        if kind == MAMBA:
            dims = (m.intermediate_size, m.conv_dim, m.num_heads, m.head_dim, m.n_groups, m.ssm_state_size)
            a_neg = self._derive(lambda: -torch.exp(m.A_log.detach().float()))
            conv_b = None if m.conv1d.bias is None else m.conv1d.bias.detach()
            return (*norm, weight_of(m.in_proj), weight_of(m.out_proj), m.conv1d.weight.detach().squeeze(1), conv_b,
                    m.dt_bias.detach(), a_neg, m.D.detach(), m.norm.weight.detach(), st.conv[i], st.ssm[i], dims,
                    float(m.norm.variance_epsilon))
        if kind == MLP:
            return (*norm, weight_of(m.up_proj), weight_of(m.down_proj))
        fused = fused_qkv_weight(m)
        proj = (fused, None, None) if fused is not None else tuple(weight_of(p) for p in (m.q_proj, m.k_proj, m.v_proj))
        return (*norm, *proj, st.k[i].shape[1], m.num_key_value_groups, m.head_dim)

    def _derive(self, recipe: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``recipe()``, a new tensor computed from the weights' values (a float32 norm weight, ``-exp(A_log)``),
        kept with its recipe so that :meth:`weights_written` recomputes it in place. Every tensor the decoder
        derives from the weights at build goes through here."""
        out = recipe()
        self._derived.append((out, recipe))
        return out

    def weights_written(self) -> None:
        """The weights' values changed in place since the build (a load that read them beside it: the build, the
        capture and the warm-up saw unfinished values): recompute each tensor derived from them in place (the
        graphs read them where they are) and clear everything earlier passes wrote (:meth:`.DecoderState.clear`,
        the token, the logits, the prefill buffers), so that nothing computed from the unfinished values is read
        again."""
        import torch  # lazy: torch (optional, heavy)

        with torch.no_grad():
            for out, recipe in self._derived:
                out.copy_(recipe())
            for t in (self.token, self.logits, self._pbuf_h, self._pbuf_p, self._pbuf_x):
                t.zero_()
        self.state.clear()

    @staticmethod
    def _stored(args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``args`` with each bitsandbytes projection module replaced by its storage where the decode kernels
        read it (:func:`.blocks.weight_of` ``quantized``); the same tensors, nothing copied."""
        import torch  # lazy: torch (optional, heavy)

        return tuple(weight_of(a, quantized=True) if isinstance(a, torch.nn.Module) else a for a in args)

    def _weights(self, args: list[tuple[Any, ...]], out: dict[int, tuple[Any, float]]) -> dict[str, list[Any]]:
        """The decode step's projections by role in the block arguments ``args`` and attention outputs ``out``
        (the gemv choice is made per role)."""
        roles: dict[str, list[Any]] = {"lm_head": [self._head_args[2]]}
        where = {MAMBA: (("in_proj", 2), ("out_proj", 3)), MLP: (("up", 2), ("down", 3)), ATTENTION: (("qkv", 2),)}
        for i, kind in enumerate(self.kinds):
            for role, j in where[kind]:
                roles.setdefault(role, []).append(args[i][j])
            if kind == ATTENTION:
                roles["qkv"] += [w for w in args[i][3:5] if w is not None]
                roles.setdefault("o_proj", []).append(out[i][0])
        return roles

    def _apply(self, setup: Setup) -> None:
        """Make ``setup`` the running configuration (compiling the block functions if it says so)."""
        import torch  # lazy: torch (optional, heavy)

        if self.setup.compiled and not setup.compiled:
            torch._dynamo.reset()
        fns: dict[str, Any] = dict(blocks.BLOCK_FUNCTIONS)
        if setup.compiled:  # one graph per block kind: every layer of a kind passes the same shapes
            fns = {k: torch.compile(f, dynamic=False, fullgraph=True) for k, f in fns.items()}
        self._fns = fns
        self._how = {role: how.spec() for role, how in setup.gemv.items()}
        quantised = setup.quant_kernels()
        self._dargs, self._dout = (self._qargs, self._qout) if quantised else (self._args, self._out)
        self.setup = setup

    def _note(self, exc: Exception, what: str, instead: str, *, when: str = "at load") -> None:
        self.notes.append(f"{what} failed {when} ({type(exc).__name__}: {str(exc)[:200]}); {instead}")
        log.warning("static decoder: %s", self.notes[-1])

    def capture(self, lengths: Sequence[int] = (0,)) -> None:
        """At load, record the graphs the warm-up needs by their first use (:meth:`_run`): the decode graph of
        the window of a step with each of ``lengths`` tokens in the state (clamped to ``max_len - 1``), then
        every prefill segment over a full chunk (Triton autotunes mamba-ssm's scan and norm kernels on their
        first call with keys that ignore the length, so that call must be a full chunk). Nothing when eager.
        Every other window and padded length is recorded on its first use in a session.

        A failing decode configuration is replaced by the next simpler one until one works; failing prefill
        graphs leave prefill eager. Each fallback is logged and noted. The dummy passes' state is reset after.
        The wall seconds of each part (eager first uses and fallbacks included) go to ``capture_seconds``."""
        if self.eager:
            return
        windows = sorted({self.state.window(min(max(int(n), 0), self.max_len - 1)) for n in lengths}, reverse=True)
        t0 = time.perf_counter()
        while self.setup.graphs:
            try:
                self._capture_decode(windows)
                self._recording.add("decode")
                break
            except Exception as exc:
                self.graphs = {k: g for k, g in self.graphs.items() if len(k) != 1}
                self.state.reset()
                simpler = self.setup.simpler()
                self._note(exc, f"decode with {self.setup.label()}", f"using {simpler.label()}")
                self._apply(simpler)
        t1 = time.perf_counter()
        try:
            self._capture_prefill()
            self._recording.add("prefill")
        except Exception as exc:
            self.graphs = {k: g for k, g in self.graphs.items() if len(k) == 1}
            self.state.reset()
            self._note(exc, "capturing the prefill graphs", "prefill launches its kernels from Python")
        self.capture_seconds = {"decode": t1 - t0, "prefill": time.perf_counter() - t1}

    def _capture_decode(self, windows: Sequence[int]) -> None:
        """First use of each decode window in ``windows`` (the largest first, so that the pool then fits the
        smaller ones) on a dummy state: ``token`` 0 at position 0; the state is reset after.

        Raises:
            Exception: whatever the eager pass (compiling, autotuning) or the recording raised.
        """
        self.state.reset()
        self.token.zero_()
        try:
            for w in windows:
                self.state.pos.zero_()
                self._run((w,), self._step_body, w, load=True)
        finally:
            self._synchronize()
            self.state.reset()
            self.token.zero_()
            self.logits.zero_()

    def _capture_prefill(self) -> None:
        """First use of every segment over a full chunk of zeroed pad buffers, all rows real; the state
        (which the dummy pass changed) is reset after.

        Raises:
            Exception: whatever the eager pass or the recording raised.
        """
        self._pbuf_h.zero_()
        self._pbuf_p.zero_()
        self._n_real.fill_(self.chunk)
        try:
            for k in range(len(self._segs)):
                self._run((k, self.chunk), self._segment, k, self.chunk, load=True)
        finally:
            self._synchronize()
            self.state.reset()

    def _run(self, key: tuple[int, ...], body: Callable[..., None], *args: int, load: bool = False) -> None:
        """Run ``body(*args)`` (:meth:`_step_body` with key ``(window,)``, :meth:`_segment` with key ``(segment,
        rows)``): replay graph ``key`` when recorded; else run it eagerly, the real computation (the first call
        of a shape compiles and autotunes what it needs), and, where graphs of its kind are recorded on first
        use (or ``load``), record it right after without executing anything (:meth:`_record`): the live state,
        ``pos`` and the pad buffers are what the eager pass left. The eager pass and the recording run on the
        capture stream, the main stream waiting for them, and always without autograd outside inference mode
        (the compiled block functions' guards see one mode wherever the step is called from; the body reads
        and writes only the state, the buffers and the weights). Seconds spent recording after load go to
        :attr:`lazy_captures`.

        Raises:
            Exception: what the eager pass raises; with ``load``, also what the recording raises (else a failed
                recording leaves ``key``, and every segment of the same length, eager: logged, noted).
        """
        import torch  # lazy: torch (optional, heavy)

        graph = self.graphs.get(key)
        if graph is not None:
            graph.replay()
            return
        kind = "decode" if len(key) == 1 else "prefill"
        record = load or (kind in self._recording and key not in self._uncaptured)
        with torch.inference_mode(False), torch.no_grad(), (
                self._capture_stream() if record else contextlib.nullcontext()):
            body(*args)
            if not record:
                return
            t0 = time.perf_counter()
            try:
                self.graphs[key] = self._record(body, *args)
            except Exception as exc:
                if load:
                    raise
                what = f"decode window {key[0]}" if kind == "decode" else f"the prefill over {key[1]} padded rows"
                self._uncaptured |= {key} if kind == "decode" else {(k, key[1]) for k in range(len(self._segs))}
                self._note(exc, f"recording the CUDA graph of {what}", "it runs eagerly (kernels launched from "
                           "Python) from now on", when="on its first use")
                return
            if not load:
                self.lazy_captures.append((key, time.perf_counter() - t0))

    @contextlib.contextmanager
    def _capture_stream(self) -> Iterator[None]:
        """The capture stream (made with the graphs' memory pool on first use) as the current stream, after
        the work queued on the current one; the current stream waits for it on leaving."""
        import torch  # lazy: torch (optional, heavy)

        if self._pool is None:
            self._pool = (torch.cuda.graph_pool_handle(), torch.cuda.Stream())
        main, side = torch.cuda.current_stream(), self._pool[1]
        side.wait_stream(main)
        try:
            with torch.cuda.stream(side):
                yield
        finally:
            main.wait_stream(side)

    def _record(self, body: Callable[..., None], *args: int) -> torch.cuda.CUDAGraph:
        """``body(*args)`` recorded as a CUDA graph on the current (capture) stream in the graphs' pool; nothing
        runs (its temporaries come from the pool and are free again when it returns).

        Raises:
            RuntimeError: the capture failed (e.g. an operation that cannot be captured, out of memory).
        """
        import torch  # lazy: torch (optional, heavy)

        graph = torch.cuda.CUDAGraph()
        # thread_local: the calls other threads may make meanwhile (the weights' readers of a load that goes on
        # beside the capture: stream synchronisation, page-locked buffers) do not invalidate it; this thread's own
        # unsafe calls still do
        graph.capture_begin(pool=None if self._pool is None else self._pool[0], capture_error_mode="thread_local")
        try:
            body(*args)
        finally:
            graph.capture_end()
        return graph

    def pending_graphs(self) -> list[tuple[int, ...]]:
        """Keys of the graphs a session may use that are not recorded yet, in the order :meth:`record_ahead` takes
        them: every segment over each padded length a pass can have (:attr:`short_rows`, then the multiples of
        ``prefill_bucket`` up to ``chunk``), then every decode window up to ``max_len``; only kinds recorded on
        first use (:meth:`capture` succeeded for them), without keys whose recording failed (on first use or
        ahead). Empty when eager."""
        keys: list[tuple[int, ...]] = []
        if "prefill" in self._recording:
            rows = [*self.short_rows, *range(self.prefill_bucket, self.chunk + 1, self.prefill_bucket)]
            keys += [(k, r) for r in rows for k in range(len(self._segs))]
        if "decode" in self._recording:
            keys += [(w,) for w in range(self.state.bucket, self.max_len + 1, self.state.bucket)]
        return [k for k in keys if k not in self.graphs and k not in self._uncaptured and k not in self.recorded_ahead]

    def prepare_thread(self) -> None:
        """Make the calling thread ready to record graphs (:meth:`record_ahead`): the decoder's device as its
        current device, and its cuBLAS handles and workspaces for the capture stream made by a product in the
        model dtype and in float32 there (creating them inside a capture would fail it). Nothing when eager."""
        import torch  # lazy: torch (optional, heavy)

        if self.eager:
            return
        torch.cuda.set_device(self.device)
        with torch.inference_mode(False), torch.no_grad(), self._capture_stream():
            for dtype in {self.dtype, torch.float32}:
                x = torch.ones(2, 16, dtype=dtype, device=self.device)
                torch.nn.functional.linear(x, x)
                torch.matmul(x, x.T)
        self._synchronize()

    def record_ahead(self, key: tuple[int, ...]) -> bool:
        """Record graph ``key`` (one of :meth:`pending_graphs`) before its first use, without running anything:
        its body is only recorded (:meth:`_record`), so the state, ``pos`` and the buffers are untouched and a
        session in progress is not disturbed; the caller makes sure no step runs meanwhile. The seconds go to
        :attr:`recorded_ahead`. Call :meth:`prepare_thread` first in the calling thread.

        Returns:
            True when recorded (or already recorded); False when the recording failed: logged, and the shape is
            left to its first use (:meth:`_run`: an eager pass, then the recording), never recorded ahead again.
        """
        import torch  # lazy: torch (optional, heavy)

        if key in self.graphs:
            return True
        body: Callable[..., None] = self._step_body if len(key) == 1 else self._segment
        t0 = time.perf_counter()
        try:
            with torch.inference_mode(False), torch.no_grad(), self._capture_stream():
                graph = self._record(body, *key)
        except Exception as exc:
            self.recorded_ahead[key] = None
            log.info("static decoder: recording graph %s ahead of its first use failed (%s: %s); it is recorded on "
                     "its first use instead", key, type(exc).__name__, str(exc)[:200])
            return False
        self.graphs[key] = graph
        self.recorded_ahead[key] = time.perf_counter() - t0
        return True

    def _synchronize(self) -> None:
        """Wait for the device (CUDA only)."""
        import torch  # lazy: torch (optional, heavy)

        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _step_body(self, window: int) -> None:
        """The captured work: ``token`` -> ``logits``, ``pos += 1`` (no host sync)."""
        import torch  # lazy: torch (optional, heavy)

        fns, how, st = self._fns, self._how.get, self.state
        h = self.lm.model.embeddings(self.token)[:, 0]  # [B, H]
        pending = torch.zeros_like(h)  # a block's output, added to h by the next block's function (with its norm);
        # a tensor for the first block too, so each block function compiles once
        future = blocks.future_keys(st.pos, self._arange, window)  # one mask for every attention layer
        for i, kind in enumerate(self.kinds):
            a = self._dargs[i]
            if kind == MAMBA and self.setup.fused_step:  # (norm32, eps, in_w, out_w, *mixer arguments)
                h, zx = fns["mamba_in"](h, pending, *a[:3], how("in_proj"))
                pending = fns["mamba_out"](mamba_step.mamba_step(zx, *a[4:]), a[3], how("out_proj"))
            elif kind == MAMBA:
                h, pending = fns["mamba"](h, pending, *a, how("in_proj"), how("out_proj"))
            elif kind == MLP:
                h, pending = fns["mlp"](h, pending, *a, how("up"), how("down"))
            else:
                o_w, scaling = self._dout[i]
                h, q, k, v = fns["qkv"](h, pending, *a, how("qkv"))
                o = blocks.attend(q, k, v, st.k[i], st.v[i], st.pos, future, window, scaling)
                pending = fns["out"](o, o_w, how("o_proj"))
        self.logits.copy_(fns["head"](h, pending, *self._head_args, how("lm_head")))
        st.pos.add_(1)

    def step(self) -> torch.Tensor:
        """Decode one token: consume ``token``, write ``logits`` ``[B, vocab]`` float32 (returned; overwritten by
        the next step); the caller writes the next token into ``token`` before the next call. Replays the window's
        graph, or runs eagerly and records it on the window's first use (:meth:`_run`)."""
        st = self.state
        window = st.window(st.length)
        self._run((window,), self._step_body, window)
        st.length += 1
        return self.logits

    def _segment(self, k: int, rows: int) -> None:
        """Segment ``k`` over ``rows`` rows of the pad buffers: its blocks, the next attention block's add + norm
        into ``_pbuf_x`` (or the final add), the stream into ``_pbuf_h``; one graph per ``(k, rows)`` serves."""
        blks, attn = self._segs[k]
        h = self._pbuf_h[:, :rows]
        pending = None if k == 0 else self._pbuf_p[:, :rows]
        for i in blks:
            x, h = prefill.add_rms_norm(pending, h, self._norms[i], self._args[i][1])
            if self.kinds[i] == MAMBA:
                m = self.layers[i].mixer  # padded rows: mamba_chunk reads the real length from the device
                pending = blocks.mamba_chunk(x, *self._args[i][2:], length=self._n_real,
                                             chunk_size=m.chunk_size, dt_limit=m.time_step_limit)
            else:
                pending = blocks.project(prefill.relu_square_(blocks.project(x, self._args[i][2])), self._args[i][3])
        if attn is not None:
            x, h = prefill.add_rms_norm(pending, h, self._norms[attn], self._args[attn][1])
            self._pbuf_x[:, :rows].copy_(x)
        elif pending is not None:
            h = h + pending
        if h.data_ptr() != self._pbuf_h.data_ptr():
            self._pbuf_h[:, :rows].copy_(h)

    def _forward_chunk(self, h: torch.Tensor, start: int) -> torch.Tensor:
        """Every block over a chunk ``h [B, T, H]`` at ``[start, start + T)``, padded: segments by :meth:`_run`
        (replayed, or run and recorded on a padded length's first use), attention on the real rows. Returns the
        stream before ``norm_f`` (a buffer view)."""
        t = int(h.shape[1])
        bucketed = min(self.chunk, -(-t // self.prefill_bucket) * self.prefill_bucket)
        rows = next((r for r in self.short_rows if r >= t), bucketed)
        self._pbuf_h[:, :t].copy_(h)
        self._pbuf_h[:, t:rows].zero_()
        self._n_real.fill_(t)
        for k, (_blks, attn) in enumerate(self._segs):
            self._run((k, rows), self._segment, k, rows)
            if attn is not None:
                st, (o_w, scaling) = self.state, self._out[attn]
                out = blocks.attention_chunk(self._pbuf_x[:, :t], *self._args[attn][2:], k_cache=st.k[attn],
                                             v_cache=st.v[attn], start=start, o_w=o_w, scaling=scaling)
                self._pbuf_p[:, :t].copy_(out)
        return self._pbuf_h[:, :t]

    def prefill(self, inputs_embeds: Embeddings, keys: Sequence[int] | None = None, *,
                snapshot_at: Sequence[int] = (), embeds_offset: int = 0) -> tuple[torch.Tensor, PrefillReport]:
        """Run a prompt into the state, resuming where ``keys`` allow, and return the last position's logits.

        Args: ``inputs_embeds`` ``[B, T - embeds_offset, H]`` embeddings of tokens ``[embeds_offset, T)``
        (model dtype; :class:`Embeddings`); ``keys`` one int per prompt token identifying its content (None:
        cold), the common prefix with the previous prompt from the latest snapshot inside it;
        ``snapshot_at`` positions after which to keep the Mamba state (those past the resume point are saved,
        each a chunk boundary; when the slots are full, a snapshot at a position not listed is replaced first);
        ``embeds_offset`` the first token embedded, at most the resume point.
        Returns: (logits ``[B, vocab]`` float32 of the last prompt token, :class:`PrefillReport`).
        Raises: ValueError: ``keys`` and the prompt differ in length, the prompt does not fit ``max_len``, or
        ``embeds_offset`` is past the resume point.
        """
        import torch  # lazy: torch (optional, heavy)

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
        kept = {int(p) for p in snapshot_at}  # snapshots this prompt asks for, older ones included
        wanted = sorted({p for p in kept if resume < p <= total}) if st.snapshot_slots else []
        cuts = sorted({*range(resume, total, self.chunk), total, *wanted})
        with torch.no_grad():
            for a, b in itertools.pairwise(cuts):
                h = self._forward_chunk(inputs_embeds[:, a - embeds_offset : b - embeds_offset], a)
                if b in wanted:
                    st.snapshot(b, keep=kept)
            logits = self.lm.lm_head(self.lm.model.norm_f(h[:, -1:])).float()[:, -1]
        st.length, st.keys = total, new_keys
        st.pos.fill_(total)
        return logits, PrefillReport(total, resume, total - resume, len(cuts) - 1, wanted)

    def extend(self, tokens: Sequence[int]) -> torch.Tensor:
        """Feed several tokens in one pass after the current state (jump-forward decoding): the prefill's
        chunk path (:meth:`_forward_chunk`: a few tokens padded to 8 or 16 rows, split at ``chunk``) from
        the conv/SSM state and KV cache the decode steps left, then the decode step's head
        (:func:`.blocks.head`) on the last row. ``length``/``pos`` advance by ``len(tokens)``; the prompt's
        keys and snapshots are left as they are (the next prompt resumes from a snapshot).

        Args:
            tokens: one or more token ids.
        Returns:
            logits ``[B, vocab]`` float32 after the last token (a new tensor).
        Raises:
            ValueError: no tokens, or the state would then hold more than ``max_len - 1`` tokens.
        """
        import torch  # lazy: torch (optional, heavy)

        st, n = self.state, len(tokens)
        if n == 0 or st.length + n + 1 > self.max_len:
            raise ValueError(f"{n} token(s) after {st.length} do not fit the static cache of {self.max_len}")
        with torch.no_grad():
            ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
            embeds = self.lm.model.embeddings(ids)
            for a in range(0, n, self.chunk):
                h = self._forward_chunk(embeds[:, a : a + self.chunk], st.length + a)
            logits = blocks.head(h[:, -1].contiguous(), None, *self._head_args)
        st.length += n
        st.pos.fill_(st.length)
        return logits

    def nbytes(self) -> int:
        """Bytes of preallocated state and buffers (the graphs' pool is not counted)."""
        extra = (self.token, self.logits, self._pbuf_h, self._pbuf_p, self._pbuf_x)
        return self.state.nbytes() + sum(t.numel() * t.element_size() for t in extra)

    def lazy_summary(self, start: int = 0, stop: int | None = None) -> dict[str, Any]:
        """Entries ``[start:stop]`` of :attr:`lazy_captures`: ``{"count": graphs, "seconds": wall seconds spent
        recording them (rounded to ms), "graphs": their keys}``."""
        done = self.lazy_captures[start:stop]
        return {"count": len(done), "seconds": round(sum(s for _key, s in done), 3),
                "graphs": [list(key) for key, _s in done]}

    def describe(self) -> dict[str, Any]:
        """What runs (for logs, doctor and the bench), with the fallbacks in ``notes``; ``capture_seconds``
        is :meth:`capture` at load, ``lazy_captures`` the graphs recorded on first use since
        (:meth:`lazy_summary`)."""
        why = prefill.fused_available(self.device)
        kernels = "Triton causal conv1d + relu^2, mamba-ssm (gated) RMSNorm" if why is None else f"torch ({why})"
        return {"decoder": "static", "eager": self.eager, "max_len": self.max_len, "state_bytes": self.nbytes(),
                "decode": self.setup.label() + ("" if self.plain or self.setup.quant_kernels() else
                                                " (projection modules are called as they are, so the blocks are "
                                                "not compiled)"),
                "gemv": {role: how.label() for role, how in self.setup.gemv.items()},
                "gemv_kept": sorted(role for role, how in self.setup.gemv.items() if how.kept),
                "decode_graphs": sorted(k[0] for k in self.graphs if len(k) == 1),
                "prefill": f"{kernels}; chunks of {self.chunk} padded to multiples of {self.prefill_bucket} rows "
                           f"(shorter passes to {self.short_rows}); "
                           f"{sum(len(k) == 2 for k in self.graphs)} segment graphs (recorded on first use)",
                "capture_seconds": {k: round(v, 2) for k, v in self.capture_seconds.items()},
                "lazy_captures": self.lazy_summary(),
                "ahead_captures": {"count": sum(s is not None for s in self.recorded_ahead.values()),
                                   "seconds": round(sum(s or 0.0 for s in self.recorded_ahead.values()), 3),
                                   "failed": [list(k) for k, s in self.recorded_ahead.items() if s is None],
                                   "pending": len(self.pending_graphs())},
                "notes": list(self.notes)}


# Embeddings, PrefillReport and fused_qkv_weight are re-exported
__all__ = ["Embeddings", "PrefillReport", "Setup", "StaticDecoder", "fused_qkv_weight"]
