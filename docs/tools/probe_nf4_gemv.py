"""Probe (GPU): every NF4 matrix-vector tile at Holotron-12B's shapes against bitsandbytes' dequantise-and-multiply,
with its time, the bytes it reads and the share of the measured copy bandwidth that makes.

Run from the repo root on the GPU machine: ``PYTHONPATH=app python docs/tools/probe_nf4_gemv.py [--double]``.
"""

from __future__ import annotations

import argparse
import statistics

import bitsandbytes as bnb
import torch

from holodesk.policy.holotron.ops import quant
from holodesk.policy.holotron.ops.gemv import _time_us

SHAPES = {"in_proj": (22656, 5120), "out_proj": (5120, 10240), "up": (20480, 5120), "down": (5120, 20480),
          "q/o": (5120, 5120), "k/v": (1024, 5120)}


def copy_gbps() -> float:
    """Device copy bandwidth (read + write bytes over time), median of 5 copies of 2 GiB."""
    a = torch.empty(2**30, dtype=torch.int16, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    times = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return 2 * a.numel() * 2 / statistics.median(times) / 1e9


def layer(w: torch.Tensor, double: bool) -> bnb.nn.Linear4bit:
    q = bnb.nn.Linear4bit(w.shape[1], w.shape[0], bias=False, compute_dtype=torch.bfloat16, quant_type="nf4",
                          compress_statistics=double, device="meta")
    q.weight = bnb.nn.Params4bit(w, requires_grad=False, quant_type="nf4", compress_statistics=double)
    return q.to("cuda")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--double", action="store_true")
    ap.add_argument("--copies", type=int, default=6)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    bw = copy_gbps()
    print(f"copy bandwidth {bw:.0f} GB/s; double quantisation {args.double}", flush=True)
    gen = torch.Generator().manual_seed(0)
    for role in args.shapes.split(","):
        n, k = SHAPES[role]
        layers = [layer(torch.randn(n, k, generator=gen).to(torch.bfloat16), args.double) for _ in range(args.copies)]
        ws = [quant.quant_weight(m) for m in layers]
        assert all(w is not None for w in ws)
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        ref = quant.gemv_reference(x, ws[0]).float()
        nbytes = quant.nbytes(ws[0]) + 2 * (k + n)
        rows = []
        for tile in quant.tiles(ws[0], torch.bfloat16):
            try:
                out = quant.linear(x, ws[0], tile.spec()).float()
                err = float((out - ref).norm() / ref.norm())
                us = _time_us(lambda xx, w, t=tile: quant.linear(xx, w, t.spec()), ws, x)
            except Exception as exc:  # a probe reports every failure
                rows.append((float("inf"), f"{tile.label():24s} FAILED {type(exc).__name__}: {str(exc)[:300]}"))
                continue
            gbps = nbytes / us / 1e3
            rows.append((us, f"{tile.label():24s} {us:8.1f} us  {gbps:6.0f} GB/s  {gbps / bw:5.1%} of copy  "
                                 f"err {err:.1e}"))
        by_packed = {id(w.packed): m for w, m in zip(ws, layers, strict=True)}

        def stock(xx: torch.Tensor, w: quant.NF4Weight, by: dict = by_packed) -> torch.Tensor:
            m = by[id(w.packed)]
            return bnb.matmul_4bit(xx, m.weight.t(), quant_state=m.weight.quant_state)

        bnb_us = _time_us(stock, ws, x)
        rows.append((bnb_us, f"{'bitsandbytes matmul_4bit':24s} {bnb_us:8.1f} us  {nbytes / bnb_us / 1e3:6.0f} GB/s"))
        print(f"== {role} [{n}, {k}]  {nbytes / 1e6:.1f} MB a product", flush=True)
        for _, line in sorted(rows)[:12]:
            print("  " + line, flush=True)
        for _, line in sorted(rows):
            if "FAILED" in line:
                print("  " + line, flush=True)


if __name__ == "__main__":
    main()
