"""The policy models Holodesk knows, declared once: H Company's Holotron, Holo2, Holo3 and Holo3.1 families.

Pure data and small functions (no torch, no transformers): the wizard, the Settings model picker,
``holodesk doctor``, the remote policy (which contract to speak) and the download dialog all read this
table, so a model is added or corrected here and nowhere else.

Each :class:`ModelSpec` carries the model's hub id, its architecture (the ``model_type`` transformers
dispatches on and the transformers class that loads it without remote code), its parameter count and
checkpoint size, the action protocol Holodesk speaks with it (H Company's ``agent-loop-v1`` for every model
here: published for Holo3 / Holo3.1 [AGENT-LOOP] and Holotron-3-Nano [HOLO-NANO]; for Holotron-12B
and Holo2 no source says which contract they were trained on), its image preprocessing, its reasoning
switch, its run profile (:class:`Profile`: reasoning, sampling, think and image budgets, each with its
source) and its license. Memory needs per precision are not
stored: they follow from the parameter count through the one fit rule of :mod:`holodesk.core.fit`.

Sources (read 2026-12-01; facts not found there are None and shown as "unknown"):

* [HF-COLL] Hugging Face collections of H Company: huggingface.co/collections/Hcompany/holotron, .../holo2,
  .../holo3, .../holo31 -- hub ids and the parameter counts the hub lists (rounded to 1B).
* [HOLOTRON] shared/docs/holotron.md (Holotron-12B card, config and checkpoint facts checked there).
* [BENCH] docs/benchmarks.md: Holotron-12B's 24.56 GiB of bf16 weights, measured.
* [COOKBOOK] github.com/hcompai/hai-cookbook (commit 2ba8961): holo2/deploy_with_vllm.md (vLLM flags,
  ``--reasoning-parser holo2``, thinking on by default, ``chat_template_kwargs {"thinking": false}``) and
  holo2/holo_2_localization_huggingface.ipynb (Qwen3-VL base, ``AutoModelForImageTextToText``, sizes
  4B / 8B / 30B-A3B, resize with the processor's ``patch_size x merge_size`` and its size limits).
* [HUB-MODELS] hub.hcompany.ai/models: Holo3.1-35B-A3B is MoE 35B / 3B active, Apache 2.0; the Holo3.1
  collection also has 0.8B, 4B and 9B; at most 5 images per request on H Company's API.
* [HUB-API] hub.hcompany.ai/models-api/chat-completions: ``chat_template_kwargs {"enable_thinking": bool}``
  toggles Holo3.x's reasoning channel.
* [VLLM-QWEN35] docs.vllm.ai/projects/recipes/en/latest/Qwen/Qwen3.5.html: Qwen3.5 / Qwen3.6 are
  served with ``--reasoning-parser qwen3``.
* [TRANSFORMERS] transformers 5.23 source (models/auto, models/nemotron_h_omni): the classes named here
  and the Nemotron Omni image processor's defaults.
* [NEMO-CUA] github.com/NVIDIA-NeMo/Nemotron (commit e27b371),
  usage-cookbook/Nemotron-3-Nano-Omni/computer-use-agent-with-omni: README.md (vLLM 0.20.0 serving
  Hcompany/Holotron-3-Nano, "the same Omni-Nano-v3 backbone" as Nemotron 3 Nano Omni) and
  server/holotron_agent.py (``chat_template_kwargs {"enable_thinking": False}`` when thinking is off).
* [AGENT-LOOP] hub.hcompany.ai/agent-loop (and its .md revisions, read 2026-12-06): Holo3 / Holo3.1 in agent
  mode; reasoning "essential ... leave it on" with ``reasoning_effort`` "medium"; the last 3 screenshots kept,
  older ones replaced by a placeholder; the schema enforced by the decoder and shown in ``<output_format>``.
* [HOLO-NANO] the same NVIDIA cookbook's server/holotron_agent.py, "H Company's official holo-nano loop": thinking
  on, ``reasoning_effort`` "medium", temperature 0.8, top_p 0.95, ``max_tokens`` 4096, the last 3 images.
* [OSWORLD-AGENT] H Company's OSWorld agent for the Nemotron-3-Nano-Omni family (shared/docs/holotron.md): samples
  at temperature 0.8 (top_p not set), keeps 2 images; the one H Company harness that states a temperature.
* [ELEMENT-LOC] hub.hcompany.ai/element-localization: its own prompt, temperature 0, thinking off.
* Third-party pages, marked where used: Holo3-35B-A3B is a fine-tune of Qwen/Qwen3.5-35B-A3B with
  ``model_type`` qwen3_5_moe (OsaurusAI/Holo3-35B-A3B-mxfp4 card); Holo-3.1-35B-A3B is a fine-tune of
  Qwen/Qwen3.6-35B-A3B, ``model_type`` qwen3_5_moe (GazTrab/Holo-3.1-35B-A3B-oQ8-mtp card, Baseten's
  Holo 3.1 page).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Final, Literal

from holodesk.core.fit import (
    CHECKPOINT_BYTES,
    HOLOTRON_12B_PARAMETERS,
    PRECISIONS,
    PrecisionFit,
    best_precision,
    disk_fits,
    explain_precision,
    needs_free_bytes,
    precision_fits,
)
from holodesk.core.units import format_bytes
from holodesk.errors import SettingsError
from holodesk.policy.protocol import DEFAULT_PROTOCOL, PROTOCOL_NAMES

AUTO_PROTOCOL: Final = "auto"
"""The ``protocol`` setting's value meaning "the protocol the registry declares for the model"."""

