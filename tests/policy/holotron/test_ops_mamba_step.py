"""The Mamba-2 decode step (ops.mamba_step): its Triton kernels against the torch reference, both measured
against the same maths in float64; under Triton's interpreter on the CPU and on a GPU. The decoder's use of
them (decode against stock generate()) is tested in test_decoder.py."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from holodesk.policy.holotron.ops import mamba_step as ms  # noqa: E402
from tests.policy.holotron import mamba_step_cases  # noqa: E402
from tests.policy.holotron.interpreter import run_interpreted  # noqa: E402


def cuda(fn):  # type: ignore[no-untyped-def]
    """GPU test: marked ``gpu`` and skipped without CUDA."""
    return pytest.mark.gpu(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")(fn))


def _check(cases: dict[str, list[dict[str, Any]]], dtype: str, *, arithmetic: bool) -> None:
    """Every token of every case: the conv state equal bit for bit, the output's shape and dtype; with
    ``arithmetic``, float32 within 1e-5 of float64 (both paths), and 16-bit kernels no further from float64 than
    1.5 times the reference plus 1e-3 (the reference rounds the conv's products, sum and bias to the model dtype
    as the stock module does; the kernels round the conv's output once)."""
    for name, tokens in cases.items():
        heads, head_dim = (int(v) for v in name.strip("()").split(",")[:2])
        for t, case in enumerate(tokens):
            where = f"{name} token {t}: {case}"
            assert case["conv_equal"], where
            assert case["dtype"] == dtype and case["shape"] == [2, heads * head_dim], where
            if not arithmetic:
                continue
            for kernels, reference in (case["out"], case["ssm"]):
                if dtype == "torch.float32":
                    assert kernels < 1e-5 and reference < 1e-5, where
                else:
                    assert kernels <= 1.5 * reference + 1e-3, where


def test_interpreted_kernels_equal_the_reference() -> None:
    """The real kernels under Triton's interpreter (a child process). float32: the conv state bit for bit and
    every value within 1e-5 of float64, as the reference. bfloat16: only what involves no arithmetic (the conv
    state, shapes, dtypes): the interpreter casts float32 to bfloat16 by truncation, not by rounding to nearest
    as the GPU does, which doubles the kernels' error; the GPU test bounds bfloat16."""
    code = "import json; from tests.policy.holotron import mamba_step_cases as c; print(json.dumps(c.interpreted()))"
    got = run_interpreted(code, timeout=600)
    _check(got["torch.float32"], "torch.float32", arithmetic=True)
    _check(got["torch.bfloat16"], "torch.bfloat16", arithmetic=False)


def test_dispatch_takes_the_reference_off_cuda() -> None:
    """On CPU tensors :func:`mamba_step` is the reference, bit for bit, and updates the states as it does."""
    gen = torch.Generator().manual_seed(1)
    heads, head_dim, groups, n, width = 4, 8, 2, 16, 4
    inner, conv_dim = heads * head_dim, heads * head_dim + 2 * groups * n
    dims = (inner, conv_dim, heads, head_dim, groups, n)
    args = (torch.randn(conv_dim, width, generator=gen), torch.randn(conv_dim, generator=gen),
            torch.randn(heads, generator=gen), -torch.rand(heads, generator=gen), torch.randn(heads, generator=gen),
            torch.randn(inner, generator=gen))
    zx = torch.randn(1, inner + conv_dim + heads, generator=gen)
    conv, ssm = torch.randn(1, conv_dim, width, generator=gen), torch.randn(1, heads, head_dim, n, generator=gen)
    assert not ms.kernels_apply(zx, args[0], conv, ssm)
    c1, s1, c2, s2 = conv.clone(), ssm.clone(), conv.clone(), ssm.clone()
    got = ms.mamba_step(zx, *args, c1, s1, dims, 1e-5)
    want = ms.mamba_step_reference(zx, *args, c2, s2, dims, 1e-5)
    assert torch.equal(got, want) and torch.equal(c1, c2) and torch.equal(s1, s2)
    assert not torch.equal(c1, conv) and not torch.equal(s1, ssm)


def test_kernels_refuse_shapes_that_disagree_with_dims() -> None:
    """A conv state, SSM state or dims that do not belong together raise before any kernel runs."""
    if not ms.HAVE_TRITON:
        pytest.skip("Triton does not import here")
    heads, head_dim, groups, n, width = 4, 8, 2, 16, 4
    inner, conv_dim = heads * head_dim, heads * head_dim + 2 * groups * n
    zx = torch.zeros(1, inner + conv_dim + heads)
    params = (torch.zeros(conv_dim, width), None, torch.zeros(heads), torch.zeros(heads), torch.zeros(heads),
              torch.zeros(inner))
    conv, ssm = torch.zeros(1, conv_dim, width), torch.zeros(1, heads, head_dim, n)
    with pytest.raises(ValueError, match="SSM state"):
        ms.mamba_step_triton(zx, *params, conv, torch.zeros(1, heads, head_dim, n + 1),
                             (inner, conv_dim, heads, head_dim, groups, n), 1e-5)
    with pytest.raises(ValueError, match="dims"):
        ms.mamba_step_triton(zx, *params, conv, ssm, (inner, conv_dim, heads, head_dim, 3, n), 1e-5)


@cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_gpu_kernels_equal_the_reference(dtype: torch.dtype) -> None:
    """On the GPU, every case and Holotron-12B's mixer: as the interpreted test, and in bfloat16 the kernels'
    error against float64 within 1.5 times the reference's plus 1e-3."""
    dims = (*mamba_step_cases.DIMS, mamba_step_cases.HOLOTRON_12B)
    cases = {str(d): mamba_step_cases.run(*d, device="cuda", dtype=dtype) for d in dims}
    print({name: [(c["out"], c["ssm"]) for c in tokens] for name, tokens in cases.items()})
    _check(cases, str(dtype), arithmetic=True)


@cuda
def test_gpu_kernels_replay_in_a_cuda_graph() -> None:
    """Recorded once in a CUDA graph and replayed for five tokens (new ``zx`` copied in before each), the
    kernels leave the states and output that five eager calls leave, bit for bit."""
    heads, head_dim, groups, n, width, _bias = mamba_step_cases.HOLOTRON_12B
    inner, conv_dim = heads * head_dim, heads * head_dim + 2 * groups * n
    dims = (inner, conv_dim, heads, head_dim, groups, n)
    gen = torch.Generator(device="cuda").manual_seed(3)
    bf = torch.bfloat16

    def draw(*shape: int, dtype: torch.dtype = bf) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device="cuda").to(dtype)

    params = (draw(conv_dim, width), draw(conv_dim), draw(heads), -draw(heads, dtype=torch.float32).exp(),
              draw(heads), draw(inner))
    conv, ssm = draw(1, conv_dim, width), draw(1, heads, head_dim, n, dtype=torch.float32)
    tokens = [draw(1, inner + conv_dim + heads) for _ in range(5)]
    eager_conv, eager_ssm = conv.clone(), ssm.clone()
    for zx in tokens:
        eager_out = ms.mamba_step(zx, *params, eager_conv, eager_ssm, dims, 1e-5)
    zx_slot = torch.zeros_like(tokens[0])
    graph_conv, graph_ssm = conv.clone(), ssm.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # compiled before recording, on scratch state
        ms.mamba_step(zx_slot, *params, conv.clone(), ssm.clone(), dims, 1e-5)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            graph_out = ms.mamba_step(zx_slot, *params, graph_conv, graph_ssm, dims, 1e-5)
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(graph_conv, conv) and torch.equal(graph_ssm, ssm)  # recording ran nothing
    for zx in tokens:
        zx_slot.copy_(zx)
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(graph_out, eager_out)
    assert torch.equal(graph_conv, eager_conv) and torch.equal(graph_ssm, eager_ssm)
