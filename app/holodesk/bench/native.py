"""``holodesk bench --family KEY``: a native family's model (Holo2, Holo3 / Holo3.1, Holotron-3-Nano) with random
weights, through :class:`~holodesk.policy.native.NativePolicy`'s own step, on this machine.

Reported for a 1080p screenshot: the weights (bytes, vision and language model), the peak memory of the step
over the weights (CUDA), TTFA (template and processor, vision and prefill, up to the first token's logits),
decode ms/token and its memory floor: the bytes one decode step must read (the language model's weights
but the embedding table, only ``num_experts_per_tok / num_experts`` of the expert weights, the KV entries of
the attention layers) over the copy bandwidth measured by :func:`holodesk.bench.floors.measure_floors`.

The model is the family's full-size one built from its config.json with random bf16 weights directly on the
device (:data:`holodesk.bench.full_size.FULL_SIZE`, or ``--config FILE``), or with ``--tiny`` the tiny checkpoint of
``holodesk tiny-checkpoint --family`` loaded through :func:`~holodesk.policy.native.policy.load_native` (the
CPU check of this code path). Both use the tiny checkpoint's tokenizer, chat template and processor files
(the published image-token ids are replaced by the tiny tokenizer's, which does not change any shape); the
full size uses the published image processor's pixel budget, so a 1080p screenshot gets the real image
token count. The text is tokenized by the tiny checkpoint's byte-level tokenizer (a few hundred tokens), which
splits the contract's prompt into several times more tokens than the models' own tokenizers: the row gives
``image_tokens`` (the real count for the frame), ``text_tokens`` and ``prompt_text_chars`` apart, and TTFA /
prefill are for ``prompt_tokens`` as built. Replies have a fixed length (``--reply-tokens``; no stop token, no
grammar): speed does not depend on the weight values, and the replies are meaningless. On CUDA the decode step
is compiled by ``generate`` for the classes that declare it (as in :class:`NativePolicy`); ``--eager`` keeps it
eager, and ``first_call_s`` (the untimed first step) shows what compiling cost. ``--family all`` (or a comma
list) runs several families one after another in one process, freeing the GPU between them.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from holodesk.bench.families import write_family_checkpoint
from holodesk.bench.floors import allocated, floor_ms, measure_floors, param_bytes, peak, reset_peak
from holodesk.bench.full_size import FULL_SIZE, PUBLISHED_MAX_PIXELS, full_size_model
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import ModelLoadError
from holodesk.policy.base import Observation
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.models import GREEDY, Sampling
from holodesk.policy.native.families import NATIVE_FAMILIES, family_by_key, read_config
from holodesk.policy.native.processor import load_processor

if TYPE_CHECKING:
    import torch

    from holodesk.policy.native.policy import LoadedNative, NativePolicy


def published_config(key: str, config_path: Path | None) -> dict[str, Any]:
    """The full-size config.json of family ``key``: ``config_path`` when given, else :data:`FULL_SIZE`'s.

    Raises:
        ModelLoadError: no full-size config is known for the family and none was given, or the file is unreadable.
    """
    if config_path is not None:
        return read_config(config_path.parent if config_path.name == "config.json" else config_path)
    build = FULL_SIZE.get(key)
    if build is None:
        raise ModelLoadError(f"the full-size config.json of {family_by_key(key).models} is not known to Holodesk",
                             hint="Pass --config with that model's config.json (no weights are read).")
    return build()


def random_native(key: str, *, tiny: bool, config_path: Path | None, device: torch.device, dtype: torch.dtype,
                  seed: int, workdir: Path) -> LoadedNative:
    """Family ``key``'s model with random weights and the tiny checkpoint's processor files, as a
    :class:`~holodesk.policy.native.policy.LoadedNative` (module docstring).

    Raises:
        ModelLoadError: see :func:`published_config` and :func:`~holodesk.policy.native.policy.load_native`.
    """
    # lazy: the native policy module loads transformers' model classes (heavy; the bench starts without them)
    from holodesk.policy.native.policy import LoadedNative, load_native

    family = family_by_key(key)
    folder = workdir / key
    if tiny:
        write_family_checkpoint(folder, key, seed=seed)
        return load_native(folder, dtype=str(dtype).removeprefix("torch."), device=str(device))
    config = published_config(key, config_path)
    write_family_checkpoint(folder, key, seed=seed, max_pixels=PUBLISHED_MAX_PIXELS.get(key, 128 * 128))
    tiny_config = json.loads((folder / "config.json").read_text())
    for name in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
                 "audio_token_id"):
        if name in tiny_config:
            config[name] = tiny_config[name]
    import torch  # lazy: torch (optional: the local extra)

    torch.manual_seed(seed)
    model = full_size_model(config, device, dtype)
    processor, how = load_processor(folder, family)
    tokenizer = getattr(processor, "tokenizer", processor)
    stop = int(model.config.get_text_config().vocab_size)  # an id no reply can hold: fixed-length replies
    return LoadedNative(model=model, processor=processor, tokenizer=tokenizer, family=family, folder=folder,
                        eos_ids=(stop,), pad_id=int(tokenizer.pad_token_id or 0),
                        think_end_id=tokenizer.get_vocab().get("</think>"), device=device, dtype=dtype,
                        processor_kind=how)


def decode_step_bytes(model: Any, length: int) -> int:
    """Bytes one decode step reads with ``length`` tokens in the cache: the decoder's weights but the embedding
    table (one row), expert weights scaled by ``num_experts_per_tok / num_experts``, the output head, and the
    K and V entries of the attention layers (every layer when the config lists no layer types; the recurrent
    state of the linear-attention / Mamba layers is left out: a few MB)."""
    text = model.config.get_text_config()
    experts = getattr(text, "num_experts", None) or getattr(text, "n_routed_experts", None)
    active = float(text.num_experts_per_tok) / float(experts) if experts else 1.0
    total = 0.0
    decoder = model.get_decoder()
    head = _output_head(model)
    in_head = {id(p) for p in head.parameters()} if head is not None else set()
    itemsize = 2
    for name, param in decoder.named_parameters():
        if id(param) in in_head:  # the decoder module may hold the head (Nemotron-H Omni): counted once, below
            continue
        size = param.numel() * param.element_size()
        itemsize = param.element_size()
        if "embed" in name:
            total += size / param.shape[0]  # one row
        else:
            total += size * (active if ".experts." in name else 1.0)
    if head is not None:
        total += head.weight.numel() * head.weight.element_size()
    kinds = [str(k) for k in (getattr(text, "layer_types", None) or getattr(text, "layers_block_type", None) or [])]
    attention = sum(1 for k in kinds if k in ("full_attention", "attention")) if kinds else text.num_hidden_layers
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    total += attention * 2 * text.num_key_value_heads * head_dim * itemsize * length
    return int(total)


def _output_head(model: Any) -> Any:
    """The output head (``lm_head``): the model's, else its decoder's (Nemotron-H Omni's decoder module is the
    causal LM that holds it); None when neither has one."""
    head = model.get_output_embeddings()
    if head is None:
        get = getattr(model.get_decoder(), "get_output_embeddings", None)
        head = get() if get is not None else None
    return head


def _head_inside_decoder_bytes(model: Any) -> int:
    """Bytes of the output head when the decoder module holds it (Nemotron-H Omni), else 0: the
    ``language_model`` weights of the row are the decoder's without the head, for every family."""
    head = _output_head(model)
    if head is None:
        return 0
    inside = {id(p) for p in model.get_decoder().parameters()}
    return sum(p.numel() * p.element_size() for p in head.parameters() if id(p) in inside)


