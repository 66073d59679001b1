"""Read a Holotron checkpoint folder as published (``model_type`` ``NemotronH_Nano_VL_V2``):
``config.json``, ``preprocessor_config.json``, the safetensors headers and the normalisation buffers,
into :class:`CheckpointInfo` (:mod:`.hf_config` turns it into transformers' native config).

Shapes the config does not state (vision prefix tokens, CPE table size) come from the safetensors
headers. What the files may say twice is cross-checked, and every disagreement becomes a plain-words
note in :attr:`CheckpointInfo.notes` (logged by the loader, listed by ``holodesk doctor``):

* the block types: ``hybrid_override_pattern`` wins over ``layer_types`` / ``layers_block_type`` (newer
  remote configs write "moe" there for the dense MLP blocks), and is checked against each block's tensors
  (:mod:`.pattern`);
* ``preprocessor_config.json`` (the arguments of NVIDIA's image processor) against ``config.json``: the
  model's shape (tile and patch size, pixel-shuffle ratio) comes from config.json, the pixel pipeline
  (tile budget, thumbnail, mean/std) from preprocessor_config.json, the file that processor reads;
* the ``<image>`` id: ``img_context_token_id`` against the tokenizer (:func:`resolve_image_token`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from holodesk.errors import ModelLoadError
from holodesk.policy.holotron.pattern import block_counts, resolve_block_pattern
from holodesk.policy.holotron.tiling import Tiling, plan_tiling
from holodesk.policy.weights import weight_files

log = logging.getLogger(__name__)

ProgressFn = Callable[[str, "float | None"], None]
"""``progress(stage, fraction)``: stage in plain words, fraction in [0, 1] or None when unknown."""

V2_MODEL_TYPES = ("NemotronH_Nano_VL_V2",)

VISION_PREFIX = "vision_model.radio_model."
_CONDITIONER_KEYS = (
    VISION_PREFIX + "input_conditioner.norm_mean",
    VISION_PREFIX + "input_conditioner.norm_std",
)

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

    def tiling(self, width: int, height: int) -> Tiling:
        """The :class:`~holodesk.policy.holotron.tiling.Tiling` of a ``width`` x ``height`` image with this
        checkpoint's tile settings (computed once per frame, by the policy's prompt builder)."""
        return plan_tiling(width, height, self.max_tiles, tile_size=self.tile_size, use_thumbnail=self.use_thumbnail,
                           tokens_per_tile=self.tokens_per_tile)

    def blocks_in_words(self) -> str:
        """The language model's blocks per kind, e.g. ``"28 Mamba-2, 6 attention, 28 MLP"`` for Holotron-12B."""
        return ", ".join(f"{n} {name}" for name, n in block_counts(self.block_pattern).items())


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


class TensorEntry(NamedTuple):
    """One tensor of a safetensors file as its header states it: ``dtype`` (the format's name, e.g. ``"BF16"``),
    ``shape``, and its bytes ``begin``..``end`` counted from the file's start."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def safetensors_header(path: Path) -> dict[str, TensorEntry]:
    """The tensors of one safetensors file from its header, without reading tensor data.

    Format (safetensors spec): 8-byte little-endian header length ``n``, then ``n`` bytes of a JSON object
    mapping each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (plus an optional
    ``__metadata__``); the offsets count from the end of the header, byte ``8 + n`` of the file.

    Raises:
        ModelLoadError: when the file is unreadable or not a safetensors file.
    """
    try:
        with path.open("rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if length > 100_000_000:
                raise ValueError(f"header length {length} is implausible")
            header = json.loads(fh.read(length))
        start = 8 + length
        return {k: TensorEntry(str(v["dtype"]), tuple(int(d) for d in v["shape"]), start + int(v["data_offsets"][0]),
                               start + int(v["data_offsets"][1]))
                for k, v in header.items() if k != "__metadata__"}
    except (OSError, struct.error, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ModelLoadError(f"{path} is not a readable safetensors file: {exc}") from None


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of one safetensors file (:func:`safetensors_header`; same errors)."""
    return {k: v.shape for k, v in safetensors_header(path).items()}


def first(config: dict[str, Any], *names: str, default: Any = None) -> Any:
    """The value of the first of ``names`` that ``config`` states (not None), else ``default``."""
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


PREPROCESSOR_FILE = "preprocessor_config.json"


def _three_floats(value: object) -> tuple[float, ...] | None:
    if isinstance(value, list) and len(value) == 3 and all(isinstance(v, (int, float)) for v in value):
        return tuple(float(v) for v in value)
    return None


def _close(a: object, b: object) -> bool:
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
    files = weight_files(root)
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

    patch_size = int(stated(first(raw, "patch_size", default=first(vision_cfg, "patch_size")), "patch_size",
                            "patch size", use="config") or 16)
    tile_size = int(stated(first(raw, "force_image_size", "image_size"), "image_size", "tile size",
                           use="config") or 512)
    downsample = float(stated(first(raw, "downsample_ratio"), "downsample_ratio", "pixel-shuffle ratio",
                              use="config") or 0.5)
    max_tiles = int(stated(first(raw, "max_num_tiles", "max_dynamic_patch", "max_tiles"), "max_num_tiles",
                           "largest tile grid", use="preprocessor") or 12)
    thumbnail = stated(first(raw, "use_thumbnail"), "use_thumbnail", "thumbnail tile", use="preprocessor")
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

    cls_key = VISION_PREFIX + "model.patch_generator.cls_token.token"
    pos_key = VISION_PREFIX + "model.patch_generator.pos_embed"
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
    image_token_id = first(raw, "img_context_token_id", "image_token_id")
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
    from safetensors import safe_open  # lazy: safetensors (optional: the 'local' extra)

    values: list[tuple[float, ...]] = []
    for key in _CONDITIONER_KEYS:
        path = next((f for f in info.weight_files if key in safetensors_shapes(f)), None)
        if path is None:
            break
        with safe_open(str(path), framework="pt") as fh:
            values.append(tuple(float(v) for v in fh.get_tensor(key).float().flatten().tolist()))
    if len(values) == 2 and all(len(v) == 3 for v in values):
        for what, buffer, stated in (("mean", values[0], info.norm_mean), ("std", values[1], info.norm_std)):
            # the buffers may be stored in bf16 (8-bit mantissa): compare to 1 %
            if stated is not None and any(not math.isclose(a, b, rel_tol=1e-2) for a, b in zip(buffer, stated,
                                                                                                strict=True)):
                log.warning("Holotron: the checkpoint's input_conditioner %s %s differs from the files' %s; "
                            "using the checkpoint's", what, list(buffer), list(stated))
        return values[0], values[1], "checkpoint input_conditioner buffers"
    if info.norm_mean is not None and info.norm_std is not None:
        return info.norm_mean, info.norm_std, info.norm_from
    raise ModelLoadError(
        f"no input normalisation (norm_mean/norm_std) found in {info.folder}",
        hint="The checkpoint lacks vision_model.radio_model.input_conditioner buffers and config values.",
    )


