"""The thought handed out while a native family generates it, through transformers' streamer interface
(``generate(streamer=...)``): a tiny Qwen3-VL checkpoint (Holo2's family) in float32 on the CPU, thinking on.
The pieces joined are the step's recorded thought, and the reply is the one decoded without a sink (greedy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import PolicyOutputError
from holodesk.policy import base
from holodesk.policy.base import Observation
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.native import NativePolicy


def _step(policy: NativePolicy, obs: Observation) -> tuple[str, dict[str, Any]]:
    """The step's raw reply and record (a random model's reply may be no action: its record is kept)."""
    try:
        proposal = policy.propose(obs)
    except PolicyOutputError as exc:
        return exc.raw_text, exc.extra or {}
    return proposal.raw_text, proposal.extra


def test_the_streamed_pieces_are_the_recorded_thought(family_dirs: dict[str, Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "THOUGHT_INTERVAL_S", 0.0)  # a piece at every token the CPU makes
    options = GenerationOptions(reasoning=True, think_budget=24, max_reply_tokens=64, max_string_chars=12,
                                max_images=1)
    policy = NativePolicy.load(family_dirs["qwen3_vl"], options, dtype="float32", device="cpu")
    pixels = np.random.default_rng(3).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    obs = Observation(task="Click OK", frame=Frame(pixels, Monitor(1, 0, 0, 96, 64)))
    try:
        raw_without, _record = _step(policy, obs)
        pieces: list[str] = []
        policy.thought_sink = pieces.append
        raw, record = _step(policy, obs)
    finally:
        policy.close()
    assert "</think>" in raw and raw == raw_without
    assert len(pieces) > 1 and "".join(pieces) == record["reasoning_text"]
