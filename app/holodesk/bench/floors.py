"""What the hardware allows: copy and matmul floors measured on the device, FLOPs and bytes per stage.

* copy floor: device-to-device copy of a 512 MiB bf16 buffer, bytes read + written per second;
* matmul floor: bf16 ``8192 x 8192 @ 8192 x 8192`` on random data, FLOP/s;
* FLOPs per stage: linear layers ``2 x params x tokens``; attention ``4 x tokens x context x width`` per layer
  (halved over the new tokens, causal); the Mamba scan is left out (about 1 % of the linear FLOPs at
  Holotron's sizes);
* bytes per decode step: the LM weights as stored (one embedding row; for bitsandbytes layers the packed
  NF4 / int8 weights plus the statistics the decode kernels read with them, :func:`quant_state_bytes`), the
  valid KV entries, the conv and SSM state read and written.

A stage's floor is ``max(FLOPs / matmul rate, bytes / copy bandwidth)``.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from holodesk.policy.holotron.runtime import sync

if TYPE_CHECKING:
    import torch

    from holodesk.policy.holotron.loader import LoadedHolotron

GiB = 1024**3


def median_ms(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 1) -> float:
    """Median wall milliseconds of ``fn()`` over ``repeats`` calls after ``warmup`` untimed ones, the
    device synchronised before and after each call."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def allocated(device: torch.device) -> int:
    """Bytes held by torch's CUDA allocator now (0 on the CPU, which keeps no statistics)."""
    import torch  # lazy: torch (optional: the local extra)

    return int(torch.cuda.memory_allocated(device)) if device.type == "cuda" else 0


def reset_peak(device: torch.device) -> int:
    """Start a new peak-memory window; returns :func:`allocated` at its start."""
    import torch  # lazy: torch (optional: the local extra)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    return allocated(device)


def peak(device: torch.device) -> int:
    """Highest allocated bytes since :func:`reset_peak` (0 on the CPU)."""
    import torch  # lazy: torch (optional: the local extra)

    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else 0


def param_bytes(module: torch.nn.Module) -> int:
    """Bytes of the parameters and buffers of ``module``."""
    return int(sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()]))


def linear_params(module: torch.nn.Module) -> int:
    """Multiply-accumulate weights of the linear layers under ``module`` (bitsandbytes ones included)."""
    n = 0
    for m in module.modules():
        fan_in, fan_out = getattr(m, "in_features", None), getattr(m, "out_features", None)
        if getattr(m, "weight", None) is not None and fan_in is not None and fan_out is not None:
            n += int(fan_in) * int(fan_out)
    return n


def quant_state_bytes(module: torch.nn.Module) -> int:
    """Bytes of bitsandbytes' quantisation statistics under ``module`` that are neither parameters nor buffers
    (so :func:`param_bytes` misses them) and that a decode step reads with the weights: per ``Linear4bit`` its
    ``quant_state``'s ``absmax`` and ``code`` and, with double quantisation, the nested ``absmax`` and ``code``;
    per ``Linear8bitLt`` the row scales ``SCB`` (on the weight before the first forward, on the module's
    state after). 0 for a model without bitsandbytes layers."""
    import torch  # lazy: torch (optional: the local extra)

    n = 0
    for m in module.modules():
        weight = getattr(m, "weight", None)
        qs = getattr(weight, "quant_state", None)
        if qs is not None:
            stats = [qs.absmax, qs.code]
            if getattr(qs, "nested", False) and qs.state2 is not None:
                stats += [qs.state2.absmax, qs.state2.code]
            n += sum(t.numel() * t.element_size() for t in stats if isinstance(t, torch.Tensor))
        elif weight is not None and weight.dtype == torch.int8:
            scb = getattr(weight, "SCB", None)
            if scb is None:
                scb = getattr(getattr(m, "state", None), "SCB", None)
            if isinstance(scb, torch.Tensor):
                n += scb.numel() * scb.element_size()
    return int(n)


def host_cpu() -> str:
    """The host processor's model name (Linux ``/proc/cpuinfo``, else :mod:`platform`) and CPU count."""
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return f"{name or platform.processor() or 'unknown'} x{os.cpu_count()}"


