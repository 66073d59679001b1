"""Prefill attention of Holotron-12B's chunks on the GPU: the flash kernel the decoder calls now against cuDNN's
(issue 34; a measurement script, not product code).

A prefill chunk's queries ``[1, 40, T, 128]`` (bf16) attend to the KV cache ``[1, 8, start + T, 128]`` with a causal
mask aligned to the bottom right (``blocks.attention_chunk``). torch's lower-right causal bias always goes to the
flash kernel (FlashAttention-2). cuDNN's kernel has no lower-right mask here, so it is run as two calls merged by
their log-sum-exp: the chunk over the past keys ``[0, start)`` without a mask, and over its own keys with the usual
causal mask (square, so top-left is bottom-right). Printed per (T, start): each way's time (CUDA events, median of
20 after 3 warm-ups), the first call of a new shape (cuDNN builds a plan per shape), and the largest difference from
a float32 reference with the mask written out.

Run on the GPU machine: ``python3 docs/bench/issue34/attention_backends.py``.
"""
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

H, KVH, D = 40, 8, 128
SCALE = D ** -0.5
dev = torch.device("cuda")
torch.manual_seed(0)


def timed(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def first_call_ms(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def flash(q, k, v, t, end):
    mask = {"is_causal": True} if end == t else {"attn_mask": causal_lower_right(t, end)}
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, scale=SCALE, enable_gqa=True, **mask)


def expand(x):  # [1, KVH, S, D] -> [1, H, S, D]
    return x[:, :, None].expand(-1, -1, H // KVH, -1, -1).reshape(1, H, x.shape[2], D)


def cudnn_part(q, k, v, causal, gqa_native):
    if not gqa_native:
        k, v = expand(k), expand(v)
    out = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=SCALE)
    return out[0], out[1]


def cudnn_split(q, k, v, t, end, gqa_native):
    start = end - t
    o_cur, l_cur = cudnn_part(q, k[:, :, start:end], v[:, :, start:end], True, gqa_native)
    if start == 0:
        return o_cur
    o_past, l_past = cudnn_part(q, k[:, :, :start], v[:, :, :start], False, gqa_native)
    l_cur, l_past = l_cur.view(1, H, t, 1).float(), l_past.view(1, H, t, 1).float()
    m = torch.maximum(l_cur, l_past)
    w_cur, w_past = torch.exp(l_cur - m), torch.exp(l_past - m)
    return ((o_cur.float() * w_cur + o_past.float() * w_past) / (w_cur + w_past)).to(q.dtype)


def reference(q, k, v, t, end):
    qf, kf, vf = q.float(), expand(k).float(), expand(v).float()
    s = (qf @ kf.transpose(-1, -2)) * SCALE
    rows = torch.arange(t, device=dev)[:, None] + (end - t)
    s.masked_fill_(torch.arange(end, device=dev)[None, :] > rows, float("-inf"))
    return torch.softmax(s, -1) @ vf


print(torch.__version__, torch.backends.cudnn.version(), torch.cuda.get_device_name(), flush=True)
rows = []
for t, start in ((2048, 0), (2048, 2048), (2048, 4096), (2048, 6144), (1024, 6144), (2048, 10240), (384, 4608)):
    end = start + t
    q = torch.randn(1, H, t, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, KVH, end, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, KVH, end, D, device=dev, dtype=torch.bfloat16)
    ref = reference(q, k, v, t, end)
    row = {"T": t, "start": start,
           "tflop": round(4 * H * D * t * (start + (t + 1) / 2) / 1e12, 3)}
    for name, fn in (("flash", lambda: flash(q, k, v, t, end)),
                     ("cudnn_gqa", lambda: cudnn_split(q, k, v, t, end, True)),
                     ("cudnn_expanded", lambda: cudnn_split(q, k, v, t, end, False))):
        try:
            row[f"{name}_first_ms"] = round(first_call_ms(fn), 2)
            row[f"{name}_ms"] = round(timed(fn), 3)
            row[f"{name}_err"] = float((fn().float() - ref).abs().max())
            row[f"{name}_tflops"] = round(row["tflop"] / row[f"{name}_ms"] * 1e3, 1)
        except Exception as exc:  # a backend that refuses these inputs: say which and why
            row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:300]
    del ref
    torch.cuda.empty_cache()
    rows.append(row)
    print(json.dumps(row), flush=True)
