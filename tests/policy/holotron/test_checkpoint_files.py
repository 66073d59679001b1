"""What a checkpoint's files say twice is cross-checked: block types, preprocessor_config.json, <image>.

Variants of the tiny checkpoint are written as the published files can be (NVIDIA's newer remote
configs carry ``layer_types`` with "moe" for the dense MLP blocks; a ``preprocessor_config.json`` next to
config.json; a config.json without ``img_context_token_id``), then loaded; the assertions read the
loaded model's own block types and the notes the loader logs and ``holodesk doctor`` shows.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from holodesk import doctor
from holodesk.bench.model import FULL, STAND_IN_IDS, full_size_config, full_size_shapes
from holodesk.bench.tiny_checkpoint import SPECIAL_TOKENS
from holodesk.errors import ModelLoadError
from holodesk.policy.holotron.checkpoint import checkpoint_info, read_checkpoint
from holodesk.policy.holotron.hf_config import translate_config
from holodesk.policy.holotron.loader import inspect_checkpoint, load_holotron
from holodesk.policy.holotron.pattern import block_counts

TINY_PATTERN = "M-M*-"  # write_tiny_checkpoint's default
REMOTE_NAMES = {"M": "mamba", "*": "attention", "-": "moe"}  # what newer remote configs write
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


@pytest.fixture
def copy(tiny_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_dir, tmp_path / "variant"))


def _edit_config(folder: Path, edit: Any) -> None:
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    edit(cfg)
    path.write_text(json.dumps(cfg))


def _block_kinds(loaded: Any) -> Counter[str]:
    """Block kinds of the loaded language model, read from its modules (not from the config)."""
    layers = loaded.model.language_model.model.layers
    return Counter(type(layer.mixer).__name__ for layer in layers)


def _load(folder: Path) -> Any:
    return load_holotron(folder, dtype="float32", device="cpu")


# -- block types -------------------------------------------------------------------------------------
def test_layer_types_with_moe_do_not_turn_mlp_blocks_into_moe(copy: Path, caplog: pytest.LogCaptureFixture) -> None:
    _edit_config(copy, lambda c: c["llm_config"].update(layer_types=[REMOTE_NAMES[ch] for ch in TINY_PATTERN]))
    with caplog.at_level(logging.WARNING, logger="holodesk.policy.holotron.loader"):
        loaded = _load(copy)
    kinds = _block_kinds(loaded)
    assert kinds == Counter({"NemotronHMamba2Mixer": 2, "NemotronHAttention": 1, "NemotronHMLP": 2}), kinds
    assert loaded.model.config.text_config.layers_block_type == [
        "linear_attention", "mlp", "linear_attention", "full_attention", "mlp"]
    assert block_counts(loaded.info.block_pattern) == {"Mamba-2": 2, "attention": 1, "MLP": 2}
    said = [n for n in loaded.notes if "layer_types" in n]
    assert len(said) == 1 and "2 MoE" in said[0] and "the pattern is used" in said[0]
    assert any("layer_types" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_the_12b_pattern_wins_over_layer_types_with_28_mlp_blocks() -> None:
    raw = full_size_config(STAND_IN_IDS["image"], STAND_IN_IDS["eos"], STAND_IN_IDS["bos"], STAND_IN_IDS["pad"])
    raw["llm_config"]["layer_types"] = [REMOTE_NAMES[ch] for ch in FULL["pattern"]]
    info = checkpoint_info(Path("no-such-folder"), raw, (), full_size_shapes(raw))
    assert block_counts(info.block_pattern) == {"Mamba-2": 28, "attention": 6, "MLP": 28}
    built = Counter(translate_config(info).text_config.layers_block_type)
    assert built == Counter({"linear_attention": 28, "full_attention": 6, "mlp": 28})
    assert "moe" not in built
    assert any("28 MoE" in n and "28 MLP" in n for n in info.notes)


def test_layer_types_alone_are_used_and_said(copy: Path) -> None:
    def edit(c: dict[str, Any]) -> None:
        c["llm_config"]["layers_block_type"] = ["mamba", "mlp", "mamba", "attention", "mlp"]
        del c["llm_config"]["hybrid_override_pattern"]

    _edit_config(copy, edit)
    info = read_checkpoint(copy)
    assert info.block_pattern == TINY_PATTERN
    assert any("no hybrid_override_pattern" in n for n in info.notes)


def test_block_types_that_contradict_the_weights_fail_naming_the_block(copy: Path) -> None:
    _edit_config(copy, lambda c: c["llm_config"].update(hybrid_override_pattern="M-M-*"))
    with pytest.raises(ModelLoadError) as err:
        read_checkpoint(copy)
    msg = str(err.value)
    assert "block 3 is MLP in the pattern but its weights are attention" in msg
    assert "block 4 is attention in the pattern but its weights are MLP" in msg


def test_agreeing_files_give_no_notes(tiny_dir: Path) -> None:
    info = read_checkpoint(tiny_dir)
    assert info.notes == ()
    assert block_counts(info.block_pattern) == {"Mamba-2": 2, "attention": 1, "MLP": 2}


# -- preprocessor_config.json -------------------------------------------------------------------------
def _write_preprocessor(folder: Path, **overrides: Any) -> None:
    data: dict[str, Any] = {
        "image_processor_type": "NemotronNanoVLV2ImageProcessor",
        "image_size": 512, "patch_size": 16, "downsample_ratio": 0.5, "max_num_tiles": 12,
        "use_thumbnail": True, "norm_mean": CLIP_MEAN, "norm_std": CLIP_STD,
    }
    data.update(overrides)
    (folder / "preprocessor_config.json").write_text(json.dumps(data))


def test_an_agreeing_preprocessor_config_is_read_silently(copy: Path) -> None:
    _write_preprocessor(copy)
    info = read_checkpoint(copy)
    assert info.notes == ()
    assert (info.max_tiles, info.use_thumbnail, info.tile_size) == (12, True, 512)
    assert info.norm_from == "preprocessor_config.json"


def test_a_disagreeing_preprocessor_config_is_logged_used_and_shown_by_doctor(
    copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    mean = [0.5, 0.5, 0.5]
    _write_preprocessor(copy, max_num_tiles=6, use_thumbnail=False, norm_mean=mean)
    info = read_checkpoint(copy)
    assert (info.max_tiles, info.use_thumbnail) == (6, False)  # the image processor's file wins
    assert info.norm_mean == (0.5, 0.5, 0.5) and info.norm_from == "preprocessor_config.json"
    notes = " | ".join(info.notes)
    assert "largest tile grid: config.json says 12, preprocessor_config.json says 6; using 6" in notes
    assert "thumbnail tile: config.json says True, preprocessor_config.json says False; using False" in notes
    assert "norm_mean" in notes and "0.5" in notes

    with caplog.at_level(logging.WARNING):
        loaded = _load(copy)
    logged = " | ".join(r.getMessage() for r in caplog.records)
    assert "using 6" in logged and "using False" in logged
    # the checkpoint's own input_conditioner buffers still normalise, and their disagreement is logged
    assert loaded.norm_source == "checkpoint input_conditioner buffers"
    assert "input_conditioner mean" in logged

    config = tmp_path / "config.toml"
    config.write_text(f'policy = "local"\nmodel = "{copy}"\n')
    monkeypatch.setenv("HOLODESK_CONFIG", str(config))
    monkeypatch.setattr(doctor, "CHECKS", [("Holotron checkpoint", doctor._checkpoint)])
    section = doctor.collect(timeout_s=60)["Holotron checkpoint"]
    assert section["language model"] == "2 Mamba-2, 1 attention, 2 MLP"
    assert section["tiles"].startswith("512 px, up to 6, no thumbnail")
    assert any("using 6" in n for n in section["notes"])


def test_a_tile_size_disagreement_keeps_the_models_shape(copy: Path) -> None:
    _write_preprocessor(copy, image_size=448)
    info = read_checkpoint(copy)
    assert info.tile_size == 512 and info.tokens_per_tile == 256
    assert any("tile size: config.json says 512, preprocessor_config.json says 448; using 512" in n
               for n in info.notes)


# -- the <image> token -------------------------------------------------------------------------------
def test_without_an_image_token_id_the_tokenizer_is_asked(copy: Path) -> None:
    _edit_config(copy, lambda c: c.pop("img_context_token_id"))
    assert read_checkpoint(copy).image_token_id is None
    loaded = _load(copy)
    image_id = loaded.tokenizer.convert_tokens_to_ids("<image>")
    assert loaded.image_token_id == image_id == SPECIAL_TOKENS.index("<image>")
    assert int(loaded.model.config.image_token_id) == image_id
    assert any(f"no img_context_token_id; using the tokenizer's <image> id {image_id}" in n for n in loaded.notes)
    assert inspect_checkpoint(copy)["image token"] == image_id


def test_a_tokenizer_whose_image_id_disagrees_is_reported(copy: Path) -> None:
    pad = SPECIAL_TOKENS.index("<pad>")
    _edit_config(copy, lambda c: c.update(img_context_token_id=pad))
    loaded = _load(copy)
    image_id = SPECIAL_TOKENS.index("<image>")
    said = [n for n in loaded.notes if "disagrees with the tokenizer's <image> id" in n]
    assert said == [f"config.json's img_context_token_id {pad} disagrees with the tokenizer's <image> id "
                    f"{image_id} (id {pad} is '<pad>' there); using {pad} from config.json"]
    # prompt and model use the same id, so images still land where the model looks for them
    assert loaded.image_token_id == int(loaded.model.config.image_token_id) == pad
    notes = inspect_checkpoint(copy)["notes"]
    assert said[0] in notes


def test_no_image_token_anywhere_fails(copy: Path) -> None:
    from holodesk.policy.holotron.checkpoint import resolve_image_token

    _edit_config(copy, lambda c: c.pop("img_context_token_id"))
    with pytest.raises(ModelLoadError, match="no img_context_token_id and the tokenizer has no <image>"):
        resolve_image_token(read_checkpoint(copy), {"<img>": 6})
