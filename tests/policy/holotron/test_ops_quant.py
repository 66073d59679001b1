"""Quantised decode (ops/quant.py): bitsandbytes' NF4 / int8 storage read in place by Triton matrix-vector
kernels, each against bitsandbytes' own dequantisation + matmul on the same weights.

CPU: the storage is the module's (no copy), the torch reference equals bitsandbytes' dequantisation bit for
bit, and the real Triton kernels run under Triton's interpreter (a child process with ``TRITON_INTERPRET=1``)
alone and inside the static decoder. GPU (``gpu``): every tile at Holotron-12B's shapes, the tile chosen at
load, the op compiled and replayed in a CUDA graph, and the captured quantised decoder against bitsandbytes'
modules.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed (pip install 'holodesk[quant]')")
pytest.importorskip("transformers")

import bitsandbytes as bnb  # noqa: E402

from holodesk.policy.holotron import blocks  # noqa: E402
from holodesk.policy.holotron.decoder import Setup  # noqa: E402
from holodesk.policy.holotron.kernels import kernel_analysis_warnings  # noqa: E402
from holodesk.policy.holotron.ops import quant  # noqa: E402
from holodesk.policy.holotron.ops.gemv import Gemv  # noqa: E402
from tests.policy.holotron import quant_cases  # noqa: E402
from tests.policy.holotron.interpreter import run_interpreted  # noqa: E402
from tests.policy.holotron.quant_cases import bnb_weight, layer, rel  # noqa: E402

MODES = ("nf4", "nf4-double", "int8")
BF16_ROUNDING = 1e-2  # relative L2 of one bf16 rounding of the output (2^-8), with margin
EXACT_CODES = 3e-3  # relative L2 of the bf16 rounding of the output alone (about 1.5e-3): float32 NF4 values


@pytest.mark.parametrize("mode", MODES)
def test_reference_dequantises_the_stored_bytes_as_bitsandbytes(mode: str) -> None:
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(48, 320, generator=gen).to(torch.bfloat16)
    m = layer(mode, w)
    stored = quant.quant_weight(m)
    assert stored is not None and quant.shape(stored) == (48, 320)
    if mode == "int8":  # bitsandbytes' int8_vectorwise_dequant, float32, bit for bit
        assert torch.equal(quant.dequantize(stored), bnb_weight(m))
    else:  # dequantize_4bit in the layer's dtype, bit for bit (nibble order, blocks, nested statistics)
        want = bnb.functional.dequantize_4bit(m.weight.data, m.weight.quant_state)
        assert want.dtype == torch.bfloat16 and torch.equal(quant.dequantize(stored, torch.bfloat16), want)
    x = torch.randn(1, 320, generator=gen).to(torch.bfloat16)
    assert rel(quant.gemv_reference(x, stored), x.float() @ bnb_weight(m).t()) < BF16_ROUNDING
    assert rel(quant.gemv_reference(x, stored), w.float() @ x.float().t().flatten()) < 0.2  # it is the weight


@pytest.mark.parametrize("mode", MODES)
def test_dequantising_by_rows_equals_the_whole(mode: str) -> None:
    """Row ranges (the chunks of the reference at load) index the blocks and the nested blocks, which cross
    rows (70 x 64 blocks of 64 values, nested in 256s), as the whole does."""
    m = layer(mode, torch.randn(70, 4096, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16))
    stored = quant.quant_weight(m)
    assert stored is not None
    whole = quant.dequantize(stored)
    assert torch.equal(torch.cat([quant.dequantize(stored, rows=(r, min(70, r + 9))) for r in range(0, 70, 9)]),
                       whole)
    x = torch.randn(2, 4096, generator=torch.Generator().manual_seed(6))
    assert torch.allclose(quant.gemv_reference(x, stored, chunk_rows=16), x @ whole.t(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_the_storage_is_the_modules_own(mode: str) -> None:
    m = layer(mode, torch.randn(32, 128))
    stored = quant.quant_weight(m)
    assert stored is not None
    if isinstance(stored, quant.NF4Weight):
        qs = m.weight.quant_state
        assert stored.packed.data_ptr() == m.weight.data_ptr() and stored.packed.dtype == torch.uint8
        assert stored.absmax is qs.absmax and stored.code is qs.code and stored.double == (mode == "nf4-double")
        if stored.double:
            assert stored.absmax.dtype == torch.uint8 and stored.absmax2 is qs.state2.absmax
            assert stored.code2 is qs.state2.code and stored.blocksize2 == 256
        assert quant.nbytes(stored) == 32 * 128 // 2 + qs.absmax.numel() * qs.absmax.element_size() + 16 * 4 + (
            qs.state2.absmax.numel() * 4 + 256 * 4 + 4 if stored.double else 0)
    else:
        assert stored.cb.data_ptr() == m.weight.data_ptr() and stored.cb.dtype == torch.int8
        assert quant.nbytes(stored) == 32 * 128 + 32 * 4
    x = torch.randn(1, 128)
    m(x)  # bitsandbytes' forward moves Int8Params' SCB into the module's state: still found, still the same
    again, via_blocks = quant.quant_weight(m), blocks.weight_of(m, quantized=True)
    for other in (again, via_blocks):
        assert type(other) is type(stored)
        tensors = [(a, b) for a, b in zip(other, stored, strict=True) if isinstance(a, torch.Tensor)]
        assert all(a.data_ptr() == b.data_ptr() for a, b in tensors[:5])  # NF4's offset may be a fresh zero
    assert blocks.weight_of(m) is m


def test_layers_the_kernels_do_not_read_stay_modules() -> None:
    w = torch.randn(16, 128)
    biased = bnb.nn.Linear4bit(128, 16, bias=True, quant_type="nf4", device="meta")
    biased.weight = bnb.nn.Params4bit(w.clone(), requires_grad=False, quant_type="nf4")
    biased.bias = torch.nn.Parameter(torch.zeros(16), requires_grad=False)
    fp4 = bnb.nn.Linear4bit(128, 16, bias=False, quant_type="fp4", device="meta")
    fp4.weight = bnb.nn.Params4bit(w.clone(), requires_grad=False, quant_type="fp4")
    for m in (biased.to("cpu"), fp4.to("cpu"), torch.nn.Linear(128, 16, bias=True)):
        assert quant.quant_weight(m) is None and blocks.weight_of(m, quantized=True) is m
    plain = torch.nn.Linear(128, 16, bias=False)
    assert quant.quant_weight(plain) is None and blocks.weight_of(plain, quantized=True) is not plain


def test_tiles_hold_whole_quantisation_blocks_and_fit_k() -> None:
    nf4 = quant.quant_weight(layer("nf4", torch.randn(8, 192)))
    int8 = quant.quant_weight(layer("int8", torch.randn(8, 192)))
    assert nf4 is not None and int8 is not None
    assert quant.tiles(nf4) and all(t.kind == "nf4" and t.block_k % 64 == 0 and t.block_k <= 384
                                    for t in quant.tiles(nf4))  # no step divides K = 192: no bf16 pairs
    wide = quant.quant_weight(layer("nf4", torch.randn(8, 512)))
    assert wide is not None
    pairs = [t for t in quant.tiles(wide) if t.kind == "nf4-pairs"]
    assert pairs and all(512 % t.block_k == 0 for t in pairs)
    assert not [t for t in quant.tiles(wide, torch.float32) if t.kind == "nf4-pairs"]  # bf16 activations only
    assert quant.tiles(int8) and all(t.kind in ("int8", "int8-words") and t.block_k <= 384 for t in quant.tiles(int8))
    # the word reader needs bf16 activations and K a multiple of its step (no step divides 192)
    assert not [t for t in quant.tiles(int8) if t.kind == "int8-words"]
    wide8 = quant.quant_weight(layer("int8", torch.randn(8, 512)))
    assert wide8 is not None
    words = [t for t in quant.tiles(wide8) if t.kind == "int8-words"]
    assert {t.block_k for t in words} == {128, 256, 512}
    assert not [t for t in quant.tiles(wide8, torch.float32) if t.kind == "int8-words"]
    with pytest.raises(ValueError, match="does not read"):
        quant.linear(torch.randn(1, 192), int8, ("nf4", 4, 64, 4))
    # off CUDA nothing is chosen: the decoder keeps bitsandbytes' modules
    assert quant.choose([nf4]) == (Gemv(), {})


def test_shuffle_tiles_fit_k_and_blocks_and_stay_off_the_interpreter() -> None:
    """``"nf4-shfl"`` (inline PTX) is offered for bf16 activations when ``K`` is a multiple of the step and each
    thread's share is whole words inside one block; never with ``shuffle=False`` (Triton's interpreter)."""
    w = quant.quant_weight(layer("nf4", torch.randn(8, 5120)))
    assert w is not None
    shfl = [t for t in quant.tiles(w) if t.kind == "nf4-shfl"]
    assert shfl and {(t.block_n, t.block_k, t.num_warps) for t in shfl} == {
        t for t in quant.NF4_SHFL_TILES if 5120 % t[1] == 0}
    assert quant.tiles(w)[: len(shfl)] == shfl  # timed first; the other kinds stay
    assert {t.kind for t in quant.tiles(w)} == {"nf4-shfl", "nf4-pairs", "nf4"}
    assert not [t for t in quant.tiles(w, shuffle=False) if t.kind == "nf4-shfl"]
    assert not [t for t in quant.tiles(w, torch.float32) if t.kind == "nf4-shfl"]
    narrow = quant.quant_weight(layer("nf4", torch.randn(8, 320)))  # no step divides K = 320
    assert narrow is not None and not [t for t in quant.tiles(narrow) if t.kind == "nf4-shfl"]
    assert quant.shfl_fits(w._replace(blocksize=32), (4, 1024, 1))  # a thread's 32 values fill one block
    assert not quant.shfl_fits(w._replace(blocksize=16), (4, 1024, 1))  # they would straddle two
    if quant.HAVE_TRITON:  # the op refuses what the kernel cannot read before launching anything
        with pytest.raises(ValueError, match="needs bf16 x"):
            quant.linear(torch.randn(1, 5120), w, ("nf4-shfl", 4, 1024, 1))
        with pytest.raises(ValueError, match="K a multiple of block_k"):
            quant.linear(torch.randn(1, 5120, dtype=torch.bfloat16), w, ("nf4-shfl", 4, 4096, 4))
        with pytest.raises(ValueError, match="blocksize multiples of 32"):
            quant.linear(torch.randn(1, 5120, dtype=torch.bfloat16), w._replace(blocksize=16), ("nf4-shfl", 4, 1024, 1))


def test_quantised_setup_falls_back_to_uncompiled_modules() -> None:
    fast = Setup(compiled=True, gemv={"up": Gemv("nf4", 4, 512, 4), "lm_head": Gemv("triton", 8, 512, 4)},
                 graphs=True, quantized=True)
    assert fast.quant_kernels() and "read as bitsandbytes stores them" in fast.label()
    simpler = fast.simpler()
    assert simpler == Setup(compiled=False, gemv={}, graphs=True, quantized=True)
    assert "bitsandbytes modules called as they are" in simpler.label()
    bf16 = Setup(compiled=True, gemv={"up": Gemv("triton", 8, 512, 4)}, graphs=True)
    assert bf16.simpler() == Setup(compiled=True, gemv={}, graphs=True) and not bf16.quant_kernels()


def test_eager_decoder_on_a_quantised_model_calls_the_modules() -> None:
    from holodesk.policy.holotron.decoder import StaticDecoder
    from tests.policy.holotron.test_decoder import tiny_lm

    lm = tiny_lm(seed=4)
    quant_cases.quantize_lm(lm, "nf4-double")
    d = StaticDecoder(lm, max_len=64, bucket=32, chunk=16, prefill_bucket=8)
    assert d.setup == Setup(compiled=False, gemv={}, graphs=False, quantized=True) and not d.plain
    assert d._dargs is d._args and "bitsandbytes modules called as they are" in d.describe()["decode"]
    assert sum(isinstance(w, quant.NF4Weight) for a in d._qargs for w in a) == 18  # 4 Mamba x2, 2 MLP x2, 2 attn x3
    assert sum(isinstance(o[0], quant.NF4Weight) for o in d._qout.values()) == 2


def test_doctor_reports_the_quantised_decode_path() -> None:
    from holodesk.policy.holotron.kernels import kernel_report, quant_decode_report

    off = quant_decode_report(cuda=False)
    assert off["bitsandbytes"] == bnb.__version__ and off["triton_kernels"] is quant.HAVE_TRITON
    assert off["live"] is False and "no CUDA device" in off["detail"]
    on = quant_decode_report(cuda=True)
    assert on["live"] is quant.HAVE_TRITON and ("Triton kernels" in on["detail"]) is quant.HAVE_TRITON
    report = kernel_report(import_transformers=False)["quantized_decode"]
    assert report == quant_decode_report(cuda=torch.cuda.is_available())


def test_int8_dequantisation_op_refuses_what_it_cannot_write() -> None:
    """``torch.ops.holodesk.dequant_int8`` checks its inputs before it launches anything (CPU tensors here)."""
    if not quant.HAVE_TRITON:
        pytest.skip("the Triton kernels do not import here")
    w = quant.quant_weight(layer("int8", torch.randn(8, 192)))
    assert isinstance(w, quant.Int8Weight)
    op = torch.ops.holodesk.dequant_int8
    with pytest.raises(ValueError, match="2-D int8 weight with contiguous columns"):
        op(w.cb.float(), w.scb, quant.INT8_SCALE, torch.bfloat16)
    with pytest.raises(ValueError, match="2-D int8 weight with contiguous columns"):
        op(w.cb.t(), w.scb, quant.INT8_SCALE, torch.bfloat16)
    with pytest.raises(ValueError, match="one scale a row"):
        op(w.cb[2:6], w.scb, quant.INT8_SCALE, torch.bfloat16)
    with pytest.raises(ValueError, match=r"not torch\.int32"):
        op(w.cb, w.scb, quant.INT8_SCALE, torch.int32)


def test_int8_matmul_off_cuda_dequantises_in_torch() -> None:
    """On CPU ``quant.matmul`` multiplies by :func:`.quant.dequantize`'s chunks (the reference, plain torch):
    chunked as one whole product, in ``x``'s dtype."""
    w = quant.quant_weight(layer("int8", torch.randn(70, 320, generator=torch.Generator().manual_seed(9))))
    assert isinstance(w, quant.Int8Weight)
    x = torch.randn(3, 5, 320, generator=torch.Generator().manual_seed(10)).to(torch.bfloat16)
    out = quant.matmul(x, w, chunk_rows=16)
    assert out.dtype == torch.bfloat16 and out.shape == (3, 5, 70)
    want = torch.nn.functional.linear(x, quant.dequantize(w, torch.bfloat16))
    assert rel(out, want) < 1e-5


