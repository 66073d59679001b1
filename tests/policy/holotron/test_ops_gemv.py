"""Matrix-vector products for one-token decode (ops.gemv): the reference and F.linear on the CPU, the Triton
kernel against the reference on a GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from holodesk.policy.holotron.ops import gemv  # noqa: E402


def test_linear_without_a_choice_is_f_linear_and_cpu_keeps_linear() -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(48, 32, generator=gen)
    x = torch.randn(1, 32, generator=gen)
    assert torch.equal(gemv.linear(x, w, None), torch.nn.functional.linear(x, w))
    assert gemv.choose([w]) == (gemv.LINEAR, {})  # nothing is timed off CUDA
    with pytest.raises(ValueError):
        gemv.linear(x, w, ("fast", 0, 0, 0))
    # a chosen kernel only applies to one row; a chunk [1, T, K] or a batch goes to F.linear
    chunk = torch.randn(1, 5, 32, generator=gen)
    assert torch.equal(gemv.linear(chunk, w, ("triton", 8, 512, 4)), torch.nn.functional.linear(chunk, w))


def test_reference_sums_in_float32_and_rounds_once() -> None:
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(64, 300, generator=gen).to(torch.bfloat16)
    x = torch.randn(1, 300, generator=gen).to(torch.bfloat16)
    exact = (x.double() @ w.double().t())
    out = gemv.gemv_reference(x, w)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, exact.float().to(torch.bfloat16))  # float32 sums of 300 terms: one rounding


gpu = pytest.mark.skipif(not torch.cuda.is_available() or not gemv.HAVE_TRITON, reason="needs CUDA and Triton")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("shape", [(1000, 777), (4096, 5120), (5120, 20480)])
def test_gpu_triton_tiles_equal_f_linear(shape: tuple[int, int]) -> None:
    gen = torch.Generator(device="cuda").manual_seed(1)
    w = torch.randn(*shape, generator=gen, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, shape[1], generator=gen, device="cuda", dtype=torch.bfloat16)
    ref = gemv.gemv_reference(x, w).float()
    for bn, bk, nw in gemv.TRITON_TILES:
        out = gemv.linear(x, w, gemv.Gemv("triton", bn, bk, nw).spec())
        assert out.shape == (1, shape[0]) and out.dtype == torch.bfloat16
        err = float((out.float() - ref).norm() / ref.norm())
        assert err < 1e-2, (bn, bk, nw, err)  # the order of float32 sums and the bf16 rounding only
    w2 = w.clone()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    how, timings = gemv.choose([w, w2])
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before  # timing leaves nothing allocated
    assert how.label() in timings and how.us > 0
    # every candidate was timed; none was dropped
    tiles = [t for t in gemv.TRITON_TILES if t[1] <= 2 * shape[1]]
    assert len(timings) == 1 + len(tiles), timings


@pytest.mark.gpu
@gpu
def test_gpu_triton_gemv_compiles_and_replays_in_a_cuda_graph() -> None:
    gen = torch.Generator(device="cuda").manual_seed(2)
    w = torch.randn(3072, 1024, generator=gen, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 1024, generator=gen, device="cuda", dtype=torch.bfloat16)
    spec = gemv.Gemv("triton", 8, 512, 4).spec()

    def block(a: torch.Tensor) -> torch.Tensor:
        return torch.relu(gemv.linear(a, w, spec)) * 2

    compiled = torch.compile(block, dynamic=False, fullgraph=True)
    eager = block(x)
    assert torch.equal(compiled(x), eager)
    static_x = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        compiled(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = compiled(static_x)
    static_x.copy_(torch.randn(1, 1024, generator=gen, device="cuda", dtype=torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, block(static_x))
