"""Holotron-3-Nano's published layout (remote-code ``config.json``: ``model_type`` ``NemotronH_Nano_Omni_Reasoning_V3``
with ``llm_config`` / ``vision_config`` / ``sound_config``, as its base Nemotron 3 Nano Omni ships it) is read by
transformers' own ``nemotron_h_omni`` classes, no remote code; a layout they cannot run is refused with the reason.

The published layout is made from the tiny Omni checkpoint by renaming its config as the released configs name
things (the weights keep their published names already: tests/policy/native/test_native_policy.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from holodesk.errors import ModelLoadError
from holodesk.policy.native.families import NEMOTRON_H_OMNI, check_checkpoint_before_weights, family_of
from holodesk.policy.native.policy import load_native

PUBLISHED_TYPE = "NemotronH_Nano_Omni_Reasoning_V3"


def _published(folder: Path, out: Path) -> Path:
    """A copy of ``folder`` whose config.json has the published remote-code layout."""
    shutil.copytree(folder, out)
    config = json.loads((out / "config.json").read_text())
    config["model_type"] = PUBLISHED_TYPE
    config["architectures"] = [PUBLISHED_TYPE]
    config["auto_map"] = {"AutoConfig": "configuration_nemotron_h.NemotronH_Nano_Omni_Reasoning_V3_Config"}
    config["llm_config"] = config.pop("text_config")
    config["sound_config"] = config.pop("audio_config")
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_published_nano_layout_loads_with_transformers_classes(family_dirs: dict[str, Path], tmp_path: Path) -> None:
    folder = _published(family_dirs["nemotron_h_omni"], tmp_path / "published")
    config = json.loads((folder / "config.json").read_text())
    assert family_of(config) is NEMOTRON_H_OMNI
    check_checkpoint_before_weights(folder, "Hcompany/Holotron-3-Nano-tiny")  # accepted before the download
    loaded = load_native(folder, dtype="float32", device="cpu")  # refuses missing or unexpected weights itself
    assert type(loaded.model).__name__ == "NemotronH_Omni_Reasoning_V3"
    assert "moe" in loaded.model.config.text_config.layers_block_type


def test_published_layout_with_a_dense_language_model_is_refused_with_the_reason(
        family_dirs: dict[str, Path], tmp_path: Path) -> None:
    folder = _published(family_dirs["nemotron_h_omni"], tmp_path / "dense")
    config = json.loads((folder / "config.json").read_text())
    llm = config["llm_config"]
    llm["layers_block_type"] = ["mlp" if block == "moe" else block for block in llm["layers_block_type"]]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="dense language model, which Holodesk does not run locally"):
        check_checkpoint_before_weights(folder, "someone/dense-omni")
