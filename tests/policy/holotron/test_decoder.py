"""StaticLM (static-state prefill/decode) against stock transformers NemotronH on a tiny fp32 model (CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers.models.nemotron_h")

from transformers import NemotronHConfig, NemotronHForCausalLM  # noqa: E402

from holodesk.policy.holotron.fast_decode import StaticLM, mamba_step_torch  # noqa: E402

PATTERN = "M*-M-M*-"  # Mamba-2, attention and MLP blocks, two attention layers
VOCAB = 256
STEPS = 40


def _tiny_lm(seed: int = 0) -> NemotronHForCausalLM:
    torch.manual_seed(seed)
    cfg = NemotronHConfig(
        vocab_size=VOCAB, hidden_size=64, hybrid_override_pattern=PATTERN,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=16, conv_kernel=4, chunk_size=16,
        intermediate_size=128, mlp_hidden_act="relu2", layer_norm_epsilon=1e-5, use_bias=False, use_conv_bias=True,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )
    lm = NemotronHForCausalLM(cfg).eval()
    with torch.no_grad():  # larger residual branches so every block moves the logits
        for name, p in lm.named_parameters():
            if name.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight")):
                p.mul_(3)
    return lm


def _prompt(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, n), generator=gen)  # no pad/bos/eos ids: generate() masks pad


def _static_greedy(s: StaticLM, lm: NemotronHForCausalLM, ids: torch.Tensor, keys: bool = False,
                   snapshot_at: tuple[int, ...] = ()) -> tuple[list[int], torch.Tensor]:
    with torch.no_grad():
        emb = lm.model.embeddings(ids)
    logits, _ = s.prefill(emb, ids[0].tolist() if keys else None, snapshot_at=snapshot_at)
    first = logits.argmax(-1, keepdim=True)
    s.token.copy_(first)
    tokens, all_logits = [int(first)], [logits.clone()]
    for _ in range(STEPS - 1):
        s.step()
        tokens.append(int(s.token))
        all_logits.append(s.logits.clone())
    return tokens, torch.cat(all_logits)


def _stock(lm: NemotronHForCausalLM, ids: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    with torch.no_grad():
        out = lm.generate(ids, max_new_tokens=STEPS, do_sample=False, output_logits=True,
                          return_dict_in_generate=True, eos_token_id=None, pad_token_id=0)
    return out.sequences[0, ids.shape[1]:].tolist(), torch.stack(out.logits, 1)[0]


@pytest.mark.parametrize("impl", ["dispatch", "torch"])
@pytest.mark.parametrize("chunk", [1000, 20])
def test_greedy_40_steps_equal_stock_generate(impl: str, chunk: int) -> None:
    lm = _tiny_lm()
    ids = _prompt(57, seed=1)
    ref_tokens, ref_logits = _stock(lm, ids)
    s = StaticLM(lm, max_len=128, bucket=32, chunk=chunk, impl=impl)
    tokens, logits = _static_greedy(s, lm, ids)
    assert tokens == ref_tokens
    err = (logits - ref_logits).norm() / ref_logits.norm()
    assert err < 1e-5, err
    assert s.length == 57 + STEPS - 1


def test_mamba_step_torch_matches_transformers_reference() -> None:
    lm = _tiny_lm(seed=3)
    layer = lm.model.layers[0]
    m = layer.mixer
    gen = torch.Generator().manual_seed(5)
    s_ref = StaticLM(lm, max_len=32, bucket=32, impl="dispatch")
    conv0 = torch.randn(s_ref.conv[0].shape, generator=gen)
    ssm0 = torch.randn(s_ref.ssm[0].shape, generator=gen)
    x = torch.randn(1, 1, 64, generator=gen)
    s_ref.conv[0].copy_(conv0)
    s_ref.ssm[0].copy_(ssm0)
    with torch.no_grad():
        ref = s_ref._mamba_decode(0, m, x)
        conv, ssm = conv0.clone(), ssm0.clone()
        out = mamba_step_torch(
            x[:, 0], m.in_proj.weight, m.conv1d.weight.squeeze(1), m.conv1d.bias, m.dt_bias,
            -torch.exp(m.A_log.float()), m.D, m.norm.weight, m.out_proj.weight, conv, ssm,
            (m.intermediate_size, m.conv_dim, m.num_heads, m.head_dim, m.n_groups, m.ssm_state_size),
            m.norm.variance_epsilon,
        )
    assert torch.allclose(out, ref[:, 0], rtol=1e-5, atol=1e-6)
    assert torch.allclose(conv, s_ref.conv[0], atol=1e-7)
    assert torch.allclose(ssm, s_ref.ssm[0], rtol=1e-5, atol=1e-6)


def test_incremental_prefill_reuses_prefix_and_equals_cold() -> None:
    lm = _tiny_lm(seed=2)
    first = _prompt(40, seed=7)
    extra = _prompt(25, seed=8)
    second = torch.cat([first, extra], dim=1)
    s = StaticLM(lm, max_len=160, bucket=32, chunk=16)
    _static_greedy(s, lm, first, keys=True, snapshot_at=(40,))
    with torch.no_grad():
        logits, report = s.prefill(lm.model.embeddings(second), second[0].tolist(), snapshot_at=(65,))
    assert report.reused == 40 and report.computed == 25
    cold = StaticLM(lm, max_len=160, bucket=32, chunk=16)
    with torch.no_grad():
        ref, _ = cold.prefill(lm.model.embeddings(second), None)
    assert torch.allclose(logits, ref, rtol=1e-5, atol=1e-5)


def test_changed_prefix_rebuilds_from_earlier_snapshot() -> None:
    lm = _tiny_lm(seed=4)
    base = _prompt(60, seed=9)
    s = StaticLM(lm, max_len=160, bucket=32, chunk=16, snapshot_slots=3)
    with torch.no_grad():
        s.prefill(lm.model.embeddings(base), base[0].tolist(), snapshot_at=(20, 45, 60))
    changed = base.clone()
    changed[0, 30:38] = _prompt(8, seed=10)[0]  # e.g. an old screenshot dropped out of the window
    with torch.no_grad():
        logits, report = s.prefill(lm.model.embeddings(changed), changed[0].tolist())
    assert report.reused == 20
    cold = StaticLM(lm, max_len=160, bucket=32, chunk=16)
    with torch.no_grad():
        ref, _ = cold.prefill(lm.model.embeddings(changed), None)
    assert torch.allclose(logits, ref, rtol=1e-5, atol=1e-5)
    assert sorted(s.snapshots) == [20]


def test_prompt_too_long_is_refused() -> None:
    lm = _tiny_lm()
    s = StaticLM(lm, max_len=32, bucket=32)
    with torch.no_grad(), pytest.raises(ValueError):
        s.prefill(lm.model.embeddings(_prompt(40, seed=1)), None)


def test_tail_embeddings_and_snapshot_cap() -> None:
    lm = _tiny_lm(seed=6)
    first = _prompt(48, seed=11)
    second = torch.cat([first, _prompt(20, seed=12)], dim=1)
    s = StaticLM(lm, max_len=160, bucket=32, chunk=16, snapshot_slots=2)
    with torch.no_grad():
        before = s.state_bytes()
        s.prefill(lm.model.embeddings(first), first[0].tolist(), snapshot_at=(10, 20, 30, 40, 48))
        assert s.state_bytes() == before  # snapshots go into preallocated slots
        assert sorted(s.snapshots) == [40, 48]
        resume = s.resume_point(second[0].tolist())
        assert resume == 48
        tail = lm.model.embeddings(second[:, resume:])
        logits, report = s.prefill(tail, second[0].tolist(), embeds_offset=resume)
        assert report.reused == 48 and report.computed == 20
        cold = StaticLM(lm, max_len=160, bucket=32, chunk=16)
        ref, _ = cold.prefill(lm.model.embeddings(second), None)
        assert torch.allclose(logits, ref, rtol=1e-5, atol=1e-5)
        with pytest.raises(ValueError):  # embeddings that start after the resume point cannot be run
            s.reset()
            s.prefill(tail, second[0].tolist(), embeds_offset=resume)


def test_fused_qkv_leaves_the_modules_and_stock_intact() -> None:
    lm = _tiny_lm(seed=8)
    ids = _prompt(38, seed=13)
    ref_tokens, ref_logits = _stock(lm, ids)
    q_before = lm.model.layers[1].mixer.q_proj.weight.detach().clone()
    s = StaticLM(lm, max_len=128, bucket=32, chunk=16, impl="torch")
    assert sorted(s._qkv) == [1, 6]  # the two attention blocks of "M*-M-M*-" (blocks 0-7: M * - M - M * -)
    # the projection modules now hold views of the fused weight: same values, stock path unchanged
    assert torch.equal(lm.model.layers[1].mixer.q_proj.weight, q_before)
    assert lm.model.layers[1].mixer.q_proj.weight.data_ptr() == s._qkv[1].data_ptr()
    assert _stock(lm, ids)[0] == ref_tokens
    tokens, logits = _static_greedy(s, lm, ids)
    assert tokens == ref_tokens
    assert torch.allclose(logits, ref_logits, rtol=1e-5, atol=1e-5)
