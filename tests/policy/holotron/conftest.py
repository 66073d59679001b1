"""Fixtures for the Holotron runtime tests: one tiny checkpoint per session, torch on one thread."""

from __future__ import annotations

from pathlib import Path

import pytest

from holodesk.policy.holotron.kernels import prepare_kernels

# Test modules of this folder import transformers' NemotronH at collection time (test_decoder.py,
# test_ops_prefill.py). transformers picks its Mamba-2 kernels once, at that import: without the
# selective_scan_cuda placeholder in place first it silently takes the torch fallback for the whole
# session, and test_gpu_kernels_live failed whenever those modules were collected before it.
prepare_kernels()

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    # The CPU box is shared; OpenMP spinning on busy cores makes the tiny model 30x slower.
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "holotron-tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_loaded(tiny_dir: Path):  # type: ignore[no-untyped-def]
    from holodesk.policy.holotron.loader import load_holotron

    return load_holotron(tiny_dir, dtype="float32", device="cpu")