UNKNOWN: Final = "unknown"
"""How a fact the sources do not give is shown to people."""


@dataclass(frozen=True)
class Architecture:
    """How a checkpoint is built and which transformers class loads it (never remote code).

    Attributes:
        model_type: the ``model_type`` transformers dispatches on (``nemotron_h_omni``, ``qwen3_vl``, ...).
        transformers_class: the class of transformers (5.23) that loads it, e.g.
            ``Qwen3VLForConditionalGeneration``.
        checkpoint_model_type: what the checkpoint's own config.json says when it differs from
            ``model_type`` (Holotron-12B: ``NemotronH_Nano_VL_V2``, translated at load); None when the same
            or not read.
        summary: the architecture in words.
        verified: False when ``model_type`` was inferred from the base model rather than read from the
            checkpoint's config.json or its card.
    """

    model_type: str
    transformers_class: str
    summary: str
    checkpoint_model_type: str | None = None
    verified: bool = True


@dataclass(frozen=True)
class ImagePreprocessing:
    """How the model's processor turns a screenshot into image tokens.

    Attributes:
        method: ``"tiles"`` (fixed tiles + thumbnail, Holotron-12B) or ``"dynamic"`` (the image resized to a
            multiple of the patch grid within a pixel budget, keeping its aspect ratio).
        patch_px: side of one vision patch, pixels; None: unknown.
        pixels_per_token: side, in pixels, of the square one image token covers (patch x merge); None:
            unknown.
        tile_px, max_tiles: tiling only: tile side and most tiles (a thumbnail is added when more than one).
        min_pixels, max_pixels: dynamic only: the pixel budget of one image; None: unknown (the checkpoint's
            preprocessor_config.json decides; it was not read).
        note: where the values come from.
    """

    method: Literal["tiles", "dynamic"]
    patch_px: int | None
    pixels_per_token: int | None
    note: str
    tile_px: int | None = None
    max_tiles: int | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None

    def describe(self) -> str:
        """One line, e.g. ``"tiles of 512 px, at most 12 + a thumbnail"``; unknown values say "unknown"."""
        if self.method == "tiles":
            return f"tiles of {self.tile_px} px, at most {self.max_tiles} + a thumbnail"

        def px(v: int | None) -> str:
            return UNKNOWN if v is None else f"{v:,} px"

        per_token = UNKNOWN if self.pixels_per_token is None else f"{self.pixels_per_token} px"
        return (f"dynamic resolution, one token per {per_token} square, "
                f"{px(self.min_pixels)} to {px(self.max_pixels)} per image")


@dataclass(frozen=True)
class Reasoning:
    """How the model's reasoning channel is switched, and what it does unswitched.

    Attributes:
        switch: ``"system_prompt"`` (a ``/think`` or ``/no_think`` line, Nemotron Nano 2) or
            ``"chat_template_kwargs"`` (a chat-template variable sent with the request).
        template_kwarg: the chat-template variable (``"thinking"`` for Holo2, ``"enable_thinking"`` for
            Holo3.x and Nemotron 3); None for ``system_prompt``.
        on_by_default: whether the model reasons when nothing switches it; None: unknown.
        vllm_reasoning_parser: vLLM's ``--reasoning-parser`` for it; None: none found in the sources.
    """

    switch: Literal["system_prompt", "chat_template_kwargs"]
    template_kwarg: str | None
    on_by_default: bool | None
    vllm_reasoning_parser: str | None

    @property
    def prompt_line(self) -> bool:
        """True when the switch is a ``/think`` / ``/no_think`` line the protocol writes into the system prompt
        (Nemotron Nano 2); False for every model switched by a chat-template variable, whose prompt must not
        carry such a line (it is text to them)."""
        return self.switch == "system_prompt"

    def template_kwargs(self, reasoning: bool) -> dict[str, bool]:
        """The ``chat_template_kwargs`` a request carries to switch reasoning on or off ({} for models
        switched in the system prompt, which the action protocol writes)."""
        if self.switch != "chat_template_kwargs" or self.template_kwarg is None:
            return {}
        return {self.template_kwarg: reasoning}


@dataclass(frozen=True)
class Profile:
    """How Holodesk runs the model by default: what its makers publish where they publish it, else
    Holodesk's choice with the reason (docs/model-fidelity.md lists every point with its source and test).

    Attributes:
        reasoning: think before acting by default (the ``reasoning`` setting's ``"auto"``).
        reasoning_effort: the ``reasoning_effort`` the published harness sends with reasoning on (``"medium"``),
            sent by the remote policy; None: none published.
        think_budget: most tokens of thought, after which ``</think>`` is forced.
        temperature: sampling temperature of an agent step (0: greedy); top_p: nucleus mass, in (0, 1].
        max_images: screenshots kept in the prompt as images, the current one included.
        sources: ``(point, where it comes from)`` pairs, one per attribute above.
    """

    reasoning: bool
    reasoning_effort: str | None
    think_budget: int
    temperature: float
    top_p: float
    max_images: int
    sources: tuple[tuple[str, str], ...]


Runtime = Literal["holotron", "native"]
"""Which local runtime runs a family: Holodesk's Holotron runtime or transformers' own classes."""