def test_interpreted_int8_dequantisation_equals_the_torch_reference() -> None:
    """The real ``int8_dequant_kernel`` under Triton's interpreter writes what :func:`.quant.dequantize` does, bit
    for bit: ``K = 2100`` (not a multiple of its 1024 columns), row ranges from 0, from 5 and the last row alone,
    bf16 / fp16 / float32 / float64; and a weight built to hold float32 values halfway between two bf16 values,
    which must round to even as torch's ``.to`` does."""
    if not quant.HAVE_TRITON:
        pytest.skip("the Triton kernels do not import here")
    code = ("import json; from tests.policy.holotron import quant_cases; "
            "print(json.dumps(quant_cases.interpreted_dequant()))")
    got = run_interpreted(code, timeout=300)
    assert got["ties"] > 0, got  # the tie weight has ties to break
    assert len(got["cases"]) == 13, got
    for case, result in got["cases"].items():
        assert result["equal"] and result["contiguous"], (case, result)
        assert result["dtype"] == ("torch.bfloat16" if case == "ties bf16" else case.split()[0]), (case, result)
    assert got["cases"]["torch.bfloat16 rows 5:37"]["shape"] == [32, 2100], got
    assert got["cases"]["ties bf16"]["shape"] == [17, 1100], got


@pytest.fixture(scope="module")
def interpreted() -> dict[str, Any]:
    """The real Triton kernels run by Triton's interpreter on CPU tensors (:func:`.interpreter.run_interpreted`)."""
    code = "import json; from tests.policy.holotron import quant_cases; print(json.dumps(quant_cases.interpreted()))"
    return dict(run_interpreted(code, timeout=900))


