"""``holodesk bench`` on the CPU with the tiny random model: the CI smoke run (no timing is asserted), the
folded product path (``--product``), and the random models' shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_cli_imports_without_torch() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import holodesk.bench.cli as b\n"
        "print(b.main(['--device', 'cpu', '--tiny']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PYTHONPATH": str(ROOT / "app")})
    assert out.stdout.strip() == "2"  # the exit status that says the local runtime is missing
    assert "the local runtime is not installed" in out.stderr


def _bench(tmp_path: Path, *extra: str, device: str = "cpu") -> dict[str, Any]:
    from holodesk.bench.cli import main

    out = tmp_path / "bench.json"
    status = main(["--device", device, "--tiny", "--prompt-tokens", "40", "--reply-tokens", "8", "--repeats", "1",
                   "--history-size", "1280x720", "--json", str(out), *extra])
    assert status == 0
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["checks_failed"] == []
    return result


@pytest.mark.slow
def test_tiny_cpu_bench_writes_json(tmp_path: Path) -> None:
    pytest.importorskip("transformers.models.nemotron_h_omni")
    result = _bench(tmp_path, "--sizes", "1280x720", "--history", "1,2", "--episode-steps", "2",
                    "--episode-warmup", "0", "--episode-repeats", "1", "--think-tokens", "24")
    assert result["device"] == "cpu" and result["dtype"] == "float32" and result["tiny"] is True
    assert result["kernels"]["fast_path"] is False  # no CUDA here: the report must say so
    assert set(result["kernels"]["functions"]) >= {"mamba_chunk_scan_combined", "selective_state_update"}
    assert result["engine"]["decoder"] == "static"
    assert result["floors"]["copy_GBps"] is None  # floors are measured on CUDA only
    frame = result["frames"][0]
    assert frame["size"] == "1280x720" and frame["tiles"] == 3
    assert frame["prompt_tokens"] == 40 + 30 + 2 + 3 * 256 + 8  # text, step text, <img></img>, image, header
    for key in ("preprocess_ms", "vision_ms", "prefill_ms", "decode_ms", "decode_ms_per_token", "ttfa_ms"):
        assert frame[key] > 0
    assert frame["reused_tokens"] == 0 and frame["prefill_tokens"] == frame["prompt_tokens"]
    assert frame["model_steps"] == 8 - 1  # the last token is not fed back: nothing reads its logits
    # the agent-loop reply (the script, else checks_failed) with one model step per token, then jump-forward
    agent = result["agent_reply"]
    off, on = agent["rows"]
    assert (off["jump_forward"], on["jump_forward"]) == (False, True) and agent["size"] == "1280x720"
    assert off["reply_tokens"] == on["reply_tokens"] > 100  # the tiny tokenizer spends many tokens
    assert off["forced_tokens"] == on["forced_tokens"] > 0
    assert off["model_steps"] == off["reply_tokens"] - 1  # after "}}" only the stop token is allowed: not fed
    assert on["model_steps"] < off["model_steps"] and agent["steps_saved"] >= 0.25
    # the reasoning-length step: a thought of at most 24 tokens (the model's, until the budget forces </think>),
    # then the agent reply, with jump-forward
    reasoning = result["reasoning"]
    assert reasoning["text_ok"] is True and 1 <= reasoning["thought_tokens"] <= 24
    assert reasoning["reply_tokens"] == reasoning["thought_tokens"] + 1 + on["reply_tokens"]  # + </think>
    assert 0 < reasoning["model_steps_per_token"] < 1 and reasoning["decode_ms_per_step"] > 0
    assert reasoning["floor_ms"] is None  # no floors on the CPU
    sampled = reasoning["sampled"]  # the same steps with the thought sampled under the nucleus cut
    assert sampled["text_ok"] is True and 1 <= sampled["thought_tokens"] <= 24 and sampled["top_p"] == 0.95
    assert sampled["model_steps"] > 0 and sampled["decode_ms_per_step"] > 0 and sampled["over_floor"] is None
    assert [h["screenshots"] for h in result["history_cold"]] == [1, 2]
    assert [h["images_encoded"] for h in result["history_cold"]] == [1, 2]  # cold: every screenshot encoded
    first, second = result["episode"]
    assert first["reused_tokens"] == 0
    # incremental prefill: step 2 resumes where step 1's prompt ended before the header
    assert second["reused_tokens"] == first["prompt_tokens"] - 8
    assert second["prefill_tokens"] == second["prompt_tokens"] - second["reused_tokens"]
    stock = result["stock"]
    agreement = stock["agreement"]
    assert stock["prompt_tokens"] == frame["prompt_tokens"]
    assert agreement["tokens_equal"] == agreement["n"] == 8  # fp32: static decoder == stock decoder
    assert agreement["first_logits_rel_err"] < 1e-4


@pytest.mark.slow
def test_tiny_cpu_bench_product_path(tmp_path: Path) -> None:
    """``--product``: HolotronPolicy.propose at 1080p (9 tiles, 2304 image tokens, checked by the bench),
    one step with three screenshots, an episode that resumes from the previous step, and a second task that
    resumes after the system prompt."""
    pytest.importorskip("transformers.models.nemotron_h_omni")
    pytest.importorskip("xgrammar")
    result = _bench(tmp_path, "--sizes", "", "--history", "", "--episode-steps", "0", "--no-stock", "--product",
                    "--product-repeats", "1", "--product-steps", "2")
    product = result["product"]
    assert product["decoder"]["decoder"] == "static"
    (one,) = product["one_screenshot"]
    assert one["tiles"] == [9] and one["image_tokens"] == 2304 and one["decoder"] == "static"
    assert one["generated_tokens"] > 0 and one["timings_ms"]["prefill"] > 0
    assert abs(one["outside_stages_ms"] - (one["wall_ms"] - sum(one["timings_ms"].values()))) <= 0.31  # six roundings
    assert 0 <= one["outside_stages_ms"] < one["wall_ms"]
    assert isinstance(one["gc_full"], int) and 0 <= one["gc_ms"] < one["wall_ms"]
    assert one["graphs_recorded"] == 0 and one["graphs_recorded_ms"] == 0  # the CPU records no CUDA graphs
    assert product["recorded_ahead"]["count"] == product["recorded_ahead"]["pending"] == 0  # nor ahead
    assert 0 <= product["recorded_ahead"]["wait_s"] < 5 and product["ahead_captures"]["count"] == 0
    assert one["forced_tokens"] > 0 and 0 < one["model_steps"] < one["generated_tokens"] - one["forced_tokens"] + 1
    assert product["three_screenshots"]["images"] == 3
    assert product["three_screenshots"]["image_tokens"] == 3 * 2304
    first, second = product["episode"]
    assert first["images"] == 1 and second["images"] == 2
    assert second["reused_tokens"] > 0  # the first screenshot stayed in the prompt: its prefix was reused
    assert second["images_encoded"] == 1
    # another task resumes after the system prompt (the same for every task), from a kept snapshot
    following = product["next_task"]
    assert 0 < following["reused_tokens"] < following["prompt_tokens"] - 2304
    assert following["reused_tokens"] in product["snapshots"]["positions"]
    assert product["snapshots"]["slots"] == 3 and product["snapshots"]["bytes"] > 0
    assert first["floor_ms"] is None and first["over_floor"] is None  # no floors measured on the CPU
    assert first["sampling"]["greedy"] is True and second["step_seed"] == first["step_seed"] + 1


@pytest.mark.gpu
def test_gpu_tiny_bench_measures_floors_and_ratios(tmp_path: Path) -> None:
    """On CUDA: the floors are measured, the engine captures its graphs without a note, every ratio to a
    floor is computed, the kernel profile is taken, the Mamba-2 kernels are live (else ``checks_failed`` and
    exit status 1), and in float32 the static decoder's reply equals the stock decoder's."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    result = _bench(tmp_path, "--dtype", "float32", "--sizes", "1920x1080", "--history", "1,2", "--history-size",
                    "1920x1080", "--episode-steps", "2", "--episode-warmup", "0", "--episode-repeats", "1",
                    "--profile", device="cuda")
    assert result["kernels"]["fast_path"] is True
    assert result["floors"]["copy_GBps"] > 0 and result["floors"]["matmul_TFLOPs"] > 0
    engine = result["engine"]
    assert engine["decode_graphs"] and engine["notes"] == [] and engine["eager"] is False
    (frame,) = result["frames"]
    assert frame["tiles"] == 9 and frame["ttfa_over_floor"] > 0 and frame["decode_fraction_of_floor"] > 0
    assert all(h["peak_over_weights_bytes"] > 0 for h in result["history_cold"])
    assert result["episode"][1]["reused_tokens"] == result["episode"][0]["prompt_tokens"] - 8
    agreement = result["stock"]["agreement"]
    assert agreement["tokens_equal"] == agreement["n"] == 8
    assert result["profile"]["kernel_launches"] > 0 and result["profile"]["top"]
    gaps = result["profile"]["gaps"]
    assert 0 < gaps["idle_us"] < gaps["span_us"] and len(result["profile"]["kernels"]) >= len(result["profile"]["top"])


