"""What "think before acting" costs a step: the expected seconds a typical thought adds, for the chosen model and
precision on this GPU, in words for the Settings dialog, ``holodesk run`` and ``holodesk doctor``.

Derived, not tabled per card: a thought token costs one decode step, which reads the weights used per token once
(:func:`decode_step_bytes`: the model table's parameters, active ones for a mixture of experts, at the fit rule's
bytes per parameter, :data:`holodesk.core.fit.BYTES_PER_PARAMETER`); at the GPU's peak memory bandwidth
(:func:`holodesk.machine.memory_bandwidth`) that is the step's floor, and our decoder reaches
:data:`DECODE_EFFICIENCY` of it. On the H100 of docs/benchmarks.md this gives 8.2 ms a token bf16, 5.8 int8 and 4.4
NF4 against 8.51, 5.69 and 4.34 measured (runs 18 and 19), and 2.5 s for a 300-token thought bf16 against the
2.53 s measured (3,096 ms with reasoning on, 564 ms off).
"""

from __future__ import annotations

from dataclasses import dataclass

from holodesk.core.fit import BYTES_PER_PARAMETER
from holodesk.machine import GpuInfo, memory_bandwidth, probe_gpus
from holodesk.policy.models import ModelSpec, find_model

DECODE_EFFICIENCY: dict[str, float] = {"bf16": 0.961, "8bit": 0.776, "4bit": 0.632}
"""Share of the bandwidth floor a decode step of our Holotron decoder reaches, per precision: docs/benchmarks.md,
run 18 (bf16 8.51 ms a token against a floor of 8.19 ms) and run 19 (int8 5.693 against 4.417 ms, NF4 4.342
against 2.744 ms), Holotron-12B on an H100. A model run on transformers' ``generate`` (the native families) is not
measured; its note says it can be several times slower (37.85 ms a token for Holotron-12B on ``generate`` in
docs/benchmarks.md run 2, against 7.42 on the static decoder then)."""

TYPICAL_THOUGHT_TOKENS = 300
"""Tokens of a typical thought: the "realistic 300-token thought" issue 32 measures (docs/benchmarks.md,
"reasoning step"). No maker publishes a typical length; the profiles publish only a budget
(:attr:`holodesk.policy.models.Profile.think_budget`), the most a thought may take."""

PRECISION_WORDS = {"bf16": "bf16", "8bit": "int8", "4bit": "NF4"}
"""How the ``precision`` settings are named in the note."""


@dataclass(frozen=True)
class ThinkingCost:
    """The expected cost of one typical thought.

    Attributes:
        seconds: added to a step. ms_per_token: one decode step. tokens: the thought's length assumed.
    """

    seconds: float
    ms_per_token: float
    tokens: int


def decode_step_bytes(spec: ModelSpec, precision: str) -> float:
    """Bytes one decode step reads: the parameters used per token (``active_parameters`` of a mixture of
    experts, else ``parameters``) at ``precision``'s bytes per parameter.

    Raises:
        KeyError: an unknown precision.
    """
    return (spec.active_parameters or spec.parameters) * BYTES_PER_PARAMETER[precision]


def estimate(spec: ModelSpec, precision: str, bandwidth: float, tokens: int = TYPICAL_THOUGHT_TOKENS) -> ThinkingCost:
    """The cost of a ``tokens``-token thought of ``spec`` at ``precision`` on a GPU of ``bandwidth`` bytes a
    second (module docstring).

    Raises:
        KeyError: an unknown precision.
    """
    ms = decode_step_bytes(spec, precision) / bandwidth / DECODE_EFFICIENCY[precision] * 1e3
    return ThinkingCost(seconds=ms * tokens / 1e3, ms_per_token=ms, tokens=tokens)


def thinking_note(*, policy: str, model: str, precision: str, gpu: GpuInfo | None,
                  bandwidth: float | None) -> str:
    """The expected cost of thinking in words, e.g. "Thinking adds about 2.5 s a step on this NVIDIA H100 80GB
    HBM3 with Holotron-12B bf16 (about 300 tokens at ~8 ms each).", or why it is not estimated.

    Args:
        policy: the ``policy`` setting (``"local"``, ``"remote"``, ``"script"``).
        model: the ``model`` setting. precision: the ``precision`` setting.
        gpu: the GPU the local model runs on (None: none found). bandwidth: its bytes a second (None: unknown).
    """
    if policy == "script":
        return "A replay file does not think: its replies are played as written."
    if policy == "remote":
        return "What thinking adds a step depends on the server (its GPU and the model it serves)."
    spec = find_model(model)
    if spec is None:
        return "The cost of thinking is not estimated for a model outside Holodesk's model table."
    if gpu is None:
        return "No NVIDIA GPU found: the cost of thinking on the CPU is not estimated (it is many times slower)."
    if bandwidth is None or precision not in DECODE_EFFICIENCY:
        return f"The cost of thinking cannot be estimated: the memory bandwidth of this {gpu.name} is unknown."
    cost = estimate(spec, precision, bandwidth)
    note = (f"Thinking adds about {cost.seconds:.1f} s a step on this {gpu.name} with {spec.display_name} "
            f"{PRECISION_WORDS[precision]} (about {cost.tokens} tokens at ~{cost.ms_per_token:.0f} ms each).")
    if spec.family.runtime == "native":
        note += (" That is the speed of Holodesk's own decoder; this model runs on transformers' generate, which "
                 "can be several times slower.")
    return note


def this_machine_note(*, policy: str, model: str, precision: str) -> str:
    """:func:`thinking_note` for the GPU of this machine the local model would use (the one with the most free
    memory, :func:`holodesk.machine.probe_gpus`) and its bandwidth (NVML); nothing is probed for a remote policy
    or a replay file."""
    gpu = probe_gpus().best if policy == "local" else None
    bandwidth = memory_bandwidth(gpu.index) if gpu is not None else None
    return thinking_note(policy=policy, model=model, precision=precision, gpu=gpu, bandwidth=bandwidth)


__all__ = ["DECODE_EFFICIENCY", "TYPICAL_THOUGHT_TOKENS", "ThinkingCost", "decode_step_bytes", "estimate",
           "thinking_note", "this_machine_note"]
