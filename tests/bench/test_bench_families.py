"""``holodesk bench --family``: the native families' bench row, on the CPU with tiny dimensions through the
same code path as the full size (``--config`` with a tiny config.json), and the published config on the meta
device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _bench(tmp_path: Path, *args: str) -> dict[str, Any]:
    from holodesk.bench.cli import main

    out = tmp_path / "bench.json"
    status = main(["--device", "cpu", "--reply-tokens", "6", "--repeats", "1", "--json", str(out), *args])
    assert status == 0
    result: dict[str, Any] = json.loads(out.read_text())
    assert result["checks_failed"] == []
    return result


@pytest.mark.slow
def test_full_size_path_with_a_given_config_reports_the_row(tmp_path: Path) -> None:
    """The full-size branch (random model built from a config.json, the published pixel budget) with a tiny
    config: a 1080p screenshot gets Qwen3-VL's real image token count, and every figure of the row is there."""
    from holodesk.bench.families import write_family_checkpoint

    config = write_family_checkpoint(tmp_path / "tiny", "qwen3_vl") / "config.json"
    row = _bench(tmp_path, "--family", "qwen3_vl", "--config", str(config))["family_row"]
    assert row["family"] == "qwen3_vl" and row["frame"] == "1920x1080"
    assert row["runtime"]["class"] == "Qwen3VLForConditionalGeneration" and row["runtime"]["cache"] == "static"
    # 1920 x 1080 -> 1920 x 1088 in 32-pixel merged patches: 60 x 34 image tokens, plus the text
    assert row["prompt_tokens"] > 60 * 34
    (step,) = row["steps"]
    assert step["generated_tokens"] == 6  # fixed-length replies: no stop token
    assert row["ttfa_ms"] > 0 and row["prefill_ms"] > 0 and row["decode_ms_per_token"] > 0
    weights = row["weights_bytes"]
    assert weights["total"] > weights["language_model"] > 0 and weights["vision"] > 0
    assert row["decode_step_bytes"] > 0
    assert row["decode_floor_ms_per_token"] is None  # floors are measured on CUDA only


@pytest.mark.slow
def test_tiny_family_bench_loads_through_the_checkpoint_path(tmp_path: Path) -> None:
    row = _bench(tmp_path, "--family", "qwen3_5_moe", "--tiny", "--history-size", "1280x720")["family_row"]
    assert row["runtime"]["class"] == "Qwen3_5MoeForConditionalGeneration" and row["frame"] == "1280x720"
    assert row["decode_ms_per_token"] > 0 and row["steps"][0]["generated_tokens"] == 6


def test_family_without_a_known_full_size_config_says_so(tmp_path: Path) -> None:
    from holodesk.bench.native import published_config
    from holodesk.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="not known") as err:
        published_config("qwen3_5", None)
    assert "--config" in (err.value.hint or "")


def test_family_lists() -> None:
    from holodesk.bench.cli import parse_args
    from holodesk.bench.native import family_keys
    from holodesk.errors import ModelLoadError

    assert family_keys("all") == ["qwen3_vl", "qwen3_5_moe", "nemotron_h_omni"]  # those with a full-size config
    assert family_keys("nemotron_h_omni, qwen3_5") == ["nemotron_h_omni", "qwen3_5"]
    with pytest.raises(ModelLoadError, match="Holotron bench"):
        family_keys("qwen3_vl,holotron")
    assert parse_args(["--family", "qwen3_vl,qwen3_5_moe"]).family == "qwen3_vl,qwen3_5_moe"
    with pytest.raises(SystemExit):
        parse_args(["--family", "qwen3_vl,llama"])