def test_kernel_gaps_splits_idle_time_by_gap_length() -> None:
    """A fake profile (kernel and CPU events as plain objects; the real one needs a GPU): overlapping kernels
    count once, CPU events are ignored, gaps up to 5 us and longer ones are summed apart, and the longer ones
    by the kernels on either side (the one ending last before the gap, not one nested inside it)."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from holodesk.bench.profiling import kernel_gaps

    def event(start: float, end: float, device: Any, name: str = "k") -> SimpleNamespace:
        return SimpleNamespace(time_range=SimpleNamespace(start=start, end=end), device_type=device, name=name)

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [event(0, 10, cuda, "a"), event(5, 12, cuda, "b"), event(1, 3, cuda, "inside"), event(14, 20, cuda, "c"),
              event(100, 110, cuda, "argmax"), event(0, 500, cpu), event(130, 140, cuda, "gemv"),
              event(150, 160, cuda, "argmax"), event(180, 190, cuda, "gemv")]
    gaps = kernel_gaps(SimpleNamespace(events=lambda: events))
    assert gaps == {"span_us": 190, "idle_us": 132, "idle_in_gaps_upto_5us": 2, "idle_in_gaps_over_5us": 130,
                    "gaps_over_5us": 4,
                    "where": [{"after": "c", "before": "argmax", "gaps": 1, "us": 80},
                              {"after": "argmax", "before": "gemv", "gaps": 2, "us": 40},
                              {"after": "gemv", "before": "argmax", "gaps": 1, "us": 10}]}
    assert kernel_gaps(SimpleNamespace(events=lambda: [event(0, 5, cpu)])) == {}


def _mixers(model: Any) -> dict[str, int]:
    return dict(Counter(type(layer.mixer).__name__ for layer in model.language_model.model.layers))


def test_full_size_random_model_has_holotron_12b_shape() -> None:
    """The bench's full-size model (config through the loader's translation, built on the meta device: no
    memory) has Holotron-12B's parameter count and blocks."""
    pytest.importorskip("transformers.models.nemotron_h_omni")
    import torch

    from holodesk.bench.model import FULL, build_random_model, random_config

    model = build_random_model(random_config(FULL).config, torch.device("meta"), torch.bfloat16, seed=0)
    assert sum(p.numel() for p in model.parameters()) == 13_173_412_352
    assert _mixers(model) == {"NemotronHMamba2Mixer": 28, "NemotronHAttention": 6, "NemotronHMLP": 28}
    assert len(model.vision_model.encoder.layer) == 32
    assert model.config.text_config.num_hidden_layers == 62
    assert next(model.parameters()).dtype == torch.bfloat16


