"""Cases shared by tests/policy/holotron/test_ops_quant.py and its Triton-interpreter child process: bitsandbytes
layers built from random weights, the quantised decode kernels against bitsandbytes' own dequantisation, and
the static decoder reading the storage against the same decoder calling bitsandbytes' modules.

The child (``python -c`` with ``TRITON_INTERPRET=1``, set before Triton compiles anything) runs the real Triton
kernels on CPU tensors; :func:`interpreted` returns what it measured as JSON-able numbers.
"""

from __future__ import annotations

from typing import Any

import bitsandbytes as bnb
import bitsandbytes.functional as bnbf
import torch

from holodesk.policy.holotron.ops import quant

QUANT_ROLES = ("in_proj", "out_proj", "up", "down", "qkv", "o_proj")
"""The decode roles whose projections bitsandbytes quantises (``lm_head`` stays bf16)."""


def nf4_layer(w: torch.Tensor, *, double: bool, device: str = "cpu") -> Any:
    """A ``Linear4bit`` (NF4, blocksize 64, ``compress_statistics=double``) holding ``w [N, K]``, quantised on
    ``device`` by bitsandbytes."""
    n, k = w.shape
    m = bnb.nn.Linear4bit(k, n, bias=False, compute_dtype=w.dtype, quant_type="nf4", compress_statistics=double,
                          device="meta")
    m.weight = bnb.nn.Params4bit(w.detach().to("cpu").clone(), requires_grad=False, quant_type="nf4",
                                 compress_statistics=double, blocksize=64)
    return m.to(device)


def int8_layer(w: torch.Tensor, *, device: str = "cpu") -> Any:
    """A ``Linear8bitLt`` (int8 weights, no fp16 copy, LLM.int8 threshold 6) holding ``w [N, K]``, quantised on
    ``device`` by bitsandbytes."""
    n, k = w.shape
    m = bnb.nn.Linear8bitLt(k, n, bias=False, has_fp16_weights=False, threshold=6.0, device="meta")
    m.weight = bnb.nn.Int8Params(w.detach().to("cpu").clone(), requires_grad=False, has_fp16_weights=False)
    return m.to(device)


def layer(mode: str, w: torch.Tensor, device: str = "cpu") -> Any:
    """``mode`` ``"nf4"`` | ``"nf4-double"`` | ``"int8"``: the bitsandbytes layer of ``w``."""
    if mode == "int8":
        return int8_layer(w, device=device)
    return nf4_layer(w, double=mode == "nf4-double", device=device)


def bnb_weight(m: Any) -> torch.Tensor:
    """bitsandbytes' own dequantisation of layer ``m``'s weight ``[N, K]`` in float32 (the reference)."""
    if isinstance(m, bnb.nn.Linear4bit):
        return bnbf.dequantize_4bit(m.weight.data, m.weight.quant_state).float()
    scb = m.weight.SCB if m.weight.SCB is not None else m.state.SCB
    return bnbf.int8_vectorwise_dequant(m.weight.data, scb).float()


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def kernel_errors(mode: str, n: int, k: int, dtype: torch.dtype, device: str, seed: int = 0
                  ) -> dict[str, float]:
    """Relative L2 error of every kernel tile's ``x [1, K] @ W^T`` against ``x @ dequantize(W)^T`` with
    bitsandbytes' dequantisation (float32 sums), for a random ``[n, k]`` weight quantised by bitsandbytes."""
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=gen).to(dtype)
    x = torch.randn(1, k, generator=gen).to(dtype=dtype, device=device)
    m = layer(mode, w, device)
    stored = quant.quant_weight(m)
    assert stored is not None, f"{mode} layer not read as stored"
    ref = x.float() @ bnb_weight(m).t()
    out: dict[str, float] = {}
    for tile in quant.tiles(stored, dtype, shuffle=device != "cpu"):  # on CPU: Triton's interpreter, no inline PTX
        y = quant.linear(x, stored, tile.spec())
        assert y.dtype == dtype and y.shape == (1, n), (y.dtype, y.shape)
        out[tile.label()] = rel(y, ref)
    return out


def quantize_lm(lm: torch.nn.Module, mode: str, device: str = "cpu") -> None:
    """Replace every unbiased ``nn.Linear`` of the LM's blocks (not ``lm_head``) by its bitsandbytes layer."""
    for parent in list(lm.model.layers.modules()):  # type: ignore[union-attr, operator]
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear and child.bias is None:
                setattr(parent, name, layer(mode, child.weight.detach(), device))


