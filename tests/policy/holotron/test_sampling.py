"""Sampling under the grammar (runtime.Sampler, built by HolotronPolicy from the ``Sampling`` settings): temperature
and top-p applied after the constraint mask, from a seeded generator, in both decoders; greedy stays the default.
The tiny checkpoint in float32 on the CPU, plus one GPU check of the captured path."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from holodesk.core.geometry import Frame, Monitor  # noqa: E402
from holodesk.policy.base import HistoryStep, Observation  # noqa: E402
from holodesk.policy.generation import GenerationOptions  # noqa: E402
from holodesk.policy.holotron import HolotronPolicy, runtime  # noqa: E402
from holodesk.policy.models import GREEDY, Sampling  # noqa: E402
from holodesk.policy.registry import get_protocol  # noqa: E402


def _frame(w: int, h: int, seed: int) -> Frame:
    pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return Frame(pixels, Monitor(1, 0, 0, w, h))


def _nucleus_reference(logits: list[float], temperature: float, top_p: float) -> list[float]:
    """Top-p by its definition, in plain Python: the most probable tokens in order until their mass reaches
    ``top_p`` (the token that reaches it included), renormalised; every other token 0 (top-p 1: every token)."""
    import math

    finite = [x / temperature for x in logits if x != float("-inf")]
    top = max(finite)
    weights = [0.0 if x == float("-inf") else math.exp(x / temperature - top) for x in logits]
    total = sum(weights)
    probs = [w / total for w in weights]
    kept: set[int] = set()
    mass = 0.0
    for i in sorted(range(len(probs)), key=lambda j: -probs[j]):
        if (mass >= top_p and top_p < 1.0) or probs[i] == 0.0:
            break
        kept.add(i)
        mass += probs[i]
    norm = sum(probs[i] for i in kept)
    return [probs[i] / norm if i in kept else 0.0 for i in range(len(probs))]


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.95, 1.0])
@pytest.mark.parametrize("temperature", [0.3, 0.8, 2.0])
def test_probabilities_equal_the_nucleus_reference(temperature: float, top_p: float) -> None:
    gen = torch.Generator().manual_seed(int(temperature * 10) + int(top_p * 100))
    for _ in range(5):
        logits = torch.randn(300, generator=gen, dtype=torch.float64) * 3
        logits[torch.rand(300, generator=gen) < 0.4] = float("-inf")  # a grammar mask
        sampler = runtime.Sampler(temperature=temperature, top_p=top_p, seed=1)
        got = sampler.probabilities(logits.float()).double()
        want = torch.tensor(_nucleus_reference(logits.tolist(), temperature, top_p), dtype=torch.float64)
        assert torch.equal(got > 0, want > 0), (temperature, top_p)  # the same nucleus
        assert torch.allclose(got, want, atol=1e-6), float((got - want).abs().max())


def test_draws_follow_the_distribution_and_never_a_masked_token() -> None:
    probs = torch.tensor([0.5, 0.25, 0.125, 0.0625, 0.0625, 0.0, 0.0, 0.0])
    logits = probs.log()  # zeros become -inf: masked
    sampler = runtime.Sampler(temperature=1.0, top_p=1.0, seed=3)
    counts = torch.zeros(8)
    draws = 16_000
    for _ in range(draws):
        counts[sampler.choose(logits.clone())] += 1
    assert counts[5:].sum() == 0
    # each frequency within 5 standard deviations of its probability (deterministic: a fixed seed)
    sd = (probs * (1 - probs) / draws).sqrt()
    assert ((counts / draws - probs).abs() <= 5 * sd + 1e-9).all(), counts / draws


def test_same_seed_same_tokens_and_greedy_is_the_argmax() -> None:
    logits = torch.randn(50, generator=torch.Generator().manual_seed(0))
    a = runtime.Sampler(temperature=1.0, top_p=0.9, seed=11)
    b = runtime.Sampler(temperature=1.0, top_p=0.9, seed=11)
    c = runtime.Sampler(temperature=1.0, top_p=0.9, seed=12)
    first = [a.choose(logits) for _ in range(40)]
    assert first == [b.choose(logits) for _ in range(40)]
    assert first != [c.choose(logits) for _ in range(40)]
    greedy = runtime.Sampler(temperature=0.0, top_p=0.5, seed=5)
    assert greedy.greedy and greedy.choose(logits) == int(logits.argmax())


@pytest.mark.parametrize(("kw", "word"), [({"temperature": -0.1}, "temperature"),
                                          ({"temperature": float("nan")}, "temperature"),
                                          ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"),
                                          ({"seed": -1}, "seed"), ({"seed": 1 << 63}, "seed"),
                                          ({"seed": 1.5}, "seed")])
def test_bad_sampler_arguments_are_refused_with_the_range(kw: dict[str, float], word: str) -> None:
    with pytest.raises(ValueError, match=word):
        runtime.Sampler(**kw)  # type: ignore[arg-type]


def test_masked_tokens_are_never_sampled_through_the_grammar(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    """Random logits at a high temperature with top-p 1: every token the sampler draws is one the grammar
    accepts (a masked token would end the reply with stop reason "grammar"), and the replies parse."""
    protocol = get_protocol("agent-loop-v1")
    constraint = runtime.Constraint(tiny_loaded, runtime.cap_strings(protocol.json_schema(), 12))
    vocab = constraint.vocab_size
    for seed in range(6):
        noise = torch.Generator().manual_seed(100 + seed)
        sampler = runtime.Sampler(temperature=4.0, top_p=1.0, seed=seed)
        decoded = runtime.decode_loop(tiny_loaded, torch.randn(vocab, generator=noise),
                                      lambda _token, g=noise: torch.randn(vocab, generator=g), max_new_tokens=400,
                                      constraint=constraint, reasoning=False, max_think_tokens=0, sampler=sampler)
        assert decoded.stop_reason == "eos", decoded.stop_reason
        text = tiny_loaded.tokenizer.decode(decoded.tokens, skip_special_tokens=False)
        protocol.parse(text)


def _sampling(seed: int) -> Sampling:
    return Sampling(greedy=False, temperature=1.5, top_p=0.95, seed=seed)


def _sampled_policy(loaded: object, decoder: str, seed: int) -> HolotronPolicy:
    return HolotronPolicy(loaded,  # type: ignore[arg-type]
                          GenerationOptions(max_reply_tokens=256, max_string_chars=12, sampling=_sampling(seed)),
                          decoder=decoder)


def test_a_seeded_episode_replays_exactly_in_both_decoders(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    """The same seed gives the same replies (static decoder twice, and the stock decoder); each step records
    the seed it sampled with (the episode seed plus the step index); another seed gives other replies."""
    frame = _frame(512, 512, 3)
    step0 = HistoryStep(index=0, frame=_frame(512, 512, 4), action=None, outcome="performed")
    observations = [Observation(task="t", frame=frame), Observation(task="t", frame=frame, history=(step0,))]
    static = _sampled_policy(tiny_loaded, "static", 41)
    first = [static.propose(obs) for obs in observations]
    assert [p.extra["step_seed"] for p in first] == [41, 42]
    assert first[0].extra["sampling"] == {"greedy": False, "temperature": 1.5, "top_p": 0.95, "seed": 41}
    again = [static.propose(obs) for obs in observations]
    assert [p.raw_text for p in again] == [p.raw_text for p in first]
    stock = [_sampled_policy(tiny_loaded, "stock", 41).propose(obs) for obs in observations]
    assert [p.raw_text for p in stock] == [p.raw_text for p in first]
    other = []
    for seed in (1000, 2000, 3000):
        static.options = replace(static.options, sampling=_sampling(seed))
        other.append(static.propose(observations[0]))
    assert any(p.raw_text != first[0].raw_text for p in other)


def test_greedy_is_the_default_and_unchanged(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    obs = Observation(task="t", frame=_frame(512, 512, 5))
    default = HolotronPolicy(tiny_loaded, GenerationOptions(max_reply_tokens=256, max_string_chars=12))
    assert default.options.sampling == GREEDY and default.sampler(0) is None
    greedy = default.propose(obs)
    assert greedy.extra["sampling"]["greedy"] is True
    seeded = GenerationOptions(max_reply_tokens=256, max_string_chars=12,
                               sampling=Sampling(greedy=True, temperature=0.8, top_p=0.5, seed=9))
    seeded_greedy = HolotronPolicy(tiny_loaded, seeded).propose(obs)
    assert seeded_greedy.raw_text == greedy.raw_text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_captured_decode_samples_as_the_eager_stock_decoder(tiny_dir) -> None:  # type: ignore[no-untyped-def]
    """On CUDA the static decoder replays CUDA graphs and samples on the GPU with a CUDA generator; for a seed
    its replies equal the stock (eager transformers) decoder's, and replay the same on a second run."""
    from holodesk.policy.holotron.loader import load_holotron

    loaded = load_holotron(tiny_dir, dtype="float32", device="cuda")
    frame = _frame(1280, 720, 60)
    step0 = HistoryStep(index=0, frame=_frame(1280, 720, 61), action=None, outcome="performed")
    observations = [Observation(task="t", frame=frame), Observation(task="t", frame=frame, history=(step0,))]
    static = _sampled_policy(loaded, "static", 7)
    assert static.kernel_report()["decoder"]["decode_graphs"]  # the captured path
    first = [static.propose(obs) for obs in observations]
    assert [static.propose(obs).raw_text for obs in observations] == [p.raw_text for p in first]
    stock = [_sampled_policy(loaded, "stock", 7).propose(obs) for obs in observations]
    assert [p.raw_text for p in stock] == [p.raw_text for p in first]
    assert [p.extra["step_seed"] for p in first] == [7, 8]

