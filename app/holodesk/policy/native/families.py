"""The load-time dispatch rule of the H Company model families Holodesk runs locally (the families themselves are
declared once, in the model table: :data:`holodesk.policy.models.FAMILIES`).

A checkpoint's ``config.json`` decides its runtime (:func:`family_of`):

* ``NemotronH_Nano_VL_V2`` whose language model has no MoE block (Holotron-12B's dense Mamba-2 /
  attention / MLP pattern) -> Holodesk's own Holotron runtime (:mod:`holodesk.policy.holotron`);
* ``qwen3_vl`` and ``qwen3_vl_moe`` (Holo2), ``qwen3_5`` and ``qwen3_5_moe`` (Holo3 / Holo3.1), and Nemotron-H Omni
  checkpoints whose language model has MoE blocks (Holotron-3-Nano, built on Nemotron 3 Nano Omni), in
  transformers' layout (``nemotron_h_omni``) or in the published remote-code one (``NemotronH_Nano_Omni_Reasoning_V3``
  with ``llm_config`` / ``vision_config`` / ``sound_config``, read through transformers' own config class, which
  maps those names: :func:`native_config`) -> transformers' own classes (:mod:`holodesk.policy.native`);
* anything else -> :class:`~holodesk.errors.ModelLoadError` naming what is supported.

Pure Python: no torch or transformers import (the doctor and the settings can read a checkpoint's family).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Final

from holodesk.errors import ModelLoadError
from holodesk.policy.holotron.pattern import resolve_block_pattern
from holodesk.policy.models import (
    FAMILIES,
    HOLOTRON,
    MODELS,
    NATIVE_FAMILIES,
    NEMOTRON_H_OMNI,
    QWEN3_5,
    QWEN3_5_MOE,
    QWEN3_VL,
    QWEN3_VL_MOE,
    Family,
    find_model,
)

log = logging.getLogger(__name__)

_NEMOTRON_TYPES: Final = frozenset(HOLOTRON.model_types + NEMOTRON_H_OMNI.model_types)


def supported_text() -> str:
    """The supported checkpoints in words, one family per clause (for error messages and the docs)."""
    return "; ".join(f"{f.models}: model_type {' or '.join(f.model_types)}{_kind(f)}" for f in FAMILIES)


_RUNTIME_WORDS: Final = {"holotron": "Holodesk's static decoder (`HolotronPolicy`, docs/holotron-runtime.md)",
                         "native": "transformers' classes (`NativePolicy`)"}


def _kind(family: Family) -> str:
    """How a Nemotron-H family is told apart from the other one of the same ``model_type`` (else "")."""
    return " with MoE blocks" if family is NEMOTRON_H_OMNI else " without MoE blocks" if family is HOLOTRON else ""


def families_markdown() -> str:
    """The families as the Markdown table of docs/native-families.md: key, ``config.json`` ``model_type``, the
    table's models (:data:`holodesk.policy.models.MODELS` entries pointing to it) and runtime, one row each."""
    rows = ["| family key (`--family`) | `config.json` `model_type` | models | runtime |", "|---|---|---|---|"]
    for family in FAMILIES:
        types = " or ".join(f"`{t}`" for t in family.model_types) + _kind(family)
        models = ", ".join(m.display_name for m in MODELS if m.family is family)
        rows.append(f"| `{family.key}` | {types} | {models} | {_RUNTIME_WORDS[family.runtime]} |")
    return "\n".join(rows) + "\n"


def family_by_key(key: str) -> Family:
    """The family called ``key`` (:attr:`Family.key`).

    Raises:
        ModelLoadError: for an unknown key; the message lists the known ones.
    """
    for family in FAMILIES:
        if family.key == key:
            return family
    raise ModelLoadError(f"unknown model family {key!r}",
                         hint="Known families: " + ", ".join(f.key for f in FAMILIES) + ".")


