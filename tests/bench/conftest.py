"""The bench tests run torch on one thread (the CPU box is shared: OpenMP spinning on busy cores makes the
tiny model many times slower). The bench registers the Mamba-2 kernel placeholder itself, before
transformers' NemotronH is imported."""

from __future__ import annotations

import importlib.util

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(1)
