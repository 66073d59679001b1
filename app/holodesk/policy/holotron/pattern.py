"""The hybrid block pattern of a Nemotron-H language model: which block is Mamba-2, attention, MLP or
MoE, as ``hybrid_override_pattern`` writes it (``M``, ``*``, ``-``, ``E``), read from ``config.json``
and checked against each block's tensors."""

from __future__ import annotations

import re
from typing import Any

from holodesk.errors import ModelLoadError

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


def block_counts(pattern: str) -> dict[str, int]:
    """Blocks per kind of a block pattern, e.g. ``{"Mamba-2": 28, "attention": 6, "MLP": 28}``."""
    return {name: pattern.count(ch) for ch, name in BLOCK_NAMES.items() if ch in pattern}


def pattern_words(pattern: str) -> str:
    """A block pattern in words, e.g. ``"62 blocks: 28 Mamba-2 / 6 attention / 28 MLP"``."""
    return f"{len(pattern)} blocks: " + " / ".join(f"{n} {name}" for name, n in block_counts(pattern).items())


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
                f"llm_config.{listed_name} ({pattern_words(listed)}) disagrees with hybrid_override_pattern "
                f"({pattern_words(pattern)}) at {len(differ)} block(s), first {differ[:5]}; the pattern is used"
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
