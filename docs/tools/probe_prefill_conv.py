"""GPU time of the prefill's causal conv kernel (:func:`holodesk.policy.holotron.ops.prefill.causal_conv1d`) at
Holotron-12B's chunk shape, over tiles: ``xBC`` of a 2048-row chunk (``[1, 2048, 12288]``, a column slice of
``in_proj``'s ``[1, 2048, 22656]`` output), width 4, bias, SiLU. Prints microseconds per call (median of 5
timings of 20 calls) and the bandwidth of its bytes (the slice read once, the output written once). On the GPU
machine: ``PYTHONPATH=/tmp/site:app python docs/tools/probe_prefill_conv.py``."""

from __future__ import annotations

import statistics

import torch

from holodesk.policy.holotron.ops import _prefill_triton as kernels

ROWS, INNER, CONV, HEADS, WIDTH = 2048, 10240, 12288, 128, 4


def main() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    zx = torch.randn(1, ROWS, INNER + CONV + HEADS, generator=gen, device="cuda").to(torch.bfloat16)
    x = zx[:, :, INNER:INNER + CONV]
    state = torch.randn(1, CONV, WIDTH, generator=gen, device="cuda").to(torch.bfloat16)
    weight = torch.randn(CONV, WIDTH, generator=gen, device="cuda").to(torch.bfloat16)
    bias = torch.randn(CONV, generator=gen, device="cuda").to(torch.bfloat16)
    out = torch.empty(1, ROWS, CONV, dtype=torch.bfloat16, device="cuda")
    nbytes = 2 * ROWS * CONV * 2
    print(torch.cuda.get_device_name(), torch.__version__, f"; x {tuple(x.shape)} strides {x.stride()}")
    reference = None
    for block_t, block_d, warps in ((32, 128, 4), (16, 256, 4), (64, 128, 4), (64, 128, 8), (32, 256, 4),
                                    (32, 256, 8), (128, 64, 4), (128, 128, 8), (64, 256, 8), (16, 512, 8),
                                    (8, 1024, 8), (256, 64, 8)):
        def call(block_t: int = block_t, block_d: int = block_d, warps: int = warps) -> None:
            grid = (1, (ROWS + block_t - 1) // block_t, (CONV + block_d - 1) // block_d)
            kernels.causal_conv1d_kernel[grid](
                x, state, weight, bias, out, ROWS, CONV, x.stride(0), x.stride(1), state.stride(0),
                state.stride(1), weight.stride(0), out.stride(0), out.stride(1),
                WIDTH=WIDTH, HAS_BIAS=True, SILU=True, BLOCK_T=block_t, BLOCK_D=block_d, num_warps=warps)

        call()
        torch.cuda.synchronize()
        if reference is None:
            reference = out.clone()
        same = bool(torch.equal(out, reference))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(5):
            start.record()
            for _ in range(20):
                call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / 20)
        us = statistics.median(samples)
        print(f"  {block_t:4d} x {block_d:5d} / {warps} warps: {us:7.1f} us, {nbytes / us / 1e3:6.0f} GB/s"
              f"{'' if same else ', OUTPUT DIFFERS from the first tile'}", flush=True)


if __name__ == "__main__":
    main()
