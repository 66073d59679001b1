"""``holodesk bench``: speed and memory of the local Holotron runtime on this machine, against its floors.

One process, in this order (each part can be left out):

1. floors (:mod:`holodesk.bench.floors`): copy bandwidth and bf16 matmul rate measured on the device;
2. one :class:`~holodesk.policy.holotron.engine.StaticEngine` built as the policy builds it, then the
   measured runs through its ``run`` (:mod:`holodesk.bench.runs`): one screenshot per ``--sizes`` entry
   (stage ms, TTFA, decode ms/token, their floors and ratios, peak memory over the weights), a typical
   agent-loop reply at ``--history-size`` with and without jump-forward (tokens and model steps per reply,
   step time), cold prompts with N screenshots (``--history``), an episode with incremental prefill (step
   N / step 1 TTFA), and with ``--profile`` the GPU time per kernel of one step;
3. the stock decoder (transformers' forward and cache) on a 1080p prompt, and the static decoder's
   agreement with it (:mod:`holodesk.bench.compare`);
4. ``--product``: :meth:`HolotronPolicy.propose` at 1080p (:mod:`holodesk.bench.product`);
5. ``--quant bf16,8bit,4bit``: each mode a fresh model (bitsandbytes LM weights for 8bit / 4bit): decode
   ms/token against its floor (the bytes a step reads as stored), TTFA, peak memory side by side, and drift
   from bf16.

``--cold-start`` runs instead :mod:`holodesk.bench.cold_start`: a checkpoint written to local disk in the
published layout (full size, or the tiny one with ``--tiny``), its file-read floor, and start -> imports ->
weights loaded -> graphs ready -> first proposal in fresh processes with the page cache cold and warm.

Weights are seeded random draws in Holotron-12B's shapes (:mod:`holodesk.bench.model`) unless
``--checkpoint`` names a folder. ``--device cpu --tiny`` runs a tiny model in a few minutes (CI smoke
test). Results are printed and written as JSON (``--json``). Exit status: 0, 1 when a check failed
(``checks_failed`` in the JSON: Mamba-2 kernels not live on CUDA without ``--allow-fallback``, a product
path check, an agent-loop reply that is not the script), 2 when the local runtime is not installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from holodesk.bench import compare, profiling, runs
from holodesk.bench.cold_start import run_cold_start
from holodesk.bench.floors import allocated, host_cpu, measure_floors, param_bytes
from holodesk.bench.model import random_loaded
from holodesk.bench.native import run_family
from holodesk.bench.product import product_path
from holodesk.errors import HolodeskError
from holodesk.policy.holotron.engine import StaticEngine
from holodesk.policy.holotron.kernels import prepare_kernels
from holodesk.policy.holotron.loader import load_holotron
from holodesk.policy.local import runtime_missing
from holodesk.policy.native.families import FAMILIES
from holodesk.session.loop import SCREEN_SETTLE_S

if TYPE_CHECKING:
    import torch

    from holodesk.policy.holotron.loader import LoadedHolotron

QUANT_MODES = ("bf16", "8bit", "4bit")
"""``--quant`` modes: bf16 weights, bitsandbytes int8, bitsandbytes NF4."""


def _family_spec(value: str) -> str:
    """A ``--family`` value: a family key, a comma list of them, or ``all``.

    Raises:
        argparse.ArgumentTypeError: an unknown key (the known ones are listed).
    """
    known = [f.key for f in FAMILIES]
    unknown = [k for k in value.split(",") if k.strip() and k.strip() not in known] if value != "all" else []
    if unknown or not value.strip(","):
        raise argparse.ArgumentTypeError(f"unknown family {', '.join(unknown) or value!r}; choose from "
                                         f"{', '.join(known)}, a comma list of them, or all")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The bench's options (``holodesk bench --help``)."""
    p = argparse.ArgumentParser(prog="holodesk bench", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--tiny", action="store_true", help="tiny random model (CPU smoke test)")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default=None,
                   help="model dtype (default: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--pattern", default=None, help="LM block pattern of the random model (reduced depth), e.g. 'M*-M-'")
    p.add_argument("--tokenizer", choices=["test", "tekken"], default="test",
                   help="tokenizer of the random model: the 480-entry test tokenizer, or tekken, a stand-in with "
                        "Holotron's 131,072 ids (needs mistral-common, bench-only) so prompt and reply lengths are "
                        "those of a real run (holodesk.bench.stand_in_tokenizer)")
    p.add_argument("--checkpoint", type=Path, default=None, help="real checkpoint folder instead of random weights")
    p.add_argument("--eager", action="store_true", help="build the engine with eager=True (no compile, no graphs); "
                   "with --family: generate's decode step not compiled")
    p.add_argument("--sizes", default="1280x720,1920x1080,2560x1440", help="frame sizes of the one-screenshot runs")
    p.add_argument("--history", default="1,3,8", help="screenshots in the prompt for the cold history runs")
    p.add_argument("--history-size", default="1920x1080", help="frame size of the history, episode and stock runs")
    p.add_argument("--episode-steps", type=int, default=8, help="steps of the incremental-prefill episode (0: skip)")
    p.add_argument("--episode-warmup", type=int, default=2, help="untimed episode steps first")
    p.add_argument("--episode-repeats", type=int, default=3, help="timed episodes; per step the median")
    p.add_argument("--prompt-tokens", type=int, default=300, help="text tokens before the first screenshot")
    p.add_argument("--reply-tokens", type=int, default=40, help="tokens of every reply (fixed length)")
    p.add_argument("--think-tokens", type=int, default=0,
                   help="also time a step with a thought of this many tokens before the reply (0: skip): with --family "
                        "reasoning off and on, greedy and sampled; for Holotron-12B the thought plus an agent-loop "
                        "action (with --quant: per mode)")
    p.add_argument("--step-text-tokens", type=int, default=30, help="text tokens before each screenshot")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-floors", action="store_true", help="skip the copy and matmul floors")
    p.add_argument("--no-stock", action="store_true", help="skip the stock decoder baseline")
    p.add_argument("--profile", action="store_true", help="GPU time per kernel over one 1080p step (CUDA only)")
    p.add_argument("--product", action="store_true", help="also run HolotronPolicy.propose at 1080p")
    p.add_argument("--product-repeats", type=int, default=2, help="cold one-screenshot propose() calls")
    p.add_argument("--product-steps", type=int, default=4, help="steps of the propose() episode")
    p.add_argument("--product-gap", type=float, default=SCREEN_SETTLE_S,
                   help="seconds between the propose() calls (default: the agent loop's wait for the screen to "
                        "settle); above 0 the graphs are recorded ahead first, as while a user types the task; 0: "
                        "back to back, from the end of the load (shapes recorded on their first use)")
    p.add_argument("--product-tokens", type=int, default=1024, help="the policy's reply budget (max_new_tokens)")
    p.add_argument("--quant", default="",
                   help="comma list of bf16,8bit,4bit: each a fresh model (8bit/4bit bitsandbytes, CUDA only) run "
                        "the same way, decode against its floor, side by side")
    p.add_argument("--allow-fallback", action="store_true", help="no failed check when Mamba-2 kernels are not live")
    p.add_argument("--family", default=None, type=_family_spec,
                   help="bench native families ("
                   + "; ".join(f"{f.key}: {f.models}" for f in FAMILIES if f.runtime == "native")
                   + "; a comma list, or all) through NativePolicy at --history-size, "
                   "with --reply-tokens, --repeats, one after another; default: Holotron-12B")
    p.add_argument("--config", type=Path, default=None,
                   help="with --family: the full-size model's config.json (default: the one Holodesk knows)")
    p.add_argument("--cold-start", action="store_true",
                   help="instead of the runs above: time to first proposal from a checkpoint on local disk, in fresh "
                        "processes, page cache cold and warm, against the file-read floor (holodesk.bench.cold_start)")
    p.add_argument("--cold-start-dir", type=Path, default=None,
                   help="where the cold-start checkpoint is written (default: $TMPDIR/holodesk-cold-start-full, "
                        "or -tiny with --tiny); --checkpoint DIR measures DIR instead and writes nothing")
    p.add_argument("--cold-start-drop", choices=["auto", "files"], default="auto",
                   help="cold page cache: auto = /proc/sys/vm/drop_caches when root (the whole page cache) plus "
                        "fadvise(DONTNEED) on the checkpoint's files; files = fadvise only")
    p.add_argument("--cold-start-runs", default="cold,warm",
                   help="the fresh processes, in order, by page cache state, e.g. cold,warm,cold")
    p.add_argument("--cold-start-steps", type=int, default=2,
                   help="propose() calls per cold-start process (the first, then steps on new frames)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    args = p.parse_args(argv)
    unknown = [m for m in args.quant.split(",") if m and m not in QUANT_MODES]
    if unknown:
        p.error(f"--quant: unknown mode(s) {', '.join(unknown)}; use a comma list of {', '.join(QUANT_MODES)}")
    return args


def _device(args: argparse.Namespace) -> tuple[torch.device, torch.dtype]:
    import torch  # lazy: torch (optional: the local extra)

    try:
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError as exc:
        raise HolodeskError(f"--device {args.device!r} is not a device PyTorch knows ({exc})",
                            hint="Use --device cuda or --device cpu.") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise HolodeskError("--device cuda was asked for, but PyTorch sees no CUDA GPU on this machine",
                            hint="Run on a machine with an NVIDIA GPU, or use --device cpu --tiny for a smoke test.")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if args.dtype:
        dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    return device, dtype


def _load(args: argparse.Namespace, device: torch.device, dtype: torch.dtype,
          quantization: str | None = None) -> LoadedHolotron:
    """The checkpoint of ``--checkpoint`` through :func:`load_holotron`, else the random model."""
    if args.checkpoint is not None:
        return load_holotron(args.checkpoint, dtype=str(dtype).replace("torch.", ""), quantization=quantization,
                             device=str(device))
    return random_loaded(tiny=args.tiny, device=device, dtype=dtype, seed=args.seed, pattern=args.pattern,
                         quantization=quantization, tokenizer_name=args.tokenizer)


def _free(device: torch.device) -> None:
    import torch  # lazy: torch (optional: the local extra)

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _header(args: argparse.Namespace, argv: list[str], device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    import torch  # lazy: torch (optional: the local extra)
    import transformers  # lazy: transformers (optional: the local extra)


    return {"command": "holodesk bench " + " ".join(argv),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "host_cpu": host_cpu(), "torch": torch.__version__, "transformers": transformers.__version__,
            "dtype": str(dtype).replace("torch.", ""), "tiny": args.tiny, "tokenizer": args.tokenizer,
            "weights": str(args.checkpoint) if args.checkpoint else f"random (seed {args.seed})",
            "checks_failed": []}


def _engine_runs(loaded: LoadedHolotron, args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any] | None:
    """Build the engine, run the measured runs and the stock comparison into ``result``.

    Returns:
        the static decoder's reply to the one-screenshot prompt (``compare.static_reference``), the
        reference of the quantised runs; None when neither they nor the stock comparison were asked for.
    """
    model = loaded.model
    weights = {"vision": param_bytes(model.vision_model), "projector": param_bytes(model.multi_modal_projector),
               "lm": param_bytes(model.language_model), "total": param_bytes(model)}
    result["weights_bytes"] = weights
    fixed = dataclasses.replace(loaded, eos_ids=())  # fixed-length replies (runs module docstring)
    t0 = time.perf_counter()
    engine = StaticEngine(fixed, max_len=runs.longest_prompt(loaded, args), eager=args.eager)
    result["engine_build_s"] = round(time.perf_counter() - t0, 2)
    result["engine"] = engine.describe()
    if loaded.device.type == "cuda":  # the CPU keeps no allocator statistics
        result["memory_at_rest_over_weights_bytes"] = allocated(loaded.device) - weights["total"]
    print(f"engine ({result['engine_build_s']} s): {result['engine']}", flush=True)
    reference: dict[str, Any] | None = None
    try:
        result["frames"] = runs.frame_runs(engine, args, result["floors"], weights)
        if args.history_size:
            result["agent_reply"] = runs.agent_reply_runs(engine, loaded, args, weights)
            result["checks_failed"] += result["agent_reply"].pop("checks_failed")
        if args.history_size and args.think_tokens > 0:
            result["reasoning"] = runs.reasoning_step(engine, loaded, args, result["floors"], weights["total"])
        result["history_cold"] = runs.history_runs(engine, args, weights)
        result.update(runs.episode_runs(engine, args, weights))
        if args.profile and loaded.device.type == "cuda":
            result["profile"] = profiling.profile_step(engine, args)
        if not args.no_stock or args.quant:
            ids, images = compare.one_screenshot(fixed, args)
            reference = compare.static_reference(engine, ids, images, args.reply_tokens)
        if reference is not None and not args.no_stock:
            stock = compare.stock_baseline(engine, args, reference)
            result["stock"] = stock
            fast = next((f for f in result["frames"] if f["size"] == args.history_size), None)
            if fast:
                result["decode_speedup_vs_stock"] = round(stock["decode_ms_per_token"] / fast["decode_ms_per_token"], 2)
            print(f"stock: {stock}; decode speed-up {result.get('decode_speedup_vs_stock')}x", flush=True)
    finally:
        del engine
    return reference


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """Run the parts of the module docstring; returns the JSON-able result."""
    prepare_kernels()  # before transformers imports NemotronH
    device, dtype = _device(args)
    result = _header(args, argv, device, dtype)
    if args.family not in (None, "holotron"):
        return run_family(args, device, dtype, result)
    if args.cold_start:
        cold = run_cold_start(args, str(device), str(dtype).replace("torch.", ""))
        result["checks_failed"] += cold.pop("checks_failed")
        result["cold_start"] = cold
        return result
    t0 = time.perf_counter()
    loaded = _load(args, device, dtype)
    result["build_s"] = round(time.perf_counter() - t0, 2)
    result["kernels"] = {k: loaded.kernels.get(k) for k in ("fast_path", "summary", "reasons")}
    result["kernels"]["functions"] = {k: v["implementation"] for k, v in loaded.kernels.get("functions", {}).items()}
    print(f"kernels: {loaded.kernels.get('summary')}", flush=True)
    if device.type == "cuda" and not loaded.kernels.get("fast_path") and not args.allow_fallback:
        result["checks_failed"].append("Mamba-2 kernels are not live: " + "; ".join(loaded.kernels.get("reasons", [])))
    result["floors"] = {} if args.no_floors else measure_floors(device)
    print(f"floors: {result['floors']}", flush=True)
    reference = None
    if any((args.sizes, args.history, args.episode_steps > 0, not args.no_stock, args.quant, args.profile)):
        reference = _engine_runs(loaded, args, result)
    _free(device)
    if args.product:
        # last user of this model: closing the policy drops loaded.model
        result["product"] = product_path(loaded, args, param_bytes(loaded.model), result["floors"])
        result["checks_failed"] += result["product"]["checks_failed"]
        _free(device)
    if args.quant and reference is not None:
        del loaded
        _free(device)
        result["quant"] = compare.quant_runs(lambda mode: _load(args, device, dtype, None if mode == "bf16" else mode),
                                             args, reference, result["floors"])
    return result


def _clean(obj: object) -> object:
    """``obj`` with non-finite floats as None and tuples as lists (strict JSON)."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def local_runtime_missing() -> str | None:
    """Why the local runtime (torch and transformers, the ``local`` extra) cannot be imported, or None
    when it can (the bench and ``holodesk tiny-checkpoint`` need it)."""
    return runtime_missing()


def main(argv: list[str]) -> int:
    """Entry point of ``holodesk bench``; returns the exit status (module docstring).

    Raises:
        HolodeskError: for a device PyTorch does not know or CUDA asked for without a GPU.
    """
    args = parse_args(list(argv))
    missing = local_runtime_missing()
    if missing is not None:
        print(f"holodesk bench: the local runtime is not installed ({missing}); pip install 'holodesk[local]'",
              file=sys.stderr)
        return 2
    result = run(args, list(argv))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_clean(result), indent=2, default=str))
        print(f"wrote {args.json}")
    for failure in result["checks_failed"]:
        print(f"holodesk bench: check failed: {failure}", file=sys.stderr)
    return 1 if result["checks_failed"] else 0
