"""Read a Holotron checkpoint folder as published and load it through transformers' native classes.

Holotron-12B ships as remote code (``model_type`` ``NemotronH_Nano_VL_V2``). transformers >= 5.23 has
every part natively (``models/nemotron_h``, ``models/radio``, ``models/nemotron_h_omni``), and
``conversion_mapping.py`` already renames the v2 key layout for ``NemotronH_Omni_Reasoning_V3``
(``mlp1.*``, ``vision_model.radio_model.*`` with the fused ``attn.qkv`` split, ``language_model.backbone.*``).
So loading is: translate ``config.json`` into ``NemotronH_Omni_Reasoning_V3_Config`` (audio off),
``from_pretrained(folder, config=...)`` and check the load report (see docs/holotron-runtime.md).

Shapes the config does not state (vision prefix tokens, CPE table size, ...) are read from the
safetensors headers; the input normalisation is read from the checkpoint's
``input_conditioner.norm_mean/norm_std`` buffers.
"""

from __future__ import annotations

import json
import logging
import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from holodesk.errors import ModelLoadError

log = logging.getLogger(__name__)

ProgressFn = Callable[[str, "float | None"], None]
"""``progress(stage, fraction)``: stage in plain words, fraction in [0, 1] or None when unknown."""

V2_MODEL_TYPES = ("NemotronH_Nano_VL_V2",)

_VISION_PREFIX = "vision_model.radio_model."
_CONDITIONER_KEYS = (
    _VISION_PREFIX + "input_conditioner.norm_mean",
    _VISION_PREFIX + "input_conditioner.norm_std",
)

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


