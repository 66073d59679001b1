"""Nemotron-H Omni's image path without torchvision (holodesk.policy.native.processor): the patch grid rule on
hand-computed cases and against transformers' own get_patch_grid_size over a sweep of sizes, the patch layout
and normalisation against an independent per-patch computation and transformers' convert_image_to_patches,
the unclamped bicubic resize, the placeholder expansion, and a proposal of the tiny Holotron-3-Nano
checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from holodesk.core.geometry import Frame, Monitor
from holodesk.policy.base import Observation
from holodesk.policy.contract import Reply
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.native import NativePolicy
from holodesk.policy.native.processor import (
    OMNI_IMAGE_DEFAULTS,
    OMNI_WITHOUT_TORCHVISION,
    omni_image_features,
    omni_image_settings,
    omni_patch_budget,
    omni_patch_grid,
    patchify,
)

CLIP_MEAN = np.array([0.48145466, 0.4578275, 0.40821073])
CLIP_STD = np.array([0.26862954, 0.26130258, 0.27577711])


@pytest.mark.parametrize(("size", "limits", "grid"), [
    # (width, height), (min_num_patches, max_num_patches), (rows, columns): worked by hand, patch 16, merge 2
    ((1920, 1080), (1024, 13312), (68, 120)),  # 67.5 -> 68 rows; 120 (even exact multiple) stays; 8160 fits
    ((512, 512), (4, 13312), (32, 32)),  # an even exact multiple keeps its patches
    ((528, 528), (4, 13312), (34, 34)),  # 33 (odd exact multiple): round(33.5) is 34 (half to even)
    ((64, 64), (1024, 13312), (32, 32)),  # 4 x 4 = 16 < 1024: scaled up by sqrt(64) = 8
    ((2560, 1440), (1024, 13312), (86, 154)),  # 90 x 160 > 13312: x0.9615 -> 86 x 153, 153 rounded up (13244 fits)
    ((1920, 1080), (4, 64), (6, 10)),  # the tiny checkpoint's budget: x0.0886 -> 6.02 x 10.63, floored
    ((96, 48), (1, 7), (2, 2)),  # 4 x 6 -> x0.54 -> 2 x 3; 2 x 4 = 8 > 7, so 3 is rounded down to 2
])
def test_patch_grid_rule(size: tuple[int, int], limits: tuple[int, int], grid: tuple[int, int]) -> None:
    width, height = size
    assert omni_patch_grid(height, width, patch_size=16, merge_size=2, min_num_patches=limits[0],
                           max_num_patches=limits[1]) == grid


def test_patch_budget_per_call() -> None:
    settings = dict(OMNI_IMAGE_DEFAULTS)
    assert omni_patch_budget(settings, 1) == 13312  # the context (65520 patches) capped by max_num_patches
    assert omni_patch_budget({**settings, "max_num_patches": 0}, 1) == (16384 - 4) * 4  # no cap: the context
    assert omni_patch_budget({**settings, "max_num_patches": 0}, 100) == 1024 * 100  # at least min per image
    assert omni_patch_budget({**settings, "max_num_patches": 16}, 1) == 1024  # never below min_num_patches


def test_patchify_is_row_major_and_channel_major() -> None:
    image = torch.arange(3 * 32 * 48, dtype=torch.float32).reshape(3, 32, 48)  # 2 x 3 patches of 16
    patches = patchify(image, 16)
    assert patches.shape == (6, 3 * 16 * 16)
    for index in range(6):
        row, col = divmod(index, 3)  # row-major patch order
        block = image[:, row * 16:(row + 1) * 16, col * 16:(col + 1) * 16]
        assert torch.equal(patches[index], block.reshape(-1))  # channel, then pixel row, then pixel column
    assert patches[1, 0] == 16 and patches[3, 0] == 16 * 48 and patches[0, 256] == 32 * 48


def test_features_match_an_independent_per_patch_computation() -> None:
    """An image already of its grid's size is not resized: every value is (pixel / 255 - mean) / std of its
    channel, laid out patch by patch as transformers' convert_image_to_patches lays them out."""
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (64, 96, 3), dtype=np.uint8)  # 4 x 6 patches of 16: even sides, kept
    settings = {**OMNI_IMAGE_DEFAULTS, "min_num_patches": 4}
    features = omni_image_features([Image.fromarray(pixels)], settings)
    assert features["image_grid_hw"].tolist() == [[4, 6]]
    values = features["pixel_values"]
    assert values.dtype == torch.float32 and values.shape == (24, 768)
    normalised = (pixels.astype(np.float64) / 255.0 - CLIP_MEAN) / CLIP_STD  # (H, W, C)
    expected = np.stack([normalised[r * 16:(r + 1) * 16, c * 16:(c + 1) * 16, :].transpose(2, 0, 1).reshape(-1)
                         for r in range(4) for c in range(6)])
    np.testing.assert_allclose(values.numpy(), expected, rtol=0, atol=2e-5)


