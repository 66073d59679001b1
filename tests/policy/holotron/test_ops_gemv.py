"""Matrix-vector products for one-token decode (ops.gemv): the reference and F.linear on the CPU, the Triton
kernel against the reference on a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from holodesk.policy.holotron.ops import gemv  # noqa: E402
from tests.policy.holotron.interpreter import run_interpreted  # noqa: E402


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


def _candidates(scale: float = 1.0) -> list[tuple[gemv.Gemv, object]]:
    """Two CPU stand-ins for timed kernels (fakes: the tiles are labels only), the second scaled by ``scale``."""
    return [(gemv.LINEAR, torch.nn.functional.linear),
            (gemv.Gemv("triton", 8, 512, 4), lambda x, w: torch.nn.functional.linear(x, w) * scale)]


def test_a_timed_choice_is_kept_and_taken_at_the_next_load_after_one_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """``fastest`` keeps what it timed; the next call with the same key returns it (``kept``) without timing,
    once its result matches; a kept choice that no longer matches, and an unreadable file, are timed again.
    ``_time_us`` is replaced by a fake (CUDA events do not exist here): 5 us for linear, 2 for the tile."""
    gen = torch.Generator().manual_seed(4)
    ws = [torch.randn(48, 32, generator=gen) for _ in range(2)]
    x = torch.randn(1, 32, generator=gen)
    ref = torch.nn.functional.linear(x, ws[0])
    timed: list[str] = []

    def fake_time_us(fn: object, weights: object, x: object) -> float:
        timed.append("x")
        return 5.0 if fn is torch.nn.functional.linear else 2.0

    monkeypatch.setattr(gemv, "_time_us", fake_time_us)
    kept = gemv.KeptChoices(tmp_path / "choices.json")
    first = gemv.fastest(_candidates(), ws, x, ref, 1e-5, (48, 32), kept=kept)
    assert first == (gemv.Gemv("triton", 8, 512, 4, 2.0), {"linear": 5.0, "triton 8x512/4w": 2.0})
    assert len(timed) == 2 and (tmp_path / "choices.json").exists()

    second = gemv.fastest(_candidates(), ws, x, ref, 1e-5, (48, 32), kept=gemv.KeptChoices(tmp_path / "choices.json"))
    assert second == (gemv.Gemv("triton", 8, 512, 4, 2.0, kept=True), first[1]) and len(timed) == 2

    # another weight count is another key: timed
    gemv.fastest(_candidates(), ws[:1], x, ref, 1e-5, (48, 32), kept=kept)
    assert len(timed) == 4

    caplog.set_level("WARNING", logger=gemv.log.name)
    wrong = gemv.fastest(_candidates(scale=2.0), ws, x, ref, 1e-5, (48, 32), kept=kept)
    assert wrong == (gemv.Gemv(us=5.0), {"linear": 5.0})  # the scaled tile is rejected
    assert "is not used (relative error" in caplog.text and len(timed) == 5

    (tmp_path / "choices.json").write_text("{not json")
    again = gemv.fastest(_candidates(), ws, x, ref, 1e-5, (48, 32), kept=kept)
    assert again[0].kept is False and "unreadable" in caplog.text and len(timed) == 7


def test_the_choice_key_names_what_the_timing_depends_on() -> None:
    w = torch.zeros(48, 32)
    x = torch.zeros(1, 32)
    key = gemv.choice_key(["linear"], [w, w], x, (48, 32))
    assert key == gemv.choice_key(["linear"], [w, w], x, (48, 32))
    assert len({key, gemv.choice_key(["linear", "triton 8x512/4w"], [w, w], x, (48, 32)),
                gemv.choice_key(["linear"], [w], x, (48, 32)), gemv.choice_key(["linear"], [w, w], x, (32, 48)),
                gemv.choice_key(["linear"], [w.bfloat16()] * 2, x, (48, 32)),
                gemv.choice_key(["linear"], [w, w], x.double(), (48, 32))}) == 6
    assert torch.__version__ in key


def test_reference_sums_in_float32_and_rounds_once() -> None:
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(64, 300, generator=gen).to(torch.bfloat16)
    x = torch.randn(1, 300, generator=gen).to(torch.bfloat16)
    exact = (x.double() @ w.double().t())
    out = gemv.gemv_reference(x, w)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, exact.float().to(torch.bfloat16))  # float32 sums of 300 terms: one rounding


def test_relu_square_is_the_product_of_the_activation() -> None:
    """``relu_square``: the product of ``relu(x)^2`` rounded to ``x``'s dtype, for F.linear and for a chosen
    kernel's spec that does not apply (a chunk of rows)."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(40, 64, generator=gen).to(torch.bfloat16)
    x = torch.randn(1, 64, generator=gen).to(torch.bfloat16)
    want = torch.nn.functional.linear(torch.square(torch.relu(x)), w)
    assert torch.equal(gemv.linear(x, w, None, relu_square=True), want)
    assert not torch.equal(gemv.linear(x, w, None), want)
    chunk = torch.randn(1, 3, 64, generator=gen).to(torch.bfloat16)
    want = torch.nn.functional.linear(torch.square(torch.relu(chunk)), w)
    assert torch.equal(gemv.linear(chunk, w, ("triton", 8, 512, 4), relu_square=True), want)


