"""The load-time dispatch: which runtime a config.json goes to, and the error for what is not supported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from holodesk.errors import ModelLoadError
from holodesk.policy.native.families import (
    FAMILIES,
    HOLOTRON,
    NEMOTRON_H_OMNI,
    QWEN3_5,
    QWEN3_5_MOE,
    QWEN3_VL,
    QWEN3_VL_MOE,
    family_by_key,
    family_of,
    read_family,
)


def _nemotron(model_type: str, pattern: str, where: str = "llm_config") -> dict[str, object]:
    return {"model_type": model_type, where: {"hybrid_override_pattern": pattern}}


@pytest.mark.parametrize(("config", "family"), [
    ({"model_type": "qwen3_vl"}, QWEN3_VL),
    ({"model_type": "qwen3_vl_moe"}, QWEN3_VL_MOE),
    ({"model_type": "qwen3_5"}, QWEN3_5),
    ({"model_type": "qwen3_5_moe"}, QWEN3_5_MOE),
    (_nemotron("NemotronH_Nano_VL_V2", "M-M*-M-"), HOLOTRON),
    (_nemotron("nemotron_h_omni", "MEM*E", "text_config"), NEMOTRON_H_OMNI),
    ({"model_type": "nemotron_h_omni", "text_config": {"layers_block_type": ["mamba", "moe", "attention"]}},
     NEMOTRON_H_OMNI),
])
def test_each_supported_config_goes_to_its_family(config: dict[str, object], family: object) -> None:
    assert family_of(config) is family
    assert (family.runtime == "holotron") == (family is HOLOTRON)  # type: ignore[attr-defined]


@pytest.mark.parametrize("config", [
    {"model_type": "llama"},
    {"model_type": "qwen2_5_vl"},
    {},
    _nemotron("NemotronH_Nano_VL_V2", "M-ME*-"),  # Holotron's type with MoE blocks is not Holotron-12B
    _nemotron("nemotron_h_omni", "M-M*-", "text_config"),  # dense Omni: neither runtime's model
])
def test_unsupported_config_names_what_is_supported(config: dict[str, object]) -> None:
    with pytest.raises(ModelLoadError) as err:
        family_of(config)
    text = str(err.value)
    for family in FAMILIES:
        for model_type in family.model_types:
            assert model_type in text, text


def test_nemotron_config_without_block_types_is_refused() -> None:
    with pytest.raises(ModelLoadError, match="block types"):
        family_of({"model_type": "nemotron_h_omni", "text_config": {}})


def test_read_family_reads_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_5_moe"}))
    assert read_family(tmp_path) is QWEN3_5_MOE
    with pytest.raises(ModelLoadError, match=r"config\.json is missing"):
        read_family(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelLoadError, match="JSON object"):
        read_family(tmp_path)


def test_family_keys() -> None:
    assert [f.key for f in FAMILIES] == ["holotron", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe",
                                         "nemotron_h_omni"]
    assert family_by_key("qwen3_vl") is QWEN3_VL
    with pytest.raises(ModelLoadError, match="Known families"):
        family_by_key("holo9")