def _shrunk(key: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (a full-size config of family ``key``) with tiny widths and depths, the same classes and
    layer kinds: the full-size bench path on the CPU."""
    text, vision = config["text_config"], config["vision_config"]
    text.update(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    if key == "qwen3_vl":
        text.update(intermediate_size=128, num_hidden_layers=2)
        text["rope_scaling"]["mrope_section"] = [4, 2, 2]
        vision.update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                      deepstack_visual_indexes=[1])
    elif key == "qwen3_5_moe":
        text.update(num_hidden_layers=4, layer_types=["linear_attention"] * 3 + ["full_attention"],
                    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                    linear_value_head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                    shared_expert_intermediate_size=32)
        text["rope_parameters"].update(mrope_section=[1, 1, 0], mrope_interleaved=True)
        vision.update(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)
    else:
        text.update(hybrid_override_pattern="MEM*E", mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16,
                    n_groups=2, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                    moe_shared_expert_intermediate_size=32, intermediate_size=64)
        vision.update(hidden_size=32, num_hidden_layers=2, num_attention_heads=2)
        config.update(projector_hidden_size=128, vision_hidden_size=32)
    return config


@pytest.mark.slow
def test_all_families_run_one_after_another_through_the_full_size_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--family all``: every family with a full-size config, in one process, through the full-size branch
    (the config built on the device, the published pixel budget: a 1080p screenshot gets the real image token
    count), here with the full-size configs shrunk to tiny widths on the CPU."""
    from holodesk.bench import full_size, native

    shrunk = {key: (lambda key=key, build=build: _shrunk(key, build()))
              for key, build in full_size.FULL_SIZE.items() if build is not None}
    monkeypatch.setattr(native, "FULL_SIZE", {**full_size.FULL_SIZE, **shrunk})
    result = _bench(tmp_path, "--family", "all", "--reply-tokens", "3")
    rows = result["family_rows"]
    assert list(rows) == ["qwen3_vl", "qwen3_5_moe", "nemotron_h_omni"]
    classes = {"qwen3_vl": "Qwen3VLForConditionalGeneration", "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
               "nemotron_h_omni": "NemotronH_Omni_Reasoning_V3"}
    for key, row in rows.items():
        assert "error" not in row, row
        assert row["runtime"]["class"] == classes[key] and row["runtime"]["compiled"] is False
        assert row["image_tokens"] == 60 * 34  # 1920 x 1080: 60 x 34 merged patches (Omni: 120 x 68 / 4)
        assert row["prompt_tokens"] == row["image_tokens"] + row["text_tokens"] and row["prompt_text_chars"] > 0
        assert row["steps"][0]["generated_tokens"] == 3
        assert row["ttfa_ms"] > 0 and row["decode_ms_per_token"] > 0 and row["build_s"] > 0
        assert row["parameters"] > 0 and row["first_call_s"] > 0


def test_published_qwen3_vl_8b_builds_on_the_meta_device() -> None:
    """Holo2-8B's architecture (Qwen3-VL-8B) from the published values, no memory used: the model the GPU row
    measures, and the decode floor's bytes (bf16 decoder weights but the embedding table, and the head)."""
    import torch

    from holodesk.bench.full_size import QWEN3_VL_8B, full_size_model
    from holodesk.bench.native import decode_step_bytes

    model = full_size_model(QWEN3_VL_8B, torch.device("meta"), torch.bfloat16)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert len(model.model.language_model.layers) == 36 and len(model.model.visual.blocks) == 27
    params = sum(p.numel() for p in model.parameters())
    assert round(params / 1e9, 2) == 8.77
    embedding = 151936 * 4096
    lm = sum(p.numel() for p in model.model.language_model.parameters())
    kv = 36 * 2 * 8 * 128 * 2 * 1000
    assert decode_step_bytes(model, 1000) == 2 * (lm - embedding) + 2 * 4096 + 2 * embedding + kv


@pytest.mark.parametrize(("key", "billions", "layers", "registry"), [
    ("qwen3_5_moe", 35.11, 40, "holo3-35b-a3b"), ("nemotron_h_omni", 32.39, 52, "holotron-3-nano")])
def test_full_size_configs_build_on_the_meta_device(key: str, billions: float, layers: int, registry: str) -> None:
    """Holo3-35B-A3B's base (Qwen3.5-35B-A3B, transformers' documented defaults) and Holotron-3-Nano's backbone
    (Nemotron 3 Nano Omni without its sound encoder) built without memory: class, depth, parameters, and the
    model registry's parameter count agrees (to the hub's whole billions; the Omni with its sound encoder)."""
    import torch

    from holodesk.bench.full_size import (
        FULL_SIZE,
        NEMOTRON_3_NANO_PATTERN,
        PARAKEET_ENCODER_PARAMETERS,
        full_size_model,
    )
    from holodesk.policy.models import get_model
    from holodesk.policy.native.families import family_of

    config = FULL_SIZE[key]()  # type: ignore[misc]  # both are known
    assert family_of(config).key == key  # the dispatch rule takes it as that family
    model = full_size_model(config, torch.device("meta"), torch.bfloat16)
    decoder = model.get_decoder()
    assert len(decoder.layers if hasattr(decoder, "layers") else decoder.model.layers) == layers
    params = sum(p.numel() for p in model.parameters())
    sound = 0
    if key == "nemotron_h_omni":  # the sound encoder the row leaves out, with the transcribed dimensions
        from transformers import AutoConfig, AutoModel

        encoder = AutoConfig.for_model("parakeet_encoder", hidden_size=1024, num_attention_heads=8,
                                       num_hidden_layers=24, intermediate_size=4096, subsampling_factor=8,
                                       num_mel_bins=128, attention_bias=False, scale_input=False)
        with torch.device("meta"):
            sound = sum(p.numel() for p in AutoModel.from_config(encoder).parameters())
        assert sound == PARAKEET_ENCODER_PARAMETERS
    spec = get_model(registry)
    assert spec.architecture.model_type == key
    assert round((params + sound) / 1e9) * 1e9 == spec.parameters
    assert round(params / 1e9, 2) == billions
    text = model.config.get_text_config()
    if key == "qwen3_5_moe":
        assert (text.hidden_size, text.num_experts, text.num_experts_per_tok) == (2048, 256, 8)
        assert model.config.vision_config.out_hidden_size == 2048
    else:
        assert (text.hidden_size, text.n_routed_experts, text.num_experts_per_tok) == (2688, 128, 6)
        assert NEMOTRON_3_NANO_PATTERN.count("M") == 23 and NEMOTRON_3_NANO_PATTERN.count("*") == 6
        symbols = {"linear_attention": "M", "moe": "E", "full_attention": "*"}  # transformers' names of M, E, *
        assert "".join(symbols.get(k, "?") for k in text.layers_block_type) == NEMOTRON_3_NANO_PATTERN


@pytest.mark.slow
def test_a_failing_family_is_recorded_and_the_next_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from holodesk.bench import full_size, native
    from holodesk.bench.cli import main

    def tiny_qwen3_vl() -> dict[str, Any]:
        return _shrunk("qwen3_vl", json.loads(json.dumps(full_size.QWEN3_VL_8B)))

    monkeypatch.setattr(native, "FULL_SIZE", {**full_size.FULL_SIZE, "qwen3_vl": tiny_qwen3_vl})
    out = tmp_path / "bench.json"
    status = main(["--device", "cpu", "--reply-tokens", "2", "--repeats", "1", "--json", str(out),
                   "--family", "qwen3_5,qwen3_vl"])
    result = json.loads(out.read_text())
    assert status == 1  # a failed family is a failed check
    rows = result["family_rows"]
    assert "not known" in rows["qwen3_5"]["error"] and result["checks_failed"][0].startswith("--family qwen3_5")
    assert "error" not in rows["qwen3_vl"] and rows["qwen3_vl"]["image_tokens"] == 60 * 34


@pytest.mark.parametrize("builder", ["write_family_checkpoint", "full_size_model", "build_random_model"])
def test_building_a_nemotron_h_model_prepares_the_kernels_first(tmp_path: Path, builder: str) -> None:
    """Each bench builder of a Nemotron-H model (the tiny Omni checkpoint, the full-size Omni row on the meta
    device, the random Holotron-12B at tiny size) prepares mamba-ssm's kernels before transformers imports
    NemotronH, so a Holotron-12B loaded later in the same process (a bench run, a test session) gets its Mamba-2
    kernels (a fresh process: the order of imports is what is checked)."""
    import subprocess
    import sys

    code = f"""
import sys
from pathlib import Path
builder = {builder!r}
if builder == "write_family_checkpoint":
    from holodesk.bench.families import write_family_checkpoint
    write_family_checkpoint(Path({str(tmp_path)!r}) / "omni", "nemotron_h_omni")
elif builder == "full_size_model":
    import torch
    from holodesk.bench.full_size import FULL_SIZE, full_size_model
    full_size_model(FULL_SIZE["nemotron_h_omni"](), torch.device("meta"), torch.bfloat16)
else:
    import torch
    from holodesk.bench.model import TINY, build_random_model, random_config
    build_random_model(random_config(TINY).config, torch.device("cpu"), torch.float32, 0)
assert "transformers.models.nemotron_h.modeling_nemotron_h" in sys.modules
from holodesk.policy.holotron.kernels import kernel_report
print("prepared before transformers:", kernel_report()["prepared_before_transformers"])
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "prepared before transformers: True" in res.stdout, res.stdout + res.stderr[-2000:]