@pytest.mark.slow
def test_interpreted_kernels_equal_bitsandbytes_dequantise_and_matmul(interpreted: dict[str, Any]) -> None:
    cases = interpreted["kernels"]
    assert len(cases) == 3 * 3 and all(cases.values()), cases
    assert any(label.startswith("nf4-pairs") for label in cases["nf4 13x512 torch.bfloat16"])
    for case, errors in cases.items():
        tol = 1e-5 if "float32" in case else BF16_ROUNDING  # float32 sums; or one bf16 rounding of the output
        assert all(e < tol for e in errors.values()), (case, errors)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["nf4-double", "int8"])
def test_interpreted_decoder_reads_storage_and_equals_the_module_path(interpreted: dict[str, Any],
                                                                       mode: str) -> None:
    got = interpreted["decoder"][mode]
    assert got["setup_kernels"] and got["quantised_projections"] == 18 and got["same_storage"], got
    assert "read as bitsandbytes stores them" in got["decode"] and got["notes"] == []
    assert len(got["errors"]) == 7 and max(got["errors"]) < 1e-4, got["errors"]


# ---------------------------------------------------------------- GPU
H, INNER, MLP_W = 5120, 10240, 20480
SHAPES_12B = {"mamba in_proj": (2 * INNER + 2 * 8 * 128 + 128, H), "mamba out_proj": (H, INNER), "mlp up": (MLP_W, H),
              "mlp down": (H, MLP_W), "q / o_proj": (H, H), "k / v": (8 * 128, H)}
