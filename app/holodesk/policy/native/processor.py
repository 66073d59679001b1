"""A checkpoint's own processor: its chat template, image processor and tokenizer.

:func:`load_processor` returns transformers' ``AutoProcessor`` for the folder when transformers can build it.
Every processor of these families holds a video processor, and transformers' video processors need
torchvision; without it (the CPU test machines, whose package mirror has only CUDA builds of torchvision)
the Qwen families get :class:`ImageProcessorChat`: the same chat template, the model's own image processor
on its PIL backend and the model's tokenizer, with the image placeholder expanded by Qwen3-VL's processor
rule. Which one was used is logged and reported (``processor`` in :meth:`NativePolicy.describe`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from holodesk.errors import ModelLoadError
from holodesk.policy.native.families import NEMOTRON_H_OMNI, Family

log = logging.getLogger(__name__)


class ImageProcessorChat:
    """Qwen3-VL / Qwen3.5's processor for text and images (no video): ``apply_chat_template`` and
    ``__call__(text=, images=)`` as the processor's.

    Each ``image_token`` of the text (``<|image_pad|>``) becomes ``grid_t * grid_h * grid_w / merge_size**2``
    copies for its image, in order (transformers' ``Qwen3VLProcessor.replace_image_token``).

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

    def __call__(self, *, text: list[str], images: list[Any], return_tensors: str = "pt") -> dict[str, Any]:
        """Token ids and attention mask of ``text`` with the placeholders expanded, and the image features
        (``pixel_values``, ``image_grid_thw``).

        Raises:
            ModelLoadError: the text holds another number of image placeholders than there are images.
        """
        features: dict[str, Any] = {}
        counts: list[int] = []
        if images:
            features = dict(self.image_processor(images=images, return_tensors=return_tensors))
            merge = int(self.image_processor.merge_size) ** 2
            counts = [int(grid.prod()) // merge for grid in features["image_grid_thw"]]
        expanded = []
        remaining = iter(counts)
        for prompt in text:
            pieces = prompt.split(self.image_token)
            out = [pieces[0]]
            for piece in pieces[1:]:
                count = next(remaining, None)
                if count is None:
                    raise ModelLoadError(f"the prompt has more image placeholders than the {len(counts)} image(s)")
                out.append(self.image_token * count + piece)
            expanded.append("".join(out))
        if next(remaining, None) is not None:
            raise ModelLoadError(f"the prompt has fewer image placeholders than the {len(counts)} image(s)")
        encoded = dict(self.tokenizer(expanded, return_tensors=return_tensors))
        return {**encoded, **features}


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


def load_processor(folder: Path, family: Family, config: Any = None) -> tuple[Any, str]:
    """The processor of the checkpoint in ``folder`` and how it was built.

    Returns:
        (processor, how): ``how`` is ``"AutoProcessor"`` or ``"image processor (PIL) + tokenizer +
        chat template: torchvision is not installed"``.
    Raises:
        ModelLoadError: transformers cannot build it (the message names the error), or torchvision is
            missing for a family whose image processor needs it (Nemotron-H Omni).
    """
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        try:
            kwargs: dict[str, Any] = {"local_files_only": True}
            if config is not None:
                kwargs["config"] = config
            return AutoProcessor.from_pretrained(str(folder), **kwargs), "AutoProcessor"
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ModelLoadError(f"the processor of {folder} could not be built: {type(exc).__name__}: {exc}") from exc
    if family is NEMOTRON_H_OMNI:
        raise ModelLoadError(
            f"{family.models} needs torchvision: transformers' image processor for it has no other backend",
            hint="Install torchvision built for this machine's torch (pip install torchvision).",
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        image_processor = AutoImageProcessor.from_pretrained(str(folder), backend="pil", local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ModelLoadError(f"the tokenizer or image processor of {folder} could not be loaded: "
                             f"{type(exc).__name__}: {exc}") from exc
    how = "image processor (PIL) + tokenizer + chat template: torchvision is not installed"
    log.warning("%s: %s (AutoProcessor needs it for the video processor; Holodesk sends no video)", folder, how)
    return ImageProcessorChat(tokenizer, image_processor, chat_template_of(folder, tokenizer)), how
