"""Without an NVIDIA GPU a hub model is not downloaded for the local runtime: the error names the model
the user chose, its size from the registry and where to set a server instead (not Holotron-12B's 25 GB
whatever the model)."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub.constants
import pytest

from holodesk.errors import ModelLoadError
from holodesk.policy import source
from holodesk.policy.models import find_model
from holodesk.policy.source import resolve_source


@pytest.fixture
def no_gpu_empty_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An empty hub cache, and no ``nvidia-smi`` on the PATH."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(source.shutil, "which", lambda name: None)


@pytest.mark.parametrize("name", ["holo2-4b", "Hcompany/Holo2-4B", "holotron-12b", "holo3.1-35b-a3b"])
def test_the_error_names_the_chosen_model_and_its_size(no_gpu_empty_cache: None, name: str) -> None:
    spec = find_model(name)
    assert spec is not None
    with pytest.raises(ModelLoadError) as info:
        resolve_source(name, download=False)
    text = str(info.value)
    assert f"checkpoint {spec.hub_id} is not on this machine" in text
    assert f"({spec.download_bytes / 1e9:.1f} GB of weights that would run far too slowly on the CPU). " in text
    assert f"{spec.display_name} needs one to run at a usable speed" in text
    assert "Settings > Basic > Server URL" in text  # the field's real place in the Settings dialog
    others = {m for m in ("Holotron-12B", "Holo2-4B", "Holo3.1-35B-A3B") if m != spec.display_name}
    assert not any(m in text for m in others), text


def test_a_model_outside_the_registry_is_named_as_given(no_gpu_empty_cache: None) -> None:
    with pytest.raises(ModelLoadError) as info:
        resolve_source("someone/their-model", download=False)
    text = str(info.value)
    assert "(its weights that would run far too slowly on the CPU). " in text
    assert "someone/their-model needs one to run at a usable speed" in text
    assert "GB" not in text
