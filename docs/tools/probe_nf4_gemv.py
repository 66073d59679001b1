"""Probe (GPU): every quantised matrix-vector tile (``quant.tiles``: ``nf4-shfl``, ``nf4-pairs``, ``nf4``; with
``--format int8``, ``int8-words`` and ``int8``) at Holotron-12B's shapes, NF4 without and with double quantisation,
against bitsandbytes' own product (``matmul_4bit``; the ``Linear8bitLt`` module for int8): time, the bytes it reads
and the share of the measured copy bandwidth that makes, and its error against ``quant.gemv_reference``.

Run from the repo root on the GPU machine: ``PYTHONPATH=app python docs/tools/probe_nf4_gemv.py`` (NF4, both
storages; ``--double no|yes`` for one, ``--kinds nf4-shfl`` for one kind, ``--format int8`` or ``both``).
A tile that fails to compile or run is printed with its error and the probe goes on. Errors: ``l2`` relative L2
against the float32 reference for ``randn`` activations, ``silu`` the same for ``silu(randn)`` (mostly positive: a
biased table shows here), and ``ulp`` the largest difference in bf16 units of the last place against the reference
rounded to bf16 (a kernel with exact codes and float32 sums: 0 or 1).
"""

from __future__ import annotations

import argparse
import statistics
import time
import traceback

import bitsandbytes as bnb
import torch
import triton

from holodesk.policy.holotron.ops import quant
from holodesk.policy.holotron.ops.gemv import _time_us

SHAPES = {"in_proj": (22656, 5120), "out_proj": (5120, 10240), "up": (20480, 5120), "down": (5120, 20480),
          "q/o": (5120, 5120), "k/v": (1024, 5120)}
"""Holotron-12B's quantised projections ``(N, K)`` (as ``tests/policy/holotron/test_ops_quant.py`` SHAPES_12B)."""


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
    del a, b
    return 2 * 2**30 * 2 / statistics.median(times) / 1e9


def layer(n: int, k: int, double: bool, gen: torch.Generator) -> bnb.nn.Linear4bit:
    """A ``Linear4bit`` (NF4, blocksize 64) of a random ``[n, k]`` bf16 weight, quantised by bitsandbytes on CUDA."""
    w = torch.randn(n, k, generator=gen, device="cuda", dtype=torch.bfloat16)
    q = bnb.nn.Linear4bit(k, n, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4",
                          compress_statistics=double, device="meta")
    q.weight = bnb.nn.Params4bit(w, requires_grad=False, quant_type="nf4", compress_statistics=double)
    return q.to("cuda")


def layer8(n: int, k: int, gen: torch.Generator) -> bnb.nn.Linear8bitLt:
    """A ``Linear8bitLt`` (int8 weights, no fp16 copy) of a random ``[n, k]`` bf16 weight, quantised on CUDA."""
    w = torch.randn(n, k, generator=gen, device="cuda", dtype=torch.bfloat16)
    m = bnb.nn.Linear8bitLt(k, n, bias=False, has_fp16_weights=False, threshold=6.0, device="meta")
    m.weight = bnb.nn.Int8Params(w.cpu(), requires_grad=False, has_fp16_weights=False)
    return m.to("cuda")


