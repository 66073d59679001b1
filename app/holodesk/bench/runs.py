"""The measured runs: every step goes through :meth:`StaticEngine.run`, the call the policy makes.

A bench prompt is token ids and RGB frames, as the policy hands them to the engine: ``--prompt-tokens``
random text ids, then per screenshot ``--step-text-tokens`` text ids, ``<img>``, one ``<image>`` per image
token of the frame (256 per tile, the checkpoint's tiling), ``</img>`` and, for an earlier step of an
episode, that step's reply; then 8 ids for the assistant header. Frames are random uint8 pixels made
outside the timed region. Replies are a fixed ``--reply-tokens`` long: the engine's model is given no stop
token (``eos_ids=()``) and no grammar, so every reply runs to ``max_new_tokens``.

The agent-loop reply (:func:`agent_reply_runs`) is the exception: :data:`AGENT_REPLY` written under the
default protocol's grammar (:class:`ScriptedReply` puts the script's next token where the model chooses,
the grammar forces the rest), once fed one model step per token and once with jump-forward.

Stage timings are the engine's own (``Generation.timings_ms``: preprocess = tiling, vision, prefill,
decode; each ends with a device synchronisation); TTFA is the host wall time of the ``run`` call. Decode
ms/token is the decode time over the decoder's steps (``Generation.model_steps``: one per token here but
the last, whose step would only give logits that nothing reads). Peak memory is torch's allocator peak
during the call, over the memory held before it and over the weights.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from holodesk.bench.floors import decode_step_bytes, floor_ms, param_bytes, peak, reset_peak, stage_flops
from holodesk.policy.holotron.runtime import Constraint, Sampler
from holodesk.policy.registry import get_protocol

if TYPE_CHECKING:
    import argparse

    import torch

    from holodesk.policy.holotron.engine import StaticEngine
    from holodesk.policy.holotron.loader import LoadedHolotron
    from holodesk.policy.holotron.runtime import PromptImage

HEADER_TOKENS = 8
"""Text ids after the last screenshot (the assistant header of a real prompt)."""
AGENT_REPLY = ('{"note": "Settings window is open; dark mode is under Appearance.", "thought": "Click the '
               'Appearance tab in the sidebar to find the dark mode switch.", "tool_call": {"tool_name": '
               '"click_desktop", "element": "Appearance tab in the left sidebar", "x": 112, "y": 348}}')
"""A typical agent-loop-v1 reply (note, thought, a click with its element), compact JSON as the grammar
writes it."""


def size(text: str) -> tuple[int, int]:
    """``"1920x1080"`` -> ``(1920, 1080)``."""
    w, h = (int(v) for v in text.lower().split("x"))
    return w, h


def random_frame(width: int, height: int, seed: int) -> np.ndarray[Any, Any]:
    """Random RGB uint8 pixels ``(height, width, 3)`` standing in for a capture."""
    return np.random.default_rng(int(seed)).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def image_tokens(loaded: LoadedHolotron, width: int, height: int) -> int:
    """``<image>`` tokens of a ``width x height`` frame with the checkpoint's tiling."""
    return loaded.info.tiling(width, height).tokens


def prompt_images(loaded: LoadedHolotron, frames: Sequence[np.ndarray[Any, Any]]) -> list[PromptImage]:
    """The engine's ``images`` argument for ``frames``: each pixel array with its tiling, planned once."""
    return [(pixels, loaded.info.tiling(int(pixels.shape[1]), int(pixels.shape[0]))) for pixels in frames]


def first_text_id(loaded: LoadedHolotron) -> int:
    """The smallest id above every added (special) token of the tokenizer (the test tokenizer's, or the tekken
    stand-in's 1,000 reserved ids) and the image markers: random ids from there on are plain text, so a bench
    prompt holds exactly the image runs it was built with."""
    tokenizer = loaded.tokenizer
    special = [*tokenizer.all_special_ids, *getattr(tokenizer, "added_tokens_decoder", {}),
               loaded.img_start_id, loaded.img_end_id, loaded.image_token_id]
    return max(int(t) for t in special) + 1