"""Holotron-12B's quantised projections ``(N, K)`` (bench/model.py HOLOTRON_12B: hidden 5120, Mamba inner
2 x hidden, 8 groups x state 128, 128 heads; MLP 20480; 40 x 128 query and 8 x 128 KV heads)."""


def cuda(fn):  # type: ignore[no-untyped-def]
    """GPU test: marked ``gpu``, skipped without CUDA; with CUDA a missing Triton kernel fails."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")(fn))


@cuda
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("role", list(SHAPES_12B))
def test_gpu_every_tile_equals_bitsandbytes_at_12b_shapes(mode: str, role: str) -> None:
    assert quant.HAVE_TRITON, "the quantised Triton kernels did not import on a CUDA machine"
    n, k = SHAPES_12B[role]
    errors = quant_cases.kernel_errors(mode, n, k, torch.bfloat16, "cuda")
    assert errors and all(e < BF16_ROUNDING for e in errors.values()), errors


def bnb_weight_f32(m: Any) -> torch.Tensor:
    """bitsandbytes' ``dequantize_4bit`` of an NF4 layer written in float32 (``code[i] * absmax`` unrounded; its
    own state asks for the layer's bf16)."""
    import copy

    qs = copy.copy(m.weight.quant_state)
    qs.dtype = torch.float32
    out = bnb.functional.dequantize_4bit(m.weight.data, qs)
    assert out.dtype == torch.float32
    return out