def ulps(out: torch.Tensor, ref: torch.Tensor) -> int:
    """Largest difference of bf16 ``out`` from float32 ``ref`` rounded to bf16, in units of the last place."""
    r = ref.to(torch.bfloat16).float()
    ulp = torch.where(r == 0, torch.ones_like(r), r.abs()).log2().floor().sub(7).exp2()
    return int(((out.float() - r).abs() / ulp).max().round())


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def probe_shape(role: str, double: bool | None, copies: int, kinds: set[str] | None, bw: float) -> None:
    """One shape: NF4 (``double`` False/True) or int8 (``double`` None)."""
    n, k = SHAPES[role]
    gen = torch.Generator(device="cuda").manual_seed(0)
    layers = [layer(n, k, double, gen) if double is not None else layer8(n, k, gen) for _ in range(copies)]
    ws = [quant.quant_weight(m) for m in layers]
    assert all(isinstance(w, quant.NF4Weight if double is not None else quant.Int8Weight) for w in ws)
    w0 = ws[0]
    x = torch.randn(1, k, generator=gen, device="cuda", dtype=torch.bfloat16)
    xs = torch.nn.functional.silu(torch.randn(1, k, generator=gen, device="cuda", dtype=torch.bfloat16))
    ref = quant.gemv_reference(x.float(), w0)  # float32 sums of the float32 dequantised weight
    ref_s = quant.gemv_reference(xs.float(), w0)
    nbytes = quant.nbytes(w0) + 2 * (k + n)
    rows = []
    for tile in quant.tiles(w0, torch.bfloat16):
        if kinds and tile.kind not in kinds:
            continue
        try:
            out = quant.linear(x, w0, tile.spec())
            out_s = quant.linear(xs, w0, tile.spec())
            torch.cuda.synchronize()
            ulp = max(ulps(out, ref), ulps(out_s, ref_s))
            errs = f"l2 {rel(out, ref):.1e}  silu {rel(out_s, ref_s):.1e}  ulp {ulp}"
            us = _time_us(lambda xx, w, t=tile: quant.linear(xx, w, t.spec()), ws, x)
        except Exception as exc:  # a probe reports every failure and goes on
            rows.append((float("inf"), f"{tile.label():24s} FAILED {type(exc).__name__}: {str(exc)[:400]}"))
            traceback.print_exc(limit=2)
            continue
        gbps = nbytes / us / 1e3
        rows.append((us, f"{tile.label():24s} {us:8.1f} us  {gbps:6.0f} GB/s  {gbps / bw:6.1%} of copy  {errs}"))
    by_data = {(w.packed if isinstance(w, quant.NF4Weight) else w.cb).data_ptr(): m
               for w, m in zip(ws, layers, strict=True)}

    def stock(xx: torch.Tensor, w: quant.QuantWeight, by: dict = by_data) -> torch.Tensor:
        if isinstance(w, quant.NF4Weight):
            m = by[w.packed.data_ptr()]
            return bnb.matmul_4bit(xx, m.weight.t(), quant_state=m.weight.quant_state)
        return by[w.cb.data_ptr()](xx)

    out = stock(x, w0)
    bnb_us = _time_us(stock, ws, x)
    name = "bitsandbytes matmul_4bit" if double is not None else "bitsandbytes Linear8bitLt"
    rows.append((bnb_us, f"{name:24s} {bnb_us:8.1f} us  {nbytes / bnb_us / 1e3:6.0f} GB/s  "
                         f"{nbytes / bnb_us / 1e3 / bw:6.1%} of copy  l2 {rel(out, ref):.1e}"))
    what = "int8" if double is None else f"nf4 double={double}"
    print(f"== {role} [{n}, {k}] {what}  {nbytes / 1e6:.1f} MB a product", flush=True)
    for _, line in sorted(rows):
        print("  " + line, flush=True)
    best = {}
    for us, line in sorted(rows):
        kind = line.split()[0]
        if us != float("inf") and kind not in best:
            best[kind] = us
    print("  best: " + ", ".join(f"{kind} {us:.1f} us" for kind, us in best.items()), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--double", choices=("no", "yes", "both"), default="both")
    ap.add_argument("--copies", type=int, default=6, help="distinct weights a shape, cycled (L2 does not hold them)")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--kinds", default="", help="comma-separated kinds to time (default every kind)")
    ap.add_argument("--format", choices=("nf4", "int8", "both"), default="nf4")
    args = ap.parse_args()
    t0 = time.perf_counter()
    bw = copy_gbps()
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; triton {triton.__version__}; "
          f"bitsandbytes {bnb.__version__}; "
          f"copy bandwidth {bw:.0f} GB/s", flush=True)
    kinds = set(args.kinds.split(",")) - {""} or None
    storages: tuple[bool | None, ...] = {"no": (False,), "yes": (True,), "both": (False, True)}[args.double]
    storages = {"nf4": storages, "int8": (None,), "both": (*storages, None)}[args.format]
    for double in storages:
        for role in args.shapes.split(","):
            try:
                probe_shape(role, double, args.copies, kinds, bw)
            except Exception:  # one shape's failure does not end the probe
                print(f"== {role} double={double} FAILED", flush=True)
                traceback.print_exc()
            torch.cuda.empty_cache()
    print(f"probe took {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
