"""The reference the Holotron runtime tests compare against: transformers' own forward over a whole
prompt, without a cache, on the embeddings of the runtime's one image-embedding merge."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def stock_logits(loaded: Any, input_ids: Sequence[int], images: Sequence[Any]) -> Any:
    """Float32 logits ``(len(input_ids), vocab)`` of every prompt position.

    Args:
        loaded: a ``LoadedHolotron``.
        input_ids: prompt token ids with one ``<image>`` run per image.
        images: RGB uint8 ``(h, w, 3)`` arrays, prompt order (tiled with the checkpoint's settings).
    """
    import torch

    from holodesk.policy.holotron import runtime

    tiled = [(pixels, loaded.info.tiling(pixels.shape[1], pixels.shape[0])) for pixels in images]
    rows = runtime.encode_tiles(loaded, runtime.tile_images(loaded, tiled))
    embeds = runtime.embed_prompt(loaded, input_ids, [rows])
    with torch.inference_mode():
        out = loaded.model.language_model(inputs_embeds=embeds, use_cache=False)
    return out.logits[0].float()
