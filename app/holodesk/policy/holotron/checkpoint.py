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

What the published files may say twice is cross-checked, and every disagreement becomes a plain-words
note in :attr:`CheckpointInfo.notes` (logged as a warning by the loader, listed by ``holodesk doctor``):

* the language model's block types: ``hybrid_override_pattern`` wins over ``layer_types`` /
  ``layers_block_type`` (newer remote configs write "moe" there for the dense MLP blocks, and
  transformers' NemotronH config would otherwise build MoE blocks from them); the pattern is checked
  against the mixer tensors of every block;
* ``preprocessor_config.json`` (NVIDIA's ``NemotronNanoVLV2ImageProcessor`` arguments ``image_size``,
  ``patch_size``, ``downsample_ratio``, ``max_num_tiles``, ``use_thumbnail``, ``norm_mean``/``norm_std``)
  against ``config.json``: the model's shape (tile and patch size, pixel-shuffle ratio) comes from
  config.json, the pixel pipeline (tile budget, thumbnail, mean/std) from preprocessor_config.json,
  which is the file NVIDIA's image processor reads;
* the ``<image>`` token id: config.json's ``img_context_token_id`` against the tokenizer
  (:func:`resolve_image_token`); the tokenizer's id is used when the config has none.
"""

from __future__ import annotations

import dataclasses
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
from holodesk.policy.holotron.tiling import Tiling, plan_tiling

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
        image_token_id: id of ``<image>`` (``img_context_token_id``); None when config.json has none
            (:func:`resolve_image_token` then takes it from the tokenizer).
        block_pattern: the language model's block types, one character per block (``M`` Mamba-2,
            ``*`` attention, ``-`` MLP, ``E`` MoE), from ``hybrid_override_pattern``.
        norm_mean, norm_std: per-channel tile normalisation stated by the files (preprocessor_config.json,
            else config.json), or None; :func:`read_normalisation` prefers the checkpoint's buffers.
        norm_from: the file ``norm_mean`` was read from ("" when None).
        notes: disagreements between the files and which value was used, in plain words.
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
    image_token_id: int | None
    block_pattern: str = ""
    norm_mean: tuple[float, ...] | None = None
    norm_std: tuple[float, ...] | None = None
    norm_from: str = ""
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def tiling(self, width: int, height: int) -> Tiling:
        """The :class:`~holodesk.policy.holotron.tiling.Tiling` of a ``width`` x ``height`` image with this
        checkpoint's tile settings (computed once per frame, by the policy's prompt builder)."""
        return plan_tiling(width, height, self.max_tiles, tile_size=self.tile_size, use_thumbnail=self.use_thumbnail,
                           tokens_per_tile=self.tokens_per_tile)

    def block_counts(self) -> dict[str, int]:
        """Blocks per kind, e.g. ``{"Mamba-2": 28, "attention": 6, "MLP": 28}`` for Holotron-12B."""
        return {name: self.block_pattern.count(ch) for ch, name in BLOCK_NAMES.items()
                if ch in self.block_pattern}


BLOCK_NAMES = {"M": "Mamba-2", "*": "attention", "-": "MLP", "E": "MoE"}
"""``hybrid_override_pattern`` characters -> block kind in words."""

_LAYER_TYPE_CHARS = {
    "mamba": "M", "mamba2": "M", "linear_attention": "M", "m": "M",
    "attention": "*", "full_attention": "*", "*": "*",
    "mlp": "-", "-": "-",
    "moe": "E", "e": "E",
}
"""``layer_types`` / ``layers_block_type`` entries (remote and transformers spellings) -> pattern characters."""

_MIXER_KEY = re.compile(r"^language_model\.backbone\.layers\.(\d+)\.mixer\.([A-Za-z_]+)")
_MIXER_KIND = {
    "in_proj": "M", "conv1d": "M", "A_log": "M", "dt_bias": "M", "D": "M", "out_proj": "M",
    "q_proj": "*", "k_proj": "*", "v_proj": "*", "o_proj": "*",
    "up_proj": "-", "down_proj": "-",
    "experts": "E", "gate": "E", "shared_experts": "E",
}
"""First name under ``mixer.`` -> the block kind whose weights it is."""


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


def block_types_from_weights(shapes: dict[str, tuple[int, ...]]) -> dict[int, str]:
    """Block index -> kind character (``M``, ``*``, ``-``, ``E``) from the mixer tensors present.

    A block whose mixer tensors name two kinds is reported as ``"?"``; blocks without mixer tensors
    are absent from the result (the load report names what is missing).
    """
    kinds: dict[int, set[str]] = {}
    for key in shapes:
        m = _MIXER_KEY.match(key)
        if m and m.group(2) in _MIXER_KIND:
            kinds.setdefault(int(m.group(1)), set()).add(_MIXER_KIND[m.group(2)])
    return {i: (next(iter(k)) if len(k) == 1 else "?") for i, k in sorted(kinds.items())}


def _pattern_words(pattern: str) -> str:
    counts = {name: pattern.count(ch) for ch, name in BLOCK_NAMES.items() if ch in pattern}
    return f"{len(pattern)} blocks: " + " / ".join(f"{n} {name}" for name, n in counts.items())


def resolve_block_pattern(
    llm: dict[str, Any], shapes: dict[str, tuple[int, ...]], where: str = "config.json"
) -> tuple[str, list[str]]:
    """The language model's block types as a pattern string, and notes on every disagreement.

    ``hybrid_override_pattern`` wins; ``layer_types`` / ``layers_block_type`` are used only when there
    is no pattern. The result is checked against the mixer tensors of each block
    (:func:`block_types_from_weights`).

    Args:
        llm: ``llm_config`` of config.json.
        shapes: checkpoint key -> shape (empty: nothing to check against).
        where: the file named in messages.
    Returns:
        (pattern, notes): notes name each disagreement and the value used, e.g.
        ``("M-M-...", ["llm_config.layer_types (62 blocks: 28 Mamba-2 / 6 attention / 28 MoE) ..."])``.
    Raises:
        ModelLoadError: no block types at all, an unknown block type, or a block whose weights are of
            another kind than the pattern says (naming the blocks).
    """
    notes: list[str] = []
    raw_pattern = llm.get("hybrid_override_pattern")
    listed_name = next((n for n in ("layer_types", "layers_block_type") if llm.get(n) is not None), None)
    listed: str | None = None
    if listed_name is not None:
        entries = llm[listed_name]
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise ModelLoadError(f"llm_config.{listed_name} in {where} is not a list of block types")
        unknown = sorted({e for e in entries if e.lower() not in _LAYER_TYPE_CHARS})
        if unknown:
            raise ModelLoadError(f"llm_config.{listed_name} in {where} has unknown block types: {', '.join(unknown)}")
        listed = "".join(_LAYER_TYPE_CHARS[e.lower()] for e in entries)
    if isinstance(raw_pattern, str) and raw_pattern:
        bad = sorted(set(raw_pattern) - set(BLOCK_NAMES))
        if bad:
            raise ModelLoadError(f"llm_config.hybrid_override_pattern in {where} has unknown characters {bad}")
        pattern = raw_pattern
        if listed is not None and listed != pattern:
            differ = [i for i in range(max(len(pattern), len(listed)))
                      if i >= len(pattern) or i >= len(listed) or pattern[i] != listed[i]]
            notes.append(
                f"llm_config.{listed_name} ({_pattern_words(listed)}) disagrees with hybrid_override_pattern "
                f"({_pattern_words(pattern)}) at {len(differ)} block(s), first {differ[:5]}; the pattern is used"
            )
    elif listed is not None:
        pattern = listed
        notes.append(f"{where} has no hybrid_override_pattern; the block types come from llm_config.{listed_name}")
    else:
        raise ModelLoadError(
            f"llm_config in {where} states no block types (hybrid_override_pattern or layer_types)",
            hint="The config does not describe a Nemotron-H language model.",
        )
    found = block_types_from_weights(shapes)
    if found:
        wrong = [f"block {i} is {BLOCK_NAMES.get(pattern[i], pattern[i])} in the pattern but its weights are "
                 + ("of two kinds" if kind == "?" else BLOCK_NAMES[kind])
                 for i, kind in found.items() if i < len(pattern) and kind != pattern[i]]
        beyond = [i for i in found if i >= len(pattern)]
        if beyond:
            wrong.append(f"the weights have {max(found) + 1} blocks, the pattern {len(pattern)}")
        if wrong:
            raise ModelLoadError(
                f"the language model's block types in {where} do not match the weights: " + "; ".join(wrong[:6]),
                hint="The config and the weights come from different models.",
            )
    return pattern, notes


PREPROCESSOR_FILE = "preprocessor_config.json"


def _three_floats(value: Any) -> tuple[float, ...] | None:
    if isinstance(value, list) and len(value) == 3 and all(isinstance(v, (int, float)) for v in value):
        return tuple(float(v) for v in value)
    return None


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(
            math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) for x, y in zip(a, b, strict=True)
        )
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return bool(a == b)


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
    notes: list[str] = []
    pre: dict[str, Any] = {}
    pre_path = root / PREPROCESSOR_FILE
    if pre_path.exists():
        pre = _read_json(pre_path)

    def stated(config_value: Any, pre_key: str, what: str, *, use: str) -> Any:
        """The value to use for one setting both files may state; a disagreement becomes a note."""
        pre_value = pre.get(pre_key)
        if pre_value is None:
            return config_value
        if config_value is None:
            return pre_value
        if not _close(config_value, pre_value):
            chosen = pre_value if use == "preprocessor" else config_value
            notes.append(f"{what}: config.json says {config_value}, {PREPROCESSOR_FILE} says {pre_value}; "
                         f"using {chosen} (from {PREPROCESSOR_FILE if use == 'preprocessor' else 'config.json'})")
            return chosen
        return config_value

    patch_size = int(stated(_first(raw, "patch_size", default=_first(vision_cfg, "patch_size")), "patch_size",
                            "patch size", use="config") or 16)
    tile_size = int(stated(_first(raw, "force_image_size", "image_size"), "image_size", "tile size",
                           use="config") or 512)
    downsample = float(stated(_first(raw, "downsample_ratio"), "downsample_ratio", "pixel-shuffle ratio",
                              use="config") or 0.5)
    max_tiles = int(stated(_first(raw, "max_num_tiles", "max_dynamic_patch", "max_tiles"), "max_num_tiles",
                           "largest tile grid", use="preprocessor") or 12)
    thumbnail = stated(_first(raw, "use_thumbnail"), "use_thumbnail", "thumbnail tile", use="preprocessor")
    use_thumbnail = True if thumbnail is None else bool(thumbnail)
    means: dict[str, tuple[float, ...] | None] = {}
    norm_from = ""
    for name, pre_names in (("norm_mean", ("norm_mean", "image_mean")), ("norm_std", ("norm_std", "image_std"))):
        cfg_v = _three_floats(raw.get(name))
        pre_v = next((v for k in pre_names if (v := _three_floats(pre.get(k))) is not None), None)
        if cfg_v is not None and pre_v is not None and not _close(cfg_v, pre_v):
            notes.append(f"{name}: config.json says {list(cfg_v)}, {PREPROCESSOR_FILE} says {list(pre_v)}; "
                         f"using {list(pre_v)} (from {PREPROCESSOR_FILE}) unless the checkpoint stores its own")
        means[name] = pre_v if pre_v is not None else cfg_v
        if name == "norm_mean" and means[name] is not None:
            norm_from = PREPROCESSOR_FILE if pre_v is not None else "config.json"
    if tile_size % patch_size:
        raise ModelLoadError(f"force_image_size {tile_size} is not a multiple of patch_size {patch_size}")
    side = tile_size // patch_size
    tokens_per_tile = round(side * downsample) ** 2
    pattern, block_notes = resolve_block_pattern(raw["llm_config"], shapes, str(root / "config.json"))
    notes = block_notes + notes

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
    return CheckpointInfo(
        folder=root,
        raw_config=raw,
        weight_files=files,
        shapes=shapes,
        tile_size=tile_size,
        patch_size=patch_size,
        max_tiles=max_tiles,
        use_thumbnail=use_thumbnail,
        downsample_ratio=downsample,
        tokens_per_tile=tokens_per_tile,
        num_prefix_tokens=num_prefix,
        max_img_size=table_side * patch_size,
        image_token_id=None if image_token_id is None else int(image_token_id),
        block_pattern=pattern,
        norm_mean=means["norm_mean"],
        norm_std=means["norm_std"],
        norm_from=norm_from,
        notes=tuple(notes),
    )


def resolve_image_token(info: CheckpointInfo, vocab: dict[str, int]) -> tuple[CheckpointInfo, list[str]]:
    """Settle the ``<image>`` token id between config.json and the tokenizer's vocabulary.

    config.json's ``img_context_token_id`` is used when present (the prompt and the model both take it
    from :attr:`CheckpointInfo.image_token_id`, so they cannot differ); a tokenizer whose ``<image>`` has
    another id is reported. Without a config id, the tokenizer's ``<image>`` id is used and that is said.

    Args:
        info: the checkpoint as read.
        vocab: the tokenizer's token -> id map.
    Returns:
        (info with ``image_token_id`` set, notes in plain words).
    Raises:
        ModelLoadError: when neither the config nor the tokenizer has an ``<image>`` token.
    """
    tokenizer_id = vocab.get("<image>")
    by_id = {v: k for k, v in vocab.items()}
    notes: list[str] = []
    chosen = info.image_token_id
    if chosen is None:
        if tokenizer_id is None:
            raise ModelLoadError(
                f"{info.folder / 'config.json'} has no img_context_token_id and the tokenizer has no <image> "
                "token; images cannot be placed in the prompt",
                hint="The checkpoint's config.json or tokenizer files are incomplete.",
            )
        chosen = int(tokenizer_id)
        notes.append(f"config.json has no img_context_token_id; using the tokenizer's <image> id {chosen}")
    elif tokenizer_id is None:
        notes.append(f"the tokenizer has no <image> token; using config.json's img_context_token_id {chosen}"
                     + (f" (the tokenizer's token {by_id[chosen]!r})" if chosen in by_id else ""))
    elif int(tokenizer_id) != chosen:
        notes.append(f"config.json's img_context_token_id {chosen} disagrees with the tokenizer's <image> id "
                     f"{tokenizer_id}"
                     + (f" (id {chosen} is {by_id[chosen]!r} there)" if chosen in by_id else "")
                     + f"; using {chosen} from config.json")
    return dataclasses.replace(info, image_token_id=chosen), notes


def _count_blocks(shapes: dict[str, tuple[int, ...]], prefix: str) -> int:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    ids = {int(m.group(1)) for k in shapes if (m := pattern.match(k))}
    return max(ids) + 1 if ids else 0


def translate_config(info: CheckpointInfo, *, attn_implementation: str | None = None) -> Any:
    """Build transformers' native ``NemotronH_Omni_Reasoning_V3_Config`` for a v2 checkpoint.

    * ``llm_config`` -> ``text_config`` (``nemotron_h``): remote-only keys dropped, legacy
      ``attention_head_dim`` -> ``head_dim``; the block types are ``info.block_pattern`` given as
      ``hybrid_override_pattern`` with ``layer_types`` / ``layers_block_type`` removed (transformers
      would let those win), and the built config's block types are checked against the pattern.
    * ``vision_config`` -> ``radio``: width, depth and MLP ratio from the tensor shapes; heads from the
      config's ``args`` when present, else the timm ViT convention for the width (1280 -> 16); prefix
      tokens and CPE table size from ``cls_token.token`` / ``pos_embed``; ``video_temporal_patch_size``
      2 because the Omni config requires it (the video projection it builds stays unused).
    * top level: ``vit_hidden_size``, ``projector_hidden_size`` (from ``mlp1.1``), downsample ratio,
      ``img_context_token_id``, no audio.

    Returns:
        ``NemotronH_Omni_Reasoning_V3_Config``.
    Raises:
        ModelLoadError: when transformers is too old, the translated config is rejected, or its block
            types differ from ``info.block_pattern``.
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
    for name in ("layer_types", "layers_block_type"):
        llm.pop(name, None)
    llm["hybrid_override_pattern"] = info.block_pattern
    llm.pop("num_hidden_layers", None)  # derived from the pattern
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
    for name, value in (("norm_mean", info.norm_mean), ("norm_std", info.norm_std)):
        if value is not None:
            vision[name] = list(value)

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
    text_config: Any = config.text_config
    built = "".join({"linear_attention": "M", "full_attention": "*", "mlp": "-", "moe": "E"}.get(t, "?")
                    for t in text_config.layers_block_type)
    if built != info.block_pattern:
        raise ModelLoadError(
            f"transformers built the language model as {_pattern_words(built)}, but the checkpoint is "
            f"{_pattern_words(info.block_pattern)}",
            hint="This transformers version maps the block types differently; report it with 'holodesk doctor'.",
        )
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    return config


def read_normalisation(info: CheckpointInfo) -> tuple[tuple[float, ...], tuple[float, ...], str]:
    """Per-channel mean/std for the tiles: the checkpoint's input_conditioner buffers when present,
    else the values the files state (:attr:`CheckpointInfo.norm_mean`: ``norm_mean``/``image_mean`` of
    preprocessor_config.json, else ``norm_mean`` of config.json). Buffers that disagree with the stated
    values are logged as a warning.

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
        for what, buffer, stated in (("mean", values[0], info.norm_mean), ("std", values[1], info.norm_std)):
            # the buffers may be stored in bf16 (8-bit mantissa): compare to 1 %
            if stated is not None and not all(
                math.isclose(a, b, rel_tol=1e-2) for a, b in zip(buffer, stated, strict=True)
            ):
                log.warning("Holotron: the checkpoint's input_conditioner %s %s differs from the files' %s; "
                            "using the checkpoint's", what, list(buffer), list(stated))
        return values[0], values[1], "checkpoint input_conditioner buffers"
    if info.norm_mean is not None and info.norm_std is not None:
        return info.norm_mean, info.norm_std, info.norm_from
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