@cuda
@pytest.mark.parametrize("mode", ["nf4", "nf4-double"])
@pytest.mark.parametrize("role", list(SHAPES_12B))
def test_gpu_shuffle_kernel_equals_bitsandbytes_with_silu_activations(mode: str, role: str) -> None:
    """Every ``"nf4-shfl"`` tile at the 12B shapes against bitsandbytes' float32 dequantisation times ``x``
    (float32 sums), for mostly positive activations (``silu``), where a biased table would add up: each output
    within one bf16 rounding of the reference (plus float32 summation order), the relative L2 error that of
    rounding alone."""
    n, k = SHAPES_12B[role]
    gen = torch.Generator().manual_seed(11)
    m = layer(mode, torch.randn(n, k, generator=gen).to(torch.bfloat16), "cuda")
    stored = quant.quant_weight(m)
    assert isinstance(stored, quant.NF4Weight)
    x = torch.nn.functional.silu(torch.randn(1, k, generator=gen)).to(device="cuda", dtype=torch.bfloat16)
    ref = x.float() @ bnb_weight_f32(m).t()
    assert rel(quant.gemv_reference(x.float(), stored), ref) < 1e-6  # the same weights, float32 both
    tiles = [t for t in quant.tiles(stored) if t.kind == "nf4-shfl"]
    assert tiles
    for tile in tiles:
        y = quant.linear(x, stored, tile.spec())
        assert y.dtype == torch.bfloat16 and y.shape == (1, n)
        bound = ref.abs() * 2.0**-8 + 1e-5 * ref.abs().max()  # half a bf16 ulp is at most 2^-8 |ref|
        assert bool(((y.float() - ref).abs() <= bound).all()), (tile.label(), float((y.float() - ref).abs().max()))
        assert rel(y, ref) < EXACT_CODES, (tile.label(), rel(y, ref))


@cuda
@pytest.mark.parametrize("mode", MODES)
def test_gpu_choose_times_tiles_and_picks_a_kernel(mode: str) -> None:
    gen = torch.Generator().manual_seed(2)
    layers = [layer(mode, torch.randn(*SHAPES_12B["mlp up"], generator=gen).to(torch.bfloat16), "cuda")
              for _ in range(3)]
    stored = [quant.quant_weight(m) for m in layers]
    assert all(s is not None for s in stored)
    best, timings = quant.choose([s for s in stored if s is not None], dtype=torch.bfloat16)
    kinds = ("int8", "int8-words") if mode == "int8" else ("nf4", "nf4-pairs", "nf4-shfl")
    assert best.kind in kinds and best.us > 0, (best, timings)
    assert set(timings) == {t.label() for t in quant.tiles(stored[0])}, timings  # every tile compiled and ran


