"""The product path: :meth:`HolotronPolicy.propose` at 1920x1080 on the bench's model (``holodesk bench
--product``).

Everything a user's step runs: the default protocol's prompt through the checkpoint's chat template (the
tiny test tokenizer on random weights, which spends more tokens per character than Nemotron's), tiling,
the static decoder with grammar-constrained greedy decoding to the stop token, reply parsing. Frames are a
desktop-like picture (flat panels plus noise). Reported: the first call (compilation and warm-up),
``--product-repeats`` cold steps with one screenshot, one step with three, and an episode of
``--product-steps`` steps where each step's frame and reply become the next step's history (from step 4 on,
the oldest screenshot leaves the window: the step resumes from the snapshot kept before it), then the first
step of another task (it resumes after the system prompt). The policy is made ready as a load ends
(:meth:`~holodesk.policy.local_core.LocalPolicy.ready`: the grammar compiled, the loaded objects frozen out of
the garbage collector's scans), and the graphs' recording ahead is started (whether or not the product's
``RECORD_AHEAD`` is on). With ``--product-gap`` above 0 the bench
first waits for that recording to end (as while the user types the task; ``recorded_ahead``: its graphs, seconds
and the wait) and then waits that long before each call, as the agent loop waits for the screen to settle;
with 0 the calls run back to back from the end of the load (``ahead_captures``: what was recorded ahead by the
end). Each timed step reports ``reused_tokens``, the prefill ms of its ``prefill_tokens``, the garbage collections
inside it (``gc_ms``, ``gc_full``), the CUDA graphs it recorded on first use, and the floor of its own new work
with the ratio to it; the kept snapshots' slots and bytes are reported once.

Checks (listed in ``checks_failed`` when they fail): a 1080p frame is 9 tiles and 2304 image tokens, and
the warm-up and the timed steps build prompts of the same length.
"""

from __future__ import annotations

import gc
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from holodesk.bench.floors import decode_step_bytes, floor_ms, param_bytes, peak, reset_peak, stage_flops
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import PolicyError, PolicyOutputError
from holodesk.policy.base import HistoryStep, Observation
from holodesk.policy.generation import GenerationOptions

if TYPE_CHECKING:
    import argparse

    import torch

    from holodesk.policy.base import Proposal
    from holodesk.policy.holotron.loader import LoadedHolotron
    from holodesk.policy.holotron.policy import HolotronPolicy

TASK = "Open the settings and turn on dark mode."
OTHER_TASK = "Find the largest file in the Downloads folder and delete it."
WIDTH, HEIGHT = 1920, 1080