def test_resize_is_bicubic_antialiased_in_float32_without_clamping() -> None:
    """A sharp black / white edge resized with bicubic overshoots below black and above white: the values stay
    (no uint8 round trip, no clamp), and they are interpolate(bicubic, antialias) of the float image."""
    pixels = np.zeros((40, 40, 3), dtype=np.uint8)
    pixels[:, 20:] = 255
    settings = {**OMNI_IMAGE_DEFAULTS, "min_num_patches": 4, "do_normalize": False}  # rescale only: x / 255
    features = omni_image_features([pixels], settings)
    assert features["image_grid_hw"].tolist() == [[4, 4]]  # 40 / 16 = 2.5 -> 3 -> rounded up to 4 (merge 2)
    values = features["pixel_values"]
    assert float(values.min()) < 0.0 and float(values.max()) > 1.0  # the bicubic overshoot is kept
    source = torch.from_numpy(pixels).permute(2, 0, 1)[None].to(torch.float32)
    resized = torch.nn.functional.interpolate(source, size=[64, 64], mode="bicubic", align_corners=False,
                                              antialias=True)[0] * (1 / 255)
    assert torch.allclose(values, patchify(resized, 16), atol=1e-6)


def test_settings_read_the_checkpoint_and_its_legacy_names(tmp_path: Path) -> None:
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(
        {"norm_mean": [0.5, 0.5, 0.5], "norm_std": [0.25, 0.25, 0.25], "max_num_patches": 64, "unrelated": 1}))
    settings = omni_image_settings(tmp_path)
    assert settings["image_mean"] == [0.5] * 3 and settings["image_std"] == [0.25] * 3
    assert settings["max_num_patches"] == 64 and settings["patch_size"] == 16 and "unrelated" not in settings


def test_tiny_holotron_3_nano_proposes_on_the_cpu(family_dirs: dict[str, Path]) -> None:
    """The tiny Omni checkpoint, with this machine's processor choice, gives a valid constrained proposal for
    a 1080p frame; each screenshot's <image> became <img> + rows * columns / 4 <image> + </img>."""
    from transformers.utils import is_torchvision_available

    policy = NativePolicy.load(family_dirs["nemotron_h_omni"],
                               GenerationOptions(max_string_chars=8), dtype="float32", device="cpu")
    try:
        expected = "AutoProcessor" if is_torchvision_available() else OMNI_WITHOUT_TORCHVISION
        assert policy.describe()["processor"] == expected
        pixels = np.random.default_rng(0).integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
        observation = Observation(task="Click OK", frame=Frame(pixels, Monitor(1, 0, 0, 1920, 1080)))
        prepared = policy.prepare(observation)
        inputs = prepared["inputs"]
        assert inputs["image_grid_hw"].tolist() == [[6, 10]]  # the tiny preprocessor's 64-patch budget
        assert inputs["pixel_values"].shape == (60, 768)
        tokenizer = policy.loaded.tokenizer
        ids = inputs["input_ids"][0].tolist()
        image_id = policy.loaded.model.config.image_token_id
        assert ids.count(image_id) == 15
        start = ids.index(tokenizer.convert_tokens_to_ids("<img>"))
        assert ids[start + 1:start + 16] == [image_id] * 15
        assert ids[start + 16] == tokenizer.convert_tokens_to_ids("</img>")
        proposal = policy.propose(observation)
        Reply.model_validate_json(proposal.raw_text)  # the reply schema, strictly
        assert policy.protocol.parse(proposal.raw_text).action == proposal.action
        assert proposal.extra["family"] == "nemotron_h_omni" and proposal.extra["processor"] == expected
        assert proposal.extra["stop_reason"] in ("eos", "grammar") and proposal.extra["constrained"] is True
    finally:
        policy.close()


