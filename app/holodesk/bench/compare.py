"""The static decoder against the reference: transformers' own forward and cache (``runtime.generate``, the
policy's ``stock`` decoder) on the same prompt, and bitsandbytes 8-bit / 4-bit LM weights against bf16.

Agreement is measured on one ``--history-size`` screenshot prompt (:mod:`holodesk.bench.runs`): greedy
tokens position by position and their common prefix, and the relative L2 error of the logits after the
prompt, which :class:`FirstLogits` takes from the decoder through the ``constraint`` hook of
:func:`~holodesk.policy.holotron.runtime.decode_loop`.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from holodesk.bench.floors import allocated, decode_step_bytes, floor_ms, param_bytes, peak, reset_peak
from holodesk.bench.runs import (
    prompt_ids,
    prompt_images,
    random_frame,
    reasoning_reply,
    reasoning_step,
    size,
    timed_step,
)
from holodesk.policy.holotron import runtime
from holodesk.policy.holotron.engine import StaticEngine

if TYPE_CHECKING:
    import argparse

    import torch

    from holodesk.policy.holotron.loader import LoadedHolotron
    from holodesk.policy.holotron.runtime import Constraint, Generation, PromptImage


class FirstLogits:
    """Takes the place of a grammar in :func:`decode_loop`: allows every token and keeps a float32 copy of
    the first logits the decoder hands over (those after the prompt) in :attr:`first` (``[vocab]``)."""

    def __init__(self) -> None:
        self.first: torch.Tensor | None = None

    def start(self) -> None:
        """A new reply begins."""
        self.first = None

    def mask(self, logits: torch.Tensor) -> None:
        """Keep the first logits; nothing is masked."""
        if self.first is None:
            self.first = logits.detach().float().clone()

    def accept(self, token: int) -> bool:
        """Every token is allowed."""
        return True

    def finished(self) -> bool:
        """Never: the reply runs to ``max_new_tokens``."""
        return False

    def forced_tokens(self, budget: int) -> list[int]:
        """None: the model chooses every token."""
        return []

    def forced_stop(self) -> int | None:
        """Never: the reply runs to ``max_new_tokens``."""
        return None

    def as_constraint(self) -> Constraint:
        """This object typed as the ``constraint`` argument (``decode_loop`` calls only these methods)."""
        return cast("Constraint", self)


def agreement(tokens: Sequence[int], logits: torch.Tensor, ref_tokens: Sequence[int],
              ref_logits: torch.Tensor) -> dict[str, Any]:
    """Greedy-token agreement (``tokens_equal`` position-wise, ``equal_prefix``) of ``tokens`` with
    ``ref_tokens`` (``n`` of them) and the relative L2 error of ``logits`` against ``ref_logits``."""
    equal = sum(int(a == b) for a, b in zip(tokens, ref_tokens, strict=False))
    prefix = 0
    for a, b in zip(tokens, ref_tokens, strict=False):
        if a != b:
            break
        prefix += 1
    ref = ref_logits.float().cpu()
    rel = float((logits.float().cpu() - ref).norm() / ref.norm())
    return {"n": len(ref_tokens), "tokens_equal": equal, "equal_prefix": prefix, "first_logits_rel_err": rel}


def one_screenshot(loaded: LoadedHolotron, args: argparse.Namespace) -> tuple[list[int], list[PromptImage]]:
    """The prompt of one ``--history-size`` screenshot shared by the comparisons (ids, images)."""
    frames = [random_frame(*size(args.history_size), seed=0)]
    return prompt_ids(loaded, frames, args, seed=0), prompt_images(loaded, frames)


def static_reference(engine: StaticEngine, ids: list[int], images: Sequence[PromptImage],
                     reply: int) -> dict[str, Any]:
    """A cold static-decoder reply to ``ids``: ``tokens`` and ``first_logits`` (on the CPU)."""
    probe = FirstLogits()
    engine.reset()
    generation, _ = engine.run(ids, images, max_new_tokens=reply, constraint=probe.as_constraint(),
                               reasoning=False, max_think_tokens=0)
    engine.reset()
    assert probe.first is not None  # decode_loop masks before its first choice
    return {"tokens": list(generation.token_ids), "first_logits": probe.first.cpu()}


def stock_baseline(engine: StaticEngine, args: argparse.Namespace, fast: dict[str, Any]) -> dict[str, Any]:
    """``runtime.generate`` (the stock decoder) on :func:`one_screenshot`'s prompt: prefill ms and decode
    ms per model step (``decode_ms_per_token``: one token each here; median of ``max(1, --repeats - 1)``
    after a warm-up), and its agreement with the static decoder's reply ``fast`` (:func:`static_reference`)."""
    loaded = engine.loaded
    ids, images = one_screenshot(loaded, args)
    n = args.reply_tokens

    def reply(constraint: Constraint | None = None) -> Generation:
        return runtime.generate(loaded, ids, images, max_new_tokens=n, constraint=constraint, reasoning=False,
                                max_think_tokens=0)

    reply()
    timed = [reply() for _ in range(max(1, args.repeats - 1))]
    probe = FirstLogits()
    stock = reply(probe.as_constraint())
    assert probe.first is not None
    prefill = statistics.median(g.timings_ms["prefill"] for g in timed)
    decode = statistics.median(g.timings_ms["decode"] / max(1, g.model_steps) for g in timed)
    return {"prompt_tokens": len(ids), "prefill_ms": round(prefill, 2), "decode_ms_per_token": round(decode, 3),
            "agreement": agreement(fast["tokens"], fast["first_logits"], stock.token_ids, probe.first)}


