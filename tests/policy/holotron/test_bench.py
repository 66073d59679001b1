"""``holodesk bench --device cpu --tiny``: the CI smoke run of the benchmark (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def test_bench_module_imports_without_torch() -> None:
    code = (
        "import sys, holodesk.policy.holotron.bench as b; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; print(b.main.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3], env={"PYTHONPATH": "app"})
    assert out.stdout.strip() == "main"


@pytest.mark.slow
def test_tiny_cpu_bench_writes_json(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers.models.nemotron_h_omni")
    from holodesk.policy.holotron.bench import main

    out = tmp_path / "bench.json"
    status = main(["--device", "cpu", "--tiny", "--sizes", "1280x720", "--history", "1,2", "--history-size", "1280x720",
                   "--episode-steps", "2", "--repeats", "1", "--prompt-tokens", "40", "--reply-tokens", "8",
                   "--json", str(out)])
    assert status == 0
    result = json.loads(out.read_text())
    assert result["device"] and result["dtype"] == "float32" and result["tiny"] is True
    assert result["kernels"]["fast_path"] is False  # no CUDA here: the report must say so
    assert set(result["kernels"]["functions"]) >= {"mamba_chunk_scan_combined", "selective_state_update"}
    frame = result["frames"][0]
    assert frame["size"] == "1280x720" and frame["tiles"] == 3
    assert frame["prompt_tokens"] == 40 + 30 + 3 * 256 + 8
    for key in ("preprocess_ms", "vision_ms", "prefill_ms", "decode_ms", "decode_ms_per_token", "ttfa_ms"):
        assert frame[key] > 0
    assert [h["screenshots"] for h in result["history_cold"]] == [1, 2]
    first, second = result["episode"]
    assert first["reused_tokens"] == 0
    assert second["reused_tokens"] == first["prompt_tokens"] - 8  # incremental prefill resumed at the snapshot
    agreement = result["stock"]["agreement"]
    assert agreement["tokens_equal"] == agreement["n"] == 8  # fp32: fast path == stock generate()
    assert agreement["first_logits_rel_err"] < 1e-5


def _mixers(model: Any) -> dict[str, int]:
    from collections import Counter

    return dict(Counter(type(layer.mixer).__name__ for layer in model.language_model.model.layers))


def test_full_size_random_model_has_holotron_12b_shape() -> None:
    """The bench's full-size model (config through the loader's translation, built on the meta device: no
    memory) has Holotron-12B's parameter count and blocks (docs/holotron.md, "Architecture")."""
    pytest.importorskip("transformers.models.nemotron_h_omni")
    import torch

    from holodesk.policy.holotron.bench import build_random_model

    model = build_random_model(False, torch.device("meta"), torch.bfloat16, seed=0)
    assert sum(p.numel() for p in model.parameters()) == 13_173_412_352
    assert _mixers(model) == {"NemotronHMamba2Mixer": 28, "NemotronHAttention": 6, "NemotronHMLP": 28}
    assert len(model.vision_model.encoder.layer) == 32
    assert model.config.text_config.num_hidden_layers == 62
    assert next(model.parameters()).dtype == torch.bfloat16


def test_random_model_pattern_override_sets_depth() -> None:
    pytest.importorskip("transformers.models.nemotron_h_omni")
    import torch

    from holodesk.policy.holotron.bench import build_random_model

    model = build_random_model(False, torch.device("meta"), torch.bfloat16, seed=0, pattern="M*-M-")
    text = model.config.text_config
    assert text.hybrid_override_pattern == "M*-M-" and text.num_hidden_layers == 5
    assert _mixers(model) == {"NemotronHMamba2Mixer": 2, "NemotronHAttention": 1, "NemotronHMLP": 2}
    assert sum(p.numel() for p in model.parameters()) == 3_024_963_328


def test_tiny_random_config_uses_the_stand_in_image_token() -> None:
    pytest.importorskip("transformers.models.nemotron_h_omni")
    from holodesk.policy.holotron.fullsize import STAND_IN_IDS, TINY, random_config

    config, info, raw = random_config(TINY)
    assert config.image_token_id == info.image_token_id == raw["img_context_token_id"] == STAND_IN_IDS["image"]
    assert (config.text_config.vocab_size, config.text_config.hidden_size, config.text_config.head_dim) == (512, 64, 16)
    assert (config.vision_config.hidden_size, config.vision_config.num_hidden_layers) == (32, 2)
    assert config.vision_config.max_img_size == 512 and info.num_prefix_tokens == 8
