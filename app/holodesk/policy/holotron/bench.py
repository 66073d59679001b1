"""``holodesk bench``: speed and memory of the local Holotron runtime on this machine, against its floors.

What it measures (issue 4), all on the current device, in one process:

* floors: device-to-device copy bandwidth (bytes read + written / time, 2 x 1 GiB buffers), bf16 matmul
  rate (8192^3 on random data), weight bytes per part, FLOPs per stage (linear layers: 2 x params x
  tokens; attention: 4 x tokens^2 x width per layer, halved when causal; the Mamba scan is left out: about
  1% of the linear FLOPs at Holotron's sizes);
* per frame size (1280x720, 1920x1080, 2560x1440; one screenshot, a ``--prompt-tokens`` text prompt and
  a fixed ``--reply-tokens`` reply): preprocessing (tiling on the CPU), vision (RADIO + ``mlp1``),
  prefill (chunked, static cache), decode (captured CUDA graphs), TTFA = their sum, peak memory over
  the weights;
* history: cold TTFA and peak memory with 1, 3 and 8 screenshots in the prompt, and an episode of 8 steps
  with incremental prefill (each step appends the last reply and a new screenshot);
* stock baseline: transformers ``generate()`` (same kernels) at 1080p: prefill (1 token) and decode
  ms/token ((t(N) - t(1)) / (N - 1)), and the fast path's greedy-token agreement / logit error against it;
* which kernels are live (:func:`holodesk.policy.holotron.kernels.kernel_report`);
* optional ``--quant 8bit,4bit``: bitsandbytes LM linears, vision and projector in bf16, with logit
  error and greedy agreement against bf16 next to speed and whole-model memory.

Weights are seeded random draws (speed and memory do not depend on their values) unless ``--checkpoint``
names a folder. ``--device cpu --tiny`` runs a tiny model in seconds (CI smoke test). Results are printed
as a table and written as JSON (``--json``).

Timings use ``torch.cuda.synchronize`` around each timed region (events would not include host work such as
tiling) after a warm-up; every figure is the median of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from holodesk.errors import HolodeskError

GiB = 1024**3


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="holodesk bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--tiny", action="store_true", help="tiny random model (CPU smoke test)")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default=None,
                   help="model dtype (default: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--pattern", default=None, help="override the LM block pattern (reduced depth), e.g. 'M*-M-'")
    p.add_argument("--checkpoint", type=Path, default=None, help="real checkpoint folder instead of random weights")
    p.add_argument("--sizes", default="1280x720,1920x1080,2560x1440")
    p.add_argument("--history", default="1,3,8", help="screenshots in the prompt for the history runs")
    p.add_argument("--history-size", default="1920x1080", help="frame size of the history, episode and stock runs")
    p.add_argument("--episode-steps", type=int, default=8, help="steps of the incremental-prefill episode (0: skip)")
    p.add_argument("--episode-warmup", type=int, default=2, help="untimed episode steps first (kernel warm-up)")
    p.add_argument("--episode-repeats", type=int, default=3,
                   help="timed episodes; each step reports the median of its samples")
    p.add_argument("--no-fp32-reference", action="store_true",
                   help="skip the float32 reference (bf16 runs compare fast and stock against it)")
    p.add_argument("--prompt-tokens", type=int, default=300)
    p.add_argument("--reply-tokens", type=int, default=40)
    p.add_argument("--step-text-tokens", type=int, default=30, help="text tokens around each history screenshot")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--chunk", type=int, default=2048, help="prefill chunk in tokens")
    p.add_argument("--bucket", type=int, default=2048, help="decode attention window granularity in tokens")
    p.add_argument("--impl", choices=["auto", "dispatch", "torch"], default="auto",
                   help="decode step: stock kernel wrappers (dispatch) or plain torch blocks (torch); auto = "
                        "torch + compile on CUDA (the fastest measured, docs/benchmarks.md), dispatch on CPU")
    p.add_argument("--compile", action="store_true", help="torch.compile the decode step (impl=torch)")
    p.add_argument("--no-graphs", action="store_true", help="decode eagerly (no CUDA graphs)")
    p.add_argument("--no-stock", action="store_true", help="skip the stock generate() baseline")
    p.add_argument("--no-floors", action="store_true")
    p.add_argument("--profile-decode", action="store_true",
                   help="GPU time per kernel over 20 decode steps at 1080p (torch.profiler), CUDA only")
    p.add_argument("--prefill-bucket", type=int, default=-1,
                   help="pad prefill chunks to multiples of this many rows and capture their Mamba/MLP segments "
                        "as CUDA graphs (-1: as the policy does, 128 on CUDA with --impl torch and graphs; 0: off)")
    p.add_argument("--compare-prefill", action="store_true",
                   help="also time the cold prefill at --history-size through the stock block modules, "
                        "alternating with the fused path in the same process")
    p.add_argument("--quant", default="", help="comma list of 8bit,4bit (bitsandbytes, CUDA only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------- helpers
def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn: Callable[[], Any], device: Any, repeats: int, warmup: int = 1) -> tuple[float, list[float], Any]:
    """Median wall ms of ``fn`` (synchronised before and after), all samples, last result."""
    result = None
    for _ in range(warmup):
        result = fn()
    samples = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        result = fn()
        _sync(device)
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples), samples, result


def _memory_text(row: dict[str, Any], device: Any) -> str:
    """"peak over rest X GiB (over weights Y)" on CUDA; the CPU has no allocator statistics."""
    if device.type != "cuda":
        return "peak memory: n/a on the CPU"
    return (f"peak over rest {row['peak_over_rest_bytes'] / GiB:.3f} GiB "
            f"(over weights {row['peak_over_weights_bytes'] / GiB:.3f})")


def _host_cpu() -> str:
    """The host processor's model name and logical CPU count (Linux ``/proc/cpuinfo``), else platform's."""
    import os

    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{name or platform.processor() or 'unknown'} x{os.cpu_count()}"


def _mem(device: Any) -> int:
    import torch

    return int(torch.cuda.memory_allocated(device)) if device.type == "cuda" else 0


def _reset_peak(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak(device: Any) -> int:
    import torch

    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else 0


def _param_bytes(module: Any) -> int:
    total = 0
    for t in [*module.parameters(), *module.buffers()]:
        total += t.numel() * t.element_size()
    return int(total)


def _linear_params(module: Any) -> int:
    """Multiply-accumulate weights of the linear layers under ``module`` (quantised ones included)."""
    n = 0
    for m in module.modules():
        w = getattr(m, "weight", None)
        if w is not None and hasattr(m, "in_features") and hasattr(m, "out_features"):
            n += int(m.in_features) * int(m.out_features)
    return n


# ---------------------------------------------------------------------------------------------- model
def build_random_model(tiny: bool, device: Any, dtype: Any, seed: int, pattern: str | None = None) -> Any:
    """Holotron-shaped ``NemotronH_Omni_Reasoning_V3`` with seeded random weights, built on ``device``.

    The config comes from :func:`holodesk.policy.holotron.fullsize.random_config` (the loader's config
    translation of Holotron-12B's dimensions, or the tiny ones); ``pattern`` replaces the LM block pattern.
    """
    import torch
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3

    from holodesk.policy.holotron.fullsize import FULL, TINY, random_config

    config = random_config(TINY if tiny else FULL, pattern).config
    for part in (config, config.text_config, config.vision_config):
        part._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = NemotronH_Omni_Reasoning_V3(config)
    finally:
        torch.set_default_dtype(previous)
    model = model.to(dtype).eval()
    with torch.no_grad():  # keep the residual stream bounded through 62 random blocks
        for name, p in model.language_model.named_parameters():
            if name.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight")):
                p.mul_(0.5)
    return model


def _vision_encode(model: Any, tiles: Any) -> Any:
    """RADIO features -> pixel shuffle -> mlp1 for ``tiles [n, 3, 512, 512]``; returns ``[n*256, H]``."""
    import torch

    side = tiles.shape[-1] // model.config.vision_config.patch_size
    with torch.no_grad():
        features = model.vision_model(tiles).features
        projected = model.project_vision_features(features, side, side)
    return projected.reshape(-1, projected.shape[-1])


def _random_frame(width: int, height: int, seed: int) -> Any:
    """A random RGB uint8 frame ``(height, width, 3)`` (stands in for a capture; made outside the timings)."""
    import numpy as np

    return np.random.default_rng(int(seed)).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def _tiles_for(width: int, height: int, device: Any, dtype: Any, gen: Any, frame: Any = None) -> tuple[Any, float]:
    """Tile a random uint8 frame of ``width x height`` as the policy does (``preprocess_pixels``, run on the
    GPU when ``device`` is CUDA: the uint8 frame is uploaded, then resized and normalised there).

    Returns (tiles ``[n, 3, 512, 512]`` in ``dtype`` on ``device``, preprocessing ms including the upload).
    """
    from holodesk.policy.holotron.fullsize import full_size_config
    from holodesk.policy.holotron.tiling import preprocess_pixels

    if frame is None:
        frame = _random_frame(width, height, int(gen))
    t0 = time.perf_counter()
    raw = full_size_config(0, 0, 0, 0)  # the published preprocessing values the random-weight model uses
    tiles, _grid = preprocess_pixels(frame, mean=raw["norm_mean"], std=raw["norm_std"],
                                     max_tiles=raw["max_num_tiles"], tile_size=raw["force_image_size"],
                                     use_thumbnail=raw["use_thumbnail"],
                                     device=device if device.type == "cuda" else None)
    tiles = tiles.to(device=device, dtype=dtype, non_blocking=True)
    _sync(device)
    return tiles, (time.perf_counter() - t0) * 1e3


class _Prompt:
    """Token ids + embeddings of a prompt: text blocks and screenshot blocks (``<image>`` x 256 per tile)."""

    def __init__(self, model: Any, vocab: int, seed: int) -> None:
        self.model = model
        self.vocab = vocab
        self.seed = seed
        self.image_token_id = int(model.config.image_token_id)  # <image>
        self.ids: list[int] = []
        self.keys: list[int] = []
        self.parts: list[Any] = []  # embeddings per block

    def text(self, n: int, salt: int) -> None:
        import torch

        gen = torch.Generator().manual_seed(self.seed * 1000003 + salt)
        ids = torch.randint(16, self.vocab, (n,), generator=gen)
        self.add_ids(ids.tolist())

    def add_ids(self, ids: list[int]) -> None:
        import torch

        emb = self.model.get_input_embeddings()
        device = emb.weight.device
        with torch.no_grad():
            self.parts.append(emb(torch.tensor(ids, device=device)))
        self.ids += ids
        self.keys += ids

    def image(self, embeds: Any, image_key: int, tokens: int | None = None) -> None:
        """A screenshot block: its embeddings ``[n, H]``, or None with ``tokens`` for one already in the
        decoder state (its embeddings are no longer needed when the prefix is reused)."""
        n = int(embeds.shape[0]) if embeds is not None else int(tokens or 0)
        self.ids += [self.image_token_id] * n
        self.keys += [(image_key << 20) + i + (1 << 40) for i in range(n)]
        self.parts.append(embeds if embeds is not None else n)

    def embeds(self) -> Any:
        """``[1, T, H]``; the parts are replaced by the concatenation (one copy of the prompt in memory)."""
        import torch

        if any(isinstance(p, int) for p in self.parts):
            raise ValueError("the prompt has screenshots without embeddings; use tail()")
        if len(self.parts) != 1:
            self.parts = [torch.cat(self.parts, dim=0)]
        return self.parts[0].unsqueeze(0)

    def tail(self, start: int) -> Any:
        """``[1, T - start, H]``: embeddings of tokens ``[start, T)`` only."""
        import torch

        pieces, offset = [], 0
        for part in self.parts:
            n = part if isinstance(part, int) else int(part.shape[0])
            if offset + n > start:
                if isinstance(part, int):
                    raise ValueError(f"tokens from {max(start, offset)} are needed but their embeddings were dropped")
                pieces.append(part[max(0, start - offset) :])
            offset += n
        return torch.cat(pieces, dim=0).unsqueeze(0)


# ---------------------------------------------------------------------------------------------- floors
def measure_floors(device: Any) -> dict[str, Any]:
    """Copy bandwidth (GB/s, read + written) and bf16 matmul rate (TFLOP/s) measured here."""
    import torch

    if device.type != "cuda":
        return {"copy_GBps": None, "matmul_TFLOPs": None, "note": "floors are measured on CUDA only"}
    n = GiB // 2

    def copy_ms() -> float:
        src = torch.randn(n // 2, device=device, dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        return _time(lambda: dst.copy_(src), device, repeats=20, warmup=3)[0]

    def matmul_ms(size: int) -> float:
        a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
        b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
        return _time(lambda: a @ b, device, repeats=10, warmup=3)[0]

    copy_gbps = 2 * n / (copy_ms() / 1e3) / 1e9
    size = 8192
    tflops = 2 * size**3 / (matmul_ms(size) / 1e3) / 1e12
    torch.cuda.empty_cache()
    return {"copy_GBps": round(copy_gbps, 1), "matmul_TFLOPs": round(tflops, 1),
            "copy_bytes": 2 * n, "matmul_shape": [size, size, size]}


def _flops(model: Any, tokens: int, tiles: int, prior_tokens: int = 0) -> dict[str, float]:
    """FLOPs of vision (``tiles``), projector and LM prefill of ``tokens`` after ``prior_tokens`` cached."""
    vcfg = model.config.vision_config
    tcfg = model.config.text_config
    v_tokens = (512 // vcfg.patch_size) ** 2 + vcfg.num_cls_tokens + vcfg.num_registers
    v_lin = _linear_params(model.vision_model)
    vision = tiles * (2 * v_lin * v_tokens + vcfg.num_hidden_layers * 4 * v_tokens**2 * vcfg.hidden_size)
    proj = 2 * _linear_params(model.multi_modal_projector) * tiles * 256
    lm = model.language_model
    lin = _linear_params(lm.model) + 0  # lm_head only for the last token
    n_attn = sum(1 for k in lm.config.layers_block_type if k == "full_attention")
    width = tcfg.num_attention_heads * tcfg.head_dim
    attn = n_attn * 4 * width * (tokens * prior_tokens + tokens * tokens / 2)
    prefill = 2 * lin * tokens + attn + 2 * lm.config.vocab_size * lm.config.hidden_size
    return {"vision": float(vision), "projector": float(proj), "prefill": float(prefill)}


def _decode_bytes(s: Any, length: int) -> int:
    """Bytes one decode step must read/write at ``length`` tokens in state: LM weights except the embedding
    table (one row read), valid KV entries, conv + SSM state read and written."""
    lm = s.lm
    weights = _param_bytes(lm) - _param_bytes(lm.model.embeddings)
    row = lm.config.hidden_size * s.dtype.itemsize
    kv = sum(t.shape[0] * t.shape[1] * t.shape[3] * t.element_size() for t in s.k.values()) * 2 * (length + 1)
    state = 2 * sum(t.numel() * t.element_size() for t in (*s.conv.values(), *s.ssm.values()))
    return int(weights + row + kv + state)


# ---------------------------------------------------------------------------------------------- runs
class _HostStalls:
    """Host-side pauses inside a timed region: Python garbage-collection time (``gc.callbacks``) and
    ``cudaMalloc`` calls of torch's caching allocator (segments allocated), to explain wall time above
    the GPU-busy time of a kernel profile."""

    def __init__(self) -> None:
        import gc

        self.gc_ms = 0.0
        self._t0 = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0:
            self.gc_ms += (time.perf_counter() - self._t0) * 1e3
            self._t0 = 0.0

    @staticmethod
    def mallocs(device: Any) -> int:
        import torch

        if device.type != "cuda":
            return 0
        return int(torch.cuda.memory_stats(device).get("segment.all.allocated", 0))


_STALLS: _HostStalls | None = None


def _stalls() -> _HostStalls:
    global _STALLS
    if _STALLS is None:
        _STALLS = _HostStalls()
    return _STALLS


def _fast_step(s: Any, model: Any, prompt: _Prompt, reply: int, device: Any, incremental: bool,
               snapshot_at: tuple[int, ...] = ()) -> dict[str, Any]:
    """Prefill + greedy decode of ``reply`` tokens; returns timings (ms), the tokens, and the host stalls
    inside the prefill (garbage-collection ms, ``cudaMalloc`` calls)."""
    import torch

    offset = s.resume_point(prompt.keys) if incremental else 0
    emb = prompt.tail(offset) if offset else prompt.embeds()
    stalls = _stalls()
    _sync(device)
    gc0, malloc0 = stalls.gc_ms, stalls.mallocs(device)
    t0 = time.perf_counter()
    logits, report = s.prefill(emb, prompt.keys if incremental else None, snapshot_at=snapshot_at,
                               embeds_offset=offset)
    _sync(device)
    t1 = time.perf_counter()
    prefill_gc_ms, prefill_mallocs = stalls.gc_ms - gc0, stalls.mallocs(device) - malloc0
    tokens = s.generate(logits, reply)
    _sync(device)
    t2 = time.perf_counter()
    del emb
    _ = torch
    return {"prefill_ms": (t1 - t0) * 1e3, "decode_ms": (t2 - t1) * 1e3,
            "decode_ms_per_token": (t2 - t1) * 1e3 / max(1, reply - 1), "tokens": tokens[0],
            "prefill_tokens": report.computed, "reused_tokens": report.reused, "first_logits": logits,
            "prefill_gc_ms": prefill_gc_ms, "prefill_mallocs": prefill_mallocs}


def _one_screenshot_prompt(model: Any, vocab: int, args: argparse.Namespace, device: Any, dtype: Any) -> _Prompt:
    """The prompt of one ``--history-size`` screenshot (frame key 0, text seed 0) that the stock baseline,
    the prefill comparison and the quantised runs share."""
    hw = _size(args.history_size)
    tiles, _ = _tiles_for(hw[0], hw[1], device, dtype, 0)
    return _build_prompt(model, vocab, [{"embeds": _vision_encode(model, tiles), "key": 0}], args, seed=0)


def _compare_prefill(s: Any, model: Any, vocab: int, args: argparse.Namespace, device: Any,
                     dtype: Any) -> dict[str, Any]:
    """Cold prefill of one ``--history-size`` screenshot prompt through each prefill path of ``s``,
    alternating, ``--repeats`` samples each after one warm-up of each: the prefill graphs (when captured),
    the eager fused path and the stock block modules (``StaticLM(fused_prefill=False)``). Medians in ms,
    and the relative L2 difference of each path's last-token logits from the stock blocks'."""
    prompt = _one_screenshot_prompt(model, vocab, args, device, dtype)
    emb = prompt.embeds()
    fused_default, bucket_default = s.fused_prefill, s.prefill_bucket
    # name -> (fused path, padded to graphs); the padded variant only when the graphs were captured
    variants = {"fused": (True, bucket_default), "stock_blocks": (False, 0)}
    if bucket_default:
        variants = {"fused_graphs": (True, bucket_default), "fused_eager": (True, 0), "stock_blocks": (False, 0)}
    kernels = dict.fromkeys(variants, "")
    samples: dict[str, list[float]] = {name: [] for name in variants}
    logits: dict[str, Any] = {}
    gc_ms = dict.fromkeys(variants, 0.0)
    try:
        for r in range(args.repeats + 1):
            for name, (fused, bucket) in variants.items():
                s.prefill_bucket = bucket
                s.set_prefill(fused)
                kernels[name] = s.prefill_kernels
                _sync(device)
                gc0 = _stalls().gc_ms
                t0 = time.perf_counter()
                logits[name], _ = s.prefill(emb, None)
                _sync(device)
                if r:
                    samples[name].append((time.perf_counter() - t0) * 1e3)
                    gc_ms[name] += _stalls().gc_ms - gc0
    finally:
        s.prefill_bucket = bucket_default
        s.set_prefill(fused_default)
        s.reset()
    ref = logits["stock_blocks"].float()
    out: dict[str, Any] = {"prompt_tokens": len(prompt.ids)}
    for name in variants:
        out[name] = {"kernels": kernels[name], "prefill_ms": round(statistics.median(samples[name]), 2),
                     "samples_ms": [round(x, 1) for x in samples[name]], "gc_ms": round(gc_ms[name], 1),
                     "logits_rel_diff_vs_stock_blocks": float((logits[name].float() - ref).norm() / ref.norm())}
    print(f"prefill paths ({out['prompt_tokens']} tokens): " + ", ".join(
        f"{name} {out[name]['prefill_ms']} ms (logits vs stock blocks "
        f"{out[name]['logits_rel_diff_vs_stock_blocks']:.2e})" for name in variants))
    return out


def _screenshot(model: Any, width: int, height: int, device: Any, dtype: Any, key: int,
                frame: Any = None) -> dict[str, Any]:
    tiles, pre_ms = _tiles_for(width, height, device, dtype, key, frame)
    _sync(device)
    t0 = time.perf_counter()
    embeds = _vision_encode(model, tiles)
    _sync(device)
    return {"embeds": embeds, "tiles": int(tiles.shape[0]), "preprocess_ms": pre_ms,
            "vision_ms": (time.perf_counter() - t0) * 1e3}


def _build_prompt(model: Any, vocab: int, shots: list[Any], args: argparse.Namespace, seed: int,
                  replies: list[list[int]] | None = None) -> _Prompt:
    """System/task text, then per screenshot: step text, ``<img>``, image tokens, ``</img>`` (and the
    reply of that step when it is history)."""
    p = _Prompt(model, vocab, seed)
    p.text(args.prompt_tokens, salt=0)
    for i, shot in enumerate(shots):
        p.text(args.step_text_tokens, salt=1 + i)
        p.image(shot["embeds"], image_key=shot["key"], tokens=shot.get("tokens"))
        if replies is not None and i < len(replies):
            p.add_ids(replies[i])
    p.text(8, salt=999)  # "<SPECIAL_11>Assistant\n<think></think>"
    return p


def run(args: argparse.Namespace, argv: list[str] | None = None) -> dict[str, Any]:
    """Run the whole benchmark and return the JSON-able result."""
    from holodesk.policy.holotron.kernels import kernel_report, prepare_kernels

    prepare_kernels()
    import torch

    from holodesk.policy.holotron.fast_decode import StaticLM

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
    result: dict[str, Any] = {
        "command": "holodesk bench " + " ".join(argv or []),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "dtype": str(dtype).replace("torch.", ""), "tiny": args.tiny,
        "weights": "checkpoint" if args.checkpoint else f"random (seed {args.seed})",
        "host_cpu": _host_cpu(),  # prefill launches ~600 kernels per chunk from Python: it follows the host
    }
    try:
        import transformers

        result["transformers"] = transformers.__version__
    except ImportError:  # pragma: no cover - transformers is required below anyway
        pass
    t0 = time.perf_counter()
    if args.checkpoint is not None:
        from holodesk.policy.holotron.loader import load_holotron

        loaded = load_holotron(args.checkpoint, dtype="bfloat16" if dtype == torch.bfloat16 else "float32",
                               device=str(device))
        model = loaded.model
    else:
        model = build_random_model(args.tiny, device, dtype, args.seed, args.pattern)
    _sync(device)
    result["build_s"] = round(time.perf_counter() - t0, 2)
    kr = kernel_report()
    result["kernels"] = {"fast_path": kr["fast_path"], "summary": kr["summary"],
                         "functions": {k: v["implementation"] for k, v in kr["functions"].items()},
                         "reasons": kr["reasons"]}
    print(f"kernels: {kr['summary']}")
    for name, entry in kr["functions"].items():
        print(f"  {name}: {'live' if entry['live'] else 'NOT live'} ({entry['implementation']})")

    lm = model.language_model
    vocab = int(lm.config.vocab_size)
    weights = {"vision": _param_bytes(model.vision_model), "projector": _param_bytes(model.multi_modal_projector),
               "lm": _param_bytes(lm), "total": _param_bytes(model)}
    result["weights_bytes"] = weights
    floors = {} if args.no_floors else measure_floors(device)
    result["floors"] = floors

    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",") if s]
    hw = _size(args.history_size)
    history = [int(v) for v in args.history.split(",") if v]
    from holodesk.policy.holotron.tiling import image_token_count

    longest = max(
        [args.prompt_tokens + 8 + args.step_text_tokens + image_token_count(w, h) for w, h in sizes]
        + [args.prompt_tokens + 8 + n * (args.step_text_tokens + image_token_count(*hw) + args.reply_tokens)
           for n in history]
        + [args.prompt_tokens + 8 + args.episode_steps * (args.step_text_tokens + image_token_count(*hw)
                                                          + args.reply_tokens)]
    ) + args.reply_tokens + 8
    impl, compile_step = args.impl, args.compile
    if impl == "auto":
        impl, compile_step = ("torch", True) if device.type == "cuda" else ("dispatch", False)
    result["decode_impl"] = {"impl": impl, "compile": compile_step,
                             "graphs": device.type == "cuda" and not args.no_graphs}
    _sync(device)
    before_static = _mem(device)
    pad = args.prefill_bucket
    if pad < 0:
        from holodesk.policy.holotron.engine import prefill_bucket_for

        pad = prefill_bucket_for(impl, cuda=device.type == "cuda", graphs=not args.no_graphs, chunk=args.chunk)
    s = StaticLM(lm, max_len=longest, bucket=args.bucket, chunk=args.chunk, impl=impl, compile=compile_step,
                 prefill_bucket=pad)
    _sync(device)
    # memory the decoder holds beyond its state after loading (kernel choice, then graph capture)
    cuda = device.type == "cuda"  # the CPU has no allocator statistics
    result["load_memory_bytes"] = {
        "static_lm_over_state": _mem(device) - before_static - s.state_bytes() if cuda else None}
    result["static_state_bytes"] = s.state_bytes()
    result["gemv"] = {role: {"chosen": how.label(), "us": how.us, "candidates_us": s.gemv_timings.get(role, {})}
                      for role, how in s.gemv.items()}
    result["prefill_gated_norm"] = s.gated_norm
    result["prefill_kernels"] = s.prefill_kernels
    print(f"prefill blocks: {s.prefill_kernels}; gated norm: {s.gated_norm}")
    for role, entry in result["gemv"].items():
        print(f"matrix-vector {role}: {entry['chosen']} ({entry['us']} us); tried {entry['candidates_us']}")
    result["max_len"] = s.max_len
    t0 = time.perf_counter()
    if device.type == "cuda" and not args.no_graphs:
        windows = s.capture_graphs()
        result["graphs"] = {"windows": windows, "capture_s": round(time.perf_counter() - t0, 2)}
        if s.prefill_bucket:
            t0 = time.perf_counter()
            lengths = s.capture_prefill_graphs()
            result["prefill_graphs"] = {"padded_lengths": lengths, "graphs": len(s.prefill_graphs),
                                        "capture_s": round(time.perf_counter() - t0, 2)}
            print(f"prefill graphs: {len(s.prefill_graphs)} in {result['prefill_graphs']['capture_s']} s")
        result["prefill_kernels"] = s.prefill_kernels
    else:
        result["graphs"] = None
    _sync(device)
    at_rest = _mem(device)
    result["memory_at_rest_bytes"] = at_rest
    result["load_memory_bytes"]["at_rest_over_weights_and_state"] = (
        at_rest - weights["total"] - s.state_bytes() if cuda else None)
    if cuda:
        print(f"memory held beyond weights and state: after the kernel choice "
              f"{result['load_memory_bytes']['static_lm_over_state'] / 2**20:.1f} MiB, after graph capture "
              f"{result['load_memory_bytes']['at_rest_over_weights_and_state'] / 2**20:.1f} MiB")
    print(f"weights {weights['total'] / GiB:.2f} GiB, static state {s.state_bytes() / GiB:.3f} GiB, "
          f"max_len {s.max_len}, graphs {result['graphs']}")

    copy_bps = (floors.get("copy_GBps") or 0) * 1e9
    mm_fps = (floors.get("matmul_TFLOPs") or 0) * 1e12

    def floor_ms(flops: float, nbytes: float) -> float | None:
        if not copy_bps or not mm_fps:
            return None
        return max(flops / mm_fps, nbytes / copy_bps) * 1e3

    # ---- frame sizes, one screenshot
    frames = []
    for w, h in sizes:
        samples: list[dict[str, Any]] = []
        for r in range(args.repeats + 1):
            _reset_peak(device)
            base = _mem(device)
            pixels = _random_frame(w, h, r)
            t_start = time.perf_counter()
            shot = _screenshot(model, w, h, device, dtype, key=r, frame=pixels)
            shot["key"] = r
            prompt = _build_prompt(model, vocab, [shot], args, seed=r)
            step = _fast_step(s, model, prompt, args.reply_tokens, device, incremental=False)
            ttfa = (time.perf_counter() - t_start) * 1e3
            if r == 0:
                continue  # warm-up
            samples.append({**{k: v for k, v in step.items() if k not in ("tokens", "first_logits")},
                            "vision_ms": shot["vision_ms"], "preprocess_ms": shot["preprocess_ms"],
                            "ttfa_ms": ttfa, "peak_over_rest_bytes": _peak(device) - base,
                            "peak_over_weights_bytes": _peak(device) - weights["total"],
                            "prompt_tokens": len(prompt.ids), "tiles": shot["tiles"]})
        med = {k: statistics.median(x[k] for x in samples) for k in samples[0]}
        fl = _flops(model, int(med["prompt_tokens"]), int(med["tiles"]))
        dec_bytes = _decode_bytes(s, int(med["prompt_tokens"]) + args.reply_tokens // 2)
        vis_floor = floor_ms(fl["vision"] + fl["projector"], weights["vision"] + weights["projector"])
        pre_floor = floor_ms(fl["prefill"], weights["lm"])
        dec_floor = floor_ms(0.0, dec_bytes)
        ttfa_floor = None
        if vis_floor is not None and pre_floor is not None and dec_floor is not None:
            ttfa_floor = vis_floor + pre_floor + dec_floor * (args.reply_tokens - 1)
        frame = {"size": f"{w}x{h}", **{k: round(v, 3) for k, v in med.items()},
                 "prefill_samples_ms": [round(x["prefill_ms"], 1) for x in samples],
                 "prefill_host_stalls": [(round(x["prefill_gc_ms"], 1), x["prefill_mallocs"]) for x in samples],
                 "flops": fl, "decode_bytes_per_token": dec_bytes,
                 "floor_ms": {"vision": vis_floor, "prefill": pre_floor, "decode_per_token": dec_floor,
                              "ttfa": ttfa_floor}}
        if ttfa_floor:
            frame["ttfa_over_floor"] = round(med["ttfa_ms"] / ttfa_floor, 3)
            frame["decode_fraction_of_floor"] = round((dec_floor or 0.0) / med["decode_ms_per_token"], 3)
        frames.append(frame)
        print(f"{w}x{h}: tiles {med['tiles']:.0f} tokens {med['prompt_tokens']:.0f} | pre {med['preprocess_ms']:.1f} "
              f"vision {med['vision_ms']:.1f} prefill {med['prefill_ms']:.1f} decode {med['decode_ms']:.1f} "
              f"({med['decode_ms_per_token']:.2f}/tok) TTFA {med['ttfa_ms']:.1f} ms | "
              f"{_memory_text(med, device)} | floors {frame['floor_ms']} | prefill samples "
              f"{frame['prefill_samples_ms']} ms, (gc ms, cudaMalloc calls) {frame['prefill_host_stalls']}")
    result["frames"] = frames
    if args.compare_prefill:
        result["prefill_paths"] = _compare_prefill(s, model, vocab, args, device, dtype)
    if args.profile_decode and device.type == "cuda":
        result["decode_profile"] = _profile_decode(s, model, vocab, args, device, dtype)

    # ---- history: cold prompts with N screenshots (1080p)
    hist = []
    for n in history:
        shots = []
        for i in range(n):
            tiles, _ = _tiles_for(hw[0], hw[1], device, dtype, 100 + i)
            shots.append({"embeds": _vision_encode(model, tiles), "key": 100 + i, "tiles": int(tiles.shape[0])})
            del tiles
        replies = [[16 + (j * 7 + i) % (vocab - 16) for j in range(args.reply_tokens)] for i in range(n - 1)]
        prompt = _build_prompt(model, vocab, shots, args, seed=7, replies=replies)
        del shots
        prompt.embeds()
        vis_ms = statistics.median(
            _time(lambda: _vision_encode(model, _tiles_for(hw[0], hw[1], device, dtype, 1)[0]), device, 1)[1]
        ) * n
        runs = []
        for _ in range(max(1, args.repeats - 1)):
            _reset_peak(device)
            base = _mem(device)
            step = _fast_step(s, model, prompt, args.reply_tokens, device, incremental=False)
            runs.append({"prefill_ms": step["prefill_ms"], "decode_ms": step["decode_ms"],
                         "decode_ms_per_token": step["decode_ms_per_token"],
                         "peak_over_rest_bytes": _peak(device) - base,
                         "peak_over_weights_bytes": _peak(device) - weights["total"]})
        med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
        entry = {"screenshots": n, "prompt_tokens": len(prompt.ids), "vision_ms_all_shots": round(vis_ms, 2),
                 **{k: round(v, 3) for k, v in med.items()},
                 "ttfa_cold_ms": round(vis_ms + med["prefill_ms"] + med["decode_ms"], 2)}
        hist.append(entry)
        print(f"history {n}: tokens {len(prompt.ids)} prefill {med['prefill_ms']:.1f} ms decode "
              f"{med['decode_ms_per_token']:.2f} ms/tok cold TTFA {entry['ttfa_cold_ms']:.1f} ms "
              f"{_memory_text(med, device)}")
        del prompt
    result["history_cold"] = hist

    # ---- episode with incremental prefill (one new screenshot per step), after an untimed warm-up episode;
    # the timed episode is run --episode-repeats times and each step reports the median of its samples
    episode = []
    if args.episode_steps > 0:
        ep_runs: list[list[dict[str, Any]]] = []
        phases = [("warmup", args.episode_warmup)] + [("timed", args.episode_steps)] * max(1, args.episode_repeats)
        for n_phase, (phase, steps) in enumerate(phases):
            s.reset()
            ep_shots: list[Any] = []
            ep_replies: list[list[int]] = []
            rows: list[dict[str, Any]] = []
            for k in range(steps):
                _reset_peak(device)
                base = _mem(device)
                key = 200 + k + 1000 * n_phase
                pixels = _random_frame(hw[0], hw[1], key)
                t_start = time.perf_counter()
                shot = _screenshot(model, hw[0], hw[1], device, dtype, key=key, frame=pixels)
                shot["key"] = key
                ep_shots.append(shot)
                prompt = _build_prompt(model, vocab, ep_shots, args, seed=11, replies=ep_replies)
                step = _fast_step(s, model, prompt, args.reply_tokens, device, incremental=True,
                                  snapshot_at=(len(prompt.ids) - 8,))
                ttfa = (time.perf_counter() - t_start) * 1e3
                ep_replies.append(step["tokens"])
                shot["tokens"] = int(shot["embeds"].shape[0])
                shot["embeds"] = None  # in the decoder state now; later steps resume past it
                if phase == "warmup":
                    continue
                rows.append({"step": k + 1, "prompt_tokens": len(prompt.ids),
                             "reused_tokens": step["reused_tokens"], "prefill_tokens": step["prefill_tokens"],
                             "vision_ms": shot["vision_ms"], "prefill_ms": step["prefill_ms"],
                             "decode_ms": step["decode_ms"], "ttfa_ms": ttfa,
                             "memory_at_rest_bytes": base - weights["total"],
                             "peak_over_rest_bytes": _peak(device) - base,
                             "peak_over_weights_bytes": _peak(device) - weights["total"]})
                print(f"episode {len(ep_runs) + 1}/{max(1, args.episode_repeats)} step {k + 1}: tokens "
                      f"{len(prompt.ids)} reused {step['reused_tokens']} prefill "
                      f"{step['prefill_ms']:.1f} ms decode {step['decode_ms']:.1f} ms TTFA {ttfa:.1f} ms")
            del ep_shots
            if rows:
                ep_runs.append(rows)
        for k in range(args.episode_steps):
            samples = [run[k] for run in ep_runs]
            row = {name: samples[0][name] for name in ("step", "prompt_tokens", "reused_tokens", "prefill_tokens")}
            for name in ("vision_ms", "prefill_ms", "decode_ms", "ttfa_ms"):
                row[name] = round(statistics.median(x[name] for x in samples), 2)
            for name in ("memory_at_rest_bytes", "peak_over_rest_bytes", "peak_over_weights_bytes"):
                row[name] = max(x[name] for x in samples)
            row["ttfa_samples_ms"] = [round(x["ttfa_ms"], 1) for x in samples]
            episode.append(row)
        if len(episode) >= 2:
            result["episode_last_over_first"] = round(episode[-1]["ttfa_ms"] / episode[0]["ttfa_ms"], 3)
            rest = [e["memory_at_rest_bytes"] for e in episode]
            result["episode_memory_at_rest_growth_bytes"] = max(rest) - min(rest)
            print(f"episode: step {len(episode)} / step 1 TTFA (medians of {len(ep_runs)}) "
                  f"{result['episode_last_over_first']}; memory at rest varies by "
                  f"{result['episode_memory_at_rest_growth_bytes'] / 2**20:.1f} MiB over the steps")
    result["episode"] = episode

    # ---- stock generate() baseline and agreement at 1080p
    if not args.no_stock:
        fp32_ref = device.type == "cuda" and dtype != torch.float32 and not args.no_fp32_reference
        result["stock"] = _stock_baseline(model, s, args, device, dtype, vocab, fp32_ref)
        st = result["stock"]
        fast = next((f for f in frames if f["size"] == args.history_size), frames[0] if frames else None)
        if fast and st.get("decode_ms_per_token"):
            result["decode_speedup_vs_stock"] = round(st["decode_ms_per_token"] / fast["decode_ms_per_token"], 2)
        print(f"stock generate(): prefill {st['prefill_ms']:.1f} ms decode {st['decode_ms_per_token']:.2f} ms/tok; "
              f"fast vs stock: tokens equal {st['agreement']['tokens_equal']}/{st['agreement']['n']} "
              f"first-logit rel err {st['agreement']['first_logits_rel_err']:.2e}; "
              f"speedup {result.get('decode_speedup_vs_stock')}x")

    if args.quant:
        modes = [q for q in args.quant.split(",") if q]
        qprompt = _one_screenshot_prompt(model, vocab, args, device, dtype)
        ref = _fast_step(s, model, qprompt, args.reply_tokens, device, incremental=False)
        ref_light = {"tokens": ref["tokens"], "first_logits": ref["first_logits"]}
        qprompt.embeds()
        qprompt.model = None  # the prompt keeps its embeddings, not the model
        s.graphs.clear()
        del s, ref
        import gc

        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        holder = [model]  # _quant_runs owns the model from here, so a rebuild can free it
        del model, lm
        result["quant"] = _quant_runs(holder, ref_light, qprompt, args, device, dtype, modes)
    return result


def _profile_decode(s: Any, model: Any, vocab: int, args: argparse.Namespace, device: Any, dtype: Any,
                    steps: int = 20) -> dict[str, Any]:
    """GPU time per kernel over ``steps`` decode steps after a 1080p prefill (torch.profiler / CUPTI, which
    also records the kernels a CUDA graph replay launches). Returns the busy time per step, the kernel
    count per step and the 25 kernels with the most time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    hw = _size(args.history_size)
    shot = _screenshot(model, hw[0], hw[1], device, dtype, key=5)
    shot["key"] = 5
    prompt = _build_prompt(model, vocab, [shot], args, seed=5)
    emb = prompt.embeds()
    s.prefill(emb, None)
    _sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as pre:
        logits, _ = s.prefill(emb, None)
        _sync(device)
    s.token.copy_(torch.argmax(logits, dim=-1, keepdim=True))
    for _ in range(3):
        s.step()
    _sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            s.step()
        _sync(device)
    def table(p: Any, per: int) -> tuple[list[dict[str, Any]], float, float]:
        rows, busy, launches = [], 0.0, 0
        for ev in p.key_averages():
            t = float(getattr(ev, "device_time_total", 0.0) or getattr(ev, "cuda_time_total", 0.0) or 0.0)
            if t <= 0 or ev.count <= 0:
                continue
            rows.append({"kernel": ev.key[:120], "calls_per_step": ev.count / per, "us_per_step": t / per})
            busy += t
            launches += ev.count
        rows.sort(key=lambda r: -r["us_per_step"])
        return rows, busy / per, launches / per

    rows, busy, launches = table(prof, steps)
    out = {"steps": steps, "gpu_busy_us_per_step": round(busy, 1), "kernels_per_step": round(launches, 1),
           "top": rows[:25]}
    host = _profile_prefill_host(s, emb, device)
    prows, pbusy, plaunches = table(pre, 1)
    out["prefill"] = {"tokens": int(emb.shape[1]), "gpu_busy_us": round(pbusy, 1), "kernels": plaunches,
                      "top": prows[:25], "host": host}
    print(f"decode profile: {out['gpu_busy_us_per_step']} us GPU-busy per step, {out['kernels_per_step']} kernels")
    for r in rows[:25]:
        print(f"  {r['us_per_step']:8.1f} us  x{r['calls_per_step']:5.1f}  {r['kernel']}")
    print(f"prefill profile ({int(emb.shape[1])} tokens): {pbusy:.1f} us GPU-busy, {plaunches:.0f} kernels")
    for r in prows[:25]:
        print(f"  {r['us_per_step']:8.1f} us  x{r['calls_per_step']:5.1f}  {r['kernel']}")
    return out


def _profile_prefill_host(s: Any, emb: Any, device: Any) -> dict[str, Any]:
    """Where the host spends a cold prefill: wall ms of the call without a profiler (the host returns
    when the last kernel is queued, so this is the launch time when the GPU keeps up), then Python's
    cProfile over one more call (its overhead inflates the absolute numbers; the shares are what it is
    for): the 20 functions with the most own time and the cumulative time of the prefill's stages."""
    import cProfile
    import pstats

    _sync(device)
    t0 = time.perf_counter()
    s.prefill(emb, None)
    launch_ms = (time.perf_counter() - t0) * 1e3
    _sync(device)
    wall_ms = (time.perf_counter() - t0) * 1e3
    prof = cProfile.Profile()
    prof.enable()
    s.prefill(emb, None)
    prof.disable()
    _sync(device)
    stats = pstats.Stats(prof)
    entries = stats.stats  # type: ignore[attr-defined]
    rows = []
    stages: dict[str, float] = {}
    wanted = ("_mamba_prefill", "_attn_prefill", "_mlp_prefill", "add_rms_norm", "causal_conv1d", "relu_square_",
              "fused")  # ours (fused: the gated norm of fast_decode); plus the library entry points below
    library = ("mamba2_chunk_scan", "mamba_chunk_scan_combined", "rms_norm_fn", "rmsnorm_fn")
    for (path, line, name), (_cc, calls, own, cum, _callers) in entries.items():
        label = f"{path.rsplit('/', 2)[-1]}:{line}({name})"
        rows.append({"function": label, "calls": calls, "own_ms": round(own * 1e3, 2), "cum_ms": round(cum * 1e3, 2)})
        if (name in wanted and "holotron" in path) or name in library:
            stages[label] = round(stages.get(label, 0.0) + cum * 1e3, 2)
    rows.sort(key=lambda r: -r["own_ms"])
    out = {"launch_ms": round(launch_ms, 2), "wall_ms": round(wall_ms, 2), "profiled_total_ms":
           round(stats.total_tt * 1e3, 2), "top_own": rows[:20], "stages_cum_ms": stages}  # type: ignore[attr-defined]
    print(f"prefill host: queued in {out['launch_ms']} ms, done in {out['wall_ms']} ms; under cProfile "
          f"{out['profiled_total_ms']} ms; stages {stages}")
    for r in rows[:12]:
        print(f"  own {r['own_ms']:8.2f} ms  cum {r['cum_ms']:8.2f} ms  x{r['calls']:5d}  {r['function']}")
    return out


def _size(text: str) -> tuple[int, int]:
    w, h = (int(v) for v in text.lower().split("x"))
    return w, h


def _agreement(tokens: list[int], logits: Any, ref_tokens: list[int], ref_logits: Any) -> dict[str, Any]:
    """Greedy-token agreement (position-wise and common prefix) and first-logit relative L2 error."""
    equal = sum(int(a == b) for a, b in zip(tokens, ref_tokens, strict=False))
    prefix = 0
    for a, b in zip(tokens, ref_tokens, strict=False):
        if a != b:
            break
        prefix += 1
    rel = float((logits.float() - ref_logits.float()).norm() / ref_logits.float().norm())
    return {"n": len(ref_tokens), "tokens_equal": equal, "equal_prefix": prefix, "first_logits_rel_err": rel}


def _stock_baseline(
    model: Any, s: Any, args: argparse.Namespace, device: Any, dtype: Any, vocab: int, fp32_ref: bool = False
) -> dict[str, Any]:
    import torch

    lm = model.language_model
    prompt = _one_screenshot_prompt(model, vocab, args, device, dtype)
    # NemotronHForCausalLM.generate() takes no inputs_embeds: both paths get the prompt's token ids (the
    # image rows are then the <image> embedding; kernels and shapes are those of the real prompt).
    ids = torch.tensor([prompt.ids], device=device)
    same = _Prompt(model, vocab, 0)
    same.add_ids(prompt.ids)
    n = args.reply_tokens

    def gen(k: int) -> Any:
        with torch.no_grad():
            return lm.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=k, min_new_tokens=k,
                               do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0)

    reps = max(1, args.repeats - 1)
    t1, _, _ = _time(lambda: gen(1), device, reps)
    tn, _, out = _time(lambda: gen(n), device, reps)
    stock_tokens = out.sequences[0, -n:].tolist()
    fast = _fast_step(s, model, same, n, device, incremental=False)
    ref_first = out.logits[0][0].float()
    result: dict[str, Any] = {
        "prefill_ms": round(t1, 2), f"generate_{n}_ms": round(tn, 2),
        "decode_ms_per_token": round((tn - t1) / (n - 1), 3), "prompt_tokens": len(prompt.ids),
        "agreement": _agreement(fast["tokens"], fast["first_logits"][0], stock_tokens, ref_first),
    }
    if fp32_ref:
        # float32 copy of the same LM: how far each bf16 path is from exact arithmetic (bf16 tolerance).
        import copy

        lm32 = copy.deepcopy(lm).float()
        with torch.no_grad():
            out32 = lm32.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                  do_sample=False, output_logits=True, return_dict_in_generate=True,
                                  pad_token_id=0)
        tokens32 = out32.sequences[0, -n:].tolist()
        first32 = out32.logits[0][0].float()
        result["fp32_reference"] = {
            "fast_bf16_vs_fp32": _agreement(fast["tokens"], fast["first_logits"][0], tokens32, first32),
            "stock_bf16_vs_fp32": _agreement(stock_tokens, ref_first, tokens32, first32),
        }
        del lm32, out32
        torch.cuda.empty_cache()
    return result