@dataclass(frozen=True)
class Family:
    """One architecture family: how its checkpoints are recognised, which runtime runs them and how its models are
    run. Every :class:`ModelSpec` points to one; the load-time dispatch
    (:func:`holodesk.policy.native.families.family_of`) returns one.

    Attributes:
        key: the ``--family`` name (transformers' ``model_type``, or ``holotron`` for Holotron-12B).
        model_types: ``config.json`` ``model_type`` values of the family (transformers' name first).
        runtime: ``"holotron"`` (Holodesk's static decoder) or ``"native"`` (transformers' classes).
        models: the H Company models of the family, in words.
        architecture: the architecture in words.
        profile: how Holodesk runs its models by default (see :class:`Profile`).
        reasoning: how their reasoning channel is switched (see :class:`Reasoning`).
        image: how their processor turns a screenshot into image tokens (see :class:`ImagePreprocessing`).
        moe: True when the family's language model is a mixture of experts.
        protocol: the action protocol Holodesk speaks with its models (a name of
            :data:`holodesk.policy.protocol.PROTOCOL_NAMES`).
    """

    key: str
    model_types: tuple[str, ...]
    runtime: Runtime
    models: str
    architecture: str
    profile: Profile
    reasoning: Reasoning
    image: ImagePreprocessing
    moe: bool = False
    protocol: str = "agent-loop-v1"


@dataclass(frozen=True)
class ModelSpec:
    """One policy model.

    Attributes:
        key: short stable name (``"holo2-8b"``).
        display_name: what people see (``"Holo2-8B"``).
        hub_id: Hugging Face repo id, ``owner/name``; the download fetches it.
        series: ``"Holotron-12B"``, ``"Holotron-3-Nano"``, ``"Holo2"``, ``"Holo3"`` or ``"Holo3.1"`` (how people
            name the models of one release; the ``model`` setting's description lists them).
        family: its architecture family (:class:`Family`: runtime, profile, reasoning switch, images, protocol).
        architecture: see :class:`Architecture`.
        parameters: total parameters (the hub's listing, rounded to 1B, except where measured).
        active_parameters: parameters used per token for mixture-of-experts models; None for dense models.
        license: the license's name; None: unknown.
        base_model: the model it was post-trained from; None: unknown.
        checkpoint_bytes: download size of the bf16 checkpoint when measured; None: estimated from the
            parameters (:attr:`download_bytes`).
        notes: facts that could not be verified, in words.
    """

    key: str
    display_name: str
    hub_id: str
    series: str
    family: Family
    architecture: Architecture
    parameters: int
    active_parameters: int | None
    license: str | None
    base_model: str | None
    checkpoint_bytes: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def download_bytes(self) -> int:
        """Bytes of the bf16 checkpoint: measured when known, else 2 bytes per parameter (an estimate)."""
        return self.checkpoint_bytes if self.checkpoint_bytes is not None else 2 * self.parameters

    def needs_free_bytes(self, precision: str) -> int:
        """Free GPU memory it needs at ``precision`` (the rule of :mod:`holodesk.core.fit`)."""
        return needs_free_bytes(self.parameters, precision)

    def precision_fits(self, free_bytes: int | None) -> list[PrecisionFit]:
        """Each precision with its need and whether it fits ``free_bytes`` (None: no GPU measured)."""
        return precision_fits(free_bytes, self.parameters)

    def best_precision(self, free_bytes: int | None) -> str | None:
        """The most faithful precision that fits ``free_bytes``; None when none fits or unknown."""
        return best_precision(free_bytes, self.parameters)

    def explain_fit(self, free_bytes: int | None, gpu_name: str = "this GPU") -> str:
        """Plain sentences saying which precision fits and why."""
        return explain_precision(free_bytes, gpu_name, model=self.display_name, parameters=self.parameters)

    def disk_fits(self, free_bytes: int) -> bool:
        """True when ``free_bytes`` of disk hold its checkpoint plus the margin."""
        return disk_fits(free_bytes, self.download_bytes)

    def size_text(self) -> str:
        """``"9B parameters"`` or ``"35B parameters (3B active)"``."""
        text = f"{_billions(self.parameters)} parameters"
        if self.active_parameters is not None:
            text += f" ({_billions(self.active_parameters)} active)"
        return text


def _billions(n: int) -> str:
    value = n / 1e9
    return f"{value:.1f}B" if value < 10 and value != int(value) else f"{value:.0f}B"


_B = 1_000_000_000

_HOLO2_IMAGE = ImagePreprocessing(
    "dynamic", patch_px=16, pixels_per_token=32,
    note="Qwen3-VL processor: patch 16 px, 2x2 merge [COOKBOOK, TRANSFORMERS]; the pixel budget is the "
         "checkpoint's preprocessor_config.json size (not read: unknown)")
_QWEN35_IMAGE = ImagePreprocessing(
    "dynamic", patch_px=16, pixels_per_token=None,
    note="Qwen3.5 uses transformers' Qwen3VLProcessor [TRANSFORMERS]; patch 16 px per a third-party card "
         "(OsaurusAI); merge and pixel budget come from the checkpoint's preprocessor_config.json (not read)")
_NEMOTRON_OMNI_IMAGE = ImagePreprocessing(
    "dynamic", patch_px=16, pixels_per_token=32, min_pixels=1024 * 16 * 16, max_pixels=13312 * 16 * 16,
    note="transformers' NemotronH_Omni_Reasoning_V3 image processor defaults: patch 16 px, pixel shuffle 0.5, "
         "1024 to 13312 patches [TRANSFORMERS]; the checkpoint's preprocessor_config.json may override them "
         "(not read)")

_HOLO2_REASONING = Reasoning("chat_template_kwargs", "thinking", on_by_default=True, vllm_reasoning_parser="holo2")
_HOLO3_REASONING = Reasoning("chat_template_kwargs", "enable_thinking", on_by_default=None,
                             vllm_reasoning_parser="qwen3")
