"""Fixtures for the native-family tests: one tiny checkpoint per family and session, torch on one thread."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

NATIVE_KEYS = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
"""The Qwen families (their processor tests share Qwen3-VL's placeholder rule; Nemotron-H Omni has its own tests,
test_omni_processor.py)."""


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    # The CPU box is shared; OpenMP spinning on busy cores makes the tiny models many times slower.
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def family_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """family key -> a tiny checkpoint folder written by ``holodesk tiny-checkpoint --family`` 's writer."""
    from holodesk.bench.families import write_family_checkpoint

    root = tmp_path_factory.mktemp("families")
    return {key: write_family_checkpoint(root / key, key, seed=0) for key in (*NATIVE_KEYS, "nemotron_h_omni")}