_KERNEL_POINTERS = {"q_ptr": "*u8", "w_ptr": "*i32", "xw_ptr": "*i32", "xq_ptr": "*i64", "x_ptr": "*bf16",
                    "y_ptr": "*bf16", "absmax_ptr": "*u8", "cb_ptr": "*i8", "out_ptr": "*bf16"}
_KERNEL_CONSTANTS = {"n_rows": 5120, "n_cols": 5120, "words_per_row": 640, "stride_w": 5120, "BLOCKSIZE": 64,
                     "BLOCKSIZE2": 256, "DOUBLE": True, "BLOCK_N": 4, "BLOCK_K": 1024, "EVEN_K": True, "X_PAIRS": True,
                     "VEC": quant.NF4_SHFL_VEC, "RELU_SQ": True, "SCALE": quant.INT8_SCALE}


@pytest.mark.parametrize("name", ["nf4_shfl_gemv_kernel", "nf4_gemv_kernel", "int8_gemv_kernel",
                                  "int8_words_gemv_kernel", "int8_dequant_kernel", "gemv_kernel"])
def test_kernels_compile_with_their_scalar_arguments_as_constants(name: str) -> None:
    """torch (2.11) decides which arguments a user Triton kernel writes by compiling it with its scalar arguments
    as constants (``identify_mutated_tensors``); a kernel that does not compile so is taken to write every
    argument, and the compiled decode then copies each weight before every product (run 10d: NF4 decode
    11.5 ms/token instead of 8.5, with ``tl.multiple_of`` on a scalar argument). Compiled offline for sm_90
    by Triton's bundled ptxas (no GPU); the GPU test of the op checks torch's own analysis."""
    triton = pytest.importorskip("triton")
    if not quant.HAVE_TRITON:
        pytest.skip("the Triton kernels do not import here")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from holodesk.policy.holotron.ops import _gemv_triton, _quant_triton

    kernel = getattr(_gemv_triton if name == "gemv_kernel" else _quant_triton, name)
    special = {("int8_gemv_kernel", "w_ptr"): "*i8", ("gemv_kernel", "w_ptr"): "*bf16"}
    sig: dict[str, str] = {}
    for arg in kernel.arg_names:
        if arg.endswith("_ptr"):
            sig[arg] = special.get((name, arg), _KERNEL_POINTERS.get(arg, "*fp32"))
        else:
            sig[arg] = "constexpr"
    constants = {arg: _KERNEL_CONSTANTS[arg] for arg, kind in sig.items() if kind == "constexpr"}
    compiled = triton.compile(ASTSource(kernel, sig, constants, {}), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 1})
    assert "tt.func" in compiled.asm["ttir"]