def _quantize_lm(model: Any, mode: str) -> None:
    """Replace the LM's Linear layers (not lm_head) by bitsandbytes 8-bit / NF4 ones, in place, on CUDA."""
    import bitsandbytes as bnb
    import torch

    lm = model.language_model.model
    for parent in list(lm.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear):
                continue
            w = child.weight.data
            if mode == "4bit":
                q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                      compute_dtype=torch.bfloat16, quant_type="nf4", compress_statistics=False,
                                      device="meta")
                q.weight = bnb.nn.Params4bit(w.to("cpu"), requires_grad=False, quant_type="nf4",
                                             compress_statistics=False)
            else:
                q = bnb.nn.Linear8bitLt(child.in_features, child.out_features, bias=child.bias is not None,
                                        has_fp16_weights=False, threshold=6.0, device="meta")
                q.weight = bnb.nn.Int8Params(w.to("cpu"), requires_grad=False, has_fp16_weights=False)
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            setattr(parent, name, q)
            del child, w
            q.to(model.device)
    torch.cuda.empty_cache()


def _quant_runs(holder: list[Any], ref: dict[str, Any], prompt: _Prompt, args: argparse.Namespace, device: Any,
                dtype: Any, modes: list[str]) -> dict[str, Any]:
    """Each mode: quantise the LM linears in place (a fresh random model for every mode after the first),
    then a 1080p step: whole-model peak memory, speed, and drift against the bf16 result ``ref``.

    ``holder`` is a one-element list with the model; the caller keeps no other reference, so the previous
    mode's model is freed before the next one is built (otherwise its memory is counted too)."""
    import gc

    import torch

    from holodesk.policy.holotron.fast_decode import StaticLM

    model = holder.pop()

    out: dict[str, Any] = {}
    hw = _size(args.history_size)
    for i, mode in enumerate(modes):
        if device.type != "cuda":
            out[mode] = {"error": "bitsandbytes needs CUDA"}
            continue
        try:
            if i > 0:
                del model
                gc.collect()
                torch.cuda.empty_cache()
                model = build_random_model(args.tiny, device, dtype, args.seed, args.pattern)
            t0 = time.perf_counter()
            _quantize_lm(model, mode)
            quant_s = time.perf_counter() - t0
            s = StaticLM(model.language_model, max_len=len(prompt.ids) + args.reply_tokens + 64,
                         bucket=args.bucket, chunk=args.chunk, impl="dispatch")
            graphs = "none"
            try:
                s.capture_graphs()
                graphs = "captured"
            except Exception as exc:  # int8 outlier handling syncs with the host
                s.graphs = {}
                s.reset()
                graphs = f"eager ({type(exc).__name__}: {str(exc)[:160]})"
            _sync(device)
            weights_now = _mem(device)
            _fast_step(s, model, prompt, args.reply_tokens, device, incremental=False)  # warm-up
            _reset_peak(device)
            pixels = _random_frame(hw[0], hw[1], 0)
            t0 = time.perf_counter()
            shot_q = _screenshot(model, hw[0], hw[1], device, dtype, key=0, frame=pixels)
            step = _fast_step(s, model, prompt, args.reply_tokens, device, incremental=False)
            ttfa = (time.perf_counter() - t0) * 1e3
            out[mode] = {"graphs": graphs, "quantize_s": round(quant_s, 1),
                         "memory_at_rest_bytes": weights_now, "peak_total_bytes": _peak(device),
                         "lm_bytes": _param_bytes(model.language_model), "ttfa_ms": round(ttfa, 2),
                         "vision_ms": round(shot_q["vision_ms"], 2), "prefill_ms": round(step["prefill_ms"], 2),
                         "decode_ms_per_token": round(step["decode_ms_per_token"], 3),
                         "vs_bf16": _agreement(step["tokens"], step["first_logits"][0], ref["tokens"],
                                               ref["first_logits"][0])}
            print(f"{mode}: {out[mode]}")
            s.graphs.clear()
            del s
        except Exception as exc:
            out[mode] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            print(f"{mode}: failed: {out[mode]['error']}")
    return out


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def main(argv: list[str]) -> int:
    """Entry point of ``holodesk bench``; returns the exit status (0 ok, 2 runtime missing)."""
    args = _parse(list(argv))
    if args.tiny:
        args.prompt_tokens = min(args.prompt_tokens, 300)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        print(f"holodesk bench: the local runtime is not installed ({exc}); pip install 'holodesk[local]'",
              file=sys.stderr)
        return 2
    result = _clean(run(args, list(argv)))
    text = json.dumps(result, indent=2, default=str)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
        print(f"wrote {args.json}")
    return 0
