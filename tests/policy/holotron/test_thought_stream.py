"""The thought handed out while the Holotron runtime generates it (decode_loop's thought watcher, detokenized
when a piece is due): the tiny checkpoint in float32 on the CPU with both decoders, and the captured static
decoder on the GPU. The pieces joined are the step's recorded thought, and a step with a sink decodes the same
tokens as one without (greedy)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from holodesk.core.geometry import Frame, Monitor  # noqa: E402
from holodesk.policy import base  # noqa: E402
from holodesk.policy.base import Observation, Proposal  # noqa: E402
from holodesk.policy.generation import GenerationOptions  # noqa: E402
from holodesk.policy.holotron import HolotronPolicy  # noqa: E402


def _frame(w: int, h: int, seed: int) -> Frame:
    pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return Frame(pixels, Monitor(1, 0, 0, w, h))


def _thinking_policy(loaded: object, decoder: str) -> HolotronPolicy:
    return HolotronPolicy(loaded,  # type: ignore[arg-type]
                          GenerationOptions(reasoning=True, max_reply_tokens=200, think_budget=24,
                                            max_string_chars=12),
                          decoder=decoder)


def _with_and_without_sink(policy: HolotronPolicy, obs: Observation) -> tuple[Proposal, Proposal, list[str]]:
    without = policy.propose(obs)
    pieces: list[str] = []
    policy.thought_sink = pieces.append
    try:
        streamed = policy.propose(obs)
    finally:
        policy.thought_sink = None
    return without, streamed, pieces


@pytest.mark.parametrize("decoder", ["static", "stock"])
def test_the_streamed_pieces_are_the_recorded_thought(tiny_loaded, decoder: str,  # type: ignore[no-untyped-def]
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "THOUGHT_INTERVAL_S", 0.0)  # a piece at every token the CPU makes
    policy = _thinking_policy(tiny_loaded, decoder)
    without, streamed, pieces = _with_and_without_sink(policy, Observation(task="t", frame=_frame(512, 512, 7)))
    thought = streamed.extra["reasoning_text"]
    assert len(pieces) > 1 and "".join(pieces) == thought
    assert streamed.raw_text == without.raw_text
    assert streamed.extra["generated_tokens"] == without.extra["generated_tokens"]


def test_nothing_is_streamed_with_reasoning_off(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    policy = HolotronPolicy(tiny_loaded, GenerationOptions(max_reply_tokens=200, max_string_chars=12))
    pieces: list[str] = []
    policy.thought_sink = pieces.append
    policy.propose(Observation(task="t", frame=_frame(512, 512, 8)))
    assert pieces == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_captured_decode_streams_the_recorded_thought_and_the_same_tokens(tiny_dir) -> None:  # type: ignore[no-untyped-def]
    """On CUDA the static decoder replays CUDA graphs; with a sink its tokens are those without one (greedy) and
    the pieces (at the product's throttle) joined are the recorded thought."""
    from holodesk.policy.holotron.loader import load_holotron

    loaded = load_holotron(tiny_dir, dtype="float32", device="cuda")
    policy = _thinking_policy(loaded, "static")
    assert policy.kernel_report()["decoder"]["decode_graphs"]  # the captured path
    without, streamed, pieces = _with_and_without_sink(policy, Observation(task="t", frame=_frame(1280, 720, 60)))
    assert pieces and "".join(pieces) == streamed.extra["reasoning_text"]
    assert streamed.raw_text == without.raw_text
    assert streamed.extra["generated_tokens"] == without.extra["generated_tokens"]
