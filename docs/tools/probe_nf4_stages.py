"""Probe (GPU, run 12a): the ``nf4-shfl`` kernel with its loop along K software-pipelined by Triton
(``tl.range(..., num_stages=S)``: the weight loads go through shared memory by ``cp.async``), S = 1 (as
shipped), 2 and 3, at the 12B shapes with double quantisation, timed and checked as ``probe_nf4_gemv.py`` does.

The variant is made from the shipped kernel's source at run time (two textual edits, checked), not kept as a
copy. Run from the repo root on the GPU machine: ``PYTHONPATH=app python docs/tools/probe_nf4_stages.py``.
"""
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).parent))


def _variant():  # type: ignore[no-untyped-def]
    """The kernels of ``_quant_triton.py`` (up to its first op registration) with a ``STAGES`` constexpr."""
    text = Path("app/holodesk/policy/holotron/ops/_quant_triton.py").read_text()
    text = text[:text.index("@torch.library.triton_op")]
    edits = [("    for k0 in range(0, n_cols, BLOCK_K):\n        w = tl.load(w_ptr",
              "    for k0 in tl.range(0, n_cols, BLOCK_K, num_stages=STAGES):\n        w = tl.load(w_ptr"),
             ("VEC: tl.constexpr, X16: tl.constexpr):", "VEC: tl.constexpr, X16: tl.constexpr, STAGES: tl.constexpr):"),
             ("BLOCK_K: tl.constexpr, VEC: tl.constexpr):\n",
              "BLOCK_K: tl.constexpr, VEC: tl.constexpr, STAGES: tl.constexpr):\n"),
             ("BLOCK_N, BLOCK_K, VEC, True)", "BLOCK_N, BLOCK_K, VEC, True, STAGES)"),
             ("BLOCK_N, BLOCK_K, VEC, False)", "BLOCK_N, BLOCK_K, VEC, False, STAGES)")]
    for old, new in edits:
        assert text.count(old) == 1, f"the kernel source changed: {old!r}"
        text = text.replace(old, new)
    path = Path(tempfile.mkdtemp()) / "nf4_stages.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("nf4_stages", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


from probe_nf4_gemv import SHAPES, copy_gbps, layer, rel, ulps  # noqa: E402

from holodesk.policy.holotron.ops import quant  # noqa: E402
from holodesk.policy.holotron.ops.gemv import _time_us  # noqa: E402

TILES = [(8, 1024, 1), (4, 1024, 1), (2, 1024, 1), (16, 1024, 2), (4, 2048, 2), (8, 512, 1)]


def run(kernels, x, w, tile, stages):  # type: ignore[no-untyped-def]
    """``x @ W^T`` by the variant at ``tile (BLOCK_N, BLOCK_K, num_warps)`` and ``stages``."""
    bn, bk, nw = tile
    y = torch.empty(1, w.rows, dtype=x.dtype, device=x.device)
    kernels.nf4_shfl_gemv_kernel[(triton.cdiv(w.rows, bn),)](
        w.packed.reshape(-1).view(torch.int32), w.absmax, w.code, w.absmax2, w.code2, w.offset, x.view(torch.int32),
        y, w.rows, w.cols, w.cols // 8, BLOCKSIZE=w.blocksize, BLOCKSIZE2=w.blocksize2, DOUBLE=w.double,
        BLOCK_N=bn, BLOCK_K=bk, VEC=quant.NF4_SHFL_VEC, STAGES=stages, num_warps=nw)
    return y


def main() -> None:
    kernels = _variant()
    bw = copy_gbps()
    print(f"{torch.cuda.get_device_name()} triton {triton.__version__} copy {bw:.0f} GB/s", flush=True)
    for role, (n, k) in SHAPES.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        ws = [quant.quant_weight(layer(n, k, True, gen)) for _ in range(6)]
        x = torch.nn.functional.silu(torch.randn(1, k, generator=gen, device="cuda", dtype=torch.bfloat16))
        ref = quant.gemv_reference(x.float(), ws[0])
        nbytes = quant.nbytes(ws[0]) + 2 * (k + n)
        best: dict[int, tuple[float, tuple[int, int, int]]] = {}
        for t in (t for t in TILES if k % t[1] == 0):
            for st in (1, 2, 3):
                out = run(kernels, x, ws[0], t, st)
                torch.cuda.synchronize()
                us = _time_us(lambda xx, w, t=t, st=st: run(kernels, xx, w, t, st), ws, x)
                share = nbytes / us / 1e3 / bw
                print(f"  {role:8s} {t[0]}x{t[1]}/{t[2]}w s{st}: {us:7.1f} us {share:6.1%} of copy  "
                      f"err {rel(out, ref):.1e} ulp {ulps(out, ref)}", flush=True)
                if st not in best or us < best[st][0]:
                    best[st] = (us, t)
        print(f"== {role} best: " + ", ".join(f"s{st} {us:.1f} us {t}" for st, (us, t) in sorted(best.items())),
              flush=True)
        del ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
