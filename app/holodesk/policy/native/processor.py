"""A checkpoint's own processor: its chat template, image processor and tokenizer.

:func:`load_processor` returns transformers' ``AutoProcessor`` for the folder when torchvision is installed.
Every processor of these families holds a video processor, and transformers' video processors need
torchvision; Nemotron-H Omni's image processor exists only on torchvision too. Without it (the CPU test
machines, whose package mirror has only CUDA builds of torchvision) the same steps are built from the
checkpoint's pieces: the Qwen families get :class:`ImageProcessorChat` (the chat template, the model's own
image processor on its PIL backend, the tokenizer, Qwen3-VL's placeholder rule), Nemotron-H Omni gets
:class:`OmniImageChat` (the chat template, the tokenizer and :func:`omni_image_features`: the patch grid rule,
a float32 bicubic resize, rescale, normalisation and patches as transformers' image processor computes them,
on torch alone). Which one was used is logged and reported (``processor`` in :meth:`NativePolicy.describe`).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from holodesk.errors import ModelLoadError
from holodesk.policy.native.families import NEMOTRON_H_OMNI, Family

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class ImageProcessorChat:
    """A processor for text and images (no video) built from the checkpoint's pieces: ``apply_chat_template``
    and ``__call__(text=, images=)`` as transformers' processor's.

    Qwen3-VL / Qwen3.5: the image features come from the model's image processor (PIL backend), and each
    ``image_token`` of the text (``<|image_pad|>``) becomes ``grid_t * grid_h * grid_w / merge_size**2`` copies
    for its image, in order (transformers' ``Qwen3VLProcessor.replace_image_token``). :class:`OmniImageChat`
    changes both for Nemotron-H Omni.

    Attributes:
        tokenizer: the checkpoint's tokenizer; image_processor: its image processor (PIL backend).
        chat_template: the Jinja chat template; image_token: the image placeholder.
    """

    def __init__(self, tokenizer: Any, image_processor: Any, chat_template: str) -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.chat_template = chat_template
        self.image_token = str(getattr(tokenizer, "image_token", None) or "<|image_pad|>")

    def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        """The prompt text of ``messages`` (``tokenize=False`` only; other keyword arguments reach the template)."""
        kwargs["tokenize"] = False
        return str(self.tokenizer.apply_chat_template(messages, chat_template=self.chat_template, **kwargs))

    def image_features(self, images: list[Any], return_tensors: str) -> dict[str, Any]:
        """The model's image inputs for ``images`` (``pixel_values``, ``image_grid_thw``)."""
        return dict(self.image_processor(images=images, return_tensors=return_tensors))

    def replacements(self, features: dict[str, Any]) -> list[str]:
        """What each image's placeholder becomes, in image order."""
        merge = int(self.image_processor.merge_size) ** 2
        return [self.image_token * (int(grid.prod()) // merge) for grid in features["image_grid_thw"]]

    def __call__(self, *, text: list[str], images: list[Any] | None = None,
                 return_tensors: str = "pt") -> dict[str, Any]:
        """Token ids and attention mask of ``text`` with the placeholders expanded, and the image features.

        Raises:
            ModelLoadError: the text holds another number of image placeholders than there are images.
        """
        features: dict[str, Any] = {}
        expansions: list[str] = []
        if images:
            features = self.image_features(images, return_tensors)
            expansions = self.replacements(features)
        expanded = []
        remaining = iter(expansions)
        for prompt in text:
            pieces = prompt.split(self.image_token)
            out = [pieces[0]]
            for piece in pieces[1:]:
                expansion = next(remaining, None)
                if expansion is None:
                    raise ModelLoadError(f"the prompt has more image placeholders than the {len(expansions)} "
                                         "image(s)")
                out.append(expansion + piece)
            expanded.append("".join(out))
        if next(remaining, None) is not None:
            raise ModelLoadError(f"the prompt has fewer image placeholders than the {len(expansions)} image(s)")
        encoded = dict(self.tokenizer(expanded, return_tensors=return_tensors))
        return {**encoded, **features}


class OmniImageChat(ImageProcessorChat):
    """Nemotron-H Omni's processor for text and images without torchvision: the image features of
    :func:`omni_image_features` (``pixel_values``, ``image_grid_hw``) with the checkpoint's image settings, and
    each ``<image>`` of the text replaced by ``<img>`` + ``rows * columns / merge_size**2`` ``<image>`` +
    ``</img>`` (transformers' ``NemotronH_Omni_Reasoning_V3Processor.replace_image_token``).

    Attributes:
        settings: the image processor settings (:func:`omni_image_settings`).
        image_start_token, image_end_token: the tokens around an image's placeholders.
    """

    def __init__(self, tokenizer: Any, settings: dict[str, Any], chat_template: str) -> None:
        super().__init__(tokenizer, None, chat_template)
        self.settings = settings
        self.image_token = str(getattr(tokenizer, "image_token", None) or "<image>")
        self.image_start_token = str(getattr(tokenizer, "image_start_token", None) or "<img>")
        self.image_end_token = str(getattr(tokenizer, "image_end_token", None) or "</img>")

    def image_features(self, images: list[Any], return_tensors: str) -> dict[str, Any]:
        """:func:`omni_image_features` of ``images`` (torch tensors: ``return_tensors`` must be ``"pt"``)."""
        if return_tensors != "pt":
            raise ModelLoadError(f"the Nemotron-H Omni image path returns torch tensors, not {return_tensors!r}")
        return omni_image_features(images, self.settings)

    def replacements(self, features: dict[str, Any]) -> list[str]:
        """``<img>`` + one ``<image>`` per merged patch + ``</img>`` per image."""
        merge = round(1 / float(self.settings["downsample_ratio"])) ** 2
        return [self.image_start_token + self.image_token * (int(rows) * int(cols) // merge) + self.image_end_token
                for rows, cols in features["image_grid_hw"].tolist()]


QWEN_WITHOUT_TORCHVISION: Final = "image processor (PIL) + tokenizer + chat template: torchvision is not installed"
"""How the Qwen families' processor is built without torchvision (``processor`` in ``describe()``)."""

OMNI_WITHOUT_TORCHVISION: Final = ("Holodesk's Nemotron-H Omni image path (torchvision's maths on torch) + tokenizer + "
                                   "chat template: torchvision is not installed")
"""How Nemotron-H Omni's processor is built without torchvision (``processor`` in ``describe()``)."""


def chat_template_of(folder: Path, tokenizer: Any) -> str:
    """The checkpoint's chat template: ``chat_template.jinja``, else ``chat_template.json``, else the
    tokenizer's.

    Raises:
        ModelLoadError: the checkpoint has none.
    """
    jinja = folder / "chat_template.jinja"
    if jinja.exists():
        return jinja.read_text(encoding="utf-8")
    as_json = folder / "chat_template.json"
    if as_json.exists():
        template = json.loads(as_json.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, str) and template:
            return template
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        return template
    raise ModelLoadError(f"{folder} has no chat template (chat_template.jinja, chat_template.json or the "
                         "tokenizer's)", hint="The checkpoint is incomplete; download it again.")


def processor_kind(family: Family, torchvision: bool) -> str:
    """How :func:`load_processor` builds ``family``'s processor, with or without torchvision installed:
    ``"AutoProcessor"``, :data:`QWEN_WITHOUT_TORCHVISION` or :data:`OMNI_WITHOUT_TORCHVISION`."""
    if torchvision:
        return "AutoProcessor"
    return OMNI_WITHOUT_TORCHVISION if family is NEMOTRON_H_OMNI else QWEN_WITHOUT_TORCHVISION


def processor_choices() -> dict[str, str]:
    """Per native family key, how its processor is built on this machine (:func:`processor_kind`; for
    ``holodesk doctor``). Needs transformers."""
    from transformers.utils import is_torchvision_available  # lazy: transformers (optional, heavy)

    # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
    from holodesk.policy.native.families import NATIVE_FAMILIES

    return {family.key: processor_kind(family, is_torchvision_available()) for family in NATIVE_FAMILIES}


def load_processor(folder: Path, family: Family, config: Any = None) -> tuple[Any, str]:
    """The processor of the checkpoint in ``folder`` and how it was built.

    The one decision point: with torchvision installed, transformers' ``AutoProcessor``; without it,
    :class:`ImageProcessorChat` (Qwen families) or :class:`OmniImageChat` (Nemotron-H Omni), logged as a warning.

    Returns:
        (processor, how): ``how`` is ``"AutoProcessor"``, :data:`QWEN_WITHOUT_TORCHVISION` or
        :data:`OMNI_WITHOUT_TORCHVISION`.
    Raises:
        ModelLoadError: transformers cannot build it, or the tokenizer / image processor cannot be loaded (the
            message names the error).
    """
    # lazy (here and below): transformers (optional, heavy)
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer
    from transformers.utils import is_torchvision_available

    how = processor_kind(family, is_torchvision_available())
    if how == "AutoProcessor":
        try:
            kwargs: dict[str, Any] = {"local_files_only": True}
            if config is not None:
                kwargs["config"] = config
            return AutoProcessor.from_pretrained(str(folder), **kwargs), how
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ModelLoadError(f"the processor of {folder} could not be built: {type(exc).__name__}: {exc}") from exc
    if how == OMNI_WITHOUT_TORCHVISION:
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ModelLoadError(f"the tokenizer of {folder} could not be loaded: {type(exc).__name__}: {exc}") from exc
        log.warning("%s: %s (transformers' Nemotron-H Omni image processor exists only on torchvision)", folder, how)
        return OmniImageChat(tokenizer, omni_image_settings(folder), chat_template_of(folder, tokenizer)), how
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        image_processor = AutoImageProcessor.from_pretrained(str(folder), backend="pil", local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ModelLoadError(f"the tokenizer or image processor of {folder} could not be loaded: "
                             f"{type(exc).__name__}: {exc}") from exc
    log.warning("%s: %s (AutoProcessor needs it for the video processor; Holodesk sends no video)", folder, how)
    return ImageProcessorChat(tokenizer, image_processor, chat_template_of(folder, tokenizer)), how


# ------------------------------------------------------------------------------------- Nemotron-H Omni images
OMNI_IMAGE_DEFAULTS: Final[dict[str, Any]] = {
    "patch_size": 16, "downsample_ratio": 0.5, "min_num_patches": 1024, "max_num_patches": 13312,
    "max_model_len": 16384, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
}
"""The Nemotron-H Omni image processor's settings where ``preprocessor_config.json`` states none (transformers
5.23's ``NemotronH_Omni_Reasoning_V3ImageProcessor`` class defaults; mean / std are OpenAI CLIP's)."""


def _first_grid_side(pixels: int, patch_size: int) -> int:
    """Patches along one side before scaling: ``round(pixels / patch_size + 0.5)`` with Python's round half to
    even, i.e. one more than the whole patches when the side is not a multiple of ``patch_size``, and for an exact
    multiple ``q`` patches: ``q`` when ``q`` is even, ``q + 1`` when it is odd."""
    whole, rest = divmod(pixels, patch_size)
    if rest:
        return whole + 1
    return whole + whole % 2


def omni_patch_grid(height: int, width: int, *, patch_size: int, merge_size: int, min_num_patches: int,
                    max_num_patches: int) -> tuple[int, int]:
    """The ``(rows, columns)`` patch grid a ``height`` x ``width`` image (pixels) is resized to by Nemotron-H Omni's
    image processor (the rule of transformers' ``get_patch_grid_size``, same arithmetic):

    1. the image's own grid (:func:`_first_grid_side` per side);
    2. scaled down by ``sqrt(max_num_patches / (rows * columns))`` when it holds more patches (each side floored);
    3. scaled up by ``sqrt(min_num_patches / (rows * columns))`` when it holds fewer than ``min_num_patches`` (and
       the budget leaves room: ``max_num_patches > min_num_patches``; each side rounded up);
    4. each side made a multiple of ``merge_size`` (rows first, then columns): rounded up when the grid stays
       within ``max_num_patches``, else down (not below ``merge_size``).

    Raises:
        ValueError: step 2 leaves a side with no patch (an image far more elongated than a screen).
    """
    rows = _first_grid_side(height, patch_size)
    cols = _first_grid_side(width, patch_size)
    shrink = min(math.sqrt(max_num_patches / (rows * cols)), 1.0)
    rows, cols = math.floor(shrink * rows), math.floor(shrink * cols)
    if rows * cols == 0:  # transformers' rule divides by zero here (a ZeroDivisionError there)
        raise ValueError(f"a {width}x{height} image is too elongated for a {max_num_patches}-patch budget: one side "
                         "would get no patch")
    if max_num_patches > min_num_patches and rows * cols < min_num_patches:
        grow = math.sqrt(min_num_patches / (rows * cols))
        rows, cols = math.ceil(grow * rows), math.ceil(grow * cols)
    extra = rows % merge_size
    if extra:
        rows = rows + merge_size - extra if (rows + merge_size - extra) * cols <= max_num_patches \
            else max(merge_size, rows - extra)
    extra = cols % merge_size
    if extra:
        cols = cols + merge_size - extra if rows * (cols + merge_size - extra) <= max_num_patches \
            else max(merge_size, cols - extra)
    return rows, cols


def omni_patch_budget(settings: dict[str, Any], images: int) -> int:
    """Most patches one image of a call with ``images`` images may get: the language model's context in
    pre-pixel-shuffle patches (``(max_model_len - 4) * merge_size**2``, at least ``min_num_patches`` per image),
    capped by ``max_num_patches`` (0: no cap), at least ``min_num_patches``."""
    merge = round(1 / float(settings["downsample_ratio"]))
    budget = max((int(settings["max_model_len"]) - 4) * merge ** 2, int(settings["min_num_patches"]) * images)
    if int(settings["max_num_patches"]):
        budget = min(budget, int(settings["max_num_patches"]))
    return max(budget, int(settings["min_num_patches"]))


def patchify(image: torch.Tensor, patch_size: int) -> torch.Tensor:
    """``(channels, rows * patch_size, columns * patch_size)`` -> ``(rows * columns, channels * patch_size**2)``:
    patches in row-major order, each flattened channel-major (channel, then pixel row, then pixel column)."""
    channels, height, width = image.shape
    rows, cols = height // patch_size, width // patch_size
    grid = image.reshape(channels, rows, patch_size, cols, patch_size)
    return grid.permute(1, 3, 0, 2, 4).reshape(rows * cols, channels * patch_size * patch_size)


def omni_image_features(images: list[Any], settings: dict[str, Any]) -> dict[str, Any]:
    """Nemotron-H Omni's image features without torchvision: per image (an RGB ``PIL.Image`` or ``(H, W, 3)`` uint8
    array) its patch grid (:func:`omni_patch_grid` within :func:`omni_patch_budget`), a bicubic resize to
    ``grid * patch_size`` pixels in float32 without clamping (``torch.nn.functional.interpolate(mode="bicubic",
    align_corners=False, antialias=True)``, which is what torchvision's tensor resize runs for a float32 image),
    rescale and normalisation fused as ``(x - mean * (1 / rescale_factor)) / (std * (1 / rescale_factor))``, and
    :func:`patchify`.

    Returns:
        ``pixel_values``: float32 ``(total_patches, 3 * patch_size**2)``; ``image_grid_hw``: int64
        ``(images, 2)`` rows and columns of each image.
    """
    # lazy: kept (GPU runtime, not re-checked this session); a core dependency: could move to the top
    import numpy as np
    import torch  # lazy: torch (optional, heavy)

    patch = int(settings["patch_size"])
    merge = round(1 / float(settings["downsample_ratio"]))
    budget = omni_patch_budget(settings, len(images))
    scale = float(settings["rescale_factor"]) if settings["do_rescale"] else 1.0
    mean = torch.tensor(settings["image_mean"], dtype=torch.float32).reshape(-1, 1, 1) * (1.0 / scale)
    std = torch.tensor(settings["image_std"], dtype=torch.float32).reshape(-1, 1, 1) * (1.0 / scale)
    patches, grids = [], []
    for image in images:
        array = np.array(image.convert("RGB") if hasattr(image, "convert") else image, dtype=np.uint8)
        pixels = torch.from_numpy(array).permute(2, 0, 1).to(torch.float32)
        height, width = pixels.shape[-2:]
        rows, cols = omni_patch_grid(height, width, patch_size=patch, merge_size=merge,
                                     min_num_patches=int(settings["min_num_patches"]), max_num_patches=budget)
        if (height, width) != (rows * patch, cols * patch):
            pixels = torch.nn.functional.interpolate(pixels[None], size=[rows * patch, cols * patch], mode="bicubic",
                                                     align_corners=False, antialias=True)[0]
        if settings["do_normalize"]:
            pixels = (pixels - mean) / std
        elif settings["do_rescale"]:
            pixels = pixels * scale
        patches.append(patchify(pixels, patch))
        grids.append((rows, cols))
    return {"pixel_values": torch.cat(patches), "image_grid_hw": torch.tensor(grids, dtype=torch.int64)}


def omni_image_settings(folder: Path) -> dict[str, Any]:
    """The image processor settings of a Nemotron-H Omni checkpoint: ``preprocessor_config.json`` over
    :data:`OMNI_IMAGE_DEFAULTS` (the released checkpoints' ``norm_mean`` / ``norm_std`` read as the mean / std).

    Raises:
        ModelLoadError: the file is not a JSON object.
    """
    settings = dict(OMNI_IMAGE_DEFAULTS)
    path = folder / "preprocessor_config.json"
    if path.exists():
        stated = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(stated, dict):
            raise ModelLoadError(f"{path} does not hold a JSON object")
        for legacy, name in (("norm_mean", "image_mean"), ("norm_std", "image_std")):
            if legacy in stated:
                stated.setdefault(name, stated.pop(legacy))
        settings.update({k: v for k, v in stated.items() if k in OMNI_IMAGE_DEFAULTS})
    return settings