_NO_TEMPERATURE = ("temperature", "no temperature is published for this model's agent loop: Holodesk samples at "
                   "0.8 as H Company's OSWorld agent does [OSWORLD-AGENT] (greedy agents tend to repeat an action)")
_NO_TOP_P = ("top_p", "not published: 1.0 (no nucleus cut), as H Company's OSWorld agent sends none [OSWORLD-AGENT]")
_NO_BUDGET = ("think_budget", "not published: Holodesk cuts thought at 2,048 tokens so a step stays bounded")
_HOLO3_PROFILE = Profile(
    reasoning=True, reasoning_effort="medium", think_budget=2048, temperature=0.8, top_p=1.0, max_images=3,
    sources=(("reasoning", "on: 'essential in agent mode, leave it on' [AGENT-LOOP]"),
             ("reasoning_effort", "'medium' [AGENT-LOOP]"), _NO_BUDGET, _NO_TEMPERATURE, _NO_TOP_P,
             ("max_images", "the last 3 screenshots [AGENT-LOOP]")))
_HOLO2_PROFILE = Profile(
    reasoning=True, reasoning_effort=None, think_budget=2048, temperature=0.8, top_p=1.0, max_images=3,
    sources=(("reasoning", "on: Holo2 thinks by default, switched off only for localization [COOKBOOK]"),
             ("reasoning_effort", "none published (Holo2's switch is the template's 'thinking') [COOKBOOK]"),
             _NO_BUDGET, _NO_TEMPERATURE, _NO_TOP_P,
             ("max_images", "not published: 3, as the agent-loop contract of Holo3 [AGENT-LOOP]")))
_HOLOTRON_3_NANO_PROFILE = Profile(
    reasoning=True, reasoning_effort="medium", think_budget=3072, temperature=0.8, top_p=0.95, max_images=3,
    sources=(("reasoning", "on: thinking=True [HOLO-NANO]"), ("reasoning_effort", "'medium' [HOLO-NANO]"),
             ("think_budget", "max_tokens 4096 for thought and reply [HOLO-NANO]: 3,072 of thought + the 1,024 "
                              "reply tokens Holodesk allows"),
             ("temperature", "0.8 [HOLO-NANO] (H Company's OSWorld agent also 0.8, but keeps 2 images and 16 tools: "
                             "the holo-nano loop published for this model is followed)"),
             ("top_p", "0.95 [HOLO-NANO]"), ("max_images", "the last 3 images [HOLO-NANO]")))
_HOLOTRON_12B_PROFILE = Profile(
    reasoning=False, reasoning_effort=None, think_budget=1024, temperature=0.8, top_p=0.95, max_images=3,
    sources=(("reasoning", "no public source: off, because its switch is Nemotron Nano 2's /think line, no agent "
                           "trace with thought is published for it, and Holodesk's measured runs (docs/benchmarks.md) "
                           "are without; 'think before acting' turns it on"),
             ("reasoning_effort", "no public source: none (Nemotron Nano 2 has no effort levels)"),
             ("think_budget", "no public source: 1,024 tokens when turned on"),
             ("temperature", "no public source: 0.8 as H Company's published loop for its sibling "
                             "Holotron-3-Nano [HOLO-NANO]"),
             ("top_p", "no public source: 0.95 as Holotron-3-Nano [HOLO-NANO]"),
             ("max_images", "no public source: 3 as Holotron-3-Nano [HOLO-NANO]")))

HOLOTRON: Final = Family("holotron", ("NemotronH_Nano_VL_V2",), "holotron", "Holotron-12B",
                         "Nemotron Nano 2 VL: RADIO + hybrid Mamba-2 / attention / MLP (dense)",
                         _HOLOTRON_12B_PROFILE,
                         Reasoning("system_prompt", None, on_by_default=None, vllm_reasoning_parser=None),
                         ImagePreprocessing("tiles", patch_px=16, pixels_per_token=32, tile_px=512, max_tiles=12,
                                            note="InternVL-style tiling [HOLOTRON]"))
QWEN3_VL: Final = Family("qwen3_vl", ("qwen3_vl",), "native", "Holo2 (e.g. Holo2-8B)",
                         "Qwen3-VL: ViT with DeepStack + dense transformer", _HOLO2_PROFILE, _HOLO2_REASONING,
                         _HOLO2_IMAGE)
QWEN3_VL_MOE: Final = Family("qwen3_vl_moe", ("qwen3_vl_moe",), "native", "Holo2, MoE sizes (Holo2-30B-A3B)",
                             "Qwen3-VL-MoE: ViT with DeepStack + MoE transformer", _HOLO2_PROFILE, _HOLO2_REASONING,
                             _HOLO2_IMAGE, moe=True)
QWEN3_5: Final = Family("qwen3_5", ("qwen3_5",), "native", "Holo3 / Holo3.1, dense sizes",
                        "Qwen3.5: ViT + hybrid Gated DeltaNet / attention, dense MLP", _HOLO3_PROFILE,
                        _HOLO3_REASONING, _QWEN35_IMAGE)
QWEN3_5_MOE: Final = Family("qwen3_5_moe", ("qwen3_5_moe",), "native",
                            "Holo3 / Holo3.1, MoE sizes (e.g. Holo3-35B-A3B)",
                            "Qwen3.5-MoE: ViT + hybrid Gated DeltaNet / attention, MoE", _HOLO3_PROFILE,
                            _HOLO3_REASONING, _QWEN35_IMAGE, moe=True)
