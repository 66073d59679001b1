"""transformers' native ``NemotronH_Omni_Reasoning_V3_Config`` for a v2 checkpoint, and the check of
transformers' load report.

transformers >= 5.23 has every part of Holotron-12B natively (``models/nemotron_h``, ``models/radio``,
``models/nemotron_h_omni``), and its ``conversion_mapping.py`` renames the v2 key layout (``mlp1.*``,
``vision_model.radio_model.*`` with the fused ``attn.qkv`` split, ``language_model.backbone.*``). So
loading is: :func:`translate_config`, ``from_pretrained(folder, config=...)``, :func:`check_load_report`
(docs/holotron-runtime.md, "How loading works").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from holodesk.errors import ModelLoadError
from holodesk.policy.holotron.checkpoint import VISION_PREFIX, CheckpointInfo, first
from holodesk.policy.holotron.pattern import pattern_words

log = logging.getLogger(__name__)

ALLOWED_MISSING = (
    # Omni builds a video patch projection (its config insists on video_temporal_patch_size); v2 has none.
    re.compile(r"^vision_model\.embeddings\.video_patch_projection\.weight$"),
    # RADIO's summary index buffer: derived from the config when a checkpoint does not store it.
    re.compile(r"^vision_model\.summary_idxs$"),
)
"""Native parameters a v2 checkpoint may lack (parts v2 does not have or does not need)."""

ALLOWED_UNEXPECTED = (
    # Omni moves normalisation out of the tower (make_preprocessor_external); Holodesk reads these two
    # buffers itself and normalises the tiles with them.
    re.compile(r"^vision_model\.input_conditioner\.norm_(mean|std)$"),
)
"""Checkpoint tensors the native model has no slot for but that Holodesk consumes elsewhere."""

# ViT widths -> heads for the RADIO towers NVIDIA ships (timm vit_{tiny,small,base,large,huge}).
_VIT_HEADS = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16, 1536: 16}
_REMOTE_ONLY_KEYS = ("architectures", "auto_map", "_name_or_path", "transformers_version", "model_type")
_DTYPE_KEYS = ("torch_dtype", "dtype")


def _count_blocks(shapes: dict[str, tuple[int, ...]], prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    ids = {int(m.group(1)) for k in shapes if (m := pattern.match(k))}
    return max(ids) + 1 if ids else 0


def _text_config(info: CheckpointInfo) -> dict[str, Any]:
    """``llm_config`` as transformers' ``nemotron_h`` config: remote-only keys dropped, legacy
    ``attention_head_dim`` -> ``head_dim``, the block types as ``info.block_pattern`` in
    ``hybrid_override_pattern`` (``layer_types`` / ``layers_block_type`` removed: transformers would let
    them win), vocabulary and width from the embedding table.

    Raises:
        ModelLoadError: ``vocab_size`` disagrees with the embedding table.
    """
    drop = {*_REMOTE_ONLY_KEYS, *_DTYPE_KEYS, "layer_types", "layers_block_type", "num_hidden_layers"}
    llm = {k: v for k, v in info.raw_config["llm_config"].items() if k not in drop}
    llm["hybrid_override_pattern"] = info.block_pattern  # num_hidden_layers is derived from it
    if "attention_head_dim" in llm:
        llm.setdefault("head_dim", llm.pop("attention_head_dim"))
    emb = info.shapes.get("language_model.backbone.embeddings.weight")
    if emb is not None:
        if llm.get("vocab_size") not in (None, emb[0]):
            raise ModelLoadError(
                f"llm_config.vocab_size {llm['vocab_size']} differs from the embedding table's {emb[0]} rows")
        llm["vocab_size"], llm.setdefault("hidden_size", emb[1])
    return llm


def _vision_config(info: CheckpointInfo) -> dict[str, Any]:
    """``vision_config`` as transformers' ``radio`` config: width, depth and MLP ratio from the tensor
    shapes; heads from the config's ``args``, else the timm ViT convention for the width (1280 -> 16);
    prefix tokens and CPE table size from ``cls_token.token`` / ``pos_embed``; ``video_temporal_patch_size``
    2 because the Omni config requires it (the video projection it builds stays unused).

    Raises:
        ModelLoadError: the patch embedder's weight is missing.
    """
    vis_raw, shapes = info.raw_config["vision_config"], info.shapes
    args = vis_raw.get("args") if isinstance(vis_raw.get("args"), dict) else {}
    embed_key = VISION_PREFIX + "model.patch_generator.embedder.weight"
    if embed_key not in shapes:
        raise ModelLoadError(f"checkpoint key {embed_key} is missing; cannot size the RADIO vision tower")
    width = int(shapes[embed_key][0])
    fc1 = shapes.get(VISION_PREFIX + "model.blocks.0.mlp.fc1.weight")
    heads = first(args, "num_heads", "num_attention_heads") or first(vis_raw, "num_attention_heads")
    num_cls = first(args, "num_cls_tokens")
    if num_cls is None:
        teachers = args.get("teachers")
        if args.get("cls_token_per_teacher") and isinstance(teachers, list) and teachers:
            num_cls = len(teachers)  # one cls token per distillation teacher
        else:
            num_cls = min(2, info.num_prefix_tokens)
    num_cls = max(1, min(int(num_cls), info.num_prefix_tokens))
    summary = shapes.get(VISION_PREFIX + "summary_idxs")
    vision = {
        "hidden_size": width,
        "num_hidden_layers": _count_blocks(shapes, VISION_PREFIX + "model.blocks."),
        "num_attention_heads": int(heads or _VIT_HEADS.get(width, max(1, width // 64))),
        "mlp_ratio": (fc1[0] / width) if fc1 else 4.0,
        "hidden_act": "gelu",
        "layer_norm_eps": float(first(vis_raw, "layer_norm_eps", default=1e-6)),
        "qkv_bias": (VISION_PREFIX + "model.blocks.0.attn.qkv.bias") in shapes,
        "patch_size": info.patch_size,
        "image_size": info.tile_size,
        "max_img_size": info.max_img_size,
        "num_cls_tokens": num_cls,
        "num_registers": info.num_prefix_tokens - num_cls,
        "summary_idxs": list(range(min(num_cls, summary[0] if summary else 2))),
        "video_temporal_patch_size": 2,
    }
    for name, value in (("norm_mean", info.norm_mean), ("norm_std", info.norm_std)):
        if value is not None:
            vision[name] = list(value)
    return vision


def translate_config(info: CheckpointInfo, *, attn_implementation: str | None = None) -> Any:
    """Build transformers' native ``NemotronH_Omni_Reasoning_V3_Config`` for a v2 checkpoint: the text
    config (:func:`_text_config`), the vision config (:func:`_vision_config`), and at the top level
    ``vit_hidden_size``, ``projector_hidden_size`` (from ``mlp1.1``), the downsample ratio,
    ``img_context_token_id``, no audio. The built config's block types are checked against the pattern.

    Returns:
        ``NemotronH_Omni_Reasoning_V3_Config``.
    Raises:
        ModelLoadError: when transformers is too old, the translated config is rejected, or its block
            types differ from ``info.block_pattern``.
    """
    try:
        # lazy: transformers (optional, heavy)
        from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3_Config
    except ImportError as exc:
        raise ModelLoadError(
            f"transformers' native Nemotron Omni classes are unavailable ({exc})",
            hint="Install transformers >= 5.23 (pip install 'holodesk[local]').",
        ) from None
    vision = _vision_config(info)
    width = vision["hidden_size"]
    vit_hidden = int(first(info.raw_config, "vit_hidden_size", default=width))
    if vit_hidden != width:
        raise ModelLoadError(f"vit_hidden_size {vit_hidden} differs from the vision tower width {width}")
    proj = info.shapes.get("mlp1.1.weight")
    try:
        config = NemotronH_Omni_Reasoning_V3_Config(
            vision_config=vision, text_config=_text_config(info), audio_config=None, vision_hidden_size=vit_hidden,
            projector_hidden_size=int(proj[0]) if proj else int(info.raw_config.get("projector_hidden_size", 4096)),
            downsample_ratio=info.downsample_ratio, force_image_size=info.tile_size,
            image_token_id=info.image_token_id, video_temporal_patch_size=2)
    except Exception as exc:
        raise ModelLoadError(f"the checkpoint's config could not be translated: {exc}") from exc
    text_config: Any = config.text_config
    built = "".join({"linear_attention": "M", "full_attention": "*", "mlp": "-", "moe": "E"}.get(t, "?")
                    for t in text_config.layers_block_type)
    if built != info.block_pattern:
        raise ModelLoadError(
            f"transformers built the language model as {pattern_words(built)}, but the checkpoint is "
            f"{pattern_words(info.block_pattern)}",
            hint="This transformers version maps the block types differently; report it with 'holodesk doctor'.",
        )
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    return config


def check_load_report(
    loading_info: dict[str, Any],
    native_to_checkpoint: dict[str, str],
    expected_name: Callable[[str], str | None] | None = None,
) -> list[str]:
    """Enforce "nothing missing or unexpected except parts v2 lacks" on transformers' load report.

    Args:
        loading_info: ``output_loading_info`` of ``from_pretrained`` (missing_keys, unexpected_keys,
            mismatched_keys, error_msgs), keys in native names.
        native_to_checkpoint: native name -> original checkpoint key (for unexpected keys).
        expected_name: native name -> the checkpoint key that should have provided it (for missing keys).
    Returns:
        Plain-words notes about the tolerated differences (for the log).
    Raises:
        ModelLoadError: naming every other missing, unexpected or mismatched key, by its checkpoint
            name where it can be derived, with the native name beside it.
    """

    def named(key: str, original: str | None) -> str:
        return f"{original} (native {key})" if original and original != key else key

    missing = sorted(loading_info.get("missing_keys") or ())
    unexpected = sorted(loading_info.get("unexpected_keys") or ())
    mismatched = sorted(
        f"{m[0]} (checkpoint {tuple(m[1])}, model {tuple(m[2])})"
        if isinstance(m, tuple) and len(m) == 3
        else str(m)
        for m in (loading_info.get("mismatched_keys") or ())
    )
    errors = [str(e) for e in (loading_info.get("error_msgs") or ())]
    bad_missing = [k for k in missing if not any(p.match(k) for p in ALLOWED_MISSING)]
    bad_unexpected = [k for k in unexpected if not any(p.match(k) for p in ALLOWED_UNEXPECTED)]
    problems: list[str] = []
    if bad_missing:
        problems.append(
            "missing from the checkpoint: "
            + ", ".join(named(k, expected_name(k) if expected_name else None) for k in bad_missing)
        )
    if bad_unexpected:
        problems.append(
            "not used by the model: "
            + ", ".join(named(k, native_to_checkpoint.get(k)) for k in bad_unexpected)
        )
    if mismatched:
        problems.append("shape mismatch: " + ", ".join(mismatched))
    if errors:
        problems.append("errors: " + "; ".join(errors))
    if problems:
        raise ModelLoadError(
            "the checkpoint does not match the Holotron architecture: " + " | ".join(problems),
            hint="The files may be incomplete or from another model; a renamed key is listed under both "
            "'missing' and 'not used'.",
        )
    notes = [f"tolerated missing {k} (v2 has no such part)" for k in missing]
    notes += [f"consumed outside the model: {named(k, native_to_checkpoint.get(k))}" for k in unexpected]
    return notes


def key_namers(model: Any, checkpoint_keys: list[str]) -> tuple[dict[str, str], Callable[[str], str | None]]:
    """Name keys as the checkpoint has them, using transformers' own conversion mapping.

    Returns:
        (native name -> checkpoint key for the keys present, a function giving the checkpoint key a
        native parameter would be loaded from, through the mapping's reverse transforms). Only used for
        messages: on any failure the mapping is empty and the function returns None.
    """
    try:
        # lazy (here and below): transformers (optional, heavy)
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, rename_source_key

        transforms = get_model_conversion_mapping(model)
        renamings: list[Any] = [t for t in transforms if not isinstance(t, WeightConverter)]
        converters: list[Any] = [t for t in transforms if isinstance(t, WeightConverter)]
        forward: dict[str, str] = {}
        for key in checkpoint_keys:
            native, _ = rename_source_key(key, renamings, converters)
            forward.setdefault(native, key)
        reverse = [t.reverse_transform() for t in get_model_conversion_mapping(model)]
        rev_renamings: list[Any] = [t for t in reverse if not isinstance(t, WeightConverter)]
        rev_converters: list[Any] = [t for t in reverse if isinstance(t, WeightConverter)]
    except Exception as exc:  # message quality only
        log.debug("could not map native names back to checkpoint keys: %s", exc)
        return {}, lambda key: None

    def expected(native: str) -> str | None:
        try:
            return str(rename_source_key(native, rev_renamings, rev_converters, reverse=True)[0])
        except Exception:
            return None

    return forward, expected
