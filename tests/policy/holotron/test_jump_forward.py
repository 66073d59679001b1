"""Jump-forward decoding on the tiny checkpoint (float32, CPU): the tokens the grammar forces are fed in one
multi-token pass, and every reply equals the reply decoded with one model step per token.

The reference and the fast path feed the model the same token ids (``decode_loop``: the model's choice
and xgrammar's jump-forward tokens after it); only how they reach the model differs (one
``StaticDecoder.extend`` pass, or one decode step each). Replies are sampled with seeded Gumbel noise
added to the logits at each choice (``Sampled.mask``, the Gumbel-max trick), so each seed reaches other
branches of the schema; a few are greedy. The GPU test does the same with compiled blocks and CUDA graphs.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from holodesk.core.geometry import Frame, Monitor  # noqa: E402
from holodesk.policy.base import Observation  # noqa: E402
from holodesk.policy.generation import GenerationOptions  # noqa: E402
from holodesk.policy.holotron import HolotronPolicy, runtime  # noqa: E402
from holodesk.policy.holotron.engine import StaticEngine  # noqa: E402
from holodesk.policy.registry import get_protocol  # noqa: E402

WORDS = ("open", "click", "the", "save", "button", "menu", "file", "edit", "type", "hello", "scroll", "down",
         "wait", "answer", "form", "name", "drag", "move", "window", "field", "submit")


class Sampled(runtime.Constraint):
    """The grammar of :class:`runtime.Constraint` with seeded Gumbel noise added to the logits before the
    mask at each of the model's choices (``seed`` None: greedy; ``temperature`` scales the noise), and a
    record of the forced runs: ``runs`` holds ``(tokens before the run, run)``; with ``record_gaps``,
    ``gaps`` maps the position of each choice to the gap between its two best masked logits."""

    def __init__(self, loaded: Any, schema: dict[str, Any]) -> None:
        super().__init__(loaded, schema)
        self.seed: int | None = None
        self.temperature = 1.0
        self.record_gaps = False
        self.gaps: dict[int, float] = {}
        self.runs: list[tuple[int, list[int]]] = []
        self._gen = torch.Generator()
        self._appended = 0

    def start(self) -> None:
        super().start()
        self.runs, self._appended, self.gaps = [], 0, {}
        if self.seed is not None:
            self._gen.manual_seed(self.seed)

    def mask(self, logits: torch.Tensor) -> None:
        if self.seed is not None:
            uniform = torch.rand(logits.shape, generator=self._gen).clamp_(1e-9, 1.0 - 1e-9)
            logits.add_((-torch.log(-torch.log(uniform)) * self.temperature).to(logits.device))
        super().mask(logits)
        if self.record_gaps:
            top = logits.float().topk(2).values
            self.gaps[self._appended] = float(top[0] - top[1])

    def accept(self, token: int) -> bool:
        self._appended += 1
        return super().accept(token)

    def forced_tokens(self, budget: int) -> list[int]:
        run = super().forced_tokens(budget)
        if run:
            self.runs.append((self._appended, run))
            self._appended += len(run)
        return run


def task_ids(loaded: Any, seed: int) -> list[int]:
    rng = random.Random(seed)
    text = "Task: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
    return [int(t) for t in loaded.tokenizer.encode(text, add_special_tokens=False)]


def both(engine: StaticEngine, constraint: Sampled, ids: list[int], **kw: Any) -> dict[bool, runtime.Generation]:
    """The reply to ``ids`` with jump-forward off and on (cold engine each time)."""
    out = {}
    for jump in (False, True):
        engine.reset()
        out[jump], _ = engine.run(ids, [], max_new_tokens=kw.get("max_new_tokens", 400), constraint=constraint,
                                  reasoning=False, max_think_tokens=0, jump_forward=jump)
    return out


@pytest.fixture(scope="module")
def contract(tiny_loaded) -> Sampled:  # type: ignore[no-untyped-def]
    return Sampled(tiny_loaded, runtime.cap_strings(get_protocol("agent-loop-v1").json_schema(), 12))


@pytest.fixture(scope="module")
def engine(tiny_loaded) -> StaticEngine:  # type: ignore[no-untyped-def]
    return StaticEngine(tiny_loaded, max_len=1024, max_images=1)


def test_jump_forward_replies_equal_one_step_per_token(tiny_loaded, engine: StaticEngine,  # type: ignore[no-untyped-def]
                                                       contract: Sampled, monkeypatch: pytest.MonkeyPatch) -> None:
    """60 sampled and 4 greedy agent-loop replies: the same ids, text and stop reason either way, every
    one ending by the grammar; the fast path makes one pass per choice of the model, counted honestly
    (the decoder's own calls), and far fewer than the reference's one per fed token."""
    calls = {"step": 0, "extend": 0}
    for name in calls:
        real = getattr(engine.decoder, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(engine.decoder, name, spy)
    totals = {False: 0, True: 0}
    tokens = forced = 0
    for seed in [None, None, None, None, *range(60)]:
        contract.seed = seed
        ids = task_ids(tiny_loaded, 1000 + (seed or 0))
        before = dict(calls)
        replies = both(engine, contract, ids)
        slow, fast = replies[False], replies[True]
        assert fast.token_ids == slow.token_ids, seed
        assert fast.text == slow.text and fast.stop_reason == slow.stop_reason == "eos", (seed, fast.text)
        json.loads(fast.text)
        assert fast.forced_tokens == slow.forced_tokens == sum(len(r) for _, r in contract.runs) > 0
        made = {k: calls[k] - before[k] for k in calls}
        assert slow.model_steps + fast.model_steps == made["step"] + made["extend"], seed
        assert made["extend"] > 0
        # reference: every token fed except those after the model's last choice (the reply then ends)
        assert slow.model_steps < len(slow.token_ids)
        # jump-forward: at most one pass per choice of the model
        assert fast.model_steps <= len(fast.token_ids) - fast.forced_tokens
        totals[False] += slow.model_steps
        totals[True] += fast.model_steps
        tokens += len(fast.token_ids)
        forced += fast.forced_tokens
    print(f"64 replies: {tokens} tokens ({forced} forced), model steps {totals[False]} one per token, "
          f"{totals[True]} with jump-forward")
    assert totals[True] <= 0.75 * totals[False]


def test_stock_decoder_jump_forward_equals_static(tiny_loaded, engine: StaticEngine,  # type: ignore[no-untyped-def]
                                                  contract: Sampled) -> None:
    """transformers' forward over several tokens from its cache (the stock decoder's jump-forward) gives
    the replies of its one-token forwards and of the static decoder."""
    for seed in range(8):
        contract.seed = seed
        ids = task_ids(tiny_loaded, 2000 + seed)
        stock = {jump: runtime.generate(tiny_loaded, ids, [], max_new_tokens=400, constraint=contract,
                                        reasoning=False, max_think_tokens=0, jump_forward=jump)
                 for jump in (False, True)}
        static = both(engine, contract, ids)[True]
        assert stock[True].token_ids == stock[False].token_ids == static.token_ids, seed
        assert stock[True].model_steps == static.model_steps < stock[False].model_steps


def test_the_budget_ends_a_reply_inside_a_forced_run(tiny_loaded, engine: StaticEngine,  # type: ignore[no-untyped-def]
                                                     contract: Sampled) -> None:
    """``max_new_tokens`` reached inside a forced run: the run is cut there, nothing more is fed, and both
    paths give that prefix of the full reply with ``max_new_tokens``."""
    contract.seed = 7
    ids = task_ids(tiny_loaded, 7)
    full = both(engine, contract, ids)[True]
    cuts = [(start, run) for start, run in contract.runs if len(run) >= 3]
    assert cuts, contract.runs
    start, run = cuts[0]
    for budget in (start + 1, start + len(run) - 1):
        cut = both(engine, contract, ids, max_new_tokens=budget)
        for g in cut.values():
            assert g.token_ids == full.token_ids[:budget] and g.stop_reason == "max_new_tokens"
        assert contract.runs[-1][0] + len(contract.runs[-1][1]) == budget  # the last run was cut at the budget


def test_a_reply_the_grammar_forces_whole_takes_no_model_step(tiny_loaded, engine: StaticEngine) -> None:  # type: ignore[no-untyped-def]
    """A schema with one possible reply: all of it forced, then the stop token (nothing else allowed), so
    the reply ends without a model step, on both paths."""
    schema = {"type": "object", "properties": {"tool": {"const": "wait_desktop"}, "seconds": {"const": 2}},
              "required": ["tool", "seconds"], "additionalProperties": False}
    constraint = Sampled(tiny_loaded, schema)
    for reply in both(engine, constraint, task_ids(tiny_loaded, 1)).values():
        assert reply.text == '{"tool": "wait_desktop", "seconds": 2}'
        assert reply.stop_reason == "eos" and reply.model_steps == 0
        assert reply.forced_tokens == len(reply.token_ids)
    assert constraint.finished()  # the stop token was accepted


def test_a_forced_run_longer_than_a_prefill_bucket(tiny_loaded, engine: StaticEngine) -> None:  # type: ignore[no-untyped-def]
    """A constant of 400 characters (several padded 128-row buckets in one pass) between free fields."""
    long = "abcdefghij klmnopqrstuvwxyz " * 15
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 6}, "b": {"const": long},
                                               "c": {"type": "string", "maxLength": 6}},
              "required": ["a", "b", "c"], "additionalProperties": False}
    constraint = Sampled(tiny_loaded, schema)
    for seed in range(4):
        constraint.seed = seed
        replies = both(engine, constraint, task_ids(tiny_loaded, 3000 + seed))
        assert replies[True].token_ids == replies[False].token_ids, seed
        assert json.loads(replies[True].text)["b"] == long
        assert max(len(run) for _, run in constraint.runs) > 128
        assert replies[True].model_steps < 20 < replies[False].model_steps


def test_forced_bytes_inside_a_character_stop_where_the_values_differ(tiny_loaded, engine: StaticEngine) -> None:  # type: ignore[no-untyped-def]
    """Two values that share the first byte of a two-byte character ("é" and "è" are C3 A9 and C3 A8):
    what is forced stops within that character (this byte-level vocabulary has C3 as a token and no
    token that extends it, so xgrammar forces that byte; a vocabulary with "é" as a token would leave
    it to the model), the model chooses the second byte, and the reply is one of the two values, the same
    either way."""
    schema = {"type": "object", "properties": {"v": {"enum": ["été long", "ère longue"]}},
              "required": ["v"], "additionalProperties": False}
    constraint = Sampled(tiny_loaded, schema)
    constraint.temperature = 30.0  # the random model all but always picks one branch at temperature 1
    seen = set()
    for seed in range(12):
        constraint.seed = seed
        replies = both(engine, constraint, task_ids(tiny_loaded, seed))
        assert replies[True].token_ids == replies[False].token_ids, seed
        value = json.loads(replies[True].text)["v"]
        assert value in ("été long", "ère longue")
        seen.add(value)
        start, first = constraint.runs[0]
        assert start == 0 and tiny_loaded.tokenizer.decode(first) in ('{"v": "', '{"v": "\ufffd'), first
        assert constraint.runs[1][0] > len(first)  # the model chose at least the distinguishing byte
    assert len(seen) == 2  # sampling reached both branches


def test_a_forced_run_stops_before_a_token_a_longer_token_extends(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    """After ``{"note`` the grammar forces ``": `` but the run stops at ``":``: the space could start a
    longer token (`` "`` or `` null``), so the model chooses how the forced text joins what follows."""
    constraint = runtime.Constraint(tiny_loaded, get_protocol("agent-loop-v1").json_schema())
    constraint.start()
    tok = tiny_loaded.tokenizer
    assert tok.decode(constraint.forced_tokens(99)) == '{"'
    for token in tok.encode("note", add_special_tokens=False):
        assert constraint.accept(token)
    assert constraint.matcher.find_jump_forward_string() == '": '
    assert tok.decode(constraint.forced_tokens(99)) == '":'
    assert constraint.forced_tokens(99) == []  # the space is the model's
    assert constraint.forced_stop() is None
    assert constraint.forced_tokens(0) == []


def test_an_xgrammar_without_jump_forward_tokens_is_a_clear_error(tiny_loaded,  # type: ignore[no-untyped-def]
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import xgrammar as xgr

    from holodesk.errors import PolicyError

    monkeypatch.delattr(xgr.GrammarMatcher, "find_jump_forward_tokens")
    with pytest.raises(PolicyError, match=r"xgrammar 0\.2\.9 or newer") as info:
        runtime.Constraint(tiny_loaded, {"type": "object"})
    assert "pip install" in (info.value.hint or "")


def _frame(seed: int) -> Frame:
    pixels = np.random.default_rng(seed).integers(0, 256, (400, 640, 3), dtype=np.uint8)
    return Frame(pixels, Monitor(1, 0, 0, 640, 400))


@pytest.mark.parametrize("decoder", ["static", "stock"])
def test_the_policy_switch(tiny_loaded, decoder: str) -> None:  # type: ignore[no-untyped-def]
    """``GenerationOptions(jump_forward=False)`` decodes one step per token: the same reply, more steps;
    the counts are in ``Proposal.extra``."""
    obs = Observation(task="open the settings", frame=_frame(3), history=())
    options = GenerationOptions(max_reply_tokens=96, max_string_chars=12, max_images=1)
    on = HolotronPolicy(tiny_loaded, options, decoder=decoder).propose(obs)
    off = HolotronPolicy(tiny_loaded, replace(options, jump_forward=False), decoder=decoder).propose(obs)
    assert on.raw_text == off.raw_text and on.extra["decoder"] == off.extra["decoder"] == decoder
    assert on.extra["generated_tokens"] == off.extra["generated_tokens"]
    assert on.extra["forced_tokens"] == off.extra["forced_tokens"] > 0
    assert on.extra["model_steps"] < off.extra["model_steps"]


# ---------------------------------------------------------------- GPU: compiled blocks and CUDA graphs
NEAR_TIE = 1e-2
"""Logit gap below which a choice may go either way on the GPU: mamba-ssm's Triton chunk scan (the prefill
and jump-forward passes) multiplies float32 in TF32, the decode step does not; both are within 1e-3 of a
full float32 forward (test_engine.py)."""


def _agree(got: list[int], want: list[int], gaps: dict[int, float], what: object) -> bool:
    """True when the replies are the same; False when they first differ at a choice of the model whose two
    best logits were within :data:`NEAR_TIE` in ``want``'s decoding (a tie the arithmetic can break either
    way); AssertionError for any other difference (a forced token, or a clear choice)."""
    if got == want:
        return True
    i = next((k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    gap = gaps.get(i)
    assert gap is not None and gap < NEAR_TIE, (what, i, gap, got, want)
    return False


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_jump_forward_replies_equal_one_step_per_token(tiny_dir) -> None:  # type: ignore[no-untyped-def]
    """On CUDA in float32 (compiled blocks, decode graphs, prefill segment graphs incl. the short ones): 40
    sampled and 2 greedy replies with jump-forward equal those with one step per token, and the first 6
    the stock decoder's. A reply may differ only from a near tie on (``_agree``), in at most 2 of the 42;
    a pass from a wrong state differs at clear choices and fails."""
    from holodesk.policy.holotron.loader import load_holotron

    loaded = load_holotron(tiny_dir, dtype="float32", device="cuda")
    engine = StaticEngine(loaded, max_len=1024, max_images=1)
    info = engine.describe()
    assert info["decode"].startswith("compiled blocks") and info["decode"].endswith("CUDA graphs"), info
    assert info["notes"] == [] and "segment graphs" in info["prefill"], info
    d = engine.decoder  # at load: a full chunk, and on first use in the warm-up its 3-token pass (8 rows)
    assert d.short_rows == [8, 16, 32, 64] and {(0, d.chunk), (0, 8)} <= set(d.graphs), sorted(d.graphs)
    constraint = Sampled(loaded, runtime.cap_strings(get_protocol("agent-loop-v1").json_schema(), 12))
    constraint.record_gaps = True
    totals = {False: 0, True: 0}
    ties = 0
    for seed in [None, None, *range(40)]:
        constraint.seed = seed
        ids = task_ids(loaded, 1000 + (seed or 0))
        engine.reset()
        slow, _ = engine.run(ids, [], max_new_tokens=400, constraint=constraint, reasoning=False,
                             max_think_tokens=0, jump_forward=False)
        gaps = dict(constraint.gaps)
        engine.reset()
        fast, _ = engine.run(ids, [], max_new_tokens=400, constraint=constraint, reasoning=False,
                             max_think_tokens=0, jump_forward=True)
        assert fast.stop_reason == slow.stop_reason == "eos", (seed, fast.text, slow.text)
        if _agree(fast.token_ids, slow.token_ids, gaps, seed):
            assert fast.text == slow.text and fast.model_steps < slow.model_steps, seed
            totals[False] += slow.model_steps
            totals[True] += fast.model_steps
        else:
            ties += 1
        if seed is not None and seed < 6:
            stock = runtime.generate(loaded, ids, [], max_new_tokens=400, constraint=constraint, reasoning=False,
                                     max_think_tokens=0, jump_forward=True)
            ties += not _agree(stock.token_ids, slow.token_ids, gaps, ("stock", seed))
    assert ties <= 2, ties
    assert totals[True] <= 0.75 * totals[False], totals
    assert engine.describe()["notes"] == [], engine.describe()["notes"]  # no graph failed on its first use


def test_a_complete_object_reply_allows_only_stop_tokens_without_reading_the_bitmask(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    """The contract's root is an object: once complete, the stop token is answered from completion alone and
    equals what the next-token bitmask allows; a schema whose root is a number keeps reading the bitmask
    (after ``7`` the reply is complete but ``70`` is still allowed)."""
    tok = tiny_loaded.tokenizer
    assert runtime.object_root(get_protocol("agent-loop-v1").json_schema())
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
              "additionalProperties": False}
    contract = runtime.Constraint(tiny_loaded, schema)
    assert contract.object_root
    contract.start()
    for token in tok.encode('{"a": 12', add_special_tokens=False):
        assert contract.accept(token)
    assert contract.forced_stop() is None  # more digits or the closing brace may follow
    assert contract.accept(tok.encode("}", add_special_tokens=False)[0])
    assert contract.matcher.is_completed()
    fast = contract.forced_stop()
    contract.object_root = False  # the bitmask's answer for the same state
    assert fast is not None and fast == contract.forced_stop() == min(tiny_loaded.eos_ids)

    number = runtime.Constraint(tiny_loaded, {"type": "integer"})
    assert not number.object_root
    number.start()
    assert number.accept(tok.encode("7", add_special_tokens=False)[0])
    assert number.matcher.is_completed() and number.forced_stop() is None


@pytest.mark.parametrize(("schema", "expected"), [
    ({"type": "object"}, True),
    ({"$defs": {"A": {"type": "object"}}, "$ref": "#/$defs/A"}, True),
    ({"anyOf": [{"type": "object"}, {"$ref": "#/$defs/B"}], "$defs": {"B": {"type": "object"}}}, True),
    ({"anyOf": [{"type": "object"}, {"type": "string"}]}, False),
    ({"allOf": [{"required": ["a"]}, {"type": "object"}]}, True),
    ({"type": ["object", "null"]}, False),
    ({"$ref": "#/$defs/missing"}, False),
    ({"type": "integer"}, False),
])
def test_object_root(schema: dict[str, Any], expected: bool) -> None:
    assert runtime.object_root(schema) is expected
