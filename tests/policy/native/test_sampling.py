"""Sampling on the native path: temperature and top_p applied after the grammar's mask (so a draw never leaves
what the grammar allows), ``generate`` drawing from a generator seeded per step, the seed recorded."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import PolicyOutputError
from holodesk.policy.base import Observation
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.models import Sampling
from holodesk.policy.native import NativePolicy
from holodesk.policy.native.policy import ReplyRule


class MaskingConstraint:
    """A stand-in for the xgrammar Constraint (named fake): allows only ``allowed``, accepts every token."""

    def __init__(self, allowed: list[int]) -> None:
        self.allowed = allowed

    def start(self) -> None:
        pass

    def mask(self, logits: torch.Tensor) -> None:
        keep = torch.full_like(logits, float("-inf"))
        keep[self.allowed] = 0.0
        logits.add_(keep)

    def accept(self, token: int) -> bool:
        return True


def _rule(sampling: Sampling, allowed: list[int]) -> ReplyRule:
    return ReplyRule(MaskingConstraint(allowed), reasoning=False, think_end_id=None,  # type: ignore[arg-type]
                     max_think_tokens=0, eos_ids=(0,), device=torch.device("cpu"), sampling=sampling)


def test_temperature_and_top_p_act_on_the_masked_logits() -> None:
    # token 1 is the model's favourite but the grammar forbids it; among the allowed 2, 3, 4 the
    # probabilities after the mask are 0.5 / 0.3 / 0.2 at temperature 1
    logits = torch.tensor([[0.0, 50.0, math.log(0.5), math.log(0.3), math.log(0.2), 0.0]])
    out = _rule(Sampling(greedy=False, temperature=0.5, top_p=0.7, seed=0), [2, 3, 4])(
        torch.tensor([[9]]), logits.clone())[0]
    kept = torch.isfinite(out).nonzero().flatten().tolist()
    assert kept == [2, 3]  # 0.5 alone is under 0.7; with 0.3 the mass reaches it; 4 is cut, 1 stays masked
    assert out[2].item() == pytest.approx(math.log(0.5) / 0.5)  # divided by the temperature


def test_greedy_leaves_the_masked_logits_alone() -> None:
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    out = _rule(Sampling(greedy=True, temperature=0.5, top_p=0.1, seed=0), [2, 3])(torch.tensor([[9]]),
                                                                                    logits.clone())[0]
    assert out.tolist() == [float("-inf"), float("-inf"), 1.0, 2.0]


def _observation() -> Observation:
    pixels = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    return Observation(task="Click OK", frame=Frame(pixels, Monitor(1, 0, 0, 96, 64)), history=())


def test_sampled_replies_repeat_with_the_seed_and_record_it(family_dirs: dict[str, Path]) -> None:
    options = GenerationOptions(constrained_decoding=False, max_reply_tokens=12)
    policy = NativePolicy.load(family_dirs["qwen3_vl"], options, dtype="float32", device="cpu")
    try:
        def reply(seed: int) -> str:
            policy.options = replace(options, sampling=Sampling(greedy=False, temperature=1.0, top_p=1.0, seed=seed))
            return policy.generate(_observation())[0]

        first = reply(7)
        assert reply(7) == first  # the same seed, the same draw
        assert any(reply(seed) != first for seed in (8, 9, 10))  # other seeds draw otherwise
        policy.options = replace(options, sampling=Sampling(greedy=False, temperature=1.0, top_p=1.0, seed=7))
        with pytest.raises(PolicyOutputError) as caught:  # the random model's reply is no action; it is recorded
            policy.propose(_observation())
        extra = caught.value.extra or {}
        assert extra.get("sampling") == {"greedy": False, "temperature": 1.0, "top_p": 1.0, "seed": 7}
        assert extra.get("step_seed") == 7
    finally:
        policy.close()