@pytest.mark.gpu
def test_gpu_tiny_holotron_3_nano_proposes(family_dirs: dict[str, Path]) -> None:
    """On CUDA: the tiny Omni checkpoint on the static cache, its decode step eager (the Omni class does not
    declare it compiles), with this machine's processor choice (transformers' AutoProcessor where torchvision
    is installed), gives valid actions."""
    from transformers.utils import is_torchvision_available

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    policy = NativePolicy.load(family_dirs["nemotron_h_omni"], GenerationOptions(max_string_chars=8), device="cuda")
    try:
        described = policy.describe()
        assert described["compiled"] is False and described["cache"] == "static"
        assert described["processor"] == ("AutoProcessor" if is_torchvision_available() else OMNI_WITHOUT_TORCHVISION)
        for seed in (0, 1):
            pixels = np.random.default_rng(seed).integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
            proposal = policy.propose(Observation(task="Click OK", frame=Frame(pixels, Monitor(1, 0, 0, 1920, 1080))))
            Reply.model_validate_json(proposal.raw_text)
    finally:
        policy.close()


def _transformers_functions(*names: str) -> dict[str, Any]:
    """Functions of transformers' installed Nemotron-H Omni image processor module, read from its file and
    compiled alone: the module itself cannot be imported without torchvision, these two functions need only
    ``math`` and ``torch``."""
    import ast
    import importlib.util
    import math

    spec = importlib.util.find_spec("transformers.models.nemotron_h_omni")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("transformers has no nemotron_h_omni module")
    path = Path(next(iter(spec.submodule_search_locations))) / "image_processing_nemotron_h_omni.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    chosen = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    assert sorted(node.name for node in chosen) == sorted(names), f"{path} no longer defines {names}"
    namespace: dict[str, Any] = {"math": math, "torch": torch}
    exec(compile(ast.Module(body=chosen, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


def test_grid_rule_and_patches_agree_with_transformers_own_functions() -> None:
    """Against transformers' get_patch_grid_size and convert_image_to_patches themselves, over every size in
    steps of 8 pixels from 8 to 4000 on each side (and budgets from the tiny checkpoint's to the context)."""
    theirs = _transformers_functions("get_patch_grid_size", "convert_image_to_patches")
    grid, patches = theirs["get_patch_grid_size"], theirs["convert_image_to_patches"]
    for lowest, highest in ((4, 64), (1024, 13312), (1024, 65520), (256, 1024)):
        for height in range(8, 4001, 88):
            for width in range(8, 4001, 8):
                try:
                    expected = grid(height, width, 16, 2, lowest, highest)
                except ZeroDivisionError:  # a side with no patch left: ours says so
                    with pytest.raises(ValueError, match="too elongated"):
                        omni_patch_grid(height, width, patch_size=16, merge_size=2, min_num_patches=lowest,
                                        max_num_patches=highest)
                    continue
                ours = omni_patch_grid(height, width, patch_size=16, merge_size=2, min_num_patches=lowest,
                                       max_num_patches=highest)
                assert ours == expected, (height, width, lowest, highest)
    image = torch.randn(1, 3, 48, 80)
    assert torch.equal(patchify(image[0], 16), patches(image, 16)[0])


def test_tiny_omni_checkpoint_names_the_audio_feature_extractor(family_dirs: dict[str, Path]) -> None:
    """transformers' Omni processor (AutoProcessor, where torchvision is installed) also builds the sound
    encoder's feature extractor and refuses a folder that does not name one; the tiny checkpoint names it and
    transformers builds it from the folder."""
    from transformers import AutoFeatureExtractor

    extractor = AutoFeatureExtractor.from_pretrained(str(family_dirs["nemotron_h_omni"]), local_files_only=True)
    assert type(extractor).__name__ == "ParakeetFeatureExtractor"
