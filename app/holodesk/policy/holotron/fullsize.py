"""Full-size Holotron-12B check on a GPU with seeded random bf16 weights (no 25 GB download).

``python -m holodesk.policy.holotron.fullsize --out results.json``

1. Writes a remote-style ``config.json`` mirroring Holotron-12B's dimensions (docs/holotron.md,
   "Architecture") plus the tiny test tokenizer (its special tokens; the LM keeps 131072 rows).
2. Derives the checkpoint facts from that config and the published tensor shapes, translates the config
   with the same code the loader uses, and builds ``NemotronH_Omni_Reasoning_V3`` directly on the GPU
   with random bf16 weights (speed and memory do not depend on the values).
3. Runs ``HolotronPolicy.propose`` on a 1920x1080 frame (must give 9 tiles / 2304 image tokens) with
   JSON-constrained greedy decoding, then a fixed-length unconstrained decode for ms/token, then a step
   with 3 screenshots in the history, and prints/writes timings, memory and :func:`kernel_report`.

Exits non-zero when the Mamba-2 kernels are not live (unless ``--allow-fallback``) or a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from holodesk.policy.holotron.checkpoint import CheckpointInfo, checkpoint_info
from holodesk.policy.holotron.hf_config import translate_config

PATTERN = "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-"
"""Holotron-12B / Nemotron-Nano-12B-v2 layer pattern: 62 blocks, 28 Mamba-2, 6 attention, 28 MLP."""


FULL: dict[str, Any] = {
    "pattern": PATTERN, "vocab": 131072, "hidden": 5120, "mlp": 20480, "attn_heads": 40, "kv_heads": 8,
    "head_dim": 128, "mamba_heads": 128, "state": 128, "groups": 8, "chunk": 128,
    "vision_width": 1280, "vision_layers": 32, "vision_heads": 16, "max_img_size": 2048,
}
"""Holotron-12B dimensions (docs/holotron.md, "Architecture"; the Mamba head dim is ``2 * hidden / mamba_heads``,
the vision MLP ``4 * vision_width``, the projector ``4 * hidden``; ``max_img_size`` sizes the CPE table)."""
TINY: dict[str, Any] = {
    "pattern": "M*-M-M*-", "vocab": 512, "hidden": 64, "mlp": 128, "attn_heads": 4, "kv_heads": 2,
    "head_dim": 16, "mamba_heads": 8, "state": 16, "groups": 2, "chunk": 64,
    "vision_width": 32, "vision_layers": 2, "vision_heads": 2, "max_img_size": 512,
}
"""A tiny shape for CPU smoke runs (``holodesk bench --tiny``, this script's ``--smoke``); not a Holotron
measurement."""

STAND_IN_IDS = {"image": 8, "bos": 1, "eos": 2, "pad": 0}
"""Special-token ids for random-weight runs without a tokenizer (any ids inside the vocabulary work)."""


def full_size_config(
    image_token_id: int, eos_id: int, bos_id: int, pad_id: int, dims: dict[str, Any] = FULL
) -> dict[str, Any]:
    """Remote-style config.json with the dimensions ``dims`` (default Holotron-12B, docs/holotron.md; values
    marked assumed there are the Nemotron-H defaults: 128 x 80 Mamba heads, state 128, 8 groups, conv 4,
    chunk 128, vocab 131072, 8 vision prefix tokens)."""
    pattern = dims["pattern"]
    return {
        "architectures": ["NemotronH_Nano_VL_V2"],
        "model_type": "NemotronH_Nano_VL_V2",
        "downsample_ratio": 0.5,
        "force_image_size": 512,
        "patch_size": 16,
        "img_context_token_id": image_token_id,
        "max_num_tiles": 12,
        "use_thumbnail": True,
        "projector_hidden_size": 4 * dims["hidden"],
        "vit_hidden_size": dims["vision_width"],
        "torch_dtype": "bfloat16",
        "norm_mean": [0.48145466, 0.4578275, 0.40821073],
        "norm_std": [0.26862954, 0.26130258, 0.27577711],
        "llm_config": {
            "model_type": "nemotron_h",
            "architectures": ["NemotronHForCausalLM"],
            "vocab_size": dims["vocab"],
            "hidden_size": dims["hidden"],
            "hybrid_override_pattern": pattern,
            "num_hidden_layers": len(pattern),
            "intermediate_size": dims["mlp"],
            "mlp_hidden_act": "relu2",
            "num_attention_heads": dims["attn_heads"],
            "num_key_value_heads": dims["kv_heads"],
            "head_dim": dims["head_dim"],
            "mamba_num_heads": dims["mamba_heads"],
            "mamba_head_dim": 2 * dims["hidden"] // dims["mamba_heads"],
            "ssm_state_size": dims["state"],
            "n_groups": dims["groups"],
            "conv_kernel": 4,
            "expand": 2,
            "chunk_size": dims["chunk"],
            "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": False,
            "bos_token_id": bos_id,
            "eos_token_id": eos_id,
            "pad_token_id": pad_id,
        },
        "vision_config": {
            "model_type": "radio",
            "patch_size": 16,
            "max_resolution": dims["max_img_size"],
            "args": {"model": "vit_huge_patch16_224", "num_heads": dims["vision_heads"]},
        },
    }


def full_size_shapes(
    config: dict[str, Any], dims: dict[str, Any] = FULL, num_prefix_tokens: int = 8
) -> dict[str, tuple[int, ...]]:
    """The published tensor shapes the loader reads (RADIO ViT-H/16, mlp1, Nemotron-H embeddings) for a
    :func:`full_size_config` of ``dims`` (vision depth and CPE table size are not stated by config.json)."""
    v = "vision_model.radio_model."
    width = int(config["vit_hidden_size"])
    patch = int(config["patch_size"])
    side = dims["max_img_size"] // patch  # CPE table: side x side patches
    shuffled = round(width / float(config["downsample_ratio"]) ** 2)  # mlp1 input after pixel shuffle
    shapes: dict[str, tuple[int, ...]] = {
        v + "model.patch_generator.cls_token.token": (num_prefix_tokens, width),
        v + "model.patch_generator.pos_embed": (1, side * side, width),
        v + "model.patch_generator.embedder.weight": (width, 3 * patch * patch),
        v + "summary_idxs": (2,),
        "mlp1.1.weight": (int(config["projector_hidden_size"]), shuffled),
        "language_model.backbone.embeddings.weight": (
            int(config["llm_config"]["vocab_size"]), int(config["llm_config"]["hidden_size"])
        ),
    }
    for i in range(dims["vision_layers"]):
        shapes[f"{v}model.blocks.{i}.attn.qkv.weight"] = (3 * width, width)
        shapes[f"{v}model.blocks.{i}.attn.qkv.bias"] = (3 * width,)
        shapes[f"{v}model.blocks.{i}.mlp.fc1.weight"] = (4 * width, width)
    return shapes


class RandomConfig(NamedTuple):
    """:func:`random_config`'s result: the translated native config, the checkpoint facts it came from
    (``info.image_token_id`` is ``<image>``), and the remote-style config.json."""

    config: Any
    info: CheckpointInfo
    raw: dict[str, Any]


def random_config(
    dims: dict[str, Any] = FULL,
    pattern: str | None = None,
    *,
    ids: dict[str, int] | None = None,
    folder: Path | None = None,
    attn_implementation: str | None = "sdpa",
) -> RandomConfig:
    """``NemotronH_Omni_Reasoning_V3_Config`` for ``dims`` through the loader's own translation
    (:func:`checkpoint_info` + :func:`translate_config`) of the config.json and tensor shapes a checkpoint
    of that size would have. No file is read or written.

    Args:
        dims: :data:`FULL`, :data:`TINY` or a dict with the same keys.
        pattern: LM block pattern replacing ``dims["pattern"]`` (reduced depth; the layer count follows).
        ids: ``image``/``bos``/``eos``/``pad`` token ids (default :data:`STAND_IN_IDS`).
        folder: recorded as ``info.folder`` (nothing is read from it).
    """
    if pattern:
        dims = {**dims, "pattern": pattern}
    t = {**STAND_IN_IDS, **(ids or {})}
    raw = full_size_config(t["image"], t["eos"], t["bos"], t["pad"], dims)
    info = checkpoint_info(folder or Path("random-weights"), raw, (), full_size_shapes(raw, dims))
    return RandomConfig(translate_config(info, attn_implementation=attn_implementation), info, raw)


def _gib(n: float) -> float:
    return round(n / 2**30, 2)


def build_random(
    device: str = "cuda", seed: int = 0, workdir: Path | None = None, dims: dict[str, Any] = FULL
) -> Any:
    """Build a full-size LoadedHolotron with random bf16 weights on ``device``.

    Returns:
        (LoadedHolotron, facts dict with build seconds, parameter count, weight memory).
    """
    import torch
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3

    from holodesk.policy.holotron.kernels import kernel_report, prepare_kernels
    from holodesk.policy.holotron.loader import LoadedHolotron, load_tokenizer
    from holodesk.policy.holotron.tiny import write_tiny_checkpoint

    prepare_kernels()
    work = workdir or Path(tempfile.mkdtemp(prefix="holotron-fullsize-"))
    tiny = write_tiny_checkpoint(work / "tokenizer-source", shards=1)
    tokenizer = load_tokenizer(tiny)
    vocab = tokenizer.get_vocab()
    ids = {"image": vocab["<image>"], "eos": vocab["<SPECIAL_12>"], "bos": vocab["<s>"], "pad": vocab["<pad>"]}
    config, info, raw = random_config(dims, ids=ids, folder=work)
    (work / "config.json").write_text(json.dumps(raw, indent=2))
    cuda = device.startswith("cuda")

    torch.manual_seed(seed)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with torch.device(device):
        model = NemotronH_Omni_Reasoning_V3._from_config(config, dtype=torch.bfloat16)
    model.eval()
    if cuda:
        torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    params = sum(p.numel() for p in model.parameters())
    loaded = LoadedHolotron(
        model=model,
        tokenizer=tokenizer,
        info=info,
        mean=tuple(raw["norm_mean"]),
        std=tuple(raw["norm_std"]),
        norm_source="config.json (random-weight check)",
        image_token_id=int(raw["img_context_token_id"]),
        img_start_id=vocab["<img>"],
        img_end_id=vocab["</img>"],
        eos_ids=(vocab["<SPECIAL_12>"],),
        think_end_id=vocab.get("</think>"),
        device=torch.device(device),
        dtype=torch.bfloat16,
        quantization=None,
        kernels=kernel_report(),
    )
    facts = {
        "build_seconds": round(build_s, 2),
        "parameters": params,
        "weights_gib": _gib(torch.cuda.memory_allocated()) if cuda else None,
        "layer_types": {
            t: config.text_config.layers_block_type.count(t) for t in ("linear_attention", "full_attention", "mlp")
        },
    }
    return loaded, facts


def _frame(width: int, height: int, seed: int) -> Any:
    import numpy as np

    from holodesk.core.geometry import Frame, Monitor

    rng = np.random.default_rng(seed)
    # a desktop-like picture: flat panels plus noise, not pure noise
    pixels = np.full((height, width, 3), 235, dtype=np.uint8)
    pixels[: height // 20] = (40, 44, 52)
    pixels[height // 5 : height // 2, width // 8 : width // 2] = (255, 255, 255)
    pixels = np.clip(pixels.astype(np.int16) + rng.integers(-8, 9, pixels.shape), 0, 255).astype(np.uint8)
    return Frame(pixels, Monitor(1, 0, 0, width, height))


def run_check(args: argparse.Namespace) -> dict[str, Any]:
    """Build, run the steps, and return the results dict (see module docstring)."""
    import torch

    from holodesk.policy.base import HistoryStep, Observation
    from holodesk.policy.holotron.policy import HolotronPolicy
    from holodesk.policy.holotron.runtime import embed_prompt, encode_images, generate

    device = "cpu" if args.smoke else "cuda"
    cuda = device == "cuda"
    results: dict[str, Any] = {
        "command": "python -m holodesk.policy.holotron.fullsize " + " ".join(sys.argv[1:]),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu (smoke shape, not Holotron-size)",
    }

    def reset_peak() -> int:
        if not cuda:
            return 0
        torch.cuda.reset_peak_memory_stats()
        return int(torch.cuda.memory_allocated())

    def peak_over(base: int) -> float | None:
        return _gib(torch.cuda.max_memory_allocated() - base) if cuda else None

    loaded, facts = build_random(device=device, seed=args.seed, dims=TINY if args.smoke else FULL)
    results["build"] = facts
    results["kernels"] = loaded.kernels
    print("kernels:", loaded.kernels["summary"], flush=True)
    print("build:", facts, flush=True)
    if not loaded.kernels["fast_path"] and not args.allow_fallback:
        raise SystemExit("Mamba-2 kernels are not live: " + "; ".join(loaded.kernels["reasons"]))

    t0 = time.perf_counter()
    policy = HolotronPolicy(loaded, max_images=3, max_new_tokens=args.max_new_tokens, max_string_chars=24,
                            decoder=args.decoder)
    results["policy_setup_s"] = round(time.perf_counter() - t0, 2)
    results["decoder"] = policy.kernel_report()["decoder"]
    print("decoder:", results["decoder"], f"(set up in {results['policy_setup_s']} s)", flush=True)
    frame = _frame(1920, 1080, args.seed)
    obs = Observation(task="Open the settings and turn on dark mode.", frame=frame)

    t0 = time.perf_counter()
    warm = policy.propose(obs)  # compiles the Triton kernels (autotune) and warms the allocator
    results["first_step_wall_s"] = round(time.perf_counter() - t0, 2)
    print("first step (compile):", results["first_step_wall_s"], "s", flush=True)

    base = reset_peak()
    steps = []
    for r in range(args.repeats):
        # a new frame each time: a cold step (the static decoder would otherwise resume after the image)
        fresh = Observation(task=obs.task, frame=_frame(1920, 1080, args.seed + 1000 + r))
        t0 = time.perf_counter()
        proposal = policy.propose(fresh)
        wall = time.perf_counter() - t0
        steps.append({"wall_ms": round(wall * 1000, 1), **{k: round(v, 1) for k, v in proposal.timings_ms.items()}})
    extra = proposal.extra
    one = {
        "tiles": extra["tiles"],
        "grids": extra["grids"],
        "image_tokens": extra["image_tokens"],
        "prompt_tokens": extra["prompt_tokens"],
        "generated_tokens": extra["generated_tokens"],
        "stop_reason": extra["stop_reason"],
        "action": repr(proposal.action),
        "raw_text": proposal.raw_text,
        "decoder": extra.get("decoder"),
        "timings_ms": steps,
        "peak_over_weights_gib": peak_over(base),
    }
    results["one_screenshot"] = one
    print("1 screenshot:", json.dumps(one), flush=True)
    if extra["tiles"] != [9] or extra["image_tokens"] != 2304:
        raise SystemExit(f"expected 9 tiles / 2304 image tokens, got {extra['tiles']} / {extra['image_tokens']}")
    if warm.extra["prompt_tokens"] != proposal.extra["prompt_tokens"]:
        raise SystemExit("the warm-up and the timed steps built prompts of different lengths")

    # fixed-length decode for ms/token (unconstrained, EOS practically unreachable with random weights)
    prepared = policy.prepare(obs, max_images=1)
    enc = encode_images(loaded, [f.pixels for f in prepared["frames"]])
    embeds = embed_prompt(loaded, prepared["input_ids"], enc.embeds)
    gen = generate(loaded, embeds, max_new_tokens=args.decode_tokens)
    n = max(1, len(gen.token_ids))
    results["decode"] = {
        "tokens": len(gen.token_ids),
        "prefill_ms": round(gen.timings_ms["prefill"], 1),
        "decode_ms": round(gen.timings_ms["decode"], 1),
        "ms_per_token": round(gen.timings_ms["decode"] / n, 2),
        "prompt_tokens": gen.prompt_tokens,
    }
    print("decode:", results["decode"], flush=True)

    # three screenshots (two in history) -> 3 x 2304 image tokens
    history = tuple(
        HistoryStep(index=i, frame=_frame(1920, 1080, args.seed + 1 + i), action=None, outcome="performed")
        for i in range(2)
    )
    base = reset_peak()
    t0 = time.perf_counter()
    three = policy.propose(Observation(task=obs.task, frame=frame, history=history))
    results["three_screenshots"] = {
        "wall_ms": round((time.perf_counter() - t0) * 1000, 1),
        "image_tokens": three.extra["image_tokens"],
        "prompt_tokens": three.extra["prompt_tokens"],
        "generated_tokens": three.extra["generated_tokens"],
        "stop_reason": three.extra["stop_reason"],
        "timings_ms": {k: round(v, 1) for k, v in three.timings_ms.items()},
        "peak_over_weights_gib": peak_over(base),
        "warnings": three.extra.get("warnings", []),
    }
    print("3 screenshots:", results["three_screenshots"], flush=True)

    # an episode through propose(): each step's frame and reply become the next step's history
    episode = []
    past: list[HistoryStep] = []
    for k in range(args.episode_steps):
        frame_k = _frame(1920, 1080, args.seed + 100 + k)
        base = reset_peak()
        t0 = time.perf_counter()
        step = policy.propose(Observation(task=obs.task, frame=frame_k, history=tuple(past)))
        wall = (time.perf_counter() - t0) * 1000
        episode.append({
            "step": k + 1, "wall_ms": round(wall, 1), "images": step.extra["images"],
            "prompt_tokens": step.extra["prompt_tokens"], "generated_tokens": step.extra["generated_tokens"],
            "reused_tokens": step.extra.get("reused_tokens"), "prefill_tokens": step.extra.get("prefill_tokens"),
            "images_encoded": step.extra.get("images_encoded"), "decoder": step.extra.get("decoder"),
            "timings_ms": {key: round(v, 1) for key, v in step.timings_ms.items()},
            "allocated_at_rest_gib": _gib(base) if cuda else None,
            "peak_over_rest_gib": peak_over(base),
        })
        print("episode step:", episode[-1], flush=True)
        past.append(HistoryStep(index=k, frame=frame_k, action=step.action, thought=step.thought, note=step.note,
                                raw_text=step.raw_text, outcome="performed"))
    results["episode"] = episode
    return results


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description="Full-size Holotron-12B check with random bf16 weights.")
    parser.add_argument("--out", type=Path, default=None, help="write the results JSON here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--episode-steps", type=int, default=4, help="steps of the propose() episode")
    parser.add_argument("--decoder", choices=["static", "stock"], default="static")
    parser.add_argument("--allow-fallback", action="store_true", help="run even without mamba-ssm kernels")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, to test this script")
    args = parser.parse_args(argv)
    import torch

    if args.smoke:
        args.allow_fallback = True
    elif not torch.cuda.is_available():
        print("a CUDA GPU is required", file=sys.stderr)
        return 2
    results = run_check(args)
    text = json.dumps(results, indent=2, default=str)
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
