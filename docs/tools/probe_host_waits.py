"""Two host-side costs of a decode step, measured apart from the model (on the GPU machine:
``PYTHONPATH=/tmp/site:app python docs/tools/probe_host_waits.py``):

1. Which host calls wait for the device: each call of the grammar mask's path (and of the bench's scripted
   reply) timed on the host right after a 20 ms device sleep is queued; a call that waits takes ~20 ms.
2. A CUDA graph's launch: graphs of N small kernels (N = 1 .. 800, the decode step has ~300); host time of
   ``replay()``, and the wall time of replay + token read per step against back-to-back replays (the GPU time):
   the difference is what a step loses to the launch and the read.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

DEV = "cuda"
VOCAB = 131072


def waits(name: str, call: Callable[[], object]) -> None:
    call()
    torch.cuda.synchronize()
    torch.cuda._sleep(20_000_000)  # ~10-20 ms of device time queued
    t0 = time.perf_counter()
    call()
    host = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    print(f"  {name:60s} {host:8.3f} ms on the host", flush=True)


def host_waits() -> None:
    import xgrammar as xgr

    logits = torch.randn(1, VOCAB, device=DEV)
    host_mask = xgr.allocate_token_bitmask(1, VOCAB)
    pinned = host_mask.pin_memory()
    device_mask = host_mask.to(DEV)
    ban = torch.zeros(VOCAB, dtype=torch.bool, device=DEV)
    print("host time of each call with ~20 ms of device work queued before it")
    waits("pageable bitmask .to(device)", lambda: host_mask.to(DEV))
    waits("pinned bitmask copy_(non_blocking=True)", lambda: device_mask.copy_(pinned, non_blocking=True))
    waits("xgr.apply_token_bitmask_inplace (device bitmask)",
          lambda: xgr.apply_token_bitmask_inplace(logits, device_mask))
    waits("masked_fill_(ban, -inf)", lambda: logits[0].masked_fill_(ban, float("-inf")))
    waits("logits.fill_(-inf)", lambda: logits.fill_(float("-inf")))
    waits("logits[0, 17] = 0.0", lambda: logits.__setitem__((0, 17), 0.0))
    waits("logits[0, 17:18].fill_(0.0)", lambda: logits[0, 17:18].fill_(0.0))
    token = torch.zeros(1, 1, dtype=torch.long, device=DEV)
    waits("token.fill_(5)", lambda: token.fill_(5))
    waits("torch.argmax(logits) (no read)", lambda: torch.argmax(logits))


def graph_launch() -> None:
    x = torch.zeros(1024, device=DEV)
    token = torch.zeros(1, dtype=torch.long, device=DEV)
    print("graph of N kernels: host us per replay() | wall us per step (fill + replay + read) | GPU us per replay "
          "(back to back) | lost per step")
    for n in (1, 50, 150, 300, 500, 800):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(n):
                    x.add_(1.0)
                token.add_(1)
        torch.cuda.current_stream().wait_stream(stream)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        hosts, walls = [], []
        for _ in range(200):
            t0 = time.perf_counter()
            token.fill_(3)
            t1 = time.perf_counter()
            graph.replay()
            t2 = time.perf_counter()
            int(token.item())
            hosts.append((t2 - t1) * 1e6)
            walls.append((time.perf_counter() - t0) * 1e6)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(200):
            graph.replay()
        end.record()
        end.synchronize()
        gpu = start.elapsed_time(end) * 1e3 / 200
        wall = statistics.median(walls)
        print(f"  N={n:4d}: {statistics.median(hosts):7.1f} | {wall:7.1f} | {gpu:7.1f} | {wall - gpu:7.1f}", flush=True)


if __name__ == "__main__":
    host_waits()
    graph_launch()
