"""StaticDecoder and DecoderState against stock transformers NemotronH on a tiny fp32 model.

The CPU tests run the decoder users run (the padded chunked prefill and the per-block decode functions),
eagerly; the GPU tests add torch.compile and CUDA graphs and compare them with the eager path.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers.models.nemotron_h")

from transformers import NemotronHConfig, NemotronHForCausalLM  # noqa: E402

from holodesk.policy.holotron import decoder as decoder_module  # noqa: E402
from holodesk.policy.holotron.decoder import Setup, StaticDecoder, fused_qkv_weight  # noqa: E402
from holodesk.policy.holotron.ops.gemv import Gemv  # noqa: E402
from holodesk.policy.holotron.state import DecoderState  # noqa: E402

PATTERN = "M*-M-M*-"  # Mamba-2, attention and MLP blocks; attention at blocks 1 and 6
VOCAB = 256
STEPS = 40
ATTENTION_BLOCKS = (1, 6)


def tiny_lm(seed: int = 0, dtype: torch.dtype = torch.float32, device: str = "cpu") -> NemotronHForCausalLM:
    """A random ``NemotronHForCausalLM`` with every block kind; larger residual branches, SSM inputs and
    steps, so that every block and the carried SSM state (any error in padding) move the logits."""
    torch.manual_seed(seed)
    cfg = NemotronHConfig(
        vocab_size=VOCAB, hidden_size=64, hybrid_override_pattern=PATTERN,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=16, conv_kernel=4, chunk_size=16,
        intermediate_size=128, mlp_hidden_act="relu2", layer_norm_epsilon=1e-5, use_bias=False, use_conv_bias=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    lm = NemotronHForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if name.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight")):
                p.mul_(3)
            if name.endswith("in_proj.weight"):
                p.mul_(4)
            if name.endswith("dt_bias"):
                p.fill_(0.5)
    return lm.to(device=device, dtype=dtype)


def fuse_qkv_by_hand(lm: NemotronHForCausalLM) -> None:
    """Lay each attention layer's q/k/v weights out as adjacent rows of one buffer, as the loader does."""
    with torch.no_grad():
        for i in ATTENTION_BLOCKS:
            m = lm.model.layers[i].mixer
            projs = (m.q_proj, m.k_proj, m.v_proj)
            fused = torch.cat([p.weight.detach() for p in projs])
            start = 0
            for p in projs:
                rows = p.weight.shape[0]
                p.weight = torch.nn.Parameter(fused[start : start + rows], requires_grad=False)
                start += rows


def prompt(n: int, seed: int, device: str = "cpu") -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, n), generator=gen).to(device)  # no pad/bos/eos ids