def language_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config.json: ``text_config`` (transformers), ``llm_config`` (remote
    code), else the config itself."""
    for key in ("text_config", "llm_config"):
        value = config.get(key)
        if isinstance(value, dict):
            return value
    return config


def nemotron_block_pattern(config: dict[str, Any], where: str = "config.json") -> str:
    """The Nemotron-H block pattern (``M`` Mamba-2, ``*`` attention, ``-`` MLP, ``E`` MoE) of a
    config.json (:func:`holodesk.policy.holotron.pattern.resolve_block_pattern`, without weights).

    Raises:
        ModelLoadError: the config states no block types, or unknown ones.
    """
    pattern, _notes = resolve_block_pattern(language_config(config), {}, where)
    return pattern


def family_of(config: dict[str, Any], where: str = "config.json") -> Family:
    """The family of a parsed ``config.json`` (the dispatch rule in the module docstring).

    Raises:
        ModelLoadError: an unsupported ``model_type`` (the message lists the supported ones), or a Nemotron
            config whose block types cannot be read or whose kind (dense / MoE) does not fit its type.
    """
    model_type = config.get("model_type")
    if model_type in _NEMOTRON_TYPES:
        moe = "E" in nemotron_block_pattern(config, where)
        if model_type in HOLOTRON.model_types and not moe:
            return HOLOTRON
        if model_type in NEMOTRON_H_OMNI.model_types and moe:
            return NEMOTRON_H_OMNI
        raise ModelLoadError(
            f"{where} has model_type {model_type!r} with a {'MoE' if moe else 'dense'} language model, which "
            "Holodesk does not run locally",
            hint=f"Supported: {supported_text()}. Use the remote policy for other models.",
        )
    for family in NATIVE_FAMILIES:
        if model_type in family.model_types:
            return family
    raise ModelLoadError(
        f"{where} has model_type {model_type!r}, which Holodesk does not run locally",
        hint=f"Supported: {supported_text()}. Use the remote policy for other models.",
    )


def native_config(config: dict[str, Any], family: Family, where: str = "config.json") -> Any:
    """transformers' config object for a checkpoint whose ``config.json`` names its family by another
    ``model_type`` than transformers' (the published remote-code layout, e.g. ``NemotronH_Nano_Omni_Reasoning_V3``):
    the same fields, built with the config class of transformers' ``model_type`` (:attr:`Family.key`), which reads
    the released names (``llm_config``, ``sound_config``, ...); None when the checkpoint is in transformers' layout
    already (``from_pretrained`` reads it itself). Imports transformers.

    Raises:
        ModelLoadError: transformers' config class rejects the fields (the message names the error).
    """
    if config.get("model_type") == family.key:
        return None
    from transformers import AutoConfig  # lazy: transformers (optional, heavy)

    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "auto_map")}
    try:
        return AutoConfig.for_model(family.key, **fields)
    except (TypeError, ValueError, KeyError) as exc:
        raise ModelLoadError(
            f"{where} has the published layout {config.get('model_type')!r}, which transformers' {family.key} "
            f"configuration cannot read: {type(exc).__name__}: {exc}",
            hint="Update transformers, or use the remote policy (vLLM serves it with --trust-remote-code).") from None


def read_config(folder: str | Path) -> dict[str, Any]:
    """``config.json`` of a checkpoint folder.

    Raises:
        ModelLoadError: the folder or the file is missing, unreadable, or not a JSON object.
    """
    path = Path(folder) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"config.json is missing from {path.parent}",
                             hint="Point Holodesk at the folder that holds config.json and the .safetensors "
                                  "files.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(f"{path} could not be read: {exc}") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"{path} does not hold a JSON object")
    return data


def read_family(folder: str | Path) -> Family:
    """The family of the checkpoint in ``folder`` (:func:`family_of` of its config.json).

    Raises:
        ModelLoadError: see :func:`read_config` and :func:`family_of`.
    """
    return family_of(read_config(folder), str(Path(folder) / "config.json"))


__all__ = ["FAMILIES", "HOLOTRON", "NATIVE_FAMILIES", "NEMOTRON_H_OMNI", "QWEN3_5", "QWEN3_5_MOE", "QWEN3_VL",
           "QWEN3_VL_MOE", "Family", "families_markdown", "family_by_key", "family_of", "language_config",
           "native_config", "nemotron_block_pattern", "read_config", "read_family", "supported_text"]


def check_checkpoint_before_weights(folder: Path, repo_id: str) -> None:
    """Refuse, before any weight is downloaded, a checkpoint Holodesk cannot run locally: its family from
    ``config.json`` (:func:`family_of`: the published layouts, remote-code
    names included, or the reason it is refused), and its size from ``model.safetensors.index.json``
    (``metadata.total_size``) against the model table's bf16 size when ``repo_id`` is a listed model.

    Raises:
        ModelLoadError: no or unreadable config.json, an unsupported family, or weights whose size is not
            within half to 1.5 times what the model table gives for the model (the message gives both).
    """
    # lazy: kept (GPU runtime, not re-checked this session); a light module: could move to the top
    from holodesk.core.units import format_bytes

    config = read_config(folder)
    family = family_of(config, f"{repo_id}'s config.json")
    index_path = folder / "model.safetensors.index.json"
    spec = find_model(repo_id)
    if not index_path.exists():
        log.info("%s: %s checkpoint, no weight index to check its size against", repo_id, family.models)
        return
    try:
        total = int(json.loads(index_path.read_text(encoding="utf-8"))["metadata"]["total_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"{repo_id}'s model.safetensors.index.json gives no weight size ({exc})",
                             hint="The repo is incomplete or not a transformers checkpoint.") from None
    log.info("%s: %s checkpoint, %s of weights", repo_id, family.models, format_bytes(total))
    if spec is not None and not 0.5 * spec.download_bytes <= total <= 1.5 * spec.download_bytes:
        raise ModelLoadError(
            f"{repo_id} holds {format_bytes(total)} of weights where {spec.display_name} in bf16 is about "
            f"{format_bytes(spec.download_bytes)}: not the checkpoint Holodesk lists for it",
            hint="Check the repo id, or download it by hand and give Holodesk its folder.")
