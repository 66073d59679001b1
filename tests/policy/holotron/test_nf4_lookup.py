"""The NF4 lookup kernel's PTX (``ops/_quant_triton.py``), checked on the CPU: its table is bitsandbytes' NF4
table rounded to bf16, and its ``prmt`` program, run by an emulator of PTX's default ``prmt.b32`` mode (PTX
ISA, "prmt": a selector nibble's low 3 bits pick one of the 8 bytes of ``{b, a}``, its bit 3 replicates that
byte's sign), turns every weight word into the bf16 pairs of its eight NF4 values in the activations' order.
The kernel itself runs on the GPU only (``test_ops_quant.py``)."""

from __future__ import annotations

import random

import pytest
import torch

from holodesk.policy.holotron.ops import quant

pytestmark = pytest.mark.skipif(not quant.HAVE_TRITON, reason="needs Triton")


def _prmt(a: int, b: int, c: int) -> int:
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    out = 0
    for j in range(4):
        sel = (c >> (4 * j)) & 0xF
        byte = src[sel & 7]
        if sel & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * j)
    return out


def _run_lookup(word: int) -> list[int]:
    """Execute the lookup PTX (with the kernel's table immediates) on one weight word; returns p0..p3."""
    from holodesk.policy.holotron.ops import _quant_triton as qt

    text = qt._LOOKUP_PTX.replace("$W", hex(word))
    for name, value in zip(("L0", "L1", "L2", "L3", "H0", "H1", "H2", "H3"), qt.NF4_LUT, strict=True):
        text = text.replace(name, hex(value))
    regs: dict[str, int] = {}

    def val(t: str) -> int:
        return regs[t] if t in regs else int(t, 0)

    ops = {"and.b32": lambda a, b: a & b, "or.b32": lambda a, b: a | b, "shr.u32": lambda a, b: a >> b}
    for line in text.strip().splitlines():
        op, rest = line.split(None, 1)
        dst, *args = [a.strip() for a in rest.rstrip(";").split(",")]
        xs = [val(a) for a in args]
        regs[dst] = (_prmt(*xs) if op == "prmt.b32" else ops[op](*xs)) & 0xFFFFFFFF
    return [regs[f"p{i}"] for i in range(4)]


def test_kernel_table_is_bitsandbytes_nf4_rounded_to_bf16() -> None:
    bnb = pytest.importorskip("bitsandbytes")
    code = bnb.functional.get_4bit_type("nf4", device="cpu")
    assert quant.nf4_lut(code) == quant.KERNEL_LUT
    other = code.clone()
    other[3] += 0.01  # another table: the kernels must not read it
    assert quant.nf4_lut(other) != quant.KERNEL_LUT


def test_lookup_ptx_gives_each_words_eight_values_in_order() -> None:
    from holodesk.policy.holotron.ops import _quant_triton as qt

    bf16 = (torch.tensor(qt.NF4_VALUES).to(torch.bfloat16).view(torch.int16).to(torch.int64) & 0xFFFF).tolist()
    rng = random.Random(0)
    words = [0, 0xFFFFFFFF, 0x01234567, 0x89ABCDEF] + [rng.getrandbits(32) for _ in range(3000)]
    for word in words:
        codes = []
        for byte in word.to_bytes(4, "little"):  # byte i: element 2i in the high nibble, 2i + 1 in the low one
            codes += [byte >> 4, byte & 15]
        pairs = _run_lookup(word)
        got = [p >> s & 0xFFFF for p in pairs for s in (0, 16)]  # the even element in the low half
        assert got == [bf16[c] for c in codes], hex(word)