def decoder_errors(lm: torch.nn.Module, ids: torch.Tensor, tile: tuple[int, int, int], *, graphs: bool,
                   steps: int = 6) -> dict[str, Any]:
    """The static decoder on the quantised ``lm`` reading its storage through the kernels (tile ``tile`` for
    every quantised role; with ``graphs`` as the decoder itself sets it up and captures it, CUDA) against the
    same decoder calling bitsandbytes' modules eagerly: relative error of the logits after the prompt and of
    ``steps`` decode steps fed the same (the module path's greedy) tokens."""
    from holodesk.policy.holotron.decoder import Setup, StaticDecoder
    from holodesk.policy.holotron.ops.gemv import Gemv

    kw: dict[str, Any] = {"max_len": 64, "bucket": 32, "chunk": 16, "prefill_bucket": 8}
    modules = StaticDecoder(lm, eager=True, **kw)  # type: ignore[arg-type]
    fast = StaticDecoder(lm, **kw)  # type: ignore[arg-type]
    if graphs:
        fast.capture()
    else:  # CPU: the decoder runs eagerly; make it read the storage through the kernels all the same
        kind = "int8" if any(isinstance(w, quant.Int8Weight) for a in fast._qargs for w in a) else "nf4"
        fast._apply(Setup(compiled=False, gemv={r: Gemv(kind, *tile) for r in QUANT_ROLES}, graphs=False,
                          quantized=True))
    shared = [(w, m) for a, b in zip(fast._qargs, fast._args, strict=True) for w, m in zip(a, b, strict=True)
              if isinstance(w, quant.NF4Weight | quant.Int8Weight)]
    same_storage = all((w.packed if isinstance(w, quant.NF4Weight) else w.cb).data_ptr() == m.weight.data_ptr()
                       for w, m in shared)
    embeds = lm.model.embeddings(ids)  # type: ignore[union-attr, operator]
    with torch.no_grad():
        a, _ = modules.prefill(embeds)
        b, _ = fast.prefill(embeds)
        errors = [rel(b, a)]
        token = a.argmax(-1, keepdim=True)
        for _ in range(steps):
            modules.token.copy_(token)
            fast.token.copy_(token)
            a = modules.step().clone()
            b = fast.step().clone()
            errors.append(rel(b, a))
            token = a.argmax(-1, keepdim=True)
    return {"errors": errors, "quantised_projections": len(shared), "same_storage": same_storage,
            "decode": fast.describe()["decode"], "notes": fast.notes, "setup_kernels": fast.setup.quant_kernels(),
            "graphs": sorted(k[0] for k in fast.graphs if len(k) == 1)}


def tie_weight(k: int, seed: int = 0) -> quant.Int8Weight:
    """An int8 weight ``[N, k]`` whose rows hold every int8 value (``-128..127`` repeated, then cut at ``k``) and
    whose row scales were drawn so that each row holds at least one float32 value ``CB SCB INT8_SCALE`` halfway
    between two bf16 values (the low 16 bits ``0x8000``): rounding to bf16 then has ties to break (even)."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.arange(-128, 128, dtype=torch.float32)
    candidates = torch.rand(1 << 14, generator=gen) * 4
    products = values[None, :] * candidates[:, None] * quant.INT8_SCALE  # as dequantize multiplies, float32
    ties = ((products.view(torch.int32) & 0xFFFF) == 0x8000).any(dim=1)
    scb = candidates[ties]
    cb = values.to(torch.int8).repeat(-(-k // 256))[:k].repeat(len(scb), 1)
    return quant.Int8Weight(cb.contiguous(), scb.contiguous())


def interpreted_dequant() -> dict[str, Any]:
    """What ``torch.ops.holodesk.dequant_int8`` computes under ``TRITON_INTERPRET=1`` against :func:`.quant.dequantize`
    of the same rows: for each case, whether the two are equal bit for bit, and the shape and dtype the op
    returned; ``ties``: the float32 values of the tie weight halfway between two bf16 values."""
    torch.set_num_threads(1)
    m = int8_layer(torch.randn(40, 2100, generator=torch.Generator().manual_seed(8)).to(torch.bfloat16))
    stored = quant.quant_weight(m)
    assert isinstance(stored, quant.Int8Weight)
    ties = tie_weight(1100)
    cases = [(f"{dtype} rows {r0}:{r1}", stored, dtype, r0, r1) for dtype in (torch.bfloat16, torch.float16,
                                                                               torch.float32, torch.float64)
             for r0, r1 in ((0, 40), (5, 37), (39, 40))]
    cases.append(("ties bf16", ties, torch.bfloat16, 0, len(ties.scb)))
    out: dict[str, Any] = {"cases": {}}
    for name, w, dtype, r0, r1 in cases:
        got = torch.ops.holodesk.dequant_int8(w.cb[r0:r1], w.scb[r0:r1], quant.INT8_SCALE, dtype)
        want = quant.dequantize(w, dtype, rows=(r0, r1))
        out["cases"][name] = {"equal": bool(torch.equal(got, want)), "shape": list(got.shape),
                              "dtype": str(got.dtype), "contiguous": got.is_contiguous()}
    exact = quant.dequantize(ties)
    out["ties"] = int(((exact.view(torch.int32) & 0xFFFF) == 0x8000).sum())
    return out


def interpreted() -> dict[str, Any]:
    """What the child process measures under ``TRITON_INTERPRET=1`` (CPU tensors): kernel errors for small
    shapes (a ragged ``K`` and a partial row tile included) and the decoder comparison on a tiny model."""
    from tests.policy.holotron.test_decoder import prompt, tiny_lm

    torch.set_num_threads(1)
    out: dict[str, Any] = {"kernels": {}, "decoder": {}}
    for mode in ("nf4", "nf4-double", "int8"):
        for n, k, dtype in ((24, 256, torch.float32), (13, 320, torch.float32), (13, 512, torch.bfloat16)):
            out["kernels"][f"{mode} {n}x{k} {dtype}"] = kernel_errors(mode, n, k, dtype, "cpu")
    for mode in ("nf4-double", "int8"):
        lm = tiny_lm(seed=3)
        quantize_lm(lm, mode)
        out["decoder"][mode] = decoder_errors(lm, prompt(20, seed=5), (4, 64, 4), graphs=False)
    return out