NEMOTRON_H_OMNI: Final = Family("nemotron_h_omni", ("nemotron_h_omni", "NemotronH_Nano_Omni_Reasoning_V3"), "native",
                                "Holotron-3-Nano (Nemotron 3 Nano Omni)",
                                "Nemotron-H Omni: RADIO + hybrid Mamba-2 / attention / MoE", _HOLOTRON_3_NANO_PROFILE,
                                Reasoning("chat_template_kwargs", "enable_thinking", on_by_default=True,
                                          vllm_reasoning_parser="nemotron_v3"),
                                _NEMOTRON_OMNI_IMAGE, moe=True)

FAMILIES: Final[tuple[Family, ...]] = (HOLOTRON, QWEN3_VL, QWEN3_VL_MOE, QWEN3_5, QWEN3_5_MOE, NEMOTRON_H_OMNI)
"""Every family Holodesk runs locally, in the order they are listed to the user."""

NATIVE_FAMILIES: Final = tuple(f for f in FAMILIES if f.runtime == "native")

_QWEN35_ARCH = Architecture(
    "qwen3_5", "Qwen3_5ForConditionalGeneration",
    "Qwen3.5 dense: Gated DeltaNet linear attention + full attention, vision tower", verified=False)
_QWEN35_MOE_ARCH = Architecture(
    "qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration",
    "Qwen3.5 mixture of experts: Gated DeltaNet linear attention + full attention, 256 experts, vision tower")


def _holo31_dense(size: str, parameters: int, *notes: str) -> ModelSpec:
    """The dense Holo3.1 model of ``size`` (``"4B"``), hub id ``Hcompany/Holo-3.1-<size>``, with ``parameters`` as
    the hub lists them; its config.json, base model and license were not read (``notes`` adds to that)."""
    return ModelSpec(
        key=f"holo3.1-{size.lower()}", display_name=f"Holo3.1-{size}", hub_id=f"Hcompany/Holo-3.1-{size}",
        series="Holo3.1", family=QWEN3_5, architecture=_QWEN35_ARCH, parameters=parameters, active_parameters=None,
        license=None, base_model=None,
        notes=("model_type qwen3_5 (dense) is assumed from the family; config.json, base model and license were not "
               "read.", *notes))


MODELS: Final[tuple[ModelSpec, ...]] = (
    ModelSpec(
        key="holotron-12b", display_name="Holotron-12B", hub_id="Hcompany/Holotron-12B", series="Holotron-12B",
        family=HOLOTRON,
        architecture=Architecture(
            "nemotron_h_omni", "NemotronH_Omni_Reasoning_V3",
            "Nemotron-H hybrid: Mamba-2 + attention (dense), RADIO vision tower",
            checkpoint_model_type="NemotronH_Nano_VL_V2"),
        parameters=HOLOTRON_12B_PARAMETERS, active_parameters=None, license="NVIDIA Open Model License",
        base_model="nvidia/NVIDIA-Nemotron-Nano-12B-v2-VL-BF16",
        checkpoint_bytes=CHECKPOINT_BYTES,
        notes=("Reasoning with no /think or /no_think line: unknown.",
               "vLLM reasoning parser: a plugin file shipped with NVIDIA's base checkpoint, not a built-in name.")),
    ModelSpec(
        key="holotron-3-nano", display_name="Holotron-3-Nano", hub_id="Hcompany/Holotron-3-Nano",
        series="Holotron-3-Nano", family=NEMOTRON_H_OMNI,
        architecture=Architecture(
            "nemotron_h_omni", "NemotronH_Omni_Reasoning_V3",
            "Nemotron 3 Nano Omni: hybrid Mamba-2 + attention with mixture-of-experts layers, RADIO vision "
            "tower", verified=False),
        parameters=33 * _B, active_parameters=3 * _B, license=None,
        base_model="NVIDIA Nemotron 3 Nano Omni (30B-A3B)",
        notes=("Reasoning switch, vLLM flags and the Omni-Nano-v3 backbone from NVIDIA's computer-use cookbook "
               "[NEMO-CUA], which serves Hcompany/Holotron-3-Nano with --reasoning-parser nemotron_v3 and sends "
               "chat_template_kwargs {'enable_thinking': false} to switch thinking off.",
               "The model card and config.json were not read: the checkpoint's model_type and the license are "
               "unknown.",
               "Parameters: 33B as the hub lists it; about 3B active per token (Nemotron 3 Nano Omni). Nemotron 3 "
               "Nano Omni's architecture as holodesk bench builds it (holodesk.bench.full_size.NEMOTRON_3_NANO_OMNI, "
               "transformers 5.23): 32.39B without the sound encoder, 0.61B more with it (about 33.0B); 4.39B per "
               "token with 6 of 128 experts (vision, embedding and head included).")),
    ModelSpec(
        key="holo2-4b", display_name="Holo2-4B", hub_id="Hcompany/Holo2-4B", series="Holo2", family=QWEN3_VL,
        architecture=Architecture("qwen3_vl", "Qwen3VLForConditionalGeneration",
                                  "Qwen3-VL dense transformer with vision tower"),
        parameters=4 * _B, active_parameters=None, license=None, base_model="Qwen3-VL Thinking (4B)",
        notes=("License not read from the model card: unknown.",)),
    ModelSpec(
        key="holo2-8b", display_name="Holo2-8B", hub_id="Hcompany/Holo2-8B", series="Holo2", family=QWEN3_VL,
        architecture=Architecture("qwen3_vl", "Qwen3VLForConditionalGeneration",
                                  "Qwen3-VL dense transformer with vision tower"),
        parameters=9 * _B, active_parameters=None, license="Apache 2.0",
        base_model="Qwen/Qwen3-VL-8B-Thinking",
        notes=("License and base model as a third-party survey quotes the model card (the card itself was "
               "not read).",
               "Qwen3-VL-8B's architecture as holodesk bench builds it (holodesk.bench.full_size.QWEN3_VL_8B): "
               "8.77B parameters.")),
    ModelSpec(
        key="holo2-30b-a3b", display_name="Holo2-30B-A3B", hub_id="Hcompany/Holo2-30B-A3B", series="Holo2",
        family=QWEN3_VL_MOE,
        architecture=Architecture("qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration",
                                  "Qwen3-VL mixture of experts with vision tower", verified=False),
        parameters=31 * _B, active_parameters=3 * _B, license=None, base_model="Qwen3-VL Thinking (30B-A3B)",
        notes=("model_type qwen3_vl_moe is the one of its base Qwen3-VL-30B-A3B; its own config.json was not "
               "read.", "License not read from the model card: unknown.")),
    ModelSpec(
        key="holo3-35b-a3b", display_name="Holo3-35B-A3B", hub_id="Hcompany/Holo3-35B-A3B", series="Holo3",
        family=QWEN3_5_MOE,
        architecture=_QWEN35_MOE_ARCH, parameters=35 * _B, active_parameters=3 * _B, license="Apache 2.0",
        base_model="Qwen/Qwen3.5-35B-A3B",
        notes=("Base model, model_type and license from third-party pages (OsaurusAI card, news coverage); the "
               "model card itself was not read.",
               "Its base model's architecture, per transformers' documented defaults (Qwen3_5MoeConfig, "
               "checkpoint Qwen/Qwen3.5-35B-A3B; holodesk.bench.full_size.qwen3_5_moe_35b_a3b): 35.11B parameters, "
               "3.90B per token with 8 of 256 experts (vision, embedding and head included).")),
    _holo31_dense("0.8B", 1 * _B, "Parameters: the hub lists 1B (rounded)."),
    _holo31_dense("4B", 5 * _B, "Parameters: the hub lists 5B (rounded)."),
    _holo31_dense("9B", 9 * _B),
    ModelSpec(
        key="holo3.1-35b-a3b", display_name="Holo3.1-35B-A3B", hub_id="Hcompany/Holo-3.1-35B-A3B",
        series="Holo3.1", family=QWEN3_5_MOE, architecture=_QWEN35_MOE_ARCH, parameters=35 * _B,
        active_parameters=3 * _B, license="Apache 2.0",
        base_model="Qwen/Qwen3.6-35B-A3B",
        notes=("Base model and model_type from third-party pages (Baseten, a derived MLX card); license from "
               "hub.hcompany.ai/models.",)),
)
"""Every model Holodesk offers, in the order the wizard and Settings list them."""