@dataclass(frozen=True)
class CheckpointInfo:
    """What Holodesk needs to know about one checkpoint folder, read from its files.

    Attributes:
        folder: the checkpoint folder.
        raw_config: ``config.json`` as published.
        weight_files: safetensors files, in index order.
        shapes: checkpoint key -> tensor shape, from the safetensors headers (no tensor is read).
        tile_size: tile edge in pixels (``force_image_size``, 512).
        patch_size: ViT patch edge in pixels (16).
        max_tiles: largest grid (12); use_thumbnail: append a thumbnail to multi-tile grids.
        downsample_ratio: pixel-shuffle ratio (0.5).
        tokens_per_tile: LM tokens per tile, ``(tile_size/patch_size * downsample_ratio)**2`` (256).
        num_prefix_tokens: RADIO cls + register tokens (rows of ``cls_token.token``).
        max_img_size: pixels covered by the CPE position table (side * patch_size; 2048 for Holotron).
        image_token_id: id of ``<image>`` (``img_context_token_id``).
    """

    folder: Path
    raw_config: dict[str, Any]
    weight_files: tuple[Path, ...]
    shapes: dict[str, tuple[int, ...]]
    tile_size: int
    patch_size: int
    max_tiles: int
    use_thumbnail: bool
    downsample_ratio: float
    tokens_per_tile: int
    num_prefix_tokens: int
    max_img_size: int
    image_token_id: int
    extra: dict[str, Any] = field(default_factory=dict)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(
            f"{path.name} is missing from {path.parent}",
            hint="Point Holodesk at the folder that holds config.json and the .safetensors files.",
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path} could not be read: {exc}") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} does not hold a JSON object")
    return data


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of one safetensors file from its header, without reading tensor data.

    Format (safetensors spec): 8-byte little-endian header length, then a JSON object mapping each
    tensor name to ``{"dtype", "shape", "data_offsets"}`` (plus an optional ``__metadata__``).

    Raises:
        ModelLoadError: when the file is unreadable or not a safetensors file.
    """
    try:
        with path.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if length > 100_000_000:
                raise ValueError(f"header length {length} is implausible")
            header = json.loads(fh.read(length))
    except (OSError, struct.error, ValueError) as exc:
        raise ModelLoadError(f"{path} is not a readable safetensors file: {exc}") from None
    return {k: tuple(int(d) for d in v["shape"]) for k, v in header.items() if k != "__metadata__"}


def _weight_files(folder: Path) -> tuple[Path, ...]:
    index = folder / "model.safetensors.index.json"
    if index.exists():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelLoadError(f"{index} has no weight_map")
        names = list(dict.fromkeys(str(v) for v in weight_map.values()))
        files = tuple(folder / n for n in names)
        absent = [f.name for f in files if not f.exists()]
        if absent:
            raise ModelLoadError(
                f"{len(absent)} weight file(s) listed in {index.name} are missing: {', '.join(absent[:5])}",
                hint="The download may be incomplete; fetch the checkpoint again.",
            )
        return files
    single = folder / "model.safetensors"
    if single.exists():
        return (single,)
    found = tuple(sorted(folder.glob("*.safetensors")))
    if found:
        return found
    raise ModelLoadError(
        f"no .safetensors weights in {folder}",
        hint="Holodesk loads safetensors checkpoints only (no .bin / pickle files).",
    )


def _first(config: dict[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


def read_checkpoint(folder: str | Path) -> CheckpointInfo:
    """Read ``config.json`` and the safetensors headers of a Holotron checkpoint folder.

    Raises:
        ModelLoadError: when the folder, config or weights are missing or unreadable, when the
            ``model_type`` is not a Nemotron Nano 2 VL checkpoint, or when shapes contradict the config.
    """
    root = Path(folder)
    if not root.is_dir():
        raise ModelLoadError(f"checkpoint folder {root} does not exist")
    raw = _read_json(root / "config.json")
    model_type = raw.get("model_type")
    if model_type not in V2_MODEL_TYPES:
        raise ModelLoadError(
            f"{root / 'config.json'} has model_type {model_type!r}, not a Holotron / Nemotron Nano 2 VL "
            f"checkpoint ({', '.join(V2_MODEL_TYPES)})",
            hint="Holodesk's local runtime runs Holotron-12B; use the remote policy for other models.",
        )
    for key in ("llm_config", "vision_config"):
        if not isinstance(raw.get(key), dict):
            raise ModelLoadError(f"{root / 'config.json'} has no {key} object")
    files = _weight_files(root)
    shapes: dict[str, tuple[int, ...]] = {}
    for f in files:
        shapes.update(safetensors_shapes(f))
    return checkpoint_info(root, raw, files, shapes)


def checkpoint_info(
    root: Path, raw: dict[str, Any], files: tuple[Path, ...], shapes: dict[str, tuple[int, ...]]
) -> CheckpointInfo:
    """Derive :class:`CheckpointInfo` from a published config and the tensor shapes.

    Split from :func:`read_checkpoint` so the full-size check can describe a checkpoint it never
    writes to disk (shapes computed from the config).

    Raises:
        ModelLoadError: when a shape the runtime needs is missing or contradicts the config.
    """
    vision_cfg = raw["vision_config"]
    patch_size = int(_first(raw, "patch_size", default=_first(vision_cfg, "patch_size", default=16)))
    tile_size = int(_first(raw, "force_image_size", "image_size", default=512))
    downsample = float(_first(raw, "downsample_ratio", default=0.5))
    if tile_size % patch_size:
        raise ModelLoadError(f"force_image_size {tile_size} is not a multiple of patch_size {patch_size}")
    side = tile_size // patch_size
    tokens_per_tile = round(side * downsample) ** 2

    cls_key = _VISION_PREFIX + "model.patch_generator.cls_token.token"
    pos_key = _VISION_PREFIX + "model.patch_generator.pos_embed"
    for key in (cls_key, pos_key):
        if key not in shapes:
            raise ModelLoadError(
                f"checkpoint key {key} is missing; cannot size the RADIO vision tower",
                hint="The checkpoint does not have the published Holotron layout.",
            )
    num_prefix = int(shapes[cls_key][0])
    positions = int(shapes[pos_key][-2])
    table_side = math.isqrt(positions)
    if table_side * table_side != positions:
        raise ModelLoadError(f"{pos_key} has {positions} positions, not a square table")
    image_token_id = _first(raw, "img_context_token_id", "image_token_id")
    if image_token_id is None:
        raise ModelLoadError(f"{root / 'config.json'} has no img_context_token_id")
    return CheckpointInfo(
        folder=root,
        raw_config=raw,
        weight_files=files,
        shapes=shapes,
        tile_size=tile_size,
        patch_size=patch_size,
        max_tiles=int(_first(raw, "max_num_tiles", "max_dynamic_patch", "max_tiles", default=12)),
        use_thumbnail=bool(_first(raw, "use_thumbnail", default=True)),
        downsample_ratio=downsample,
        tokens_per_tile=tokens_per_tile,
        num_prefix_tokens=num_prefix,
        max_img_size=table_side * patch_size,
        image_token_id=int(image_token_id),
    )


def _count_blocks(shapes: dict[str, tuple[int, ...]], prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    ids = {int(m.group(1)) for k in shapes if (m := pattern.match(k))}
    return max(ids) + 1 if ids else 0


def translate_config(info: CheckpointInfo, *, attn_implementation: str | None = None) -> Any:
    """Build transformers' native ``NemotronH_Omni_Reasoning_V3_Config`` for a v2 checkpoint.

    * ``llm_config`` -> ``text_config`` (``nemotron_h``): remote-only keys dropped, legacy
      ``attention_head_dim`` -> ``head_dim``; ``hybrid_override_pattern`` is accepted natively.
    * ``vision_config`` -> ``radio``: width, depth and MLP ratio from the tensor shapes; heads from the
      config's ``args`` when present, else the timm ViT convention for the width (1280 -> 16); prefix
      tokens and CPE table size from ``cls_token.token`` / ``pos_embed``; ``video_temporal_patch_size``
      2 because the Omni config requires it (the video projection it builds stays unused).
    * top level: ``vit_hidden_size``, ``projector_hidden_size`` (from ``mlp1.1``), downsample ratio,
      ``img_context_token_id``, no audio.

    Returns:
        ``NemotronH_Omni_Reasoning_V3_Config``.
    Raises:
        ModelLoadError: when transformers is too old or the translated config is rejected.
    """
    try:
        from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3_Config
    except ImportError as exc:
        raise ModelLoadError(
            f"transformers' native Nemotron Omni classes are unavailable ({exc})",
            hint="Install transformers >= 5.23 (pip install 'holodesk[local]').",
        ) from None
    raw, shapes = info.raw_config, info.shapes

    llm = {k: v for k, v in raw["llm_config"].items() if k not in _REMOTE_ONLY_KEYS + _DTYPE_KEYS}
    if "attention_head_dim" in llm:
        head_dim = llm.pop("attention_head_dim")
        llm.setdefault("head_dim", head_dim)
    emb = shapes.get("language_model.backbone.embeddings.weight")
    if emb is not None:
        if llm.get("vocab_size") not in (None, emb[0]):
            raise ModelLoadError(
                f"llm_config.vocab_size {llm['vocab_size']} differs from the embedding table's {emb[0]} rows"
            )
        llm["vocab_size"], llm.setdefault("hidden_size", emb[1])

    vis_raw = raw["vision_config"]
    args = vis_raw.get("args") if isinstance(vis_raw.get("args"), dict) else {}
    embed_key = _VISION_PREFIX + "model.patch_generator.embedder.weight"
    if embed_key not in shapes:
        raise ModelLoadError(f"checkpoint key {embed_key} is missing; cannot size the RADIO vision tower")
    width = int(shapes[embed_key][0])
    blocks = _count_blocks(shapes, _VISION_PREFIX + "model.blocks.")
    fc1 = shapes.get(_VISION_PREFIX + "model.blocks.0.mlp.fc1.weight")
    heads = _first(args, "num_heads", "num_attention_heads", default=None) or _first(
        vis_raw, "num_attention_heads", default=None
    )
    if heads is None:
        heads = _VIT_HEADS.get(width, max(1, width // 64))
    summary = shapes.get(_VISION_PREFIX + "summary_idxs")
    num_cls = _first(args, "num_cls_tokens", default=None)
    if num_cls is None:
        teachers = args.get("teachers")
        if args.get("cls_token_per_teacher") and isinstance(teachers, list) and teachers:
            num_cls = len(teachers)
        else:
            num_cls = min(2, info.num_prefix_tokens)
    num_cls = max(1, min(int(num_cls), info.num_prefix_tokens))
    summary_idxs = list(range(min(num_cls, summary[0] if summary else 2)))
    vision = {
        "hidden_size": width,
        "num_hidden_layers": blocks,
        "num_attention_heads": int(heads),
        "mlp_ratio": (fc1[0] / width) if fc1 else 4.0,
        "hidden_act": "gelu",
        "layer_norm_eps": float(_first(vis_raw, "layer_norm_eps", default=1e-6)),
        "qkv_bias": (_VISION_PREFIX + "model.blocks.0.attn.qkv.bias") in shapes,
        "patch_size": info.patch_size,
        "image_size": info.tile_size,
        "max_img_size": info.max_img_size,
        "num_cls_tokens": num_cls,
        "num_registers": info.num_prefix_tokens - num_cls,
        "summary_idxs": summary_idxs,
        "video_temporal_patch_size": 2,
    }
    for name in ("norm_mean", "norm_std"):
        if isinstance(raw.get(name), list) and len(raw[name]) == 3:
            vision[name] = [float(v) for v in raw[name]]

    proj = shapes.get("mlp1.1.weight")
    vit_hidden = int(_first(raw, "vit_hidden_size", default=width))
    if vit_hidden != width:
        raise ModelLoadError(f"vit_hidden_size {vit_hidden} differs from the vision tower width {width}")
    kwargs: dict[str, Any] = {
        "vision_config": vision,
        "text_config": llm,
        "audio_config": None,
        "vision_hidden_size": vit_hidden,
        "projector_hidden_size": int(proj[0]) if proj else int(raw.get("projector_hidden_size", 4096)),
        "downsample_ratio": info.downsample_ratio,
        "force_image_size": info.tile_size,
        "image_token_id": info.image_token_id,
        "video_temporal_patch_size": 2,
    }
    try:
        config = NemotronH_Omni_Reasoning_V3_Config(**kwargs)
    except Exception as exc:
        raise ModelLoadError(f"the checkpoint's config could not be translated: {exc}") from exc
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    return config


def read_normalisation(info: CheckpointInfo) -> tuple[tuple[float, ...], tuple[float, ...], str]:
    """Per-channel mean/std for the tiles: the checkpoint's input_conditioner buffers when present,
    else ``norm_mean``/``norm_std`` of config.json, else ``image_mean``/``image_std`` of
    preprocessor_config.json.

    Returns:
        (mean, std, source) with 3 floats each and ``source`` naming where they came from.
    Raises:
        ModelLoadError: when none of these exists (the values must not be guessed).
    """
    from safetensors import safe_open

    weight_map: dict[str, Path] = {}
    index = info.folder / "model.safetensors.index.json"
    if index.exists():
        weight_map = {k: info.folder / v for k, v in _read_json(index)["weight_map"].items()}
    values: list[tuple[float, ...]] = []
    for key in _CONDITIONER_KEYS:
        path = weight_map.get(key) or next(
            (f for f in info.weight_files if key in safetensors_shapes(f)), None
        )
        if path is None:
            break
        with safe_open(str(path), framework="pt") as fh:
            values.append(tuple(float(v) for v in fh.get_tensor(key).float().flatten().tolist()))
    if len(values) == 2 and all(len(v) == 3 for v in values):
        return values[0], values[1], "checkpoint input_conditioner buffers"
    raw = info.raw_config
    if isinstance(raw.get("norm_mean"), list) and isinstance(raw.get("norm_std"), list):
        return tuple(map(float, raw["norm_mean"])), tuple(map(float, raw["norm_std"])), "config.json"
    pre = info.folder / "preprocessor_config.json"
    if pre.exists():
        p = _read_json(pre)
        if isinstance(p.get("image_mean"), list) and isinstance(p.get("image_std"), list):
            return (
                tuple(map(float, p["image_mean"])),
                tuple(map(float, p["image_std"])),
                "preprocessor_config.json",
            )
    raise ModelLoadError(
        f"no input normalisation (norm_mean/norm_std) found in {info.folder}",
        hint="The checkpoint lacks vision_model.radio_model.input_conditioner buffers and config values.",
    )


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
