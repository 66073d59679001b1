"""The product path: :meth:`HolotronPolicy.propose` at 1920x1080 on the bench's model (``holodesk bench
--product``).

Everything a user's step runs: the default protocol's prompt through the checkpoint's chat template (the
tiny test tokenizer on random weights, which spends more tokens per character than Nemotron's), tiling,
the static decoder with grammar-constrained greedy decoding to the stop token, reply parsing. Frames are a
desktop-like picture (flat panels plus noise). Reported: the first call (compilation and warm-up),
``--product-repeats`` cold steps with one screenshot, one step with three, and an episode of
``--product-steps`` steps where each step's frame and reply become the next step's history.

Checks (listed in ``checks_failed`` when they fail): a 1080p frame is 9 tiles and 2304 image tokens, and
the warm-up and the timed steps build prompts of the same length.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from holodesk.bench.floors import peak, reset_peak
from holodesk.errors import PolicyError, PolicyOutputError

if TYPE_CHECKING:
    import argparse

    import torch

    from holodesk.core.geometry import Frame
    from holodesk.policy.base import Proposal
    from holodesk.policy.holotron.loader import LoadedHolotron

TASK = "Open the settings and turn on dark mode."
WIDTH, HEIGHT = 1920, 1080


def desktop_frame(seed: int, width: int = WIDTH, height: int = HEIGHT) -> Frame:
    """A desktop-like RGB frame: a light background, a dark top bar, a white window, +-8 noise."""
    import numpy as np

    from holodesk.core.geometry import Frame, Monitor

    rng = np.random.default_rng(seed)
    pixels = np.full((height, width, 3), 235, dtype=np.uint8)
    pixels[: height // 20] = (40, 44, 52)
    pixels[height // 5 : height // 2, width // 8 : width // 2] = (255, 255, 255)
    pixels = np.clip(pixels.astype(np.int16) + rng.integers(-8, 9, pixels.shape), 0, 255).astype(np.uint8)
    return Frame(pixels, Monitor(1, 0, 0, width, height))


def _row(proposal: Proposal, wall_ms: float, weights: int, base: int, device: torch.device) -> dict[str, Any]:
    """One step's figures: wall ms, the policy's details and stage ms, memory over the weights (CUDA only)."""
    extra = proposal.extra
    names = ("images", "tiles", "image_tokens", "prompt_tokens", "generated_tokens", "model_steps", "forced_tokens",
             "stop_reason", "reused_tokens", "prefill_tokens", "images_encoded", "decoder")
    cuda = device.type == "cuda"
    return {"wall_ms": round(wall_ms, 1), **{k: extra.get(k) for k in names},
            "timings_ms": {k: round(v, 1) for k, v in proposal.timings_ms.items()},
            "memory_at_rest_over_weights_gib": round((base - weights) / 2**30, 3) if cuda else None,
            "peak_over_weights_gib": round((peak(device) - weights) / 2**30, 3) if cuda else None,
            "action": repr(proposal.action)}


def product_path(loaded: LoadedHolotron, args: argparse.Namespace, weights: int) -> dict[str, Any]:
    """Run the steps of the module docstring with ``HolotronPolicy(loaded, decoder="static")`` and return
    the results (``checks_failed``: the failed checks, in words)."""
    from holodesk.policy.base import HistoryStep, Observation
    from holodesk.policy.holotron.policy import HolotronPolicy

    device = loaded.device
    out: dict[str, Any] = {"checks_failed": []}
    t0 = time.perf_counter()
    policy = HolotronPolicy(loaded, max_images=3, max_new_tokens=args.product_tokens, max_string_chars=24,
                            decoder="static")
    out["policy_setup_s"] = round(time.perf_counter() - t0, 2)
    out["decoder"] = policy.kernel_report()["decoder"]
    try:
        t0 = time.perf_counter()
        warm = policy.propose(Observation(task=TASK, frame=desktop_frame(args.seed)))
        out["first_step_wall_s"] = round(time.perf_counter() - t0, 2)
        print(f"product path: set up in {out['policy_setup_s']} s, first step {out['first_step_wall_s']} s",
              flush=True)

        cold = []
        for r in range(args.product_repeats):
            frame = desktop_frame(args.seed + 1000 + r)  # a new frame: nothing to resume from
            base = reset_peak(device)
            t0 = time.perf_counter()
            proposal = policy.propose(Observation(task=TASK, frame=frame))
            cold.append(_row(proposal, (time.perf_counter() - t0) * 1e3, weights, base, device))
            print(f"product 1 screenshot: {cold[-1]}", flush=True)
        out["one_screenshot"] = cold
        if cold and (cold[-1]["tiles"] != [9] or cold[-1]["image_tokens"] != 2304):
            out["checks_failed"].append(f"a 1080p frame gave {cold[-1]['tiles']} tiles / "
                                        f"{cold[-1]['image_tokens']} image tokens, expected [9] / 2304")
        if cold and warm.extra["prompt_tokens"] != cold[-1]["prompt_tokens"]:
            out["checks_failed"].append("the warm-up and the timed steps built prompts of different lengths")

        history = tuple(HistoryStep(index=i, frame=desktop_frame(args.seed + 1 + i), action=None,
                                    outcome="performed") for i in range(2))
        base = reset_peak(device)
        t0 = time.perf_counter()
        three = policy.propose(Observation(task=TASK, frame=desktop_frame(args.seed), history=history))
        out["three_screenshots"] = _row(three, (time.perf_counter() - t0) * 1e3, weights, base, device)
        print(f"product 3 screenshots: {out['three_screenshots']}", flush=True)

        episode: list[dict[str, Any]] = []
        past: list[HistoryStep] = []
        for k in range(args.product_steps):
            frame = desktop_frame(args.seed + 100 + k)
            base = reset_peak(device)
            t0 = time.perf_counter()
            step = policy.propose(Observation(task=TASK, frame=frame, history=tuple(past)))
            episode.append({"step": k + 1, **_row(step, (time.perf_counter() - t0) * 1e3, weights, base, device)})
            print(f"product episode step {k + 1}: {episode[-1]}", flush=True)
            past.append(HistoryStep(index=k, frame=frame, action=step.action, thought=step.thought, note=step.note,
                                    raw_text=step.raw_text, outcome="performed"))
        out["episode"] = episode
    except (PolicyError, PolicyOutputError) as exc:  # e.g. a reply cut at --product-tokens: a failed check
        out["checks_failed"].append(f"propose failed: {exc}"[:500])
    finally:
        policy.close()
    return out