def series_names() -> tuple[str, ...]:
    """The series of the table's models, each once, in table order (``("Holotron-12B", "Holotron-3-Nano", "Holo2",
    ...)``): the models the ``model`` setting's description names."""
    return tuple(dict.fromkeys(m.series for m in MODELS))


DEFAULT_MODEL: Final = "holotron-12b"
"""Key of the model a new installation uses (the ``model`` setting's default is its hub id)."""

_BY_KEY: Final[dict[str, ModelSpec]] = {m.key: m for m in MODELS}
_CACHE_DIR = re.compile(r"^models--([^/]+?)--(.+)$")


def get_model(key: str) -> ModelSpec:
    """The model with this ``key``.

    Raises:
        SettingsError: unknown key; the message lists the known ones.
    """
    spec = _BY_KEY.get(key)
    if spec is None:
        raise SettingsError(f"unknown model {key!r}", hint="Known models: " + ", ".join(_BY_KEY) + ".")
    return spec


def find_model(name: str) -> ModelSpec | None:
    """The registry's model that ``name`` designates, or None.

    ``name`` is what the ``model`` setting holds: a hub id (``Hcompany/Holo2-8B``), a key (``holo2-8b``), a
    served model name (vLLM ``--served-model-name``, e.g. ``Holotron-12B`` or ``holo2-8b``), or a local
    folder -- a hub-cache snapshot (``.../models--Hcompany--Holo2-8B/snapshots/<commit>``) or a folder named
    after the repo. Matching ignores case.
    """
    text = name.strip()
    if not text:
        return None
    low = text.lower()
    for spec in MODELS:
        repo = spec.hub_id.split("/", 1)[1].lower()
        if low in (spec.key, spec.hub_id.lower(), repo, spec.display_name.lower()):
            return spec
    parts = PurePath(text).parts
    for part in reversed(parts):
        match = _CACHE_DIR.match(part)
        if match:
            return find_model(f"{match.group(1)}/{match.group(2)}")
    if len(parts) > 1:
        return find_model(parts[-1])
    return None


def hub_id_for(name: str) -> str:
    """The hub repo to download for ``name``: the registry model's hub id when ``name`` designates one
    (a key such as ``holo2-8b``, a served name, a hub id in any case), else ``name`` unchanged."""
    spec = find_model(name)
    return spec.hub_id if spec is not None else name


def protocol_for(model: str, protocol: str = AUTO_PROTOCOL) -> str:
    """The action protocol to speak with ``model``: :func:`protocol_of` its registry entry (:func:`find_model`).

    Raises:
        SettingsError: ``protocol`` is neither ``"auto"`` nor a known protocol name.
    """
    return protocol_of(find_model(model), protocol)