def test_random_model_pattern_override_sets_depth() -> None:
    pytest.importorskip("transformers.models.nemotron_h_omni")
    import torch

    from holodesk.bench.model import FULL, build_random_model, random_config

    model = build_random_model(random_config(FULL, "M*-M-").config, torch.device("meta"), torch.bfloat16, seed=0)
    text = model.config.text_config
    assert text.hybrid_override_pattern == "M*-M-" and text.num_hidden_layers == 5
    assert _mixers(model) == {"NemotronHMamba2Mixer": 2, "NemotronHAttention": 1, "NemotronHMLP": 2}
    assert sum(p.numel() for p in model.parameters()) == 3_024_963_328


def test_tiny_random_config_uses_the_stand_in_image_token() -> None:
    pytest.importorskip("transformers.models.nemotron_h_omni")
    from holodesk.bench.model import STAND_IN_IDS, TINY, random_config

    config, info, raw = random_config(TINY)
    assert config.image_token_id == info.image_token_id == raw["img_context_token_id"] == STAND_IN_IDS["image"]
    assert (config.text_config.vocab_size, config.text_config.hidden_size, config.text_config.head_dim) == (512, 64, 16)
    assert (config.vision_config.hidden_size, config.vision_config.num_hidden_layers) == (32, 2)
    assert config.vision_config.max_img_size == 512 and info.num_prefix_tokens == 8