def text_ids(loaded: LoadedHolotron, n: int, seed: int) -> list[int]:
    """``n`` random text ids in ``[first_text_id, vocab)``, the same for the same seed."""
    vocab = int(loaded.model.config.text_config.vocab_size)
    return [int(t) for t in np.random.default_rng(seed).integers(first_text_id(loaded), vocab, size=n)]


def prompt_ids(loaded: LoadedHolotron, frames: Sequence[np.ndarray[Any, Any]], args: argparse.Namespace, seed: int,
               replies: Sequence[Sequence[int]] = ()) -> list[int]:
    """Token ids of a bench prompt over ``frames`` (module docstring); ``replies[i]`` follows frame ``i``."""
    ids = text_ids(loaded, args.prompt_tokens, seed)
    for i, pixels in enumerate(frames):
        ids += text_ids(loaded, args.step_text_tokens, seed * 1009 + i + 1)
        n = image_tokens(loaded, int(pixels.shape[1]), int(pixels.shape[0]))
        ids += [loaded.img_start_id, *([loaded.image_token_id] * n), loaded.img_end_id]
        if i < len(replies):
            ids += list(replies[i])
    return ids + text_ids(loaded, HEADER_TOKENS, seed * 1009)


def longest_prompt(loaded: LoadedHolotron, args: argparse.Namespace) -> int:
    """Tokens the engine's cache must hold for every run of ``args``, reply included."""
    per_frame = args.step_text_tokens + 2
    hw = size(args.history_size)
    shot = per_frame + image_tokens(loaded, *hw) + args.reply_tokens
    screenshots = [int(v) for v in args.history.split(",") if v] + [args.episode_steps, 1]
    lengths = [per_frame + image_tokens(loaded, *size(s)) for s in args.sizes.split(",") if s]
    lengths += [n * shot for n in screenshots]
    reply = max(args.reply_tokens, agent_reply_budget(loaded), reasoning_reply(loaded, args.think_tokens))
    return args.prompt_tokens + HEADER_TOKENS + max(lengths) + reply + 1


def agent_reply_budget(loaded: LoadedHolotron) -> int:
    """``max_new_tokens`` of the agent-loop reply runs: :data:`AGENT_REPLY`'s tokens and a margin."""
    return len(loaded.tokenizer.encode(AGENT_REPLY, add_special_tokens=False)) + 16


def timed_step(engine: StaticEngine, ids: list[int], images: Sequence[PromptImage], reply: int, weights: int,
               snapshot_at: Sequence[int] = (), constraint: Constraint | None = None,
               jump_forward: bool = True, think_tokens: int = 0, sampler: Sampler | None = None) -> dict[str, Any]:
    """One :meth:`StaticEngine.run` of at most ``reply`` tokens (after at most ``think_tokens`` of thinking
    when > 0), greedy or with ``sampler``'s choice, timed. Returns the stage ms, ``ttfa_ms``,
    ``decode_ms_per_token`` (per model step), the engine's details, ``tokens``, ``reply_tokens``,
    ``model_steps``, ``forced_tokens``, ``text`` and peak bytes over rest and ``weights``."""
    device = engine.loaded.device
    base = reset_peak(device)
    t0 = time.perf_counter()
    generation, details = engine.run(ids, images, snapshot_at=snapshot_at, max_new_tokens=reply,
                                     constraint=constraint, reasoning=think_tokens > 0,
                                     max_think_tokens=think_tokens, jump_forward=jump_forward, sampler=sampler)
    wall = (time.perf_counter() - t0) * 1e3
    ms = {f"{stage}_ms": float(v) for stage, v in generation.timings_ms.items()}
    top = peak(device)
    return {**ms, "ttfa_ms": wall, "decode_ms_per_token": ms["decode_ms"] / max(1, generation.model_steps),
            "reply_tokens": len(generation.token_ids), "model_steps": generation.model_steps,
            "forced_tokens": generation.forced_tokens, "text": generation.text,
            "prompt_tokens": len(ids), "reused_tokens": int(details["reused_tokens"]),
            "prefill_tokens": int(details["prefill_tokens"]), "images_encoded": int(details["images_encoded"]),
            "tokens": list(generation.token_ids), "memory_at_rest_bytes": base - weights,
            "peak_over_rest_bytes": top - base, "peak_over_weights_bytes": top - weights}