def embed(lm: NemotronHForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return lm.model.embeddings(ids)


def static_greedy(d: StaticDecoder, lm: NemotronHForCausalLM, ids: torch.Tensor, *, keys: bool = False,
                  snapshot_at: tuple[int, ...] = ()) -> tuple[list[int], torch.Tensor]:
    logits, _ = d.prefill(embed(lm, ids), ids[0].tolist() if keys else None, snapshot_at=snapshot_at)
    d.token.copy_(logits.argmax(-1, keepdim=True))
    tokens, all_logits = [int(d.token)], [logits.clone()]
    for _ in range(STEPS - 1):
        d.step()
        d.token.copy_(d.logits.argmax(-1, keepdim=True))
        tokens.append(int(d.token))
        all_logits.append(d.logits.clone())
    return tokens, torch.cat(all_logits)


def stock_greedy(lm: NemotronHForCausalLM, ids: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    with torch.no_grad():
        out = lm.generate(ids, max_new_tokens=STEPS, do_sample=False, output_logits=True,
                          return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
    return out.sequences[0, ids.shape[1]:].tolist(), torch.stack(out.logits, 1)[0]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12))


@pytest.mark.parametrize(("chunk", "prefill_bucket"), [(64, 64), (16, 8), (20, 5)])
def test_greedy_decoding_equals_stock_generate(chunk: int, prefill_bucket: int) -> None:
    lm = tiny_lm()
    ids = prompt(57, seed=1)
    ref_tokens, ref_logits = stock_greedy(lm, ids)
    d = StaticDecoder(lm, max_len=128, bucket=32, chunk=chunk, prefill_bucket=prefill_bucket)
    assert d.eager and d.describe()["decode_graphs"] == []  # CPU: eager by necessity, the same code
    tokens, logits = static_greedy(d, lm, ids)
    assert tokens == ref_tokens
    assert rel(logits, ref_logits) < 1e-5
    assert d.state.length == 57 + STEPS - 1


def test_padded_prefill_state_equals_the_stock_forward() -> None:
    """Chunks cut at 1-3 tokens and padded to 8 rows give the conv, SSM and KV state and the logits of one
    unpadded stock forward over the whole prompt."""
    lm = tiny_lm(seed=7)
    ids = prompt(61, seed=4)
    with torch.no_grad():
        out = lm(ids, use_cache=True)
    cache = out.past_key_values
    d = StaticDecoder(lm, max_len=128, bucket=32, chunk=16, prefill_bucket=8, snapshot_slots=6)
    logits, report = d.prefill(embed(lm, ids), ids[0].tolist(), snapshot_at=(1, 3, 17, 18, 33, 36))
    assert report.chunks == 10 and report.snapshots == [1, 3, 17, 18, 33, 36]
    assert rel(logits, out.logits[:, -1]) < 1e-5
    for i, conv in d.state.conv.items():
        assert rel(conv, cache.get_conv_state(i)) < 1e-6
        assert rel(d.state.ssm[i], cache.get_recurrent_state(i)) < 1e-5
    for i in ATTENTION_BLOCKS:
        assert rel(d.state.k[i][:, :, :61], cache.layers[i].keys) < 1e-6
        assert rel(d.state.v[i][:, :, :61], cache.layers[i].values) < 1e-6


def test_resume_from_a_snapshot_equals_a_cold_prefill() -> None:
    lm = tiny_lm(seed=2)
    first = prompt(40, seed=7)
    second = torch.cat([first, prompt(25, seed=8)], dim=1)
    d = StaticDecoder(lm, max_len=160, bucket=32, chunk=16, prefill_bucket=8)
    static_greedy(d, lm, first, keys=True, snapshot_at=(40,))
    logits, report = d.prefill(embed(lm, second), second[0].tolist(), snapshot_at=(65,))
    assert (report.reused, report.computed) == (40, 25)
    cold = StaticDecoder(lm, max_len=160, bucket=32, chunk=16, prefill_bucket=8)
    ref, _ = cold.prefill(embed(lm, second), None)
    assert rel(logits, ref) < 1e-5
    # and decoding on from the resumed state equals decoding from the cold one
    assert static_greedy(d, lm, second, keys=True)[0] == static_greedy(cold, lm, second)[0]


def test_changed_prefix_rebuilds_from_an_earlier_snapshot() -> None:
    lm = tiny_lm(seed=4)
    base = prompt(60, seed=9)
    d = StaticDecoder(lm, max_len=160, bucket=32, chunk=16, prefill_bucket=8, snapshot_slots=3)
    d.prefill(embed(lm, base), base[0].tolist(), snapshot_at=(20, 45, 60))
    changed = base.clone()
    changed[0, 30:38] = prompt(8, seed=10)[0]  # e.g. an old screenshot dropped out of the window
    logits, report = d.prefill(embed(lm, changed), changed[0].tolist())
    assert report.reused == 20 and sorted(d.state.snapshots) == [20]
    ref, _ = StaticDecoder(lm, max_len=160, bucket=32, chunk=16, prefill_bucket=8).prefill(embed(lm, changed))
    assert rel(logits, ref) < 1e-5


def test_tail_embeddings_snapshot_cap_and_refusals() -> None:
    lm = tiny_lm(seed=6)
    first = prompt(48, seed=11)
    second = torch.cat([first, prompt(20, seed=12)], dim=1)
    d = StaticDecoder(lm, max_len=160, bucket=32, chunk=16, prefill_bucket=8, snapshot_slots=2)
    before = d.nbytes()
    d.prefill(embed(lm, first), first[0].tolist(), snapshot_at=(10, 20, 30, 40, 48))
    assert d.nbytes() == before  # snapshots go into preallocated slots
    assert sorted(d.state.snapshots) == [40, 48]
    resume = d.state.resume_point(second[0].tolist())
    assert resume == 48
    tail = embed(lm, second[:, resume:])
    logits, report = d.prefill(tail, second[0].tolist(), embeds_offset=resume)
    assert (report.reused, report.computed) == (48, 20)
    ref, _ = StaticDecoder(lm, max_len=160, bucket=32, chunk=16, prefill_bucket=8).prefill(embed(lm, second))
    assert rel(logits, ref) < 1e-5
    d.state.reset()
    with pytest.raises(ValueError, match="resumes at 0"):  # embeddings that start after the resume point
        d.prefill(tail, second[0].tolist(), embeds_offset=resume)
    with pytest.raises(ValueError, match="does not fit"):
        d.prefill(embed(lm, prompt(160, seed=1)))
    with pytest.raises(ValueError, match="keys"):
        d.prefill(embed(lm, first), [1, 2, 3])
    with pytest.raises(ValueError, match="prefill_bucket"):
        StaticDecoder(lm, max_len=64, bucket=32, chunk=16, prefill_bucket=5)


def _interleaved(d: StaticDecoder, lm: NemotronHForCausalLM, ids: torch.Tensor, runs: list[int], *,
                 jump: bool, chosen: list[int] | None = None) -> tuple[list[int], torch.Tensor]:
    """Prefill ``ids``, then per entry ``n`` of ``runs`` feed the greedy token (or the next of ``chosen``)
    followed by ``n`` further tokens (a forced run: ``(greedy + 1 + i) % VOCAB``). ``jump``: each run is one
    :meth:`StaticDecoder.extend`; else one :meth:`StaticDecoder.step` per token. Returns the tokens chosen
    and the logits read (one row per run)."""
    logits, _ = d.prefill(embed(lm, ids), ids[0].tolist())
    tokens, rows = [], []
    for j, n in enumerate(runs):
        greedy = int(logits.argmax(-1)) if chosen is None else chosen[j]
        fed = [greedy, *[(greedy + 1 + i) % VOCAB for i in range(n)]]
        tokens.append(greedy)
        if jump:
            logits = d.extend(fed)
        else:
            for token in fed:
                d.token.fill_(token)
                logits = d.step()
        rows.append(logits.clone())
    return tokens, torch.cat(rows)


@pytest.mark.parametrize(("chunk", "prefill_bucket"), [(64, 64), (16, 8), (20, 5)])
def test_extend_equals_one_step_per_token(chunk: int, prefill_bucket: int) -> None:
    """Jump-forward's multi-token pass from the decode state (KV cache, conv and SSM state the steps left)
    gives the logits and state of one decode step per token: runs of 1 to 41 tokens, shorter and longer
    than a padded bucket and than a chunk (cut into several), alternating with single steps; with
    ``prefill_bucket`` 64 the short passes are padded to 8, 16 and 32 rows."""
    lm = tiny_lm(seed=3)
    ids = prompt(37, seed=5)
    runs = [0, 3, 1, 0, 9, 41, 2, 17, 0, 6]
    kw = {"max_len": 256, "bucket": 32, "chunk": chunk, "prefill_bucket": prefill_bucket}
    fast, ref = StaticDecoder(lm, **kw), StaticDecoder(lm, **kw)
    got_tokens, got = _interleaved(fast, lm, ids, runs, jump=True)
    want_tokens, want = _interleaved(ref, lm, ids, runs, jump=False)
    assert got_tokens == want_tokens
    assert rel(got, want) < 1e-5, rel(got, want)
    assert fast.state.length == ref.state.length == 37 + len(runs) + sum(runs)
    assert int(fast.state.pos) == fast.state.length
    for i in fast.state.conv:
        assert rel(fast.state.conv[i], ref.state.conv[i]) < 1e-5
        assert rel(fast.state.ssm[i], ref.state.ssm[i]) < 1e-5
    end = fast.state.length
    for i in ATTENTION_BLOCKS:
        assert rel(fast.state.k[i][:, :, :end], ref.state.k[i][:, :, :end]) < 1e-5
        assert rel(fast.state.v[i][:, :, :end], ref.state.v[i][:, :, :end]) < 1e-5
    # a decode step after the last run (the graph-free step reads the state extend left)
    nxt = int(got[-1].argmax())
    assert nxt == int(want[-1].argmax())
    for d in (fast, ref):
        d.token.fill_(nxt)
    after_fast, after_ref = fast.step().clone(), ref.step().clone()
    assert rel(after_fast, after_ref) < 1e-5


def test_extend_refuses_what_does_not_fit() -> None:
    lm = tiny_lm(seed=3)
    d = StaticDecoder(lm, max_len=64, bucket=32, chunk=16, prefill_bucket=8)
    ids = prompt(50, seed=5)
    d.prefill(embed(lm, ids), ids[0].tolist())
    with pytest.raises(ValueError, match="do not fit"):
        d.extend(list(range(3, 17)))  # 50 + 14 + 1 > 64
    with pytest.raises(ValueError, match="do not fit"):
        d.extend([])
    assert d.state.length == 50
    d.extend(list(range(3, 16)))  # 50 + 13 + 1 == 64: fits
    assert d.state.length == 63


def test_decoder_state_bookkeeping() -> None:
    lm = tiny_lm(seed=1)
    st = DecoderState(lm, max_len=70, bucket=32, snapshot_slots=2)
    assert st.max_len == 96 and (st.window(0), st.window(31), st.window(32)) == (32, 32, 64)
    with pytest.raises(ValueError):
        st.window(96)
    kv = 2 * 2 * (1 * 2 * 96 * 16 * 4)  # two attention layers, k and v, fp32
    mamba = 3 * (192 * 4 * 4 + 8 * 16 * 16 * 4)  # three Mamba layers, conv + ssm
    assert st.nbytes() == kv + 3 * mamba + 8  # state + two snapshot slots + pos
    st.keys = [5, 6, 7, 8, 9]
    st.ssm[0].fill_(1.0)
    st.snapshot(2)
    st.ssm[0].fill_(2.0)
    st.snapshot(4)
    st.ssm[0].fill_(3.0)
    st.snapshot(5)  # no free slot: replaces the oldest (2)
    assert sorted(st.snapshots) == [4, 5]
    assert st.resume_point([5, 6, 7, 8, 9, 10]) == 5
    assert st.resume_point([5, 6, 7, 8, 9]) == 4  # the last token must run to give logits
    assert st.resume_point([5, 6, 7, 0, 9, 10]) == 0
    st.restore(4)
    assert float(st.ssm[0][0, 0, 0, 0]) == 2.0 and sorted(st.snapshots) == [4]
    with pytest.raises(KeyError):
        st.restore(5)
    st.restore(0)
    assert float(st.ssm[0].abs().sum()) == 0.0 and st.snapshots == {} and st.keys == []


def _fingerprint(lm: NemotronHForCausalLM) -> list[tuple[str, int, float]]:
    return [(n, p.data_ptr(), float(p.detach().double().sum())) for n, p in lm.named_parameters()]


def test_fused_qkv_layout_is_used_and_the_model_stays_stock() -> None:
    lm = tiny_lm(seed=8)
    ids = prompt(38, seed=13)
    ref_tokens, ref_logits = stock_greedy(lm, ids)
    for i in ATTENTION_BLOCKS:
        assert fused_qkv_weight(lm.model.layers[i].mixer) is None  # separately allocated weights
    fuse_qkv_by_hand(lm)
    m = lm.model.layers[1].mixer
    fused = fused_qkv_weight(m)
    assert fused is not None and fused.shape == (64 + 2 * 32, 64)
    assert torch.equal(fused[64:96], m.k_proj.weight) and fused.data_ptr() == m.q_proj.weight.data_ptr()
    before = _fingerprint(lm)
    d = StaticDecoder(lm, max_len=128, bucket=32, chunk=16, prefill_bucket=8)
    assert all(d._args[i][3] is None for i in ATTENTION_BLOCKS)  # one fused product per attention block
    tokens, logits = static_greedy(d, lm, ids)
    assert tokens == ref_tokens and rel(logits, ref_logits) < 1e-5
    assert _fingerprint(lm) == before  # no weight replaced or changed
    assert not any("forward" in vars(mod) for mod in lm.modules())  # no module patched
    assert stock_greedy(lm, ids)[0] == ref_tokens


class ModuleLinear(torch.nn.Linear):
    """A projection the decoder must call as a module (as it does bitsandbytes' quantised layers)."""


def test_projection_modules_are_called_as_modules() -> None:
    lm = tiny_lm(seed=9)
    ids = prompt(30, seed=14)
    ref_tokens, ref_logits = stock_greedy(lm, ids)
    for layer in lm.model.layers:
        for name in ("in_proj", "up_proj", "k_proj"):
            old = getattr(layer.mixer, name, None)
            if old is not None:
                new = ModuleLinear(old.in_features, old.out_features, bias=False)
                new.weight = old.weight
                setattr(layer.mixer, name, new)
    d = StaticDecoder(lm, max_len=128, bucket=32, chunk=16, prefill_bucket=8)
    assert not d.plain and "not compiled" in d.describe()["decode"]
    tokens, logits = static_greedy(d, lm, ids)
    assert tokens == ref_tokens and rel(logits, ref_logits) < 1e-5


# ---------------------------------------------------------------- load-time fallbacks (forced, CPU)
class FakeGraph:
    """Stands in for a CUDA graph on the CPU (no CUDA capture here): records the body and its arguments
    without running them; ``replay()`` runs the body eagerly and counts the replays."""

    def __init__(self, body: object, args: tuple[int, ...]) -> None:
        self.body, self.args, self.replays = body, args, 0

    def replay(self) -> None:
        self.replays += 1
        with torch.no_grad():
            self.body(*self.args)  # type: ignore[operator]


def _fake_capture(monkeypatch: pytest.MonkeyPatch, fails: object = lambda body, args: False) -> list[tuple[int, ...]]:
    """Replace the CUDA parts of recording a graph by fakes: the capture stream by no stream, the capture by
    a :class:`FakeGraph` (or a RuntimeError while ``fails(body, args)``), a recording thread's preparation by
    nothing. Returns the ``args`` of every recording attempt, in order."""
    attempts: list[tuple[int, ...]] = []

    def record(self: StaticDecoder, body: object, *args: int) -> FakeGraph:
        attempts.append(args)
        if fails(body, args):  # type: ignore[operator]
            raise RuntimeError("forced recording failure")
        return FakeGraph(body, args)

    monkeypatch.setattr(StaticDecoder, "_capture_stream", lambda self: contextlib.nullcontext())
    monkeypatch.setattr(StaticDecoder, "_record", record)
    monkeypatch.setattr(StaticDecoder, "prepare_thread", lambda self: None)
    return attempts


def _forced(monkeypatch: pytest.MonkeyPatch, start: Setup, fails: object) -> StaticDecoder:
    """A decoder whose decode capture raises while ``fails(setup)`` (a fake of the CUDA capture, which
    cannot run here) and whose prefill capture succeeds, started from ``start`` as on a GPU; graphs
    recorded on first use afterwards are :class:`FakeGraph` s."""
    lm = tiny_lm(seed=3)
    _fake_capture(monkeypatch)

    def capture_decode(self: StaticDecoder, windows: list[int]) -> None:
        if fails(self.setup):  # type: ignore[operator]
            raise RuntimeError("forced capture failure")

    monkeypatch.setattr(StaticDecoder, "_capture_decode", capture_decode)
    monkeypatch.setattr(StaticDecoder, "_capture_prefill", lambda self: None)
    d = StaticDecoder(lm, max_len=128, bucket=32, chunk=16, prefill_bucket=8)
    d.eager = False
    d._apply(start)  # as __init__ does on a GPU (compiling is lazy: nothing is compiled here)
    return d


def _still_decodes(d: StaticDecoder) -> None:
    ids = prompt(33, seed=15)
    assert static_greedy(d, d.lm, ids)[0] == stock_greedy(d.lm, ids)[0]


def test_failing_gemv_kernels_fall_back_to_f_linear(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    triton = {"lm_head": Gemv("triton", 8, 512, 4), "up": Gemv()}
    d = _forced(monkeypatch, Setup(compiled=False, gemv=triton, graphs=True), lambda s: bool(s.gemv))
    with caplog.at_level(logging.WARNING, logger=decoder_module.__name__):
        d.capture()
    assert d.setup == Setup(compiled=False, gemv={}, graphs=True)
    assert len(d.notes) == 1 and "chosen matrix-vector kernels, CUDA graphs failed at load" in d.notes[0]
    assert "using plain torch blocks, F.linear, CUDA graphs" in d.notes[0]
    assert d.notes[0] in caplog.text and d.describe()["notes"] == d.notes
    _still_decodes(d)


def test_mamba_step_path_decodes_as_stock(monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``fused_step`` a Mamba-2 block runs as ``mamba_in``, :func:`.ops.mamba_step.mamba_step` and its
    ``out_proj``; on CPU tensors the step takes its torch reference, so the greedy tokens are stock's (the
    kernels themselves: test_ops_mamba_step.py)."""
    d = _forced(monkeypatch, Setup(compiled=False, gemv={}, graphs=True, fused_step=True), lambda s: False)
    d.capture()
    assert d.setup.fused_step and d.notes == []
    assert d.describe()["decode"] == "plain torch blocks, F.linear, Mamba-2 step kernels, CUDA graphs"
    _still_decodes(d)


@pytest.mark.parametrize("fused_step", [True, False], ids=["mamba-step-kernels", "block-maths"])
def test_each_decode_function_sees_one_signature_per_model(monkeypatch: pytest.MonkeyPatch, fused_step: bool) -> None:
    """Compiled with ``dynamic=False``, a decode function compiles again for every new shape or dtype it is called
    with, and torch counts these per function (8 at most in a process: on the GPU, ``attn_out`` called for both
    the attention and the Mamba output projections hit that limit in the test session and decode fell back).
    Here every function of a step is wrapped to record the shapes and dtypes of its tensor arguments over
    several steps and windows: one signature each."""
    d = _forced(monkeypatch, Setup(compiled=False, gemv={}, graphs=True, fused_step=fused_step), lambda s: False)
    d.capture()
    seen: dict[str, set[tuple[object, ...]]] = {}

    def recording(name: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            seen.setdefault(name, set()).add(tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else
                                                   type(a).__name__ for a in args))
            return fn(*args)
        return call

    d._fns = {name: recording(name, fn) for name, fn in d._fns.items()}
    _still_decodes(d)
    assert seen and all(len(sigs) == 1 for sigs in seen.values()), seen
    used = {"mamba_in", "mamba_out"} if fused_step else {"mamba"}
    assert used <= seen.keys() and {"mlp", "qkv", "out", "head"} <= seen.keys()


def test_failing_mamba_step_kernels_fall_back_to_the_blocks_maths(monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    d = _forced(monkeypatch, Setup(compiled=False, gemv={}, graphs=True, fused_step=True), lambda s: s.fused_step)
    with caplog.at_level(logging.WARNING, logger=decoder_module.__name__):
        d.capture()
    assert d.setup == Setup(compiled=False, gemv={}, graphs=True)
    assert len(d.notes) == 1 and "F.linear, Mamba-2 step kernels, CUDA graphs failed at load" in d.notes[0]
    assert d.notes[0].endswith("using plain torch blocks, F.linear, CUDA graphs") and d.notes[0] in caplog.text
    _still_decodes(d)


def test_failing_compile_falls_back_to_plain_torch(monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    d = _forced(monkeypatch, Setup(compiled=True, gemv={}, graphs=True), lambda s: s.compiled)
    with caplog.at_level(logging.WARNING, logger=decoder_module.__name__):
        d.capture()
    assert d.setup == Setup(compiled=False, gemv={}, graphs=True)
    assert len(d.notes) == 1 and d.notes[0].startswith("decode with compiled blocks") and d.notes[0] in caplog.text
    _still_decodes(d)


def test_failing_capture_falls_back_to_eager_decode(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    d = _forced(monkeypatch, Setup(compiled=True, gemv={"qkv": Gemv("triton", 4, 512, 4)}, graphs=True),
                lambda s: True)
    with caplog.at_level(logging.WARNING, logger=decoder_module.__name__):
        d.capture()
    assert d.setup == Setup(compiled=False, gemv={}, graphs=False)
    assert len(d.notes) == 3 and d.notes[-1].endswith("using plain torch blocks, F.linear, eager")
    assert all(note in caplog.text for note in d.notes)
    assert d.describe()["decode"] == "plain torch blocks, F.linear, eager"
    _still_decodes(d)


def test_failing_prefill_graphs_leave_prefill_eager(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    d = _forced(monkeypatch, Setup(compiled=False, gemv={}, graphs=True), lambda s: False)

    def broken(self: StaticDecoder) -> None:
        self.graphs[(0, 8)] = "a graph captured before the failure"  # type: ignore[assignment]
        raise RuntimeError("forced prefill capture failure")

    monkeypatch.setattr(StaticDecoder, "_capture_prefill", broken)
    with caplog.at_level(logging.WARNING, logger=decoder_module.__name__):
        d.capture()
    assert d.graphs == {} and len(d.notes) == 1 and "capturing the prefill graphs failed at load" in d.notes[0]
    assert d.notes[0] in caplog.text and "0 segment graphs" in d.describe()["prefill"]
    _still_decodes(d)


def test_eager_capture_does_nothing() -> None:
    d = StaticDecoder(tiny_lm(seed=3), max_len=64, bucket=32, chunk=16, prefill_bucket=8, eager=True)
    d.capture()
    assert d.graphs == {} and d.notes == [] and d.setup == Setup(compiled=False, gemv={}, graphs=False)
    assert d.describe()["capture_seconds"] == {}


def test_capture_times_the_decode_and_the_prefill_graphs_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    d = _forced(monkeypatch, Setup(compiled=False, gemv={}, graphs=True), lambda s: False)
    d.capture()
    seconds = d.describe()["capture_seconds"]
    assert set(seconds) == {"decode", "prefill"} and all(v >= 0 for v in seconds.values())


# ---------------------------------------------------------------- graphs recorded on first use (fakes, CPU)
LAZY = {"max_len": 256, "bucket": 32, "chunk": 64, "prefill_bucket": 32}  # short passes padded to 8 or 16 rows
LAZY_RUNS = [0, 0, 0, 3, 0, 0, 9, 0, 20, 0, 0, 0, 0]
"""Per entry: a decode step (0) or a jump-forward pass of the greedy token and ``n`` forced ones. After a
90-token prompt (a 64-row chunk, then 26 tokens padded to 32 rows): windows 96, 128 and 160, passes of 4,
10 and 21 tokens padded to 8, 16 and 32 rows."""
LAZY_NEW = {(96,), (128,), (160,)} | {(k, rows) for k in range(3) for rows in (8, 16, 32)}
"""The graphs the session records on first use ("M*-M-M*-" has 3 segments); capture() recorded window 32
and the 64-row chunk."""


def _session(d: StaticDecoder, lm: NemotronHForCausalLM, ids: torch.Tensor, runs: list[int], *,
             chosen: list[int] | None = None) -> tuple[list[int], torch.Tensor]:
    """Prefill ``ids``; then per entry ``n`` of ``runs`` take the greedy token (or the next of ``chosen``) and
    feed it by one decode step when ``n`` is 0, else by one :meth:`StaticDecoder.extend` with ``n`` forced
    tokens after it (``(token + 1 + i) % VOCAB``). Returns the tokens taken and the logits read (the
    prefill's, then one row per entry)."""
    logits, _ = d.prefill(embed(lm, ids), ids[0].tolist())
    tokens, rows = [], [logits.clone()]
    for j, n in enumerate(runs):
        token = int(logits.argmax(-1)) if chosen is None else chosen[j]
        tokens.append(token)
        if n == 0:
            d.token.fill_(token)
            logits = d.step()
        else:
            logits = d.extend([token, *[(token + 1 + i) % VOCAB for i in range(n)]])
        rows.append(logits.clone())
    return tokens, torch.cat(rows)


def _as_on_a_gpu(lm: NemotronHForCausalLM, **kw: int) -> StaticDecoder:
    """A CPU decoder set up as on a GPU (graphs on, plain torch blocks), not captured yet."""
    d = StaticDecoder(lm, **kw)
    d.eager = False
    d._apply(Setup(compiled=False, gemv={}, graphs=True))
    return d


def _same_state(a: StaticDecoder, b: StaticDecoder) -> None:
    assert a.state.length == b.state.length and int(a.state.pos) == int(b.state.pos) == a.state.length
    for i in a.state.conv:
        assert torch.equal(a.state.conv[i], b.state.conv[i]) and torch.equal(a.state.ssm[i], b.state.ssm[i])
    for i in ATTENTION_BLOCKS:
        end = a.state.length
        assert torch.equal(a.state.k[i][:, :, :end], b.state.k[i][:, :, :end])
        assert torch.equal(a.state.v[i][:, :, :end], b.state.v[i][:, :, :end])


def test_capture_records_the_given_windows_and_a_full_chunk_then_resets(monkeypatch: pytest.MonkeyPatch) -> None:
    """capture() records only the decode windows of the given lengths (clamped to the cache; the largest
    first) and every segment over a full chunk, each after an eager first use; the dummy passes leave no state."""
    attempts = _fake_capture(monkeypatch)
    d = _as_on_a_gpu(tiny_lm(seed=3), **LAZY)
    d.capture(lengths=(100, 0, 10_000))
    assert attempts == [(256,), (128,), (32,), (0, 64), (1, 64), (2, 64)]
    assert set(d.graphs) == {(256,), (128,), (32,), (0, 64), (1, 64), (2, 64)}
    assert d.lazy_captures == [] and d.notes == [] and d.describe()["lazy_captures"]["count"] == 0
    assert d.state.length == 0 and int(d.state.pos) == 0 and int(d.token) == 0
    assert all(not t.any() for t in (*d.state.conv.values(), *d.state.ssm.values(), d.logits))
    assert "3 segment graphs" in d.describe()["prefill"]


def test_shapes_first_used_in_a_session_are_recorded_once_then_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A window or padded length not captured at load runs eagerly once (its real computation: the session
    equals the eager decoder's, logits and state, bit for bit), is recorded then (once), and replayed by every
    later use; a second session replays only and gives the same."""
    attempts = _fake_capture(monkeypatch)
    lm = tiny_lm(seed=3)
    d = _as_on_a_gpu(lm, **LAZY)
    d.capture()
    at_load = set(d.graphs)
    assert at_load == {(32,), (0, 64), (1, 64), (2, 64)}
    ref = StaticDecoder(lm, **LAZY)  # eager: no graphs
    ids = prompt(90, seed=5)
    for session in range(2):
        got_tokens, got = _session(d, lm, ids, LAZY_RUNS)
        want_tokens, want = _session(ref, lm, ids, LAZY_RUNS)
        assert got_tokens == want_tokens and torch.equal(got, want), session
        _same_state(d, ref)
        assert set(d.graphs) == at_load | LAZY_NEW and len(attempts) == len(at_load | LAZY_NEW), session
        assert {key for key, _s in d.lazy_captures} == LAZY_NEW and len(d.lazy_captures) == len(LAZY_NEW)
        if session == 0:
            for graph in d.graphs.values():
                graph.replays = 0  # type: ignore[attr-defined]
        d.state.reset()
        ref.state.reset()
    assert all(d.graphs[key].replays > 0 for key in LAZY_NEW | {(0, 64)})  # type: ignore[attr-defined]
    summary = d.describe()["lazy_captures"]
    assert summary["count"] == len(LAZY_NEW) and summary["seconds"] >= 0 and len(summary["graphs"]) == len(LAZY_NEW)
    assert d.notes == [] and ref.graphs == {}


def test_a_failed_recording_leaves_the_shape_eager_noted_and_not_retried(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Recording the graph of a window or padded length on its first use fails: the step still gives the eager
    decoder's result, the shape (for prefill: every segment of that length) runs eagerly from then on, it is
    logged and noted once, and never recorded again."""
    attempts = _fake_capture(monkeypatch, lambda body, args: args in ((128,), (0, 32)))
    lm = tiny_lm(seed=3)
    d = _as_on_a_gpu(lm, **LAZY)
    d.capture()
    ref = StaticDecoder(lm, **LAZY)
    ids = prompt(90, seed=5)
    for session in range(2):
        with caplog.at_level(logging.WARNING, logger=decoder_module.__name__):
            got_tokens, got = _session(d, lm, ids, LAZY_RUNS)
        want_tokens, want = _session(ref, lm, ids, LAZY_RUNS)
        assert got_tokens == want_tokens and torch.equal(got, want), session
        _same_state(d, ref)
        d.state.reset()
        ref.state.reset()
    failed = {(128,), (0, 32), (1, 32), (2, 32)}
    assert not failed & set(d.graphs) and set(d.graphs) == {(32,), (0, 64), (1, 64), (2, 64)} | (LAZY_NEW - failed)
    assert attempts.count((128,)) == 1 and attempts.count((0, 32)) == 1 and (1, 32) not in attempts
    rows, window = d.notes  # the prompt's 26-token tail comes first
    assert window.startswith("recording the CUDA graph of decode window 128 failed on its first use (RuntimeError")
    assert rows.startswith("recording the CUDA graph of the prefill over 32 padded rows failed on its first use")
    assert all(note.endswith("it runs eagerly (kernels launched from Python) from now on") for note in d.notes)
    assert [r.getMessage() for r in caplog.records] == [f"static decoder: {note}" for note in d.notes]
    assert d.describe()["notes"] == d.notes and d.describe()["lazy_captures"]["count"] == len(LAZY_NEW - failed)


def _held(d: StaticDecoder) -> list[torch.Tensor]:
    """Copies of everything a step reads or writes: the state, ``pos``, the token, logits and pad buffers."""
    st = d.state
    return [t.clone() for t in (*st.conv.values(), *st.ssm.values(), *st.k.values(), *st.v.values(), st.pos, d.token,
                                d.logits, d._pbuf_h, d._pbuf_p, d._pbuf_x, d._n_real)]


def test_graphs_recorded_ahead_run_nothing_and_spare_the_session_first_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    """pending_graphs() lists what a session may still record (every segment over each padded length, then every
    decode window, without capture()'s); record_ahead() records each without running anything (a session in
    progress keeps its state, bit for bit), and a session after it replays them, records nothing on first use
    and equals the eager decoder's."""
    attempts = _fake_capture(monkeypatch)
    lm = tiny_lm(seed=3)
    d = _as_on_a_gpu(lm, **LAZY)
    assert d.pending_graphs() == []  # before capture() nothing is recorded on first use either
    d.capture()
    pending = d.pending_graphs()
    assert pending == [(k, r) for r in (8, 16, 32) for k in range(3)] + [(w,) for w in range(64, 257, 32)]
    ids = prompt(90, seed=5)
    d.prefill(embed(lm, ids[:, :40]), ids[0, :40].tolist())  # a session in progress
    before = _held(d)
    assert all(d.record_ahead(key) for key in pending)
    assert all(torch.equal(a, b) for a, b in zip(before, _held(d), strict=True)) and d.state.length == 40
    assert d.pending_graphs() == [] and list(d.recorded_ahead) == pending
    assert d.record_ahead(pending[0]) and len(attempts) == 4 + len(pending)  # a recorded key is not recorded again
    d.state.reset()
    ref = StaticDecoder(lm, **LAZY)
    got_tokens, got = _session(d, lm, ids, LAZY_RUNS)
    want_tokens, want = _session(ref, lm, ids, LAZY_RUNS)
    assert got_tokens == want_tokens and torch.equal(got, want)
    _same_state(d, ref)
    assert d.lazy_captures == [] and len(attempts) == 4 + len(pending)
    assert all(d.graphs[key].replays > 0 for key in LAZY_NEW)  # type: ignore[attr-defined]
    info = d.describe()["ahead_captures"]
    assert info["count"] == len(pending) and info["pending"] == 0 and info["failed"] == [] and info["seconds"] >= 0
    assert d.notes == []


def test_a_graph_whose_recording_ahead_fails_is_recorded_on_its_first_use(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Recording window 128 and segment 1 over 16 rows ahead fails: each is logged once, no longer pending nor
    tried ahead again, shown in describe(); the session still equals the eager decoder's and records exactly
    those two on their first use (an eager pass, then the recording), without a note."""
    tried: set[tuple[int, ...]] = set()

    def fails(body: object, args: tuple[int, ...]) -> bool:  # each key's first recording: the one ahead
        first = args not in tried
        tried.add(args)
        return first and args in ((128,), (1, 16))

    attempts = _fake_capture(monkeypatch, fails)
    lm = tiny_lm(seed=3)
    d = _as_on_a_gpu(lm, **LAZY)
    d.capture()
    with caplog.at_level(logging.INFO, logger=decoder_module.__name__):
        done = {key: d.record_ahead(key) for key in d.pending_graphs()}
    assert [key for key, ok in done.items() if not ok] == [(1, 16), (128,)]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and "graph (128,) ahead of its first use failed (RuntimeError" in messages[1]
    assert all(m.endswith("it is recorded on its first use instead") for m in messages)
    assert d.pending_graphs() == [] and d.describe()["ahead_captures"]["failed"] == [[1, 16], [128]]
    ref = StaticDecoder(lm, **LAZY)
    ids = prompt(90, seed=5)
    got_tokens, got = _session(d, lm, ids, LAZY_RUNS)
    want_tokens, want = _session(ref, lm, ids, LAZY_RUNS)
    assert got_tokens == want_tokens and torch.equal(got, want)
    assert {key for key, _s in d.lazy_captures} == {(128,), (1, 16)} and d.notes == []
    assert attempts.count((128,)) == attempts.count((1, 16)) == 2 and set(d.graphs) >= LAZY_NEW


# ---------------------------------------------------------------- GPU: compile + graphs vs eager
def cuda(fn):  # type: ignore[no-untyped-def]
    """GPU test: marked ``gpu`` and skipped without CUDA."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")(fn))


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_graphs_and_eager_agree_and_equal_stock(dtype: torch.dtype) -> None:
    """Compiled blocks, chosen matrix-vector kernels and CUDA graphs (decode windows and prefill segments) give
    the eager decoder's prefill state and logits; in float32 also its tokens and stock generate()'s."""
    lm = tiny_lm(seed=5, dtype=dtype, device="cuda")
    fuse_qkv_by_hand(lm)
    ids = prompt(61, seed=4, device="cuda")
    before = _fingerprint(lm)
    fast = StaticDecoder(lm, max_len=128, bucket=32, chunk=16, prefill_bucket=8, snapshot_slots=2)
    fast.capture()
    eager = StaticDecoder(lm, max_len=128, bucket=32, chunk=16, prefill_bucket=8, snapshot_slots=2, eager=True)
    info = fast.describe()
    assert fast.notes == [] and info["decode"].startswith("compiled blocks") and info["decode"].endswith("graphs")
    # "M*-M-M*-": segments [M] -> attention, [- M - M] -> attention, [-]; at load window 32 and 16-row chunks
    assert info["decode_graphs"] == [32] and "3 segment graphs" in info["prefill"], info
    assert eager.describe()["decode"] == "plain torch blocks, F.linear, eager" and eager.graphs == {}
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for _ in range(2):  # replays twice: the graphs keep no state of their own
        got, _ = fast.prefill(embed(lm, ids), ids[0].tolist(), snapshot_at=(17, 36))
        want, _ = eager.prefill(embed(lm, ids), ids[0].tolist(), snapshot_at=(17, 36))
        assert rel(got, want) < tol
        for a, b in zip([*fast.state.ssm.values(), *fast.state.conv.values()],
                        [*eager.state.ssm.values(), *eager.state.conv.values()], strict=True):
            assert rel(a, b) < tol
        for d in (fast, eager):
            d.state.reset()
    assert "6 segment graphs" in fast.describe()["prefill"]  # the 1- and 4-token cuts' 8 rows, on first use
    if dtype == torch.float32:
        tokens, logits = static_greedy(fast, lm, ids)
        eager_tokens, eager_logits = static_greedy(eager, lm, ids)
        assert tokens == eager_tokens == stock_greedy(lm, ids)[0]
        assert rel(logits, eager_logits) < tol
        assert fast.describe()["decode_graphs"] == [32, 64, 96, 128]  # steps 61-99: windows 64-128 on first use
    assert fast.notes == [] and _fingerprint(lm) == before


@cuda
def test_gpu_extend_with_graphs_equals_eager_steps() -> None:
    """Jump-forward passes replayed as segment graphs (short ones padded to 8 and 16 rows, longer ones to
    32-row buckets and cut at the 64-token chunk) give the logits and state of the eager decoder fed one
    step per token the same tokens, in float32. The bound is that of the prefill against a full forward
    (mamba-ssm's Triton scan multiplies float32 in TF32); a pass from a wrong state is off by ~1."""
    lm = tiny_lm(seed=3, device="cuda")
    fuse_qkv_by_hand(lm)
    ids = prompt(37, seed=5, device="cuda")
    runs = [0, 3, 1, 0, 9, 41, 2, 17, 0, 6, 70, 0, 12]
    kw = {"max_len": 320, "bucket": 32, "chunk": 64, "prefill_bucket": 32}
    fast = StaticDecoder(lm, **kw)
    fast.capture()
    assert fast.notes == [] and fast.short_rows == [8, 16], fast.notes
    eager = StaticDecoder(lm, **kw, eager=True)
    for _ in range(2):  # the graphs keep no state of their own
        want_tokens, want = _interleaved(eager, lm, ids, runs, jump=False)
        got_tokens, got = _interleaved(fast, lm, ids, runs, jump=True, chosen=want_tokens)
        assert got_tokens == want_tokens
        assert rel(got, want) < 5e-3, rel(got, want)
        for i in fast.state.ssm:
            assert rel(fast.state.ssm[i], eager.state.ssm[i]) < 5e-3
            assert rel(fast.state.conv[i], eager.state.conv[i]) < 5e-3
        end = fast.state.length
        for i in ATTENTION_BLOCKS:
            assert rel(fast.state.k[i][:, :, :end], eager.state.k[i][:, :, :end]) < 5e-3
        for d in (fast, eager):
            d.state.reset()
    assert {(k, r) for k in range(len(fast._segs)) for r in (8, 16)} <= set(fast.graphs), sorted(fast.graphs)
    assert fast.notes == [], fast.notes


@cuda
def test_gpu_resume_with_graphs_equals_cold() -> None:
    lm = tiny_lm(seed=2, device="cuda")
    first = prompt(40, seed=7, device="cuda")
    second = torch.cat([first, prompt(25, seed=8, device="cuda")], dim=1)
    d = StaticDecoder(lm, max_len=160, bucket=32, chunk=16, prefill_bucket=8)
    d.capture()
    static_greedy(d, lm, first, keys=True, snapshot_at=(40,))
    logits, report = d.prefill(embed(lm, second), second[0].tolist())
    cold, _ = StaticDecoder(lm, max_len=160, bucket=32, chunk=16, prefill_bucket=8, eager=True).prefill(
        embed(lm, second))
    assert report.reused == 40 and rel(logits, cold) < 1e-4


def _like_eager(fast: StaticDecoder, eager: StaticDecoder, got: torch.Tensor, want: torch.Tensor, session: int) -> None:
    """After a :func:`_session` of ``LAZY_RUNS`` on a 90-token prompt by each: ``got`` (``fast``'s logits) gives
    ``want``'s greedy tokens within 1e-3, and ``fast``'s state (length, ``pos``, SSM, conv, keys, values) is the
    ``eager`` decoder's within 1e-3."""
    assert got.argmax(-1).tolist() == want.argmax(-1).tolist(), session  # the same greedy tokens
    assert rel(got, want) < 1e-3, (session, rel(got, want))
    assert fast.state.length == eager.state.length == 90 + len(LAZY_RUNS) + sum(LAZY_RUNS)
    assert int(fast.state.pos) == fast.state.length
    for i in fast.state.ssm:
        assert rel(fast.state.ssm[i], eager.state.ssm[i]) < 1e-3, (session, i)
        assert rel(fast.state.conv[i], eager.state.conv[i]) < 1e-3, (session, i)
    end = fast.state.length
    for i in ATTENTION_BLOCKS:
        assert rel(fast.state.k[i][:, :, :end], eager.state.k[i][:, :, :end]) < 1e-3, (session, i)
        assert rel(fast.state.v[i][:, :, :end], eager.state.v[i][:, :, :end]) < 1e-3, (session, i)


@cuda
def test_gpu_graphs_recorded_ahead_replay_like_eager() -> None:
    """In float32 with compiled blocks and graphs, after capture() every pending graph (``LAZY_NEW`` and the
    other windows and padded lengths) is recorded ahead from a thread of its own (:meth:`StaticDecoder.prepare_thread`,
    then :meth:`StaticDecoder.record_ahead`: no eager pass) while a session is in progress, whose state it leaves
    as it was; two sessions after it replay them, record nothing on first use and give the eager decoder's
    logits, tokens and state."""
    import threading

    lm = tiny_lm(seed=3, device="cuda")
    fuse_qkv_by_hand(lm)
    ids = prompt(90, seed=5, device="cuda")
    fast = StaticDecoder(lm, **LAZY)
    fast.capture()
    pending = fast.pending_graphs()
    assert fast.notes == [] and len(pending) == 16 and set(pending) >= LAZY_NEW, pending
    fast.prefill(embed(lm, ids[:, :40]), ids[0, :40].tolist())
    torch.cuda.synchronize()
    before = _held(fast)
    results: list[bool] = []

    def record() -> None:
        fast.prepare_thread()
        results.extend(fast.record_ahead(key) for key in pending)
        torch.cuda.synchronize()

    thread = threading.Thread(target=record)
    thread.start()
    thread.join()
    assert results == [True] * len(pending), fast.describe()["ahead_captures"]
    assert all(torch.equal(a, b) for a, b in zip(before, _held(fast), strict=True))
    assert fast.pending_graphs() == [] and fast.describe()["ahead_captures"]["count"] == len(pending)
    fast.state.reset()
    eager = StaticDecoder(lm, **LAZY, eager=True)
    want_tokens, want = _session(eager, lm, ids, LAZY_RUNS)
    for session in range(2):
        _tokens, got = _session(fast, lm, ids, LAZY_RUNS, chosen=want_tokens)
        _like_eager(fast, eager, got, want, session)
        fast.state.reset()
    assert fast.lazy_captures == [] and fast.notes == [], (fast.lazy_captures, fast.notes)


class CountingGraph:
    """Wraps a recorded graph and counts its replays."""

    def __init__(self, graph: torch.cuda.CUDAGraph) -> None:
        self.graph, self.replays = graph, 0

    def replay(self) -> None:
        self.replays += 1
        self.graph.replay()


@cuda
def test_gpu_shapes_first_used_in_a_session_are_recorded_and_replayed_like_eager() -> None:
    """In float32 with compiled blocks and graphs, capture() records window 32 and the 64-row chunk only; a
    session whose prompt tail (32 rows), jump-forward passes (8, 16, 32 rows) and decode windows (96, 128, 160)
    were not captured runs each eagerly once, records it (``LAZY_NEW``, nothing executed twice: the logits,
    tokens and state are the eager decoder's, and so are the decode steps after each recording), and a second
    session replays them without recording anything and gives the same again."""
    lm = tiny_lm(seed=3, device="cuda")
    fuse_qkv_by_hand(lm)
    ids = prompt(90, seed=5, device="cuda")
    fast = StaticDecoder(lm, **LAZY)
    fast.capture()
    info = fast.describe()
    assert fast.notes == [] and info["decode"].startswith("compiled blocks"), info
    at_load = set(fast.graphs)
    assert at_load == {(32,), (0, 64), (1, 64), (2, 64)} and fast.lazy_captures == [], sorted(at_load)
    eager = StaticDecoder(lm, **LAZY, eager=True)
    want_tokens, want = _session(eager, lm, ids, LAZY_RUNS)
    first = None
    for session in range(2):
        if session == 1:
            fast.graphs = {k: CountingGraph(g) for k, g in fast.graphs.items()}  # type: ignore[misc]
        _tokens, got = _session(fast, lm, ids, LAZY_RUNS, chosen=want_tokens)
        _like_eager(fast, eager, got, want, session)
        assert set(fast.graphs) == at_load | LAZY_NEW, sorted(fast.graphs)
        assert [key for key, _s in fast.lazy_captures] and {key for key, _s in fast.lazy_captures} == LAZY_NEW
        assert len(fast.lazy_captures) == len(LAZY_NEW) and fast.notes == [], (session, fast.notes)
        if first is None:
            first = got
        else:  # replays of what the first session recorded give what its eager first uses gave
            assert rel(got, first) < 1e-5, rel(got, first)
        fast.state.reset()
    used = LAZY_NEW | {(k, 64) for k in range(3)}  # window 32 (recorded at load) is not used by a 90-token prompt
    assert all(fast.graphs[key].replays > 0 for key in used), {  # type: ignore[attr-defined]
        key: g.replays for key, g in fast.graphs.items()}  # type: ignore[attr-defined]


@cuda
def test_gpu_a_capture_failing_on_a_first_use_leaves_that_length_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real capture that raises inside (after ``capture_begin``, the body's kernels recorded) on the first
    use of segment 1 over 32 rows: the step goes on, the session equals the eager decoder's twice over, the
    32-row segments 1 and 2 stay eager (segment 0's graph, recorded before, replays), every other shape is
    still recorded, and one note says so."""
    lm = tiny_lm(seed=3, device="cuda")
    fuse_qkv_by_hand(lm)
    ids = prompt(90, seed=5, device="cuda")
    real = StaticDecoder._record

    def record(self: StaticDecoder, body: Any, *args: int) -> torch.cuda.CUDAGraph:
        def failing(*a: int) -> None:
            body(*a)
            raise RuntimeError("forced failure inside the capture")

        return real(self, failing if args == (1, 32) else body, *args)

    monkeypatch.setattr(StaticDecoder, "_record", record)
    fast = StaticDecoder(lm, **LAZY)
    fast.capture()
    assert fast.notes == [], fast.notes
    eager = StaticDecoder(lm, **LAZY, eager=True)
    want_tokens, want = _session(eager, lm, ids, LAZY_RUNS)
    for session in range(2):
        _tokens, got = _session(fast, lm, ids, LAZY_RUNS, chosen=want_tokens)
        assert got.argmax(-1).tolist() == want.argmax(-1).tolist(), session
        assert rel(got, want) < 1e-3, (session, rel(got, want))
        for i in fast.state.ssm:
            assert rel(fast.state.ssm[i], eager.state.ssm[i]) < 1e-3, (session, i)
        fast.state.reset()
    assert set(fast.graphs) == {(32,), (0, 64), (1, 64), (2, 64)} | (LAZY_NEW - {(1, 32), (2, 32)}), sorted(fast.graphs)
    (note,) = fast.notes
    assert note.startswith("recording the CUDA graph of the prefill over 32 padded rows failed on its first use")
