"""GPU time of one Mamba-2 decode step between the projections at Holotron-12B's shape: the torch maths compiled
by ``torch.compile`` (what decode ran before :mod:`holodesk.policy.holotron.ops.mamba_step`) against the two
Triton kernels. 28 layers (each its own conv and SSM state, as in a decode step) are recorded in one CUDA graph
per path and replayed (the paths' accuracy is tested in tests/policy/holotron/test_ops_mamba_step.py); prints
microseconds per layer (median of 5 timings of 20 replays) and the time the state's bytes need at the copy
bandwidth. On the GPU machine: ``PYTHONPATH=/tmp/site:app python docs/tools/probe_mamba_step.py``."""

from __future__ import annotations

import statistics

import torch

from holodesk.policy.holotron.ops import mamba_step as ms

LAYERS = 28
HEADS, HEAD_DIM, GROUPS, STATE, WIDTH = 128, 80, 8, 128, 4


def main() -> None:
    dev, bf = "cuda", torch.bfloat16
    inner = HEADS * HEAD_DIM
    conv_dim = inner + 2 * GROUPS * STATE
    dims = (inner, conv_dim, HEADS, HEAD_DIM, GROUPS, STATE)
    gen = torch.Generator(device=dev).manual_seed(0)

    def draw(*shape: int, dtype: torch.dtype = bf) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=dev).to(dtype)

    layers = [((draw(conv_dim, WIDTH), draw(conv_dim), draw(HEADS), -draw(HEADS, dtype=torch.float32).exp(),
                draw(HEADS), draw(inner)),
               draw(1, conv_dim, WIDTH), draw(1, HEADS, HEAD_DIM, STATE, dtype=torch.float32)) for _ in range(LAYERS)]
    zx = draw(1, inner + conv_dim + HEADS)
    copy = torch.empty(1 << 28, dtype=torch.uint8, device=dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        copy.clone()
    end.record()
    end.synchronize()
    copy_gbps = 2 * copy.numel() * 10 / (start.elapsed_time(end) * 1e-3) / 1e9
    compiled = torch.compile(ms.mamba_step_reference, dynamic=False, fullgraph=True)
    paths = {"torch.compile of the reference": compiled, "Triton kernels": ms.mamba_step_triton}
    state_bytes = 2 * HEADS * HEAD_DIM * STATE * 4
    print(f"copy bandwidth {copy_gbps:.0f} GB/s; SSM state read + written per layer {state_bytes / 2**20:.2f} MiB "
          f"({state_bytes / copy_gbps / 1e3:.2f} us at that bandwidth)")
    for name, fn in paths.items():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for params, conv, ssm in layers[:2]:
                fn(zx, *params, conv.clone(), ssm.clone(), dims, 1e-5)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for params, conv, ssm in layers:
                    fn(zx, *params, conv, ssm, dims, 1e-5)
        torch.cuda.current_stream().wait_stream(stream)
        graph.replay()
        samples = []
        for _ in range(5):
            start.record()
            for _ in range(20):
                graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / 20 / LAYERS)
        us = statistics.median(samples)
        print(f"{name}: {us:.2f} us per layer ({us * LAYERS / 1e3:.3f} ms per decode step of {LAYERS} layers)")


if __name__ == "__main__":
    main()