def quant_run(with_stops: LoadedHolotron, args: argparse.Namespace, ref: dict[str, Any],
              floors: dict[str, Any] | None = None) -> dict[str, Any]:
    """A static engine on the weights of ``with_stops`` (bf16 or its ``quantization``; the engine's copy has no
    stop tokens: fixed-length replies, as the measured runs): one cold step on the one-screenshot prompt after a
    warm-up, memory at rest and peak (whole model), speed, and drift from the bf16 reply ``ref``; with measured
    ``floors`` also the decode floor from the bytes a step reads as stored
    (:func:`~holodesk.bench.floors.decode_step_bytes`, the reply's middle token) and the fraction of it
    reached (floor / measured); with ``--think-tokens`` also the reasoning-length step
    (:func:`~holodesk.bench.runs.reasoning_step`) under ``"reasoning"``."""
    loaded = dataclasses.replace(with_stops, eos_ids=())
    device = loaded.device
    ids, images = one_screenshot(loaded, args)
    reply = max(args.reply_tokens, reasoning_reply(loaded, args.think_tokens))
    engine = StaticEngine(loaded, max_len=len(ids) + reply + 64, eager=args.eager)
    try:
        at_rest = allocated(device)
        timed_step(engine, ids, images, args.reply_tokens, 0)  # warm-up
        engine.reset()
        step = timed_step(engine, ids, images, args.reply_tokens, 0)
        top = peak(device)
        mine = static_reference(engine, ids, images, args.reply_tokens)
        step_bytes = decode_step_bytes(loaded, len(ids) + args.reply_tokens // 2)
        floor = floor_ms(floors or {}, 0.0, step_bytes)
        return {"engine": engine.describe(), "memory_at_rest_bytes": at_rest, "peak_total_bytes": top,
                "lm_bytes": param_bytes(loaded.model.language_model), "decode_bytes_per_token": step_bytes,
                **{k: round(step[k], 3) for k in ("ttfa_ms", "vision_ms", "prefill_ms", "decode_ms_per_token")},
                "decode_floor_ms": None if floor is None else round(floor, 4),
                "decode_fraction_of_floor": None if floor is None else round(floor / step["decode_ms_per_token"], 3),
                "vs_bf16": agreement(mine["tokens"], mine["first_logits"], ref["tokens"], ref["first_logits"]),
                "reasoning": reasoning_step(engine, with_stops, args, floors, 0) if args.think_tokens else None}
    finally:
        del engine
        gc.collect()


SIDE_BY_SIDE = ("decode_ms_per_token", "decode_floor_ms", "decode_fraction_of_floor", "ttfa_ms",
                "peak_total_bytes", "reasoning")
"""The figures :func:`quant_runs` puts side by side per mode."""


def quant_runs(build: Callable[[str], LoadedHolotron], args: argparse.Namespace, ref: dict[str, Any],
               floors: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`quant_run` for each mode of ``--quant`` (``bf16``, ``8bit``, ``4bit``); ``build(mode)`` returns a
    fresh LoadedHolotron with those weights (the previous one is freed first, so its memory is not counted).
    Returns each mode's run by name and ``side_by_side``: :data:`SIDE_BY_SIDE` per mode that ran."""
    import torch  # lazy: torch (optional: the local extra)

    out: dict[str, Any] = {}
    for mode in (m for m in args.quant.split(",") if m):
        if mode != "bf16" and not torch.cuda.is_available():
            out[mode] = {"error": "bitsandbytes needs CUDA"}
            continue
        gc.collect()
        if torch.cuda.is_available():  # a bf16 row on a CPU-only machine has no CUDA allocator
            torch.cuda.empty_cache()
            reset_peak(torch.device("cuda"))
        try:
            t0 = time.perf_counter()
            loaded = build(mode)
            built = round(time.perf_counter() - t0, 1)
            out[mode] = {"build_s": built, **quant_run(loaded, args, ref, floors)}
            del loaded
        except Exception as exc:  # one failing mode must not hide the others: reported in the JSON
            out[mode] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        print(f"{mode}: {out[mode]}", flush=True)
    out["side_by_side"] = {mode: {k: run.get(k) for k in SIDE_BY_SIDE} for mode, run in out.items()
                           if "error" not in run}
    print(f"side by side: {out['side_by_side']}", flush=True)
    return out