def _median(samples: list[dict[str, Any]]) -> dict[str, float]:
    keys = [k for k, v in samples[0].items() if isinstance(v, int | float)]
    return {k: round(statistics.median(float(s[k]) for s in samples), 3) for k in keys}


def _memory_text(row: dict[str, Any], cuda: bool) -> str:
    if not cuda:
        return "peak memory: n/a on the CPU"
    return f"peak over weights {row['peak_over_weights_bytes'] / 2**30:.3f} GiB"


def frame_runs(engine: StaticEngine, args: argparse.Namespace, floors: dict[str, Any],
               weights: dict[str, int]) -> list[dict[str, Any]]:
    """Cold steps with one screenshot per ``--sizes`` entry: a warm-up, then ``--repeats`` timed steps on
    new frames; medians, the floors of each stage and the ratios to them."""
    loaded = engine.loaded
    cuda = loaded.device.type == "cuda"
    rows = []
    for text in (s for s in args.sizes.split(",") if s):
        w, h = size(text)
        samples = []
        for r in range(args.repeats + 1):
            engine.reset()
            pixels = random_frame(w, h, r)
            step = timed_step(engine, prompt_ids(loaded, [pixels], args, seed=r), prompt_images(loaded, [pixels]),
                              args.reply_tokens, weights["total"])
            if r:  # r == 0 is the warm-up
                samples.append(step)
        med = _median(samples)
        tiles = image_tokens(loaded, w, h) // loaded.info.tokens_per_tile
        flops = stage_flops(loaded, int(med["prompt_tokens"]), tiles)
        step_bytes = decode_step_bytes(loaded, int(med["prompt_tokens"]) + args.reply_tokens // 2)
        vision_floor = floor_ms(floors, flops["vision"] + flops["projector"], weights["vision"] + weights["projector"])
        prefill_floor = floor_ms(floors, flops["prefill"], weights["lm"])
        decode_floor = floor_ms(floors, 0.0, step_bytes)
        ttfa_floor = None
        if vision_floor is not None and prefill_floor is not None and decode_floor is not None:
            ttfa_floor = vision_floor + prefill_floor + decode_floor * (args.reply_tokens - 1)
        row: dict[str, Any] = {"size": text, "tiles": tiles, **med,
                               "prefill_samples_ms": [round(s["prefill_ms"], 1) for s in samples],
                               "flops": flops, "decode_bytes_per_token": step_bytes,
                               "floor_ms": {"vision": vision_floor, "prefill": prefill_floor,
                                            "decode_per_token": decode_floor, "ttfa": ttfa_floor}}
        if ttfa_floor and decode_floor:
            row["ttfa_over_floor"] = round(med["ttfa_ms"] / ttfa_floor, 3)
            row["decode_fraction_of_floor"] = round(decode_floor / med["decode_ms_per_token"], 3)
        rows.append(row)
        print(f"{text}: tiles {tiles} tokens {med['prompt_tokens']:.0f} | pre {med['preprocess_ms']:.1f} vision "
              f"{med['vision_ms']:.1f} prefill {med['prefill_ms']:.1f} decode {med['decode_ms']:.1f} "
              f"({med['decode_ms_per_token']:.2f}/tok) TTFA {med['ttfa_ms']:.1f} ms | {_memory_text(med, cuda)} | "
              f"floors {row['floor_ms']} | TTFA/floor {row.get('ttfa_over_floor')} decode floor/measured "
              f"{row.get('decode_fraction_of_floor')}", flush=True)
    return rows


class ScriptedReply:
    """Takes the place of the grammar in :func:`decode_loop` so that the reply is ``script``: the real
    :class:`Constraint` (its mask is computed, its matcher accepts every token and forces what the grammar
    forces), with the model's choice replaced by the first token of the tokenizer's encoding of the rest
    of the script (a stop token once it is written). The model still runs every step it would."""

    def __init__(self, inner: Constraint, tokenizer: Any, script: str, stop: int) -> None:
        self.inner, self.tokenizer, self.script, self.stop = inner, tokenizer, script, stop
        self.tokens: list[int] = []

    def start(self) -> None:
        """A new reply begins."""
        self.inner.start()
        self.tokens = []

    def mask(self, logits: torch.Tensor) -> None:
        """The grammar's mask (for its cost), then every token but the script's next one masked."""
        self.inner.mask(logits)
        written = str(self.tokenizer.decode(self.tokens))
        rest = self.script[len(written):] if self.script.startswith(written) else ""
        ids = self.tokenizer.encode(rest, add_special_tokens=False) if rest else [self.stop]
        logits.fill_(float("-inf"))
        chosen = int(ids[0])
        logits[chosen:chosen + 1].fill_(0.0)  # `logits[chosen] = 0.0` copies from pageable memory: a host wait

    def accept(self, token: int) -> bool:
        """Pass the choice to the grammar."""
        self.tokens.append(int(token))
        return self.inner.accept(token)

    def finished(self) -> bool:
        """The grammar's answer."""
        return self.inner.finished()

    def forced_tokens(self, budget: int) -> list[int]:
        """What the grammar forces (:meth:`Constraint.forced_tokens`)."""
        run = self.inner.forced_tokens(budget)
        self.tokens += run
        return run

    def forced_stop(self) -> int | None:
        """The grammar's answer."""
        return self.inner.forced_stop()

    def as_constraint(self) -> Constraint:
        """This object typed as the ``constraint`` argument (``decode_loop`` calls only these methods)."""
        return cast("Constraint", self)


def agent_reply_runs(engine: StaticEngine, loaded: LoadedHolotron, args: argparse.Namespace,
                     weights: dict[str, int]) -> dict[str, Any]:
    """Cold one-screenshot ``--history-size`` steps whose reply is :data:`AGENT_REPLY` under the default
    protocol's grammar, one model step per token and with jump-forward: a warm-up, then ``--repeats``
    timed steps each; medians of the step (TTFA), decode, tokens per reply and model steps per reply.

    Args:
        loaded: the model with its stop tokens (the engine's copy has none).
    Returns:
        ``{"text", "rows": [one step per token, jump-forward], "steps_saved", "checks_failed"}`` (a reply
        that is not the script is a failed check).
    """
    constraint = Constraint(loaded, get_protocol("agent-loop-v1").json_schema())
    script = ScriptedReply(constraint, loaded.tokenizer, AGENT_REPLY, stop=int(loaded.eos_ids[0]))
    w, h = size(args.history_size)
    budget = agent_reply_budget(loaded)
    out: dict[str, Any] = {"text": AGENT_REPLY, "size": args.history_size, "rows": [], "checks_failed": []}
    for jump in (False, True):
        samples = []
        for r in range(args.repeats + 1):
            engine.reset()
            pixels = random_frame(w, h, 300 + r)
            step = timed_step(engine, prompt_ids(loaded, [pixels], args, seed=300 + r), prompt_images(loaded, [pixels]),
                              budget, weights["total"], constraint=script.as_constraint(), jump_forward=jump)
            if step["text"] != AGENT_REPLY:
                out["checks_failed"].append(f"agent reply (jump_forward={jump}) is not the script: {step['text']!r}")
            if r:  # r == 0 is the warm-up
                samples.append(step)
        med = _median(samples)
        out["rows"].append({"jump_forward": jump, **{k: med[k] for k in (
            "reply_tokens", "model_steps", "forced_tokens", "ttfa_ms", "vision_ms", "prefill_ms", "decode_ms",
            "decode_ms_per_token")}})
    off, on = out["rows"]
    out["steps_saved"] = round(1.0 - on["model_steps"] / max(1.0, off["model_steps"]), 3)
    print(f"agent reply at {args.history_size}: {on['reply_tokens']:.0f} tokens ({on['forced_tokens']:.0f} forced); "
          f"model steps {off['model_steps']:.0f} one per token, {on['model_steps']:.0f} with jump-forward "
          f"({out['steps_saved']:.0%} fewer); decode {off['decode_ms']:.1f} -> {on['decode_ms']:.1f} ms, "
          f"step (TTFA) {off['ttfa_ms']:.1f} -> {on['ttfa_ms']:.1f} ms", flush=True)
    return out


def reasoning_reply(loaded: LoadedHolotron, think: int) -> int:
    """Cache tokens the reply of :func:`reasoning_step` needs after its prompt: its ``max_new_tokens`` (the thought,
    ``</think>`` and :func:`agent_reply_budget`) plus the thinking budget that :meth:`StaticEngine.fits` adds to
    it (0 when ``think`` is 0)."""
    return (think + 1 + agent_reply_budget(loaded)) + think if think > 0 else 0


SAMPLED = {"temperature": 0.8, "top_p": 0.95}
"""The sampled reasoning step's settings: Holotron-12B's published temperature (policy/models.py) with a nucleus
cut (Holotron-3-Nano's 0.95), so the step pays the vocabulary sort a sampled token can cost."""


def reasoning_step(engine: StaticEngine, loaded: LoadedHolotron, args: argparse.Namespace,
                   floors: dict[str, Any] | None, weights: int) -> dict[str, Any]:
    """A cold one-screenshot ``--history-size`` step whose reply is a thought of ``--think-tokens`` tokens
    (the model's own tokens until the thinking budget forces ``</think>``) and then :data:`AGENT_REPLY` under
    the default protocol's grammar with jump-forward (issue 34: reasoning-length replies): a warm-up, then
    ``--repeats`` timed steps, medians; then the same steps with the thought sampled (:data:`SAMPLED`: the
    nucleus path, a sort of the vocabulary a token) under ``"sampled"``.

    Args:
        engine: built on ``loaded`` without stop tokens (fixed-length thinking), its cache large enough
            (:func:`longest_prompt`).
        loaded: the model with its stop tokens (the script's stop token).
        floors: measured floors, or None/empty (no floor figures).
        weights: bytes of the whole model (memory figures over them).
    Returns:
        ``{"thought_tokens", "reply_tokens", "model_steps", "model_steps_per_token", "ttfa_ms", "vision_ms",
        "prefill_ms", "decode_ms", "decode_ms_per_step", "floor_ms" (vision + prefill + one decode step's
        bytes per model step), "over_floor", "text_ok", "sampled": {"ttfa_ms", "decode_ms", "model_steps",
        "decode_ms_per_step", "over_floor", "text_ok"}}``.
    """
    constraint = Constraint(loaded, get_protocol("agent-loop-v1").json_schema())
    script = ScriptedReply(constraint, loaded.tokenizer, AGENT_REPLY, stop=int(loaded.eos_ids[0]))
    w, h = size(args.history_size)
    think = args.think_tokens

    def steps(sampled: bool) -> tuple[dict[str, float], bool]:
        samples, text_ok = [], True
        for r in range(args.repeats + 1):
            engine.reset()
            pixels = random_frame(w, h, 500 + r)
            sampler = Sampler(**SAMPLED, seed=r, device=loaded.device) if sampled else None
            step = timed_step(engine, prompt_ids(loaded, [pixels], args, seed=500 + r),
                              prompt_images(loaded, [pixels]), think + 1 + agent_reply_budget(loaded), weights,
                              constraint=script.as_constraint(), think_tokens=think,  # the budget counts the
                              sampler=sampler)  # thought and its </think> too
            end = loaded.think_end_id
            thought = step["tokens"].index(end) if end in step["tokens"] else len(step["tokens"])
            text_ok = text_ok and str(step["text"]).endswith(AGENT_REPLY)
            if r:  # r == 0 is the warm-up
                samples.append({**step, "thought_tokens": thought})
        return _median(samples), text_ok

    med, text_ok = steps(sampled=False)
    drawn, drawn_ok = steps(sampled=True)
    out: dict[str, Any] = {k: med[k] for k in ("thought_tokens", "reply_tokens", "model_steps", "ttfa_ms",
                                               "vision_ms", "prefill_ms", "decode_ms", "prompt_tokens")}
    out["model_steps_per_token"] = round(med["model_steps"] / max(1.0, med["reply_tokens"]), 3)
    out["decode_ms_per_step"] = round(med["decode_ms"] / max(1.0, med["model_steps"]), 3)
    out["text_ok"] = text_ok
    model = loaded.model
    tiles = image_tokens(loaded, w, h) // loaded.info.tokens_per_tile
    flops = stage_flops(loaded, int(med["prompt_tokens"]), tiles)
    vision = floor_ms(floors or {}, flops["vision"] + flops["projector"],
                      param_bytes(model.vision_model) + param_bytes(model.multi_modal_projector))
    prefill = floor_ms(floors or {}, flops["prefill"], param_bytes(model.language_model))
    decode = floor_ms(floors or {}, 0.0, decode_step_bytes(loaded, int(med["prompt_tokens"] + med["reply_tokens"] / 2)))
    floor = None if vision is None or prefill is None or decode is None else (
        vision + prefill + decode * med["model_steps"])
    out["decode_floor_ms_per_step"] = None if decode is None else round(decode, 4)
    out["floor_ms"] = None if floor is None else round(floor, 1)
    out["over_floor"] = None if not floor else round(med["ttfa_ms"] / floor, 3)
    sampled_floor = None if vision is None or prefill is None or decode is None else (
        vision + prefill + decode * drawn["model_steps"])
    out["sampled"] = {**{k: drawn[k] for k in ("thought_tokens", "ttfa_ms", "decode_ms", "model_steps")},
                      "decode_ms_per_step": round(drawn["decode_ms"] / max(1.0, drawn["model_steps"]), 3),
                      "over_floor": None if not sampled_floor else round(drawn["ttfa_ms"] / sampled_floor, 3),
                      "text_ok": drawn_ok, **SAMPLED}
    print(f"reasoning step at {args.history_size}: thought {out['thought_tokens']:.0f} + action tokens = "
          f"{out['reply_tokens']:.0f} tokens in {out['model_steps']:.0f} model steps "
          f"({out['model_steps_per_token']} per token), step {out['ttfa_ms']:.1f} ms (decode {out['decode_ms']:.1f}, "
          f"{out['decode_ms_per_step']} ms/step), floor {out['floor_ms']} ms, x{out['over_floor']}; sampled "
          f"(temperature {SAMPLED['temperature']}, top_p {SAMPLED['top_p']}): step {out['sampled']['ttfa_ms']:.1f} ms, "
          f"{out['sampled']['decode_ms_per_step']} ms/step, x{out['sampled']['over_floor']}", flush=True)
    return out


def history_runs(engine: StaticEngine, args: argparse.Namespace, weights: dict[str, int]) -> list[dict[str, Any]]:
    """Cold steps with N ``--history-size`` screenshots in the prompt for each N in ``--history`` (earlier
    screenshots followed by a reply), ``max(1, --repeats - 1)`` runs each, the engine reset before each."""
    loaded = engine.loaded
    w, h = size(args.history_size)
    vocab = int(loaded.model.config.text_config.vocab_size)
    rows = []
    for n in (int(v) for v in args.history.split(",") if v):
        frames = [random_frame(w, h, 100 + i) for i in range(n)]
        first = first_text_id(loaded)
        replies = [[first + (j * 7 + i) % (vocab - first) for j in range(args.reply_tokens)] for i in range(n - 1)]
        ids = prompt_ids(loaded, frames, args, seed=7, replies=replies)
        samples = []
        for _ in range(max(1, args.repeats - 1)):
            engine.reset()
            samples.append(timed_step(engine, ids, prompt_images(loaded, frames), args.reply_tokens, weights["total"]))
        med = _median(samples)
        row = {"screenshots": n, **med, "ttfa_cold_ms": med["ttfa_ms"]}
        rows.append(row)
        print(f"history {n}: tokens {len(ids)} vision {med['vision_ms']:.1f} prefill {med['prefill_ms']:.1f} ms "
              f"decode {med['decode_ms_per_token']:.2f} ms/tok cold TTFA {med['ttfa_ms']:.1f} ms "
              f"{_memory_text(med, loaded.device.type == 'cuda')}", flush=True)
    return rows


def _episode(engine: StaticEngine, args: argparse.Namespace, weights: int, steps: int,
             salt: int) -> list[dict[str, Any]]:
    """One episode from a reset engine: step k's prompt holds the frames of steps 1..k, each earlier one
    followed by its reply; the state is kept at the end of each prompt before the header, where the next
    step's prompt continues (so only the reply, the step text and the new frame are prefilled)."""
    loaded = engine.loaded
    w, h = size(args.history_size)
    engine.reset()
    frames: list[Any] = []
    replies: list[list[int]] = []
    rows = []
    for k in range(steps):
        frames.append(random_frame(w, h, 200 + k + 1000 * salt))
        ids = prompt_ids(loaded, frames, args, seed=11, replies=replies)
        step = timed_step(engine, ids, prompt_images(loaded, frames), args.reply_tokens, weights,
                          snapshot_at=(len(ids) - HEADER_TOKENS,))
        replies.append(step.pop("tokens"))
        rows.append({"step": k + 1, **step})
    return rows


def episode_runs(engine: StaticEngine, args: argparse.Namespace, weights: dict[str, int]) -> dict[str, Any]:
    """``--episode-warmup`` untimed steps, then ``--episode-repeats`` episodes of ``--episode-steps`` steps;
    per step the median of its samples (memory: the largest), and step N / step 1 TTFA."""
    if args.episode_steps <= 0:
        return {"episode": []}
    if args.episode_warmup > 0:
        _episode(engine, args, weights["total"], args.episode_warmup, salt=0)
    runs = [_episode(engine, args, weights["total"], args.episode_steps, salt=1 + i)
            for i in range(max(1, args.episode_repeats))]
    rows = []
    for k in range(args.episode_steps):
        samples = [run[k] for run in runs]
        row = {name: samples[0][name] for name in ("step", "prompt_tokens", "reused_tokens", "prefill_tokens")}
        for name in ("vision_ms", "prefill_ms", "decode_ms", "ttfa_ms"):
            row[name] = round(statistics.median(s[name] for s in samples), 2)
        for name in ("memory_at_rest_bytes", "peak_over_rest_bytes", "peak_over_weights_bytes"):
            row[name] = max(s[name] for s in samples)
        row["ttfa_samples_ms"] = [round(s["ttfa_ms"], 1) for s in samples]
        rows.append(row)
        print(f"episode step {k + 1}: tokens {row['prompt_tokens']} reused {row['reused_tokens']} prefill "
              f"{row['prefill_ms']} ms decode {row['decode_ms']} ms TTFA {row['ttfa_ms']} ms", flush=True)
    out: dict[str, Any] = {"episode": rows}
    if len(rows) >= 2:
        out["episode_last_over_first"] = round(rows[-1]["ttfa_ms"] / rows[0]["ttfa_ms"], 3)
        rest = [r["memory_at_rest_bytes"] for r in rows]
        out["episode_memory_at_rest_growth_bytes"] = max(rest) - min(rest)
        print(f"episode: step {len(rows)} / step 1 TTFA {out['episode_last_over_first']}", flush=True)
    return out