INTERPRETED_RELU_SQUARE = """
import json, torch
from holodesk.policy.holotron.ops import gemv
torch.set_num_threads(1)
gen = torch.Generator().manual_seed(4)
out = {}
for n, k, tile in ((24, 256, (8, 256, 4)), (13, 320, (4, 512, 4))):
    w = torch.randn(n, k, generator=gen)
    x = torch.randn(1, k, generator=gen)
    spec = gemv.Gemv("triton", *tile).spec()
    fused = gemv.linear(x, w, spec, relu_square=True)
    apart = gemv.linear(torch.square(torch.relu(x)), w, spec)
    out[f"{n}x{k}"] = [bool(torch.equal(fused, apart)), bool(torch.equal(gemv.linear(x, w, spec), fused))]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_interpreted_kernel_squares_x_as_a_separate_pass_would() -> None:
    """The real Triton kernel under Triton's interpreter (a child process: the interpreter is chosen when a
    kernel is defined): with ``relu_square`` it gives bit for bit what it gives for ``relu(x)^2`` computed
    apart, and not what it gives for ``x`` (an even and a ragged ``K``). In float32: the interpreter rounds
    float32 to bfloat16 toward zero where the GPU rounds to nearest even, so the bf16 rounding is checked
    on the GPU (``test_gpu_relu_square_kernel_equals_the_separate_pass_compiled_and_captured``)."""
    pytest.importorskip("triton")
    cases = run_interpreted(INTERPRETED_RELU_SQUARE, timeout=600)
    assert cases == {"24x256": [True, False], "13x320": [True, False]}, cases


def _captured(fn, static_x: torch.Tensor):  # type: ignore[no-untyped-def]
    """``fn(static_x)`` run once on a side stream (compiles and autotunes), then recorded as a CUDA graph;
    returns the graph and the output tensor its replays write."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(static_x)
    return graph, out


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
    # the next choice for the same weights is the kept one, checked once, not timed again
    again, kept_timings = gemv.choose([w, w2])
    assert again.kept and again.label() == how.label() and kept_timings == timings


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
    graph, out = _captured(compiled, static_x)
    static_x.copy_(torch.randn(1, 1024, generator=gen, device="cuda", dtype=torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, block(static_x))


@pytest.mark.gpu
@gpu
def test_gpu_relu_square_kernel_equals_the_separate_pass_compiled_and_captured() -> None:
    """The MLP's down product with the activation read into the kernel: bit for bit the kernel on
    ``relu(x)^2`` computed apart, for every tile, eagerly, compiled and replayed in a CUDA graph."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    w = torch.randn(5120, 20480, generator=gen, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 20480, generator=gen, device="cuda", dtype=torch.bfloat16)
    for bn, bk, nw in gemv.TRITON_TILES:
        spec = gemv.Gemv("triton", bn, bk, nw).spec()
        assert torch.equal(gemv.linear(x, w, spec, relu_square=True),
                           gemv.linear(torch.square(torch.relu(x)), w, spec)), (bn, bk, nw)
    spec = gemv.Gemv("triton", 4, 512, 4).spec()

    def block(a: torch.Tensor) -> torch.Tensor:
        return gemv.linear(a, w, spec, relu_square=True)

    compiled = torch.compile(block, dynamic=False, fullgraph=True)
    assert torch.equal(compiled(x), block(x))
    static_x = x.clone()
    graph, out = _captured(compiled, static_x)
    static_x.copy_(torch.randn(1, 20480, generator=gen, device="cuda", dtype=torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, gemv.linear(torch.square(torch.relu(static_x)), w, spec))