def family_runs(loaded: LoadedNative, args: argparse.Namespace, floors: dict[str, Any]) -> dict[str, Any]:
    """``--repeats`` timed steps (after one untimed: compilation) of a 1080p screenshot through
    :meth:`NativePolicy.generate`, with their peak memory and the decode floor (module docstring)."""
    # lazy: the native policy module loads transformers' model classes (heavy; the bench starts without them)
    from holodesk.policy.native.policy import NativePolicy

    model = loaded.model
    vision = next((m for m in (getattr(model, "vision_model", None), getattr(getattr(model, "model", None), "visual",
                                                                              None)) if m is not None), None)
    total = param_bytes(model)
    weights = {"total": total, "vision": param_bytes(vision) if vision is not None else None,
               "language_model": param_bytes(model.get_decoder()) - _head_inside_decoder_bytes(model)}
    policy = NativePolicy(loaded, GenerationOptions(constrained_decoding=False, max_images=1,
                                                    max_reply_tokens=args.reply_tokens))
    if args.eager:
        policy.compiled = False  # generate's decode step stays eager (--eager)
    width, height = (int(v) for v in args.history_size.split("x"))
    pixels = np.random.default_rng(args.seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    observation = Observation(task="Open the settings and turn on dark mode.",
                              frame=Frame(pixels, Monitor(1, 0, 0, width, height)))
    device = loaded.device
    prepared = policy.prepare(observation)
    ids = prepared["inputs"]["input_ids"]
    image_tokens = int((ids == int(model.config.image_token_id)).sum())
    prompt_chars = len(prepared["prompt_text"])
    del prepared, ids
    started = time.perf_counter()
    policy.generate(observation)  # untimed: the compiled decode step and the static cache are built here
    first_call_s = time.perf_counter() - started
    steps = []
    for _ in range(max(1, args.repeats)):
        at_rest = reset_peak(device)
        _raw, timings, details = policy.generate(observation)
        steps.append({"timings_ms": timings, "ttfa_ms": details["ttfa_ms"],
                      "decode_ms_per_token": details["decode_ms_per_token"],
                      "generated_tokens": details["generated_tokens"], "prompt_tokens": details["prompt_tokens"],
                      "peak_over_rest_bytes": peak(device) - at_rest if device.type == "cuda" else None})
    per_token = [s["decode_ms_per_token"] for s in steps if s["decode_ms_per_token"]]
    decode_ms = statistics.median(per_token) if per_token else None
    length = steps[-1]["prompt_tokens"] + args.reply_tokens
    nbytes = decode_step_bytes(model, length)
    flops = float(nbytes)  # 2 FLOPs (a multiply-add) per bf16 weight of 2 bytes read
    floor = floor_ms(floors, flops, nbytes) if floors else None
    result = {
        "family": loaded.family.key, "models": loaded.family.models, "runtime": policy.describe(),
        "frame": args.history_size, "weights_bytes": weights,
        "parameters": sum(p.numel() for p in model.parameters()), "first_call_s": first_call_s,
        "memory_at_rest_over_weights_bytes": allocated(device) - total if device.type == "cuda" else None,
        "prompt_tokens": steps[-1]["prompt_tokens"], "image_tokens": image_tokens,
        "text_tokens": steps[-1]["prompt_tokens"] - image_tokens, "prompt_text_chars": prompt_chars,
        "reply_tokens": args.reply_tokens,
        "ttfa_ms": statistics.median(s["ttfa_ms"] for s in steps),
        "prefill_ms": statistics.median(s["timings_ms"]["prefill"] for s in steps),
        "decode_ms_per_token": decode_ms, "decode_step_bytes": nbytes, "decode_floor_ms_per_token": floor,
        "decode_vs_floor": (decode_ms / floor) if decode_ms and floor else None,
        "peak_over_rest_bytes": max((s["peak_over_rest_bytes"] or 0) for s in steps) if device.type == "cuda" else None,
        "steps": steps,
    }
    if getattr(args, "think_tokens", 0) > 0:
        result["think"] = think_runs(policy, observation, args)
    policy.close()
    return result


def think_runs(policy: NativePolicy, observation: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One step's wall time (median of ``--repeats`` after one untimed) with reasoning off and on (a thought of
    exactly ``--think-tokens`` tokens: the random model never closes it, so ``</think>`` is forced at the budget,
    then the ``--reply-tokens`` reply), each greedy and sampled (temperature 0.8, top_p 0.95, applied after the
    mask in :class:`~holodesk.policy.native.policy.ReplyRule`)."""
    sampled = Sampling(greedy=False, temperature=0.8, top_p=0.95, seed=args.seed)
    rows: dict[str, Any] = {}
    for name, reasoning, sampling in (("off_greedy", False, GREEDY), ("off_sampled", False, sampled),
                                      ("on_greedy", True, GREEDY), ("on_sampled", True, sampled)):
        policy.options = replace(policy.options, reasoning=reasoning, think_budget=args.think_tokens, sampling=sampling)
        policy.generate(observation)  # untimed: a longer reply may need a larger static cache
        walls, tokens, per_token = [], [], []
        for _ in range(max(1, args.repeats)):
            _raw, timings, details = policy.generate(observation)
            walls.append(sum(timings.values()))
            tokens.append(details["generated_tokens"])
            per_token.append(details["decode_ms_per_token"])
        rows[name] = {"step_ms": statistics.median(walls), "generated_tokens": statistics.median(tokens),
                      "decode_ms_per_token": statistics.median(v for v in per_token if v)}
        print(f"think bench {name}: {rows[name]}", flush=True)
    return {"think_tokens": args.think_tokens, "reply_tokens": args.reply_tokens, "rows": rows}


def family_keys(spec: str) -> list[str]:
    """The native family keys of a ``--family`` value: one key, a comma list, or ``all`` (every native family
    with a known full-size config, :data:`~holodesk.bench.full_size.FULL_SIZE`, in :data:`FAMILIES` order).

    Raises:
        ModelLoadError: an unknown key, or ``holotron`` in a list (it has its own bench: leave --family out).
    """
    if spec == "all":
        return [f.key for f in NATIVE_FAMILIES if FULL_SIZE.get(f.key) is not None]
    keys = [k.strip() for k in spec.split(",") if k.strip()]
    for key in keys:
        if family_by_key(key).runtime != "native":
            raise ModelLoadError(f"--family {key} runs on the Holotron bench; leave --family out for it")
    return keys


def _free(device: torch.device) -> None:
    """Drop what the last family left on ``device``: Python garbage, torch.compile's caches, cached blocks."""
    import torch  # lazy: torch (optional: the local extra)

    gc.collect()
    if device.type == "cuda":
        torch._dynamo.reset()
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def family_row(key: str, args: argparse.Namespace, device: torch.device, dtype: torch.dtype,
               floors: dict[str, Any]) -> dict[str, Any]:
    """The bench row of one family (:func:`random_native` then :func:`family_runs`), with ``build_s`` (the
    random model built on the device); the model is freed before returning."""
    with tempfile.TemporaryDirectory(prefix="holodesk-bench-") as tmp:
        started = time.perf_counter()
        loaded = random_native(key, tiny=args.tiny, config_path=args.config, device=device, dtype=dtype,
                               seed=args.seed, workdir=Path(tmp))
        build_s = time.perf_counter() - started
        try:
            row = family_runs(loaded, args, floors)
        finally:
            del loaded
            _free(device)
    row["build_s"] = build_s
    return row


def run_family(args: argparse.Namespace, device: torch.device, dtype: torch.dtype,
               result: dict[str, Any]) -> dict[str, Any]:
    """The ``--family`` bench into ``result`` (the header); returns it. One family: ``family_row``. Several
    (a comma list or ``all``, :func:`family_keys`): one after another in this process, the GPU memory freed
    between them, ``family_rows`` by key; a family that fails is recorded as ``{"error": ...}`` (and in
    ``checks_failed``) and the next one runs.

    Raises:
        ModelLoadError: an unknown family, a non-native one, or for one family no full-size config
            (:func:`published_config`).
    """
    keys = family_keys(args.family)
    if args.config is not None and len(keys) != 1:
        raise ModelLoadError("--config names one model's config.json: give one --family with it")
    result["floors"] = {} if args.no_floors else measure_floors(device)
    print(f"floors: {result['floors']}", flush=True)
    if len(keys) == 1:
        row = family_row(keys[0], args, device, dtype, result["floors"])
        result["family_row"] = row
        print(json.dumps({k: v for k, v in row.items() if k != "steps"}, default=str), flush=True)
        return result
    rows: dict[str, Any] = {}
    for key in keys:
        try:
            rows[key] = family_row(key, args, device, dtype, result["floors"])
        except Exception as exc:  # the other families still run; the failure is reported
            rows[key] = {"family": key, "error": f"{type(exc).__name__}: {exc}"}
            result["checks_failed"].append(f"--family {key}: {type(exc).__name__}: {exc}")
        _free(device)  # here, where no traceback holds the last family's tensors any more
        print(json.dumps({k: v for k, v in rows[key].items() if k != "steps"}, default=str), flush=True)
    result["family_rows"] = rows
    return result


__all__ = ["decode_step_bytes", "family_keys", "family_row", "family_runs", "published_config", "random_native",
           "run_family"]
