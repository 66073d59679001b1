"""Prefill operations (prefill_ops): the torch references on the CPU, the CUDA kernels against them on a GPU,
and StaticLM's fused prefill path against the stock block modules."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers.models.nemotron_h")

from holodesk.policy.holotron import prefill_ops  # noqa: E402
from holodesk.policy.holotron.fast_decode import StaticLM  # noqa: E402


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


def _tiny_lm(seed: int, dtype: torch.dtype = torch.float32, device: str = "cpu"):  # type: ignore[no-untyped-def]
    from transformers import NemotronHConfig, NemotronHForCausalLM

    torch.manual_seed(seed)
    cfg = NemotronHConfig(
        vocab_size=256, hidden_size=64, hybrid_override_pattern="M*-M-M*-",
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=16, conv_kernel=4, chunk_size=16,
        intermediate_size=128, mlp_hidden_act="relu2", layer_norm_epsilon=1e-5, use_bias=False,
        use_conv_bias=True, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    lm = NemotronHForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if name.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight")):
                p.mul_(3)
            if name.endswith("dt_bias"):  # steps of ~1 (softplus(0.5)), not ~0.02: padding would show
                p.fill_(0.5)
    return lm.to(device=device, dtype=dtype)


def _run_both(lm, device: str, cuts: tuple[int, ...]) -> tuple[StaticLM, StaticLM, list, list]:  # type: ignore[no-untyped-def]
    """Prefill the same prompt, cut at ``cuts`` (chunk boundaries of 1-3 tokens included), on both paths."""
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 256, (1, 61), generator=gen).to(device)
    with torch.no_grad():
        emb = lm.model.embeddings(ids)
    runs, logits = [], []
    for fused in (True, False):
        s = StaticLM(lm, max_len=128, bucket=32, chunk=16, fused_prefill=fused, snapshot_slots=len(cuts))
        with torch.no_grad():
            out, _ = s.prefill(emb, ids[0].tolist(), snapshot_at=cuts)
        runs.append(s)
        logits.append(out)
    return runs[0], runs[1], logits, list(ids[0].tolist())


def test_fused_prefill_path_equals_stock_blocks_on_cpu() -> None:
    lm = _tiny_lm(seed=5)
    fused, stock, logits, _ = _run_both(lm, "cpu", cuts=(1, 3, 17, 18, 33, 36))
    assert fused.fused_prefill and not stock.fused_prefill
    assert fused.prefill_kernels.startswith("holodesk torch path")
    assert stock.prefill_kernels.startswith("stock blocks")
    assert torch.allclose(logits[0], logits[1], rtol=1e-5, atol=1e-5)
    for i in fused.conv:
        assert torch.allclose(fused.conv[i], stock.conv[i], atol=1e-6)
        assert torch.allclose(fused.ssm[i], stock.ssm[i], rtol=1e-5, atol=1e-5)
    for i in fused.k:
        assert torch.allclose(fused.k[i][:, :, :61], stock.k[i][:, :, :61], rtol=1e-5, atol=1e-5)


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


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_fused_prefill_equals_stock_blocks(dtype: torch.dtype) -> None:
    assert prefill_ops.fused_available(torch.device("cuda")) is None
    lm = _tiny_lm(seed=5, dtype=dtype, device="cuda")
    fused, stock, logits, _ = _run_both(lm, "cuda", cuts=(1, 3, 17, 18, 33, 36))
    assert fused.prefill_kernels.startswith("fused") and stock.prefill_kernels.startswith("stock blocks")
    # half precision: all query heads in one flash call over the grouped KV heads (fp32: per-head loop)
    assert ("one flash call" in fused.prefill_kernels) == (dtype == torch.bfloat16), fused.prefill_kernels
    assert "failed" not in fused.prefill_kernels, fused.prefill_kernels
    err = (logits[0] - logits[1]).norm() / logits[1].norm()
    assert err < (1e-4 if dtype == torch.float32 else 3e-2), err


@pytest.mark.parametrize("length", [1, 2, 3, 4, 7, 9])
def test_conv_state_at_a_device_length_ignores_the_padding(length: int) -> None:
    x, state, weight, b = _conv_case(9)
    ref_state = state.clone()
    want = prefill_ops.causal_conv1d(x[:, :length].contiguous(), ref_state, weight, b)
    out = prefill_ops.causal_conv1d(x, state, weight, b, length=torch.tensor([length]))
    assert torch.equal(state, ref_state)
    assert torch.allclose(out[:, :length], want, atol=1e-6)  # real rows never read the padded ones


def _prefill_states(s: StaticLM, lm, ids: torch.Tensor, cuts: tuple[int, ...]) -> tuple:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        logits, _ = s.prefill(lm.model.embeddings(ids), ids[0].tolist(), snapshot_at=cuts)
    n = ids.shape[1]
    return (logits, [c.clone() for c in s.conv.values()], [t.clone() for t in s.ssm.values()],
            [k[:, :, :n].clone() for k in s.k.values()])


def test_padded_prefill_equals_unpadded_on_cpu() -> None:
    """Chunks padded to multiples of 8 rows in static buffers (the path the prefill graphs capture), with
    padded dt masked out of the scan and the conv state taken at the real length, give the unpadded state."""
    lm = _tiny_lm(seed=7)
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(3, 256, (1, 61), generator=gen)
    cuts = (1, 3, 17, 18, 33, 36)
    plain = StaticLM(lm, max_len=128, bucket=32, chunk=16, snapshot_slots=len(cuts))
    padded = StaticLM(lm, max_len=128, bucket=32, chunk=16, snapshot_slots=len(cuts), prefill_bucket=8)
    assert "padded to multiples of 8 rows, eager" in padded.prefill_kernels
    want = _prefill_states(plain, lm, ids, cuts)
    got = _prefill_states(padded, lm, ids, cuts)
    assert torch.allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    for a_list, b_list in zip(got[1:], want[1:], strict=True):
        for a, b in zip(a_list, b_list, strict=True):
            assert float((a - b).norm() / b.norm()) < 1e-5
    # a resumed prefill on top of the padded state (the episode case) equals a cold one
    longer = torch.cat([ids, torch.randint(3, 256, (1, 21), generator=gen)], dim=1)
    with torch.no_grad():
        resumed, report = padded.prefill(lm.model.embeddings(longer), longer[0].tolist())
        cold, _ = StaticLM(lm, max_len=128, bucket=32, chunk=16).prefill(lm.model.embeddings(longer), None)
    assert report.reused == 36
    assert torch.allclose(resumed, cold, rtol=1e-5, atol=1e-5)


def test_prefill_bucket_must_divide_the_chunk() -> None:
    with pytest.raises(ValueError, match="prefill_bucket"):
        StaticLM(_tiny_lm(seed=1), max_len=64, bucket=32, chunk=16, prefill_bucket=5)


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_prefill_graphs_equal_the_eager_path(dtype: torch.dtype) -> None:
    lm = _tiny_lm(seed=7, dtype=dtype, device="cuda")
    gen = torch.Generator().manual_seed(4)
    ids = torch.randint(3, 256, (1, 61), generator=gen).cuda()
    cuts = (1, 3, 17, 18, 33, 36)
    plain = StaticLM(lm, max_len=128, bucket=32, chunk=16, snapshot_slots=len(cuts))
    graphed = StaticLM(lm, max_len=128, bucket=32, chunk=16, snapshot_slots=len(cuts), prefill_bucket=8)
    assert graphed.capture_prefill_graphs() == [8, 16]
    assert "segments as CUDA graphs" in graphed.prefill_kernels
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for _ in range(2):  # replays twice: the graphs keep no state of their own
        want = _prefill_states(plain, lm, ids, cuts)
        got = _prefill_states(graphed, lm, ids, cuts)
        assert float((got[0] - want[0]).norm() / want[0].norm()) < tol
        for a, b in zip(got[2], want[2], strict=True):  # SSM states
            assert float((a - b).norm() / b.norm().clamp_min(1e-6)) < tol


def test_dropping_the_prefill_graphs_returns_to_unpadded_chunks() -> None:
    """What the engine does when capturing the prefill graphs fails: buffers freed, chunks at their own
    length again, same results."""
    lm = _tiny_lm(seed=7)
    ids = torch.randint(3, 256, (1, 40), generator=torch.Generator().manual_seed(5))
    s = StaticLM(lm, max_len=128, bucket=32, chunk=16, prefill_bucket=8)
    before = s.state_bytes()
    s.drop_prefill_graphs()
    assert s.prefill_bucket == 0 and s._pbuf_h is None and "padded" not in s.prefill_kernels
    assert s.state_bytes() == before - 3 * 16 * 64 * 4  # three [1, chunk, hidden] float32 buffers
    want = _prefill_states(StaticLM(lm, max_len=128, bucket=32, chunk=16), lm, ids, ())
    got = _prefill_states(s, lm, ids, ())
    assert torch.equal(got[0], want[0])