def _warmed_and_recorded(fn, *args):  # type: ignore[no-untyped-def]
    """``fn(*args)`` run twice on a side stream (compiling it) while torch's analysis of our kernels is listened
    to (:func:`.kernels.kernel_analysis_warnings`), then recorded in a CUDA graph on that stream; returns the
    graph, the output its replays write and the analysis lines logged meanwhile."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with kernel_analysis_warnings() as analysis, torch.cuda.stream(stream):
        for _ in range(2):
            fn(*args)
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    return graph, out, analysis


@cuda
@pytest.mark.parametrize(("mode", "kind"), [("nf4", "nf4-pairs"), ("nf4-double", "nf4-pairs"), ("nf4", "nf4"),
                                            ("nf4", "nf4-shfl"), ("nf4-double", "nf4-shfl"), ("int8", "int8"),
                                            ("int8", "int8-words")])
def test_gpu_op_compiles_and_replays_in_a_cuda_graph(mode: str, kind: str) -> None:
    gen = torch.Generator().manual_seed(3)
    m = layer(mode, torch.randn(1024, 5120, generator=gen).to(torch.bfloat16), "cuda")
    stored = quant.quant_weight(m)
    assert stored is not None
    how = next(t for t in quant.tiles(stored) if t.kind == kind).spec()

    def step(x: torch.Tensor, w: quant.QuantWeight) -> torch.Tensor:
        return blocks.project(torch.nn.functional.silu(x), w, how) * 2

    fn = torch.compile(step, dynamic=False, fullgraph=True)
    x = torch.randn(1, 5120, device="cuda", dtype=torch.bfloat16)
    graph, out, analysis = _warmed_and_recorded(fn, x, stored)
    # torch's check of what the kernel writes: when it fails, torch copies every input at each call
    assert not [line for line in analysis if "assuming every input is mutated" in line]
    x.copy_(torch.randn(1, 5120, device="cuda", dtype=torch.bfloat16))
    want = (torch.nn.functional.silu(x).float() @ bnb_weight(m).t() * 2)
    graph.replay()
    torch.cuda.synchronize()
    assert rel(out, want) < (EXACT_CODES if kind == "nf4-shfl" else BF16_ROUNDING)
    if kind == "nf4-shfl":  # the float32 NF4 values: no bias beside bitsandbytes' float32 dequantisation
        exact = torch.nn.functional.silu(x).float() @ bnb_weight_f32(m).t() * 2
        assert rel(out, exact) < EXACT_CODES


@cuda
@pytest.mark.parametrize("mode", ["nf4", "nf4-double", "int8"])
def test_gpu_captured_quantised_decoder_equals_the_module_path(mode: str) -> None:
    """The decoder sets itself up on a quantised tiny model: kernels chosen for every quantised role, blocks
    compiled, decode graphs captured, no fallback; its logits follow bitsandbytes' modules run eagerly."""
    from tests.policy.holotron.test_decoder import prompt, tiny_lm

    lm = tiny_lm(seed=6, dtype=torch.bfloat16, device="cuda")
    quant_cases.quantize_lm(lm, mode, "cuda")
    got = quant_cases.decoder_errors(lm, prompt(20, seed=7, device="cuda"), (4, 64, 4), graphs=True)
    assert got["notes"] == [] and got["setup_kernels"] and got["same_storage"], got
    assert got["decode"].startswith("compiled blocks") and got["decode"].endswith("CUDA graphs"), got
    # window 32: recorded at load, and the only one a 20-token prompt and 6 steps use (64 would be on first use)
    assert got["graphs"] == [32] and got["quantised_projections"] == 18, got
    # bf16 activations; the module path rounds the dequantised weight to bf16 (NF4 through bitsandbytes'
    # module, int8 weight-only through quant.matmul), the kernels do not
    assert max(got["errors"]) < 3e-2, got["errors"]


@cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_int8_dequantisation_op_equals_the_torch_reference_at_12b_shape(dtype: torch.dtype) -> None:
    """``torch.ops.holodesk.dequant_int8`` on the 12B MLP down projection ``[5120, 20480]``, in prefill's
    4096-row chunks (rows 0:4096 and 4096:5120): :func:`.quant.dequantize` of the same rows, bit for bit; and the
    tie weight's halfway values rounded to even as torch rounds them."""
    assert quant.HAVE_TRITON, "the quantised Triton kernels did not import on a CUDA machine"
    n, k = SHAPES_12B["mlp down"]
    m = layer("int8", torch.randn(n, k, generator=torch.Generator().manual_seed(12)).to(torch.bfloat16), "cuda")
    w = quant.quant_weight(m)
    assert isinstance(w, quant.Int8Weight) and w.cb.is_cuda
    for r0, r1 in ((0, 4096), (4096, n)):
        got = torch.ops.holodesk.dequant_int8(w.cb[r0:r1], w.scb[r0:r1], quant.INT8_SCALE, dtype)
        want = quant.dequantize(w, dtype, rows=(r0, r1))
        assert got.dtype == dtype and got.shape == (r1 - r0, k) and got.is_contiguous()
        assert torch.equal(got, want), (r0, r1, int((got != want).sum()))
    ties = quant_cases.tie_weight(20480)
    ties = quant.Int8Weight(ties.cb.cuda(), ties.scb.cuda())
    got = torch.ops.holodesk.dequant_int8(ties.cb, ties.scb, quant.INT8_SCALE, dtype)
    assert torch.equal(got, quant.dequantize(ties, dtype))


def _int8_cuda_weight(n: int, k: int, seed: int) -> quant.Int8Weight:
    m = layer("int8", torch.randn(n, k, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16), "cuda")
    w = quant.quant_weight(m)
    assert isinstance(w, quant.Int8Weight)
    return w