def measure_floors(device: torch.device) -> dict[str, Any]:
    """Copy bandwidth (``copy_GBps``, GB/s read + written) and bf16 matmul rate (``matmul_TFLOPs``) measured
    on ``device``; both None on a CPU."""
    import torch  # lazy: torch (optional: the local extra)

    if device.type != "cuda":
        return {"copy_GBps": None, "matmul_TFLOPs": None, "note": "floors are measured on CUDA only"}
    n = GiB // 2
    size = 8192
    copy_ms = _copy_ms(device, n)
    matmul_ms = _matmul_ms(device, size)
    torch.cuda.empty_cache()
    return {"copy_GBps": round(2 * n / (copy_ms / 1e3) / 1e9, 1),
            "matmul_TFLOPs": round(2 * size**3 / (matmul_ms / 1e3) / 1e12, 1),
            "copy_bytes": 2 * n, "matmul_shape": [size, size, size]}


def _copy_ms(device: torch.device, nbytes: int) -> float:
    """Median ms of copying a bf16 device buffer of ``nbytes`` bytes into another."""
    import torch  # lazy: torch (optional: the local extra)

    src = torch.randn(nbytes // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return median_ms(lambda: dst.copy_(src), device, repeats=20, warmup=3)


def _matmul_ms(device: torch.device, size: int) -> float:
    """Median ms of a bf16 ``size x size`` matrix product on random data."""
    import torch  # lazy: torch (optional: the local extra)

    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    return median_ms(lambda: a @ b, device, repeats=10, warmup=3)


def stage_flops(loaded: LoadedHolotron, tokens: int, tiles: int, prior_tokens: int = 0) -> dict[str, float]:
    """FLOPs of the vision tower over ``tiles``, the projector, and the LM prefill of ``tokens`` after
    ``prior_tokens`` already in the state (``lm_head`` for the last token only)."""
    model = loaded.model
    vcfg = model.config.vision_config
    tcfg = model.config.text_config
    tile_tokens = (loaded.info.tile_size // vcfg.patch_size) ** 2 + vcfg.num_cls_tokens + vcfg.num_registers
    vision = tiles * (2 * linear_params(model.vision_model) * tile_tokens
                      + vcfg.num_hidden_layers * 4 * tile_tokens**2 * vcfg.hidden_size)
    projector = 2 * linear_params(model.multi_modal_projector) * tiles * loaded.info.tokens_per_tile
    lm = model.language_model
    attention_layers = sum(1 for kind in tcfg.layers_block_type if kind == "full_attention")
    width = tcfg.num_attention_heads * tcfg.head_dim
    attention = attention_layers * 4 * width * (tokens * prior_tokens + tokens * tokens / 2)
    prefill = 2 * linear_params(lm.model) * tokens + attention + 2 * tcfg.vocab_size * tcfg.hidden_size
    return {"vision": float(vision), "projector": float(projector), "prefill": float(prefill)}


def decode_step_bytes(loaded: LoadedHolotron, length: int) -> int:
    """Bytes one decode step reads or writes with ``length`` tokens in the state: the LM weights as stored
    except the embedding table (one row read; bitsandbytes layers: packed weights plus
    :func:`quant_state_bytes`; ``lm_head``, norms, conv and the rest in the model dtype), the KV entries of
    the attention layers, and the conv (model dtype) and SSM (float32) state of the Mamba layers, read and
    written."""
    lm = loaded.model.language_model
    tcfg = loaded.model.config.text_config
    itemsize = next(lm.model.embeddings.parameters()).element_size()
    weights = (param_bytes(lm) + quant_state_bytes(lm) - param_bytes(lm.model.embeddings)
               + tcfg.hidden_size * itemsize)
    kinds = list(tcfg.layers_block_type)
    kv = kinds.count("full_attention") * 2 * tcfg.num_key_value_heads * tcfg.head_dim * itemsize * (length + 1)
    inner = tcfg.mamba_num_heads * tcfg.mamba_head_dim
    conv = (inner + 2 * tcfg.n_groups * tcfg.ssm_state_size) * tcfg.conv_kernel * itemsize
    ssm = inner * tcfg.ssm_state_size * 4
    return int(weights + kv + 2 * kinds.count("linear_attention") * (conv + ssm))


def floor_ms(floors: dict[str, Any], flops: float, nbytes: float) -> float | None:
    """``max(flops / matmul rate, nbytes / copy bandwidth)`` in ms, or None without measured floors."""
    copy_bps = (floors.get("copy_GBps") or 0) * 1e9
    matmul_fps = (floors.get("matmul_TFLOPs") or 0) * 1e12
    if not copy_bps or not matmul_fps:
        return None
    return max(flops / matmul_fps, nbytes / copy_bps) * 1e3
