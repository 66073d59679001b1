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


def test_family_without_a_known_published_config_says_so(tmp_path: Path) -> None:
    from holodesk.bench.native import published_config
    from holodesk.errors import ModelLoadError

    for key in ("qwen3_5", "qwen3_5_moe", "nemotron_h_omni"):
        with pytest.raises(ModelLoadError, match="not known") as err:
            published_config(key, None)
        assert "--config" in (err.value.hint or "")


def test_published_qwen3_vl_8b_builds_on_the_meta_device() -> None:
    """Holo2-8B's architecture (Qwen3-VL-8B) from the published values, no memory used: the model the GPU row
    measures, and the decode floor's bytes (bf16 decoder weights but the embedding table, and the head)."""
    import torch

    from holodesk.bench.families import QWEN3_VL_8B, full_size_model
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