def protocol_of(spec: ModelSpec | None, protocol: str = AUTO_PROTOCOL) -> str:
    """The action protocol to speak with the model of registry entry ``spec`` (None: not in the registry):
    ``protocol`` itself when it names one (the user's override), else (``"auto"``) the entry's protocol, else
    :data:`DEFAULT_PROTOCOL` for a model the registry does not know.

    Raises:
        SettingsError: ``protocol`` is neither ``"auto"`` nor a known protocol name.
    """
    if protocol != AUTO_PROTOCOL:
        if protocol not in PROTOCOL_NAMES:
            raise SettingsError(f"unknown action protocol {protocol!r}",
                                hint="Use 'auto' or one of: " + ", ".join(PROTOCOL_NAMES) + ".")
        return protocol
    return spec.family.protocol if spec is not None else DEFAULT_PROTOCOL


UNKNOWN_PROFILE: Final = Profile(
    reasoning=False, reasoning_effort=None, think_budget=1024, temperature=0.8, top_p=1.0, max_images=3,
    sources=tuple((point, "the model is not in Holodesk's registry: Holodesk's default") for point in
                  ("reasoning", "reasoning_effort", "think_budget", "temperature", "top_p", "max_images")))
"""The profile of a model the registry does not know (a served name or a folder it cannot place)."""


def profile_for(model: str) -> Profile | None:
    """The registry profile of ``model`` (anything :func:`find_model` reads); None when it is not in the
    registry (callers use :data:`UNKNOWN_PROFILE` and say so)."""
    spec = find_model(model)
    return spec.family.profile if spec is not None else None


SEED_LIMIT: Final = 2**31
"""Seeds are in [0, 2**31) (the ``seed`` setting's range)."""


