"""``holodesk bench --device cpu --tiny``: the CI smoke run of the benchmark (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
