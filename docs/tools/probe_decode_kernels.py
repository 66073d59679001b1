"""GPU time of the small kernels between a decode step's matrix-vector products, at Holotron-12B's shapes, each
way of running them side by side in one process:

* the Mamba-2 mixer between its projections (5.0 MiB of float32 SSM state read and written a layer): the torch
  maths compiled by ``torch.compile`` (:func:`~holodesk.policy.holotron.ops.mamba_step.mamba_step_reference`)
  against the two Triton kernels at several tiles;
* a block's residual add and RMSNorm of one ``[1, 5120]`` row: compiled from the torch maths (as the decode
  block functions were before run 14) against the package's one-program Triton kernel
  (``_prefill_triton.add_rms_norm_row_kernel``, which ``ops.prefill.add_rms_norm_row`` runs with 32 warps) at
  several warp counts, back to back and after an L2-evicting copy;
* the greedy token of ``[1, 131072]`` float32 logits: ``torch.argmax`` compiled against eager.

Each is recorded in one CUDA graph (28 Mamba layers with their own states; 63 norms; 39 argmaxes, as in a step or
reply) and replayed; prints microseconds per call (median of 5 timings of 20 replays). Accuracy is tested in
tests/policy/holotron. On the GPU machine: ``PYTHONPATH=/tmp/site:app python docs/tools/probe_decode_kernels.py``."""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable

import torch

from holodesk.policy.holotron.ops import _prefill_triton
from holodesk.policy.holotron.ops import mamba_step as ms
from holodesk.policy.holotron.ops.prefill import add_rms_norm_reference

HEADS, HEAD_DIM, GROUPS, STATE, WIDTH = 128, 80, 8, 128, 4
HIDDEN, VOCAB = 5120, 131072
DEV, BF = "cuda", torch.bfloat16


def per_call_us(calls: list[Callable[[], object]]) -> float:
    """``calls`` run once (compiling), recorded in one CUDA graph, replayed: GPU microseconds per call."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for call in calls[:2]:
            call()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for call in calls:
                call()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(5):
        start.record()
        for _ in range(20):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / 20 / len(calls))
    return statistics.median(samples)


def mamba(gen: torch.Generator) -> None:
    inner = HEADS * HEAD_DIM
    conv_dim = inner + 2 * GROUPS * STATE
    dims = (inner, conv_dim, HEADS, HEAD_DIM, GROUPS, STATE)

    def draw(*shape: int, dtype: torch.dtype = BF) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=DEV).to(dtype)

    layers = [((draw(conv_dim, WIDTH), draw(conv_dim), draw(HEADS), -draw(HEADS, dtype=torch.float32).exp(),
                draw(HEADS), draw(inner)),
               draw(1, conv_dim, WIDTH), draw(1, HEADS, HEAD_DIM, STATE, dtype=torch.float32)) for _ in range(28)]
    zx = draw(1, inner + conv_dim + HEADS)
    paths: dict[str, Callable[..., torch.Tensor]] = {
        "torch.compile of the reference": torch.compile(ms.mamba_step_reference, dynamic=False, fullgraph=True)}
    for block_p, warps in ((8, 2), (8, 4), (16, 2), (16, 4), (16, 8), (32, 4), (32, 8)):
        paths[f"Triton kernels, {block_p} rows x {warps} warps"] = functools.partial(
            ms.mamba_step_triton, block_p=block_p, num_warps=warps)
    print(f"Mamba-2 step, 28 layers; the state's bytes (10.0 MiB a layer) need {10 * 2**20 / 4.0e6:.2f} us at 4 TB/s")
    for name, fn in paths.items():
        calls = [functools.partial(fn, zx, *params, conv, ssm, dims, 1e-5) for params, conv, ssm in layers]
        print(f"  {name}: {per_call_us(calls):.2f} us a layer", flush=True)


def norm(gen: torch.Generator) -> None:
    rows = [(torch.randn(1, HIDDEN, generator=gen, device=DEV).to(BF), torch.randn(1, HIDDEN, generator=gen,
                                                                                    device=DEV).to(BF),
             torch.rand(HIDDEN, generator=gen, device=DEV) + 0.5) for _ in range(63)]

    def torch_maths(h: torch.Tensor, pending: torch.Tensor, w32: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, s = add_rms_norm_reference(pending, h, w32, 1e-5)
        return s, x

    compiled = torch.compile(torch_maths, dynamic=False, fullgraph=True)

    def kernel(h: torch.Tensor, pending: torch.Tensor, w32: torch.Tensor, warps: int) -> None:
        h_out, x_out = torch.empty_like(h), torch.empty_like(h)
        _prefill_triton.add_rms_norm_row_kernel[(1,)](h, pending, w32, h_out, x_out, 1e-5, h.stride(0),
                                                      pending.stride(0), h_out.stride(0), x_out.stride(0),
                                                      COLS=HIDDEN, BLOCK=8192, num_warps=warps)

    print("residual add + RMSNorm of a [1, 5120] row, 63 calls")
    print(f"  torch.compile of the torch maths: {per_call_us([functools.partial(compiled, *r) for r in rows]):.2f} us")
    for warps in (4, 8, 16, 32):
        us = per_call_us([functools.partial(kernel, *r, warps) for r in rows])
        print(f"  Triton one-program kernel, {warps} warps: {us:.2f} us", flush=True)
    # in a decode step each norm follows a matrix-vector product that streamed 50-400 MB through L2: a 64 MiB
    # copy before each call evicts the norm's weight; the copy's own time (measured alone) is taken off
    src, dst = torch.empty(2**25, dtype=BF, device=DEV), torch.empty(2**25, dtype=BF, device=DEV)

    def flush() -> None:
        dst.copy_(src)

    alone = per_call_us([flush] * 63)
    print(f"  after a 64 MiB copy each (the copy alone: {alone:.2f} us, taken off):")
    with_compiled = [c for r in rows for c in (flush, functools.partial(compiled, *r))]
    print(f"    torch.compile of the torch maths: {2 * per_call_us(with_compiled) - alone:.2f} us")
    for warps in (8, 16, 32):
        calls = [c for r in rows for c in (flush, functools.partial(kernel, *r, warps))]
        print(f"    Triton one-program kernel, {warps} warps: {2 * per_call_us(calls) - alone:.2f} us", flush=True)


def argmax(gen: torch.Generator) -> None:
    logits = [torch.randn(1, VOCAB, generator=gen, device=DEV) for _ in range(39)]
    token = torch.zeros(1, 1, dtype=torch.long, device=DEV)
    compiled = torch.compile(lambda x: torch.argmax(x, dim=-1, keepdim=True), dynamic=False, fullgraph=True)
    print("greedy token of [1, 131072] float32 logits, 39 calls")
    print(f"  torch.compile: {per_call_us([functools.partial(compiled, x) for x in logits]):.2f} us")
    eager = [functools.partial(torch.argmax, x, dim=-1, keepdim=True, out=token) for x in logits]
    print(f"  eager torch.argmax: {per_call_us(eager):.2f} us", flush=True)


def main() -> None:
    gen = torch.Generator(device=DEV).manual_seed(0)
    print(torch.cuda.get_device_name(), torch.__version__)
    mamba(gen)
    norm(gen)
    argmax(gen)


if __name__ == "__main__":
    main()