@cuda
def test_gpu_int8_matmul_dequantises_through_the_op_and_equals_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    """``quant.matmul`` of 2048 rows on the 12B MLP up projection ``[20480, 5120]`` (five 4096-row chunks) equals
    ``F.linear`` with the torch-dequantised weight, and never calls :func:`.quant.dequantize` on CUDA."""
    assert quant.HAVE_TRITON, "the quantised Triton kernels did not import on a CUDA machine"
    n, k = SHAPES_12B["mlp up"]
    w = _int8_cuda_weight(n, k, 13)
    x = torch.randn(1, 2048, k, generator=torch.Generator().manual_seed(14)).to(device="cuda", dtype=torch.bfloat16)
    want = torch.nn.functional.linear(x, quant.dequantize(w, torch.bfloat16))

    def torch_path(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise AssertionError("quant.matmul dequantised an int8 CUDA weight in torch")

    monkeypatch.setattr(quant, "dequantize", torch_path)
    out = quant.matmul(x, w)
    assert out.dtype == torch.bfloat16 and out.shape == (1, 2048, n)
    assert rel(out, want) < 1e-4  # the same bf16 weight; only cuBLAS's sums per chunk may differ


@cuda
def test_gpu_int8_matmul_without_triton_says_so(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
                                               ) -> None:
    """Without the Triton kernels an int8 CUDA weight is dequantised in torch (same result), logged once."""
    w = _int8_cuda_weight(512, 640, 15)
    x = torch.randn(37, 640, device="cuda", dtype=torch.bfloat16)
    fused = quant.matmul(x, w)
    monkeypatch.setattr(quant, "HAVE_TRITON", False)
    quant._int8_prefill_in_torch.cache_clear()
    with caplog.at_level("WARNING", logger=quant.__name__):
        plain = quant.matmul(x, w)
        quant.matmul(x, w)
    quant._int8_prefill_in_torch.cache_clear()
    said = [r.getMessage() for r in caplog.records if "int8 prefill dequantises its weights in torch" in r.getMessage()]
    assert len(said) == 1, caplog.records
    assert rel(plain, fused) < 1e-4  # the same bf16 weight bit for bit; only cuBLAS may sum otherwise


@cuda
@pytest.mark.parametrize("compiled", [False, True])
def test_gpu_int8_prefill_projection_replays_in_a_cuda_graph(compiled: bool) -> None:
    """Prefill's int8 projection (``blocks.project`` of several rows: ``quant.matmul`` through the op) recorded in
    a CUDA graph as the decoder records prefill segments (eagerly), and also compiled: no torch analysis
    warning, and the replay follows new activations."""
    assert quant.HAVE_TRITON, "the quantised Triton kernels did not import on a CUDA machine"
    w = _int8_cuda_weight(*SHAPES_12B["q / o_proj"], 16)
    weight = quant.dequantize(w, torch.bfloat16)

    def body(x: torch.Tensor, stored: quant.QuantWeight) -> torch.Tensor:
        return blocks.project(x, stored) * 2

    fn = torch.compile(body, dynamic=False, fullgraph=True) if compiled else body
    x = torch.randn(1, 256, SHAPES_12B["q / o_proj"][1], device="cuda", dtype=torch.bfloat16)
    graph, out, analysis = _warmed_and_recorded(fn, x, w)
    assert not [line for line in analysis if "assuming every input is mutated" in line]
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert rel(out, torch.nn.functional.linear(x, weight) * 2) < 1e-4


@pytest.mark.parametrize("op", ["gemv_int8", "gemv_int8_words"])
def test_int8_ops_trace_with_fake_tensors_without_a_data_pointer(op: str) -> None:
    """``torch.compile`` traces a ``triton_op`` by running its body on fake tensors, which have no data pointer:
    reading one there fails the compile (run 24: the int8-words op asked ``x.data_ptr()`` and the captured int8
    decoder fell back to plain torch blocks). On the CPU, fake CUDA tensors stand in and the read is a warning,
    turned into an error here."""
    pytest.importorskip("triton")
    if not quant.HAVE_TRITON:
        pytest.skip("the Triton kernels do not import here")
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    with warnings.catch_warnings(), FakeTensorMode():
        warnings.simplefilter("error")
        x = torch.empty(1, 5120, dtype=torch.bfloat16, device="cuda")
        cb = torch.empty(1024, 5120, dtype=torch.int8, device="cuda")
        scb = torch.empty(1024, device="cuda")
        y = getattr(torch.ops.holodesk, op)(x, cb, scb, quant.INT8_SCALE, 4, 1024, 4)
    assert tuple(y.shape) == (1, 1024) and y.dtype == torch.bfloat16
