"""Offline (no GPU): compile the shuffle-lookup NF4 kernel (``_quant_triton.nf4_shfl_gemv_kernel``) for sm_90 at
every tile ``quant.NF4_SHFL_TILES`` offers and count the SASS instructions of its inner loop per weight, by pipe.

Needs Triton with its bundled ``ptxas`` and ``cuobjdump`` (``triton/backends/nvidia/bin``); no CUDA device.
Run from the repo root: ``PYTHONPATH=app python docs/tools/sass_nf4_shfl.py [--double] [--sass DIR]``. To
compile with the Triton the GPU machine runs, unpack its wheel (``pip download --no-deps triton==3.6.0``, then
``python -m zipfile -e WHEEL DIR``) and put ``DIR`` first on ``PYTHONPATH``; Triton chooses layouts differently
between versions, and the table says which one compiled.

The hot loop is the backward branch's body that holds the 16-byte activation load (``LDG.E.128.CONSTANT``;
the kernel's other loop is the path for an ``x`` that is not 16-byte aligned). Pipes (sm_90, per SM and
clock): SHFL 32 lanes (the shuffle unit), the integer ALU 64 lanes (SHF LOP3 PRMT IADD3 LEA ISETP SEL ...),
IMAD 64 lanes on the FMA-heavy pipe, float32 FFMA/FMUL/FADD 128 lanes, four warp instructions issued in
all. At the copy floor (about 4.2 TB/s on 132 SMs at 1.98 GHz) an SM must retire about 32 NF4 weights a
clock: 1 SHFL a weight fills the shuffle unit, and all instructions together may be about 4 a weight.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton >= 3.9 warns without it; 3.6 fuses by default

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from holodesk.policy.holotron.ops import _quant_triton, quant

PIPES = {"SHFL": ("SHFL",), "FP32": ("FFMA", "FMUL", "FADD"), "IMAD": ("IMAD",),
         "ALU": ("SHF", "LOP3", "PRMT", "IADD3", "LEA", "ISETP", "SEL", "IABS", "LOP", "MOV", "FSEL", "ISCADD"),
         "LDG": ("LDG",), "LDS/STS/BAR": ("LDS", "STS", "BAR")}
LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s*(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)")


def compile_tile(block_n: int, block_k: int, num_warps: int, double: bool) -> str:
    """The SASS (``cuobjdump -sass``) of the kernel at this tile for sm_90, blocksize 64 (nested 256)."""
    vec = quant.NF4_SHFL_VEC
    sig = {"w_ptr": "*i32", "absmax_ptr": "*u8" if double else "*fp32", "code_ptr": "*fp32", "absmax2_ptr": "*fp32",
           "code2_ptr": "*fp32", "offset_ptr": "*fp32", "xw_ptr": "*i32", "y_ptr": "*bf16", "n_rows": "i32",
           "n_cols": "i32", "words_per_row": "i32", "BLOCKSIZE": "constexpr", "BLOCKSIZE2": "constexpr", "DOUBLE": "constexpr",
           "BLOCK_N": "constexpr", "BLOCK_K": "constexpr", "VEC": "constexpr"}
    const = {"BLOCKSIZE": 64, "BLOCKSIZE2": 256, "DOUBLE": double, "BLOCK_N": block_n, "BLOCK_K": block_k, "VEC": vec}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(11)}  # as the JIT specialises aligned pointers, K % 16
    src = ASTSource(_quant_triton.nf4_shfl_gemv_kernel, sig, const, attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        sass = subprocess.run([str(cuobjdump), "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout
        usage = subprocess.run([str(cuobjdump), "-res-usage", str(cubin)], check=True, capture_output=True,
                               text=True).stdout
    regs = re.search(r"REG:(\d+)", usage)
    return f"// registers {regs.group(1) if regs else '?'}\n" + sass


def hot_loop(sass: str) -> list[tuple[str, str]]:
    """``(opcode, operands)`` of the loop (backward branch to its start) that holds a 16-byte constant load."""
    ins = [(int(m.group(1), 16), m.group(2), m.group(3)) for m in map(LINE.match, sass.splitlines()) if m]
    loops = []
    for addr, op, rest in ins:
        target = re.search(r"0x([0-9a-f]+)", rest)
        if op.startswith("BRA") and target and int(target.group(1), 16) < addr:
            loops.append((int(target.group(1), 16), addr))
    for start, end in sorted(loops, key=lambda se: se[1] - se[0], reverse=True):
        body = [(op, rest) for a, op, rest in ins if start <= a <= end]
        if any(op.startswith("LDG.E.128.CONSTANT") for op, _ in body):
            return body
    raise RuntimeError("no loop with a 16-byte activation load found")


def count(body: list[tuple[str, str]]) -> dict[str, int]:
    """Instructions of ``body`` by pipe (:data:`PIPES`; anything else under ``other``)."""
    out: collections.Counter[str] = collections.Counter()
    for op, _ in body:
        base = op.split(".")[0]
        pipe = next((p for p, ops in PIPES.items() if base in ops), "other")
        out[pipe] += 1
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--double", action="store_true", help="double quantisation (uint8 absmax, nested scales)")
    ap.add_argument("--sass", type=Path, help="also write each tile's SASS into this folder")
    args = ap.parse_args()
    cols = ["SHFL", "ALU", "IMAD", "FP32", "LDG", "LDS/STS/BAR", "other"]
    print(f"sm_90 SASS (Triton {triton.__version__}), hot loop per weight; double quantisation {args.double}")
    print(f"{'tile':22s} {'regs':>4s} {'weights':>7s} " + " ".join(f"{c:>11s}" for c in cols) + f" {'all':>6s}")
    for bn, bk, nw in quant.NF4_SHFL_TILES:
        label = f"nf4-shfl {bn}x{bk}/{nw}w"
        try:
            sass = compile_tile(bn, bk, nw, args.double)
            body = hot_loop(sass)
        except Exception as exc:  # report the tile and go on
            print(f"{label:22s} FAILED {type(exc).__name__}: {str(exc)[:300]}")
            continue
        if args.sass:
            args.sass.mkdir(parents=True, exist_ok=True)
            (args.sass / f"{label.replace(' ', '_').replace('/', '_')}{'_double' if args.double else ''}.sass"
             ).write_text(sass)
        weights = bn * bk // (32 * nw)  # weights a thread handles per iteration (more where Triton replicates)
        c = count(body)
        regs = sass.splitlines()[0].split()[-1]
        print(f"{label:22s} {regs:>4s} {weights:7d} " + " ".join(f"{c.get(k, 0) / weights:11.3f}" for k in cols)
              + f" {len(body) / weights:6.2f}")
        other = collections.Counter(op.split(".")[0] for op, _ in body
                                    if not any(op.split(".")[0] in ops for ops in PIPES.values()))
        if other:
            print(f"{'':22s} other: {dict(other)}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
