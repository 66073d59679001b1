"""Prefill kernels (ops.prefill): the torch references against the definitions on the CPU, the CUDA kernels
against the references on a GPU. The decoder's prefill as a whole is tested in test_decoder.py."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers.models.nemotron_h")

from holodesk.policy.holotron.ops import prefill as prefill_ops  # noqa: E402
from tests.policy.holotron import prefill_cases  # noqa: E402
from tests.policy.holotron.interpreter import run_interpreted  # noqa: E402


def cuda(fn):  # type: ignore[no-untyped-def]
    """GPU test: marked ``gpu`` and skipped without CUDA."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")(fn))


def _naive_conv(x: torch.Tensor, state: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                silu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Definition by loops, float64: src = past inputs then the chunk; out[t] = sum_k w[k] src[t+k+1-W]."""
    x64, s64, w64 = x.double(), state.double(), weight.double()
    bsz, seq_len, dim = x.shape
    width = state.shape[-1]
    src = torch.cat([s64.transpose(1, 2), x64], dim=1)  # [B, W + T, D], src index j -> W + j
    out = torch.zeros(bsz, seq_len, dim, dtype=torch.float64)
    for t in range(seq_len):
        for k in range(width):
            out[:, t] += w64[:, k] * src[:, width + t + k + 1 - width]
    if bias is not None:
        out += bias.double()
    if silu:
        out = out * torch.sigmoid(out)
    return out, src[:, -width:].transpose(1, 2)


def _conv_case(seq_len: int, *, dim: int = 40, width: int = 4, bias: bool = True, device: str = "cpu",
               dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    wide = torch.randn(2, seq_len, dim + 24, generator=gen).to(device=device, dtype=dtype)
    x = wide[:, :, 8 : 8 + dim]  # a column slice, as the xBC columns of in_proj's output
    assert x.stride(-1) == 1 and not x.is_contiguous()
    state = torch.randn(2, dim, width, generator=gen).to(device=device, dtype=dtype)
    weight = torch.randn(dim, width, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(dim, generator=gen).to(device=device, dtype=dtype) if bias else None
    return x, state, weight, b


@pytest.mark.parametrize("seq_len", [1, 3, 4, 9])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_reference_is_the_causal_conv_definition(seq_len: int, bias: bool) -> None:
    x, state, weight, b = _conv_case(seq_len, bias=bias)
    want, want_state = _naive_conv(x, state, weight, b, silu=True)
    out = prefill_ops.causal_conv1d(x, state, weight, b, silu=True)  # CPU: the torch reference
    assert out.shape == (2, seq_len, 40) and out.is_contiguous()
    assert torch.allclose(out.double(), want, atol=1e-5)
    assert torch.allclose(state.double(), want_state)


def test_conv_rejects_mismatched_shapes() -> None:
    x, state, weight, b = _conv_case(5)
    with pytest.raises(ValueError, match="conv shapes disagree"):
        prefill_ops.causal_conv1d(x, state[:, :-1], weight, b)


def test_relu_square_and_add_rms_norm_references() -> None:
    x = torch.randn(3, 7, 16)
    want = torch.relu(x) ** 2
    assert torch.equal(prefill_ops.relu_square_(x.clone()), want)
    h, pending, w = torch.randn(1, 5, 32), torch.randn(1, 5, 32), torch.randn(32)
    normed, stream = prefill_ops.add_rms_norm(pending, h, w, 1e-5)
    total = h + pending
    ref = total * torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + 1e-5) * w
    assert torch.equal(stream, total)
    assert torch.allclose(normed, ref, atol=1e-6)
    first, same = prefill_ops.add_rms_norm(None, h, w, 1e-5)
    assert same is h
    assert torch.equal(first, prefill_ops.rms_norm_reference(h, w, 1e-5))


def _naive_gated_norm(y: torch.Tensor, gate: torch.Tensor, w: torch.Tensor, eps: float, group: int) -> torch.Tensor:
    """NemotronHRMSNormGated by its definition, float64: per group g = y*silu(z); g / sqrt(mean(g^2) + eps)."""
    g = y.double() * torch.nn.functional.silu(gate.double())
    parts = g.split(group, dim=-1)
    return torch.cat([p / torch.sqrt(p.pow(2).mean(-1, keepdim=True) + eps) for p in parts], dim=-1) * w.double()


def test_gated_rms_norm_reference_is_the_definition_and_the_stock_module() -> None:
    from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHRMSNormGated

    gen = torch.Generator().manual_seed(2)
    y, gate = torch.randn(2, 5, 48, generator=gen), torch.randn(2, 5, 48, generator=gen)
    w = torch.randn(48, generator=gen)
    out = prefill_ops.gated_rms_norm(y, gate, w, 1e-5, 16)  # CPU: the reference
    assert torch.allclose(out.double(), _naive_gated_norm(y, gate, w, 1e-5, 16), atol=1e-5)
    stock = NemotronHRMSNormGated(48, group_size=16, eps=1e-5)
    with torch.no_grad():
        stock.weight.copy_(w)
        assert torch.equal(out, stock(y, gate))


@cuda
@pytest.mark.parametrize("seq_len", [1, 3, 4, 37, 300])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_conv_kernel_equals_definition(seq_len: int, dtype: torch.dtype) -> None:
    assert prefill_ops.HAVE_TRITON
    for bias in (True, False):
        x, state, weight, b = _conv_case(seq_len, dim=300, bias=bias, device="cuda", dtype=dtype, seed=seq_len)
        want, want_state = _naive_conv(x.cpu(), state.cpu(), weight.cpu(), None if b is None else b.cpu(), True)
        out = prefill_ops.causal_conv1d(x, state, weight, b, silu=True)
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        assert torch.allclose(out.double().cpu(), want, rtol=tol, atol=tol)
        assert torch.equal(state.cpu().double(), want_state.to(dtype).double())


@cuda
def test_gpu_relu_square_and_add_rms_norm_equal_references() -> None:
    x = torch.randn(37, 5000, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(prefill_ops.relu_square_(x.clone()), torch.square(torch.relu(x)))
    h = torch.randn(1, 300, 512, device="cuda", dtype=torch.bfloat16)
    pending = torch.randn_like(h)
    w = torch.randn(512, device="cuda", dtype=torch.bfloat16)
    normed, stream = prefill_ops.add_rms_norm(pending, h, w, 1e-5)
    assert torch.equal(stream, h + pending)
    ref = prefill_ops.rms_norm_reference(h + pending, w, 1e-5)
    assert (normed.float() - ref.float()).abs().max() <= 0.02 * ref.float().abs().max()
    assert prefill_ops.fused_available(torch.device("cuda")) is None


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_gated_rms_norm_kernel_equals_reference(dtype: torch.dtype) -> None:
    gen = torch.Generator(device="cuda").manual_seed(3)
    wide = torch.randn(1, 300, 1024 + 512, generator=gen, device="cuda", dtype=dtype)
    y, gate = wide[..., :1024], wide[..., 512:]  # strided column slices, as the scan output and the gate
    w = torch.randn(1024, generator=gen, device="cuda", dtype=dtype)
    out = prefill_ops.gated_rms_norm(y, gate, w, 1e-5, 128)
    ref = prefill_ops.gated_rms_norm_reference(y, gate, w, 1e-5, 128)
    assert out.shape == ref.shape
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert float((out.float() - ref.float()).norm() / ref.float().norm()) < tol


@pytest.mark.parametrize("length", [1, 2, 3, 4, 7, 9])
def test_conv_state_at_a_device_length_ignores_the_padding(length: int) -> None:
    x, state, weight, b = _conv_case(9)
    ref_state = state.clone()
    want = prefill_ops.causal_conv1d(x[:, :length].contiguous(), ref_state, weight, b)
    out = prefill_ops.causal_conv1d(x, state, weight, b, length=torch.tensor([length]))
    assert torch.equal(state, ref_state)
    assert torch.allclose(out[:, :length], want, atol=1e-6)  # real rows never read the padded ones




def test_step_size_reference_zeroes_the_padded_rows_only() -> None:
    """The torch reference: ``clamp(softplus(dt + bias))`` on the real rows (transformers' maths), exactly 0 on
    the padded ones, whatever the floor of the clamp."""
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(2)
    dt = torch.randn(1, 12, 6, generator=gen) * 5
    bias = torch.randn(6, generator=gen)
    got = prefill_ops.step_size_reference(dt, bias, torch.tensor([7]), (0.001, float("inf")))
    assert torch.equal(got[:, :7], F.softplus(dt + bias).clamp(0.001, float("inf"))[:, :7])
    assert torch.equal(got[:, 7:], torch.zeros(1, 5, 6))
    # off CUDA the dispatch is the reference
    assert torch.equal(prefill_ops.step_size(dt, bias, torch.tensor([7]), (0.001, float("inf"))), got)


@pytest.fixture(scope="module")
def interpreted() -> dict[str, Any]:
    """The real Triton kernels run by Triton's interpreter on CPU tensors (:func:`.interpreter.run_interpreted`)."""
    pytest.importorskip("triton")
    code = ("import json; from tests.policy.holotron import prefill_cases; "
            "print(json.dumps(prefill_cases.interpreted()))")
    return dict(run_interpreted(code, timeout=600))


@pytest.mark.slow
def test_interpreted_step_size_kernel_equals_reference(interpreted: dict[str, Any]) -> None:
    for dtype, cases in interpreted.items():
        assert len(cases["step_size"]) == 3 * 3 * 3, dtype
        for case, got in cases["step_size"].items():
            assert got["shape_dtype_equal"] and got["padding_zero"], (dtype, case, got)
            assert got["excess"] < 1e-6, (dtype, case, got)


@pytest.mark.slow
def test_interpreted_conv_state_kernel_equals_reference(interpreted: dict[str, Any]) -> None:
    for dtype, cases in interpreted.items():
        assert len(cases["conv_state"]) == 3 * (1 + 5 + 9 + 40), dtype
        assert all(cases["conv_state"].values()), (dtype, [c for c, ok in cases["conv_state"].items() if not ok])


@pytest.mark.slow
def test_interpreted_add_rms_norm_row_kernel_equals_definition(interpreted: dict[str, Any]) -> None:
    """float32: the sum bit for bit and the norm within 1e-6 of float64, as the reference. bfloat16: only the
    shapes (the interpreter rounds float32 to bfloat16 by truncation; the GPU test bounds bfloat16)."""
    for dtype, cases in interpreted.items():
        assert len(cases["add_rms_norm_row"]) == len(prefill_cases.ROW_NORM_SHAPES), dtype
        for case, got in cases["add_rms_norm_row"].items():
            assert got["shape_dtype"], (dtype, case, got)
            if dtype == "torch.float32":
                assert got["s_equal"] and got["kernel"] < 1e-6 and got["reference"] < 1e-6, (case, got)


def test_add_rms_norm_row_is_the_reference_off_cuda() -> None:
    """On CPU tensors the decode row's add + norm is the reference, bit for bit; no ``pending``: ``s`` is ``h``."""
    h, pending, w = torch.randn(2, 64), torch.randn(2, 64), torch.rand(64) + 0.5
    s, x = prefill_ops.add_rms_norm_row(h, pending, w, 1e-5)
    assert torch.equal(s, h + pending)
    assert torch.equal(x, prefill_ops.rms_norm_reference(h + pending, w, 1e-5))
    s, x = prefill_ops.add_rms_norm_row(h, None, w, 1e-5)
    assert s is h and torch.equal(x, prefill_ops.rms_norm_reference(h, w, 1e-5))


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_add_rms_norm_row_kernel_equals_definition(dtype: torch.dtype) -> None:
    """The sum bit for bit; the norm as close to float64 as the reference (float32: 1e-6; bfloat16: within one
    rounding, 2^-8 of the largest value, more than the reference by at most a rounding's worth)."""
    assert prefill_ops.HAVE_TRITON
    for case, got in prefill_cases.add_rms_norm_row_cases("cuda", dtype).items():
        assert got["s_equal"] and got["shape_dtype"], (case, got)
        if dtype == torch.float32:
            assert got["kernel"] < 1e-6 and got["reference"] < 1e-6, (case, got)
        else:
            assert got["kernel"] <= 2.0**-8 and got["kernel"] <= got["reference"] + 2.0**-8, (case, got)


@cuda
def test_gpu_add_rms_norm_row_compiled_and_replayed_equals_eager() -> None:
    """The op inside ``torch.compile`` (as the decode block functions call it) and replayed in a CUDA graph gives
    the eager op's outputs bit for bit, and the dispatch runs the op on CUDA."""
    h = torch.randn(1, 5120, device="cuda", dtype=torch.bfloat16)
    pending, w = torch.randn_like(h), torch.rand(5120, device="cuda") + 0.5
    eager = prefill_ops.add_rms_norm_row(h, pending, w, 1e-5)
    assert torch.equal(eager[1], torch.ops.holodesk.add_rms_norm(h, pending, w, 1e-5)[1])
    compiled = torch.compile(lambda a, b: prefill_ops.add_rms_norm_row(a, b, w, 1e-5), fullgraph=True)
    out = compiled(h, pending)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph):
        replayed = compiled(h, pending)
    torch.cuda.current_stream().wait_stream(stream)
    h.copy_(torch.randn_like(h))
    graph.replay()
    torch.cuda.synchronize()
    again = prefill_ops.add_rms_norm_row(h, pending, w, 1e-5)
    assert all(torch.equal(a, b) for a, b in zip(out, eager, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(replayed, again, strict=True))


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_step_size_and_conv_state_kernels_equal_references(dtype: torch.dtype) -> None:
    assert prefill_ops.HAVE_TRITON
    for case, got in prefill_cases.step_size_cases("cuda", dtype).items():
        assert got["shape_dtype_equal"] and got["padding_zero"] and got["excess"] < 1e-6, (case, got)
    cases = prefill_cases.conv_state_cases("cuda", dtype)
    assert all(cases.values()), [c for c, ok in cases.items() if not ok]


@cuda
def test_gpu_padded_chunk_dispatch_runs_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA ``step_size`` and ``set_conv_state`` (what ``mamba_chunk`` calls) launch the Triton kernels, not
    the torch references."""
    def refuse(*args: object) -> None:
        raise AssertionError("the torch reference ran on CUDA")

    monkeypatch.setattr(prefill_ops, "step_size_reference", refuse)
    monkeypatch.setattr(prefill_ops, "set_conv_state_reference", refuse)
    x, state, weight, b = _conv_case(9, device="cuda", dtype=torch.bfloat16)
    prefill_ops.causal_conv1d(x, state, weight, b, length=torch.tensor([5], device="cuda"))
    dt = torch.randn(1, 16, 8 + 4, device="cuda")[..., 4:]
    got = prefill_ops.step_size(dt, torch.zeros(8, device="cuda"), torch.tensor([5], device="cuda"), (0.001, 1e4))
    assert got.shape == (1, 16, 8) and torch.equal(got[:, 5:], torch.zeros(1, 11, 8, device="cuda"))