def desktop_frame(seed: int, width: int = WIDTH, height: int = HEIGHT) -> Frame:
    """A desktop-like RGB frame: a light background, a dark top bar, a white window, +-8 noise."""
    rng = np.random.default_rng(seed)
    pixels = np.full((height, width, 3), 235, dtype=np.uint8)
    pixels[: height // 20] = (40, 44, 52)
    pixels[height // 5 : height // 2, width // 8 : width // 2] = (255, 255, 255)
    pixels = np.clip(pixels.astype(np.int16) + rng.integers(-8, 9, pixels.shape), 0, 255).astype(np.uint8)
    return Frame(pixels, Monitor(1, 0, 0, width, height))


def new_work_floor_ms(loaded: LoadedHolotron, floors: dict[str, Any], extra: dict[str, Any]) -> float | None:
    """The floor of a step's own new work (issue 34's yardstick), in ms: the vision tower and projector over
    the frames it encoded (``images_encoded`` frames of the step's largest tiling), the prefill of the
    ``prefill_tokens`` it computed after the ``reused_tokens`` it took from the kept state, and one decode
    step's bytes per model step of its reply (:mod:`holodesk.bench.floors`). None without measured floors."""
    model = loaded.model
    tiles = max(extra.get("tiles") or [0]) * int(extra.get("images_encoded") or 0)
    flops = stage_flops(loaded, int(extra["prefill_tokens"]), tiles, prior_tokens=int(extra["reused_tokens"]))
    vision = floor_ms(floors, flops["vision"] + flops["projector"],
                      param_bytes(model.vision_model) + param_bytes(model.multi_modal_projector) if tiles else 0)
    prefill = floor_ms(floors, flops["prefill"], param_bytes(model.language_model))
    steps = int(extra.get("model_steps") or 0)
    decode = floor_ms(floors, 0.0, decode_step_bytes(loaded, int(extra["prompt_tokens"]) + steps // 2))
    if vision is None or prefill is None or decode is None:
        return None
    return vision + prefill + decode * steps


class Collections:
    """The garbage collections while it is entered (``gc.callbacks``): ``by_generation`` (``{generation: [count,
    ms]}``, ms of host wall time inside them) and ``ms`` (their sum over the generations)."""

    def __init__(self) -> None:
        self.by_generation: dict[int, list[float]] = {}
        self._start = 0.0

    def _watch(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        entry = self.by_generation.setdefault(int(info["generation"]), [0, 0.0])
        entry[0] += 1
        entry[1] += (time.perf_counter() - self._start) * 1e3

    def __enter__(self) -> Collections:
        gc.callbacks.append(self._watch)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._watch)

    @property
    def ms(self) -> float:
        return sum(ms for _count, ms in self.by_generation.values())


def _row(proposal: Proposal, wall_ms: float, weights: int, base: int, device: torch.device,
         floor: float | None = None, collections: Collections | None = None,
         recorded: tuple[int, float] = (0, 0.0)) -> dict[str, Any]:
    """One step's figures: wall ms, the policy's details and stage ms, ``outside_stages_ms`` (wall less the
    stages: the step's host work that no stage times), ``gc_ms`` and ``gc_full`` (garbage collections during
    the step: their ms and how many were full, generation 2; with ``collections``), ``graphs_recorded`` and
    ``graphs_recorded_ms`` (``recorded``: the CUDA graphs the step recorded on first use, and the seconds that
    took), memory over the weights (CUDA only), and with ``floor`` (:func:`new_work_floor_ms`) ``floor_ms`` and
    ``over_floor`` (wall / floor)."""
    extra = proposal.extra
    names = ("images", "tiles", "image_tokens", "prompt_tokens", "generated_tokens", "model_steps", "forced_tokens",
             "stop_reason", "reused_tokens", "prefill_tokens", "images_encoded", "decoder", "sampling", "step_seed")
    cuda = device.type == "cuda"
    return {"wall_ms": round(wall_ms, 1), **{k: extra.get(k) for k in names},
            "timings_ms": {k: round(v, 1) for k, v in proposal.timings_ms.items()},
            "outside_stages_ms": round(wall_ms - sum(proposal.timings_ms.values()), 1),
            "gc_ms": None if collections is None else round(collections.ms, 1),
            "gc_full": None if collections is None else int(collections.by_generation.get(2, [0])[0]),
            "graphs_recorded": recorded[0], "graphs_recorded_ms": round(recorded[1] * 1e3, 1),
            "floor_ms": None if floor is None else round(floor, 1),
            "over_floor": None if not floor else round(wall_ms / floor, 3),
            "memory_at_rest_over_weights_gib": round((base - weights) / 2**30, 3) if cuda else None,
            "peak_over_weights_gib": round((peak(device) - weights) / 2**30, 3) if cuda else None,
            "action": repr(proposal.action)}


def _make_ready(policy: HolotronPolicy) -> None:
    """As a load ends (the grammar compiled, the loaded objects frozen out of the collector's scans), then the
    static engine's recording ahead started, whatever ``engine.RECORD_AHEAD`` says for the product (once)."""
    policy.ready()
    if policy.engine is not None:
        policy.engine.start_recording_ahead()


def _ahead(policy: HolotronPolicy, what: str, *, wait: bool = False) -> dict[str, Any]:
    """The static engine's graphs recorded ahead (``StaticEngine.describe()["ahead_captures"]``), printed as
    ``what``; with ``wait``, after waiting for its recording thread to end (``wait_s``: how long that took)."""
    t0 = time.perf_counter()
    if wait and policy.engine is not None:
        policy.engine.wait_recorded()
    ahead = {**policy.kernel_report()["decoder"].get("ahead_captures", {}),
             **({"wait_s": round(time.perf_counter() - t0, 2)} if wait else {})}
    print(f"product {what}: {ahead}", flush=True)
    return ahead


def product_path(loaded: LoadedHolotron, args: argparse.Namespace, weights: int,
                 floors: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the steps of the module docstring with ``HolotronPolicy(loaded, decoder="static")``, made ready and
    closed as the product's load and close do, and return
    the results (``checks_failed``: the failed checks, in words); with measured ``floors`` each timed step
    also gets the floor of its own new work (:func:`new_work_floor_ms`)."""
    # lazy: the Holotron policy module loads transformers and the runtime (heavy; the bench starts without them)
    from holodesk.policy.holotron.policy import HolotronPolicy

    device = loaded.device
    out: dict[str, Any] = {"checks_failed": []}

    def recorded() -> tuple[int, float]:
        """The graphs the static decoder has recorded on first use since the policy was made, and their seconds."""
        lazy = policy.kernel_report()["decoder"].get("lazy_captures") or {}
        return int(lazy.get("count", 0)), float(lazy.get("seconds", 0.0))

    def timed(observation: Observation) -> tuple[Proposal, dict[str, Any]]:
        """One timed step after ``gap`` seconds: the proposal and its row (:func:`_row`), memory peaks counted from
        the step's start."""
        time.sleep(gap)
        before = recorded()
        base = reset_peak(device)
        with Collections() as collections:
            t0 = time.perf_counter()
            proposal = policy.propose(observation)
            wall = (time.perf_counter() - t0) * 1e3
        floor = new_work_floor_ms(loaded, floors, proposal.extra) if floors else None
        after = recorded()
        return proposal, _row(proposal, wall, weights, base, device, floor, collections,
                              (after[0] - before[0], after[1] - before[1]))

    t0 = time.perf_counter()
    policy = HolotronPolicy(loaded, GenerationOptions(max_images=3, max_reply_tokens=args.product_tokens,
                                                      max_string_chars=24), decoder="static")
    _make_ready(policy)
    out["policy_setup_s"] = round(time.perf_counter() - t0, 2)
    out["decoder"] = policy.kernel_report()["decoder"]
    gap = max(0.0, float(args.product_gap))
    try:
        if gap > 0:
            out["recorded_ahead"] = _ahead(policy, "graphs recorded ahead before the first step", wait=True)
        t0 = time.perf_counter()
        warm = policy.propose(Observation(task=TASK, frame=desktop_frame(args.seed)))
        out["first_step_wall_s"] = round(time.perf_counter() - t0, 2)
        print(f"product path: set up in {out['policy_setup_s']} s, first step {out['first_step_wall_s']} s",
              flush=True)

        cold = []
        for r in range(args.product_repeats):
            # a new frame: nothing to resume from
            cold.append(timed(Observation(task=TASK, frame=desktop_frame(args.seed + 1000 + r)))[1])
            print(f"product 1 screenshot: {cold[-1]}", flush=True)
        out["one_screenshot"] = cold
        if cold and (cold[-1]["tiles"] != [9] or cold[-1]["image_tokens"] != 2304):
            out["checks_failed"].append(f"a 1080p frame gave {cold[-1]['tiles']} tiles / "
                                        f"{cold[-1]['image_tokens']} image tokens, expected [9] / 2304")
        if cold and warm.extra["prompt_tokens"] != cold[-1]["prompt_tokens"]:
            out["checks_failed"].append("the warm-up and the timed steps built prompts of different lengths")

        history = tuple(HistoryStep(index=i, frame=desktop_frame(args.seed + 1 + i), action=None,
                                    outcome="performed") for i in range(2))
        out["three_screenshots"] = timed(Observation(task=TASK, frame=desktop_frame(args.seed), history=history))[1]
        print(f"product 3 screenshots: {out['three_screenshots']}", flush=True)

        episode: list[dict[str, Any]] = []
        past: list[HistoryStep] = []
        for k in range(args.product_steps):
            frame = desktop_frame(args.seed + 100 + k)
            step, row = timed(Observation(task=TASK, frame=frame, history=tuple(past)))
            episode.append({"step": k + 1, **row})
            print(f"product episode step {k + 1}: {episode[-1]}", flush=True)
            past.append(HistoryStep(index=k, frame=frame, action=step.action, thought=step.thought, note=step.note,
                                    raw_text=step.raw_text, outcome="performed"))
        out["episode"] = episode
        # a second task: the system prompt and tool schema come from the kept state
        out["next_task"] = timed(Observation(task=OTHER_TASK, frame=desktop_frame(args.seed + 500)))[1]
        print(f"product next task, step 1: {out['next_task']}", flush=True)
        out["snapshots"] = policy.kernel_report()["decoder"].get("snapshots")
        print(f"product kept snapshots: {out['snapshots']}", flush=True)
        out["ahead_captures"] = _ahead(policy, "graphs recorded ahead, at the end")
    except (PolicyError, PolicyOutputError) as exc:  # e.g. a reply cut at --product-tokens: a failed check
        out["checks_failed"].append(f"propose failed: {exc}"[:500])
    finally:
        policy.close()
    return out