def test_random_loaded_takes_tiling_and_normalisation_from_the_config(tmp_path: Path) -> None:
    """The LoadedHolotron of random weights reads its tile settings, normalisation and special ids the way
    the loader does (from the checkpoint facts and the tokenizer), not from constants of the bench."""
    pytest.importorskip("transformers.models.nemotron_h_omni")
    import torch

    from holodesk.bench.model import random_loaded

    loaded = random_loaded(tiny=True, device=torch.device("cpu"), dtype=torch.float32, seed=0, workdir=tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert loaded.mean == tuple(raw["norm_mean"]) and loaded.std == tuple(raw["norm_std"])
    assert (loaded.info.tile_size, loaded.info.max_tiles) == (raw["force_image_size"], raw["max_num_tiles"])
    vocab = loaded.tokenizer.get_vocab()
    assert loaded.image_token_id == vocab["<image>"] == raw["img_context_token_id"]
    assert loaded.eos_ids == (vocab["<SPECIAL_12>"],) and loaded.think_end_id == vocab["</think>"]


def test_quant_modes_are_checked() -> None:
    from holodesk.bench.cli import parse_args

    assert parse_args(["--quant", "bf16,8bit,4bit"]).quant == "bf16,8bit,4bit"
    with pytest.raises(SystemExit):
        parse_args(["--quant", "4bit,nf4"])


def test_decode_floor_counts_the_quantised_bytes_read() -> None:
    """A quantised model's decode bytes are its weights as stored plus the statistics the kernels read with
    them (absmax, nested absmax, code tables, int8 row scales), which are not parameters."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed (pip install 'holodesk[quant]')")
    from holodesk.bench.floors import decode_step_bytes, param_bytes, quant_state_bytes
    from holodesk.bench.model import random_loaded
    from holodesk.policy.holotron.ops import quant

    cpu = torch.device("cpu")
    plain = random_loaded(tiny=True, device=cpu, dtype=torch.float32, seed=0)
    assert quant_state_bytes(plain.model) == 0
    for mode in ("4bit", "8bit"):
        q = random_loaded(tiny=True, device=cpu, dtype=torch.float32, seed=0, quantization=mode)
        lm, lm0 = q.model.language_model, plain.model.language_model
        bnb_layers = [m for m in lm.modules() if type(m).__name__ in ("Linear4bit", "Linear8bitLt")]
        layers = [m for m in lm.modules() if quant.quant_weight(m) is not None]
        assert layers == bnb_layers and len(layers) >= 10  # the kernels read every quantised linear
        read = sum(quant.nbytes(s) for s in map(quant.quant_weight, layers) if s is not None)
        weights = sum(m.weight.numel() * m.weight.element_size() for m in layers)
        assert quant_state_bytes(lm) == read - weights > 0
        grown = decode_step_bytes(q, 100) - decode_step_bytes(plain, 100)
        assert grown == param_bytes(lm) + quant_state_bytes(lm) - param_bytes(lm0) < 0  # fewer bytes than fp32


@pytest.mark.slow
def test_tiny_cpu_bench_quant_rows_side_by_side(tmp_path: Path) -> None:
    pytest.importorskip("transformers.models.nemotron_h_omni")
    result = _bench(tmp_path, "--sizes", "", "--history", "", "--episode-steps", "0", "--no-stock",
                    "--quant", "bf16,4bit", "--think-tokens", "16")
    rows = result["quant"]
    assert rows["4bit"] == {"error": "bitsandbytes needs CUDA"}
    bf16 = rows["bf16"]
    assert bf16["decode_ms_per_token"] > 0 and bf16["ttfa_ms"] > 0 and bf16["decode_bytes_per_token"] > 0
    assert bf16["decode_floor_ms"] is None and bf16["decode_fraction_of_floor"] is None  # no floors on the CPU
    assert bf16["vs_bf16"]["tokens_equal"] == bf16["vs_bf16"]["n"] == 8  # the same weights, rebuilt
    assert list(rows["side_by_side"]) == ["bf16"]
    assert set(rows["side_by_side"]["bf16"]) == {"decode_ms_per_token", "decode_floor_ms", "decode_fraction_of_floor",
                                                 "ttfa_ms", "peak_total_bytes", "reasoning"}
    reasoning = rows["side_by_side"]["bf16"]["reasoning"]  # the 16-token thought plus the action, per mode
    assert reasoning == bf16["reasoning"] and reasoning["text_ok"] is True and 1 <= reasoning["thought_tokens"] <= 16
    assert 0 < reasoning["model_steps_per_token"] < 1 and reasoning["floor_ms"] is None


def test_collections_counts_the_garbage_collections_while_entered() -> None:
    import gc

    from holodesk.bench.product import Collections

    with Collections() as seen:
        gc.collect(2)
        gc.collect(0)
    gc.collect(2)  # after the exit: not counted
    assert seen.by_generation[2][0] == 1 and seen.by_generation[0][0] == 1
    assert seen.ms == sum(ms for _n, ms in seen.by_generation.values()) and seen.ms > 0
    assert seen._watch not in gc.callbacks