@dataclass(frozen=True)
class Sampling:
    """How each token of a reply is chosen (after the grammar's mask, where decoding is constrained).

    Attributes:
        greedy: take the most likely token; ``temperature`` and ``top_p`` are then unused.
        temperature: > 0, divides the logits before the softmax; top_p: in (0, 1], the smallest set of
            tokens whose probability reaches it is kept.
        seed: the run's seed; step ``n`` (0 = the first) draws from a generator seeded with
            :meth:`step_seed` ``(n)``, so a recorded run can be replayed exactly.
    """

    greedy: bool
    temperature: float
    top_p: float
    seed: int

    def __post_init__(self) -> None:
        if not self.greedy and not self.temperature > 0:
            raise SettingsError(f"temperature must be above 0 when sampling, got {self.temperature}",
                                hint="Set a temperature above 0 (the model profiles use 0.8), or turn greedy on.")
        if not 0 < self.top_p <= 1:
            raise SettingsError(f"top_p must be in (0, 1], got {self.top_p}", hint="Use e.g. 0.95, or 1 for no cut.")
        if not 0 <= self.seed < SEED_LIMIT:
            raise SettingsError(f"seed must be in [0, {SEED_LIMIT}), got {self.seed}")

    def step_seed(self, step: int) -> int:
        """The seed of step ``step`` (0-based): ``seed + step`` modulo :data:`SEED_LIMIT`."""
        return (self.seed + step) % SEED_LIMIT

    def record(self) -> dict[str, object]:
        """What the episode records: ``{"greedy", "temperature", "top_p", "seed"}``."""
        return {"greedy": self.greedy, "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}


GREEDY: Final = Sampling(greedy=True, temperature=0.0, top_p=1.0, seed=0)
"""Greedy decoding (tests, element localization [ELEMENT-LOC], benchmarks that compare replies)."""


@dataclass(frozen=True)
class RunChoice:
    """The generation settings one policy runs with: the model's profile where the user left ``"auto"``.

    Attributes:
        reasoning: think before acting.
        reasoning_effort: sent with reasoning on, where the profile publishes one; else None.
        think_budget: most tokens of thought.
        sampling: see :class:`Sampling`.
        profile: the profile used; known: False when the model is not in the registry
            (:data:`UNKNOWN_PROFILE`).
        notes: what came from where, in words (logged, and shown by ``holodesk doctor``).
    """

    reasoning: bool
    reasoning_effort: str | None
    think_budget: int
    sampling: Sampling
    profile: Profile
    known: bool
    notes: tuple[str, ...]


def run_choice(model: str, *, reasoning: str = "auto", greedy: bool = False, temperature: float | None = None,
               top_p: float | None = None, seed: int | None = None) -> RunChoice:
    """:func:`run_choice_for` ``model``'s registry entry (:func:`find_model`)."""
    return run_choice_for(model, find_model(model), reasoning=reasoning, greedy=greedy, temperature=temperature,
                          top_p=top_p, seed=seed)


def run_choice_for(model: str, spec: ModelSpec | None, *, reasoning: str = "auto", greedy: bool = False,
                   temperature: float | None = None, top_p: float | None = None, seed: int | None = None) -> RunChoice:
    """Resolve the user's generation settings for ``model`` against the :class:`Profile` of its registry entry.

    Args:
        model: the ``model`` setting (hub id, key, served name or folder), named in the notes.
        spec: ``model``'s registry entry (:func:`find_model`); None: not in the registry (:data:`UNKNOWN_PROFILE`).
        reasoning: ``"auto"`` (the profile's), ``"on"`` or ``"off"``.
        greedy: greedy decoding instead of sampling.
        temperature, top_p: None: the profile's.
        seed: None: a fresh random seed (recorded with each proposal, so the run can be replayed).
    Raises:
        SettingsError: ``reasoning`` not one of the three words, or sampling values out of range.
    """
    if reasoning not in ("auto", "on", "off"):
        raise SettingsError(f"reasoning must be 'auto', 'on' or 'off', got {reasoning!r}")
    profile = spec.family.profile if spec is not None else None
    known = profile is not None
    used = profile if profile is not None else UNKNOWN_PROFILE
    notes = [] if known else [f"{model!r} is not in Holodesk's model registry: reasoning off, temperature "
                              f"{used.temperature}, top_p {used.top_p} (Holodesk's defaults)"]
    think = used.reasoning if reasoning == "auto" else reasoning == "on"
    if reasoning == "auto":
        notes.append(f"think before acting: {'on' if think else 'off'} (the model's profile: "
                     f"{dict(used.sources)['reasoning']})")
    if seed is None:
        seed = secrets.randbelow(SEED_LIMIT)
    sampling = Sampling(greedy=greedy, temperature=used.temperature if temperature is None else temperature,
                        top_p=used.top_p if top_p is None else top_p, seed=seed)
    return RunChoice(reasoning=think, reasoning_effort=used.reasoning_effort if think else None,
                     think_budget=used.think_budget, sampling=sampling, profile=used, known=known, notes=tuple(notes))


@dataclass(frozen=True)
class ModelFit:
    """One model against one GPU: ``fits`` lists every precision; ``best`` is the most faithful that fits
    (None when none fits or no GPU was measured)."""

    model: ModelSpec
    fits: tuple[PrecisionFit, ...]
    best: str | None


def fit_table(free_bytes: int | None) -> list[ModelFit]:
    """Every registry model (registry order) with its fit on a GPU with ``free_bytes`` free (None: none
    measured)."""
    return [ModelFit(m, tuple(m.precision_fits(free_bytes)), m.best_precision(free_bytes)) for m in MODELS]


def models_that_fit(free_bytes: int | None) -> list[ModelFit]:
    """The models at least one precision of which fits ``free_bytes`` (registry order); [] without a GPU."""
    return [f for f in fit_table(free_bytes) if f.best is not None]


def thinking_words(on: bool, think_budget: int, effort: str | None = None, why: str = "") -> str:
    """"Think before acting" in words: on, with its effort and budget, or off, with the budget it has when turned
    on; ``why`` follows on/off. E.g. ``"think before acting off (setting 'auto'); when on, up to 1,024 tokens of
    thought"``, ``"think before acting on, effort medium, up to 3,072 tokens of thought"``."""
    budget = f"up to {think_budget:,} tokens of thought"
    if not on:
        return f"think before acting off{why}; when on, {budget}"
    return f"think before acting on{why}" + (f", effort {effort}" if effort else "") + f", {budget}"


def _reasoning_words(reasoning: Reasoning) -> str:
    """How the model's thinking is switched, and what it does when nothing switches it, in words."""
    switch = ("a /think or /no_think line in the system prompt" if reasoning.switch == "system_prompt"
              else f"the chat-template variable {reasoning.template_kwarg!r} (true or false)")
    unswitched = {None: "whether it thinks when nothing switches it is not published",
                  True: "it thinks when nothing switches it",
                  False: "it does not think when nothing switches it"}[reasoning.on_by_default]
    return f"switched on or off by {switch}; {unswitched}"


def describe(spec: ModelSpec) -> dict[str, str]:
    """The model's facts as plain lines (doctor, tooltips); unknown facts read "unknown".

    ``checkpoint type`` is the ``model_type`` its config.json names; ``runs as`` the transformers class that
    runs it (and the ``model_type`` Holodesk reads the checkpoint as, where that differs from the checkpoint's)."""
    arch = spec.architecture
    checkpoint_type = f"{arch.checkpoint_model_type or arch.model_type} (the model_type in its config.json)"
    if not arch.verified:
        checkpoint_type = f"{arch.model_type}, inferred from its base model [not read from its config.json]"
    runs_as = f"transformers' {arch.transformers_class}"
    if arch.checkpoint_model_type:
        runs_as += f", its config read as model_type {arch.model_type} when it loads"
    size = spec.size_text()
    profile = spec.family.profile
    disk = format_bytes(spec.download_bytes) + ("" if spec.checkpoint_bytes is not None else " (estimated)")
    return {
        "model": f"{spec.display_name} ({spec.hub_id})",
        "architecture": arch.summary,
        "checkpoint type": checkpoint_type,
        "runs as": runs_as,
        "size": f"{size}, {disk} to download",
        "protocol": spec.family.protocol,
        "images": spec.family.image.describe(),
        "reasoning": _reasoning_words(spec.family.reasoning),
        "profile": (thinking_words(profile.reasoning, profile.think_budget, profile.reasoning_effort)
                    + f"; temperature {profile.temperature}, top_p {profile.top_p}; {profile.max_images} screenshots"),
        "license": spec.license or UNKNOWN,
        "base model": spec.base_model or UNKNOWN,
    }


__all__ = [
    "AUTO_PROTOCOL", "DEFAULT_MODEL", "FAMILIES", "GREEDY", "HOLOTRON", "MODELS", "NATIVE_FAMILIES", "NEMOTRON_H_OMNI",
    "PRECISIONS", "QWEN3_5", "QWEN3_5_MOE", "QWEN3_VL", "QWEN3_VL_MOE", "UNKNOWN_PROFILE", "Architecture", "Family",
    "ImagePreprocessing", "ModelFit", "ModelSpec", "Profile", "Reasoning", "RunChoice", "Runtime", "Sampling",
    "describe", "find_model", "fit_table", "get_model", "hub_id_for", "models_that_fit", "profile_for", "protocol_for",
    "protocol_of", "run_choice", "run_choice_for", "series_names", "thinking_words",
]
