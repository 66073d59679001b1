"""The full-size ``config.json`` of each native family, for ``holodesk bench --family``: :data:`FULL_SIZE`
(:func:`full_size_model` builds one with random weights on the device). The tiny checkpoints of the same
families are :mod:`holodesk.bench.families`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from holodesk.errors import ModelLoadError
from holodesk.policy.holotron.kernels import prepare_kernels

if TYPE_CHECKING:
    import torch

QWEN3_VL_8B: Final[dict[str, Any]] = {
    "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "qwen3_vl_text", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "attention_bias": False,
        "attention_dropout": 0.0, "initializer_range": 0.02, "bos_token_id": 151643, "eos_token_id": 151645,
        "rope_scaling": {"rope_type": "default", "mrope_interleaved": True, "mrope_section": [24, 20, 20]},
        "rope_theta": 5000000, "tie_word_embeddings": False, "dtype": "bfloat16",
    },
    "vision_config": {
        "model_type": "qwen3_vl", "depth": 27, "hidden_size": 1152, "hidden_act": "gelu_pytorch_tanh",
        "intermediate_size": 4304, "num_heads": 16, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2,
        "temporal_patch_size": 2, "out_hidden_size": 4096, "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [8, 16, 24], "initializer_range": 0.02,
    },
}
"""Qwen3-VL-8B's config.json, the architecture Holo2-8B is fine-tuned from. Sources (read 2026-12-01): the
config.json of a public Qwen3-VL-8B fine-tune (huggingface.co/Steinate/Cortex, ``base_model``
Qwen/Qwen3-VL-8B-Instruct; its vision block as in huggingface.co/quanliang/F1, the same tower) and, for every
dimension it states, Ollama's GGUF metadata of qwen3-vl:8b (36 blocks, width 4096, FFN 12288, 32 heads / 8 KV
heads of 128, rope base 5e6; vision 27 blocks, width 1152, 16 heads, patch 16, merge 2, temporal patch 2,
DeepStack layers 8, 16, 24). Not read from Hcompany/Holo2-8B's own repository (not reachable from here)."""

def qwen3_5_moe_35b_a3b() -> dict[str, Any]:
    """The config.json of Qwen3.5-35B-A3B (the base model of Holo3-35B-A3B; Holo3.1-35B-A3B is a Qwen3.6-35B-A3B
    fine-tune with the same ``model_type``): the base model's architecture, per transformers' documented
    defaults. ``Qwen3_5MoeConfig`` and its text and vision configs are documented as that checkpoint
    (``@auto_docstring(checkpoint="Qwen/Qwen3.5-35B-A3B")`` in transformers 5.23's
    configuration_qwen3_5_moe.py): 40 layers of width 2048 (three Gated DeltaNet, one gated attention; 16
    heads / 2 KV heads of 256), 256 experts of 512 with 8 routed per token and one shared expert of 512,
    vocabulary 248320; vision 27 blocks of width 1152. One value is set: the vision merger's
    ``out_hidden_size`` (the vision config's generic default is 3584) to the language model's width, which the
    merger's output must have to be placed in the prompt's embeddings. The checkpoint's own config.json was not
    read (not reachable from here). Needs transformers (imported here)."""
    from transformers import AutoConfig  # lazy: transformers (optional: the local extra)

    config: dict[str, Any] = AutoConfig.for_model("qwen3_5_moe").to_dict()
    config["architectures"] = ["Qwen3_5MoeForConditionalGeneration"]
    config["vision_config"]["out_hidden_size"] = config["text_config"]["hidden_size"]
    for part in (config, config["text_config"], config["vision_config"]):
        part.pop("transformers_version", None)
    return config


NEMOTRON_3_NANO_PATTERN: Final = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
"""The 52 blocks of Nemotron 3 Nano's language model (23 Mamba-2, 23 MoE, 6 attention)."""

NEMOTRON_3_NANO_OMNI: Final[dict[str, Any]] = {
    "architectures": ["NemotronH_Omni_Reasoning_V3"], "model_type": "nemotron_h_omni",
    "downsample_ratio": 0.5, "projector_hidden_size": 20480, "vision_hidden_size": 1280,
    "video_temporal_patch_size": 2, "tie_word_embeddings": False,
    "text_config": {
        "model_type": "nemotron_h", "vocab_size": 131072, "hidden_size": 2688,
        "hybrid_override_pattern": NEMOTRON_3_NANO_PATTERN, "num_attention_heads": 32, "num_key_value_heads": 2,
        "head_dim": 128, "intermediate_size": 1856, "mlp_hidden_act": "relu2", "mamba_num_heads": 64,
        "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "expand": 2,
        "chunk_size": 128, "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 6,
        "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712, "routed_scaling_factor": 2.5,
        "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "max_position_embeddings": 262144,
        "tie_word_embeddings": False,
    },
    "vision_config": {"model_type": "radio", "video_temporal_patch_size": 2},
    "audio_config": None,
}
"""Nemotron 3 Nano Omni's architecture (nvidia/Nemotron-3-Nano-Omni-30B-A3B-Reasoning-BF16, the backbone
Holotron-3-Nano shares), in transformers' ``nemotron_h_omni`` layout. transformers documents
``NemotronH_Omni_Reasoning_V3_Config`` as that checkpoint, but its defaults are not the full model (its text
config defaults to a 4-block NemotronH), so the values are stated here. Sources (read 2026-12-01): a public
transcription of that checkpoint's config.json (github, a quantization plan's "config.json (full snapshot)":
52 blocks ``MEMEM*EMEMEM*...EMEMEMEME``, width 2688, 128 experts of 1856 with 6 routed and a shared one of
3712, 32 heads / 2 KV heads of 128, Mamba-2 64 heads of 64 with state 128 and 8 groups, vocabulary 131072;
RADIO v2-H vision of width 1280 with a 20480-wide projector; a Parakeet sound encoder of 24 layers of 1024, 8
heads, FFN 4096, 128 mel bins), and NVIDIA Megatron-Bridge's ``Nemotron3NanoProvider`` tests (the same
language model dimensions, router top-k 6 and scaling 2.5). The vision tower is transformers' ``RadioConfig``
defaults (ViT-H/16: 32 blocks of 1280, 16 heads), the same width. The sound encoder is left out
(``audio_config`` None): its projector's width is in neither source, and Holodesk sends no audio; a real
checkpoint also holds its weights (:data:`PARAKEET_ENCODER_PARAMETERS`). Holotron-3-Nano's own config.json
was not read."""

PARAKEET_ENCODER_PARAMETERS: Final = 608_977_920
"""Parameters of the sound encoder the full-size Omni row leaves out (transformers' Parakeet encoder with the
dimensions above, attention without bias as the Omni config sets it, on the meta device; without its
projector into the language model): about 1.2 GB in bf16."""

FULL_SIZE: Final[dict[str, Callable[[], dict[str, Any]] | None]] = {
    "qwen3_vl": lambda: json.loads(json.dumps(QWEN3_VL_8B)),
    "qwen3_vl_moe": None,
    "qwen3_5": None,
    "qwen3_5_moe": qwen3_5_moe_35b_a3b,
    "nemotron_h_omni": lambda: json.loads(json.dumps(NEMOTRON_3_NANO_OMNI)),
}
"""Per native family, the config.json of its full-size model for ``holodesk bench --family`` (a fresh copy per
call): Holo2-8B (:data:`QWEN3_VL_8B`), Holo3-35B-A3B (:func:`qwen3_5_moe_35b_a3b`), Holotron-3-Nano
(:data:`NEMOTRON_3_NANO_OMNI`). None for Holo2-30B-A3B (Qwen3-VL-30B-A3B): its config.json was not read, and
transformers' ``Qwen3VLMoeConfig`` text defaults (24 layers, 60 experts) are not that model. None for Holo3 /
Holo3.1 dense sizes (Qwen3.5, 0.8B / 4B / 9B): no config of
those sizes was found, and transformers' ``Qwen3_5Config`` defaults (documented as Qwen/Qwen3.5-27B) build a
9.4B model of width 4096 and 32 layers, which is not the 27B they name, so they are not used —
``holodesk bench --family qwen3_5 --config config.json`` takes the file instead."""

PUBLISHED_MAX_PIXELS: Final[dict[str, int]] = {"qwen3_vl": 16777216, "qwen3_5_moe": 16777216,
                                               "nemotron_h_omni": 13312 * 16 * 16}
"""The image processor's pixel budget per image at full size: Qwen3-VL's preprocessor ``size.longest_edge``
(Ollama's qwen3-vl metadata ``vision.longest_edge`` 16777216; Qwen3.5 uses Qwen3-VL's processor, its own
preprocessor_config.json was not read), and Nemotron 3 Nano Omni's ``max_num_patches`` 13312 of 16 x 16
pixels. A 1080p screenshot is not scaled down by either."""


def full_size_model(config: dict[str, Any], device: torch.device, dtype: torch.dtype) -> Any:
    """The model of ``config`` (a config.json of a native family) with transformers' random initialisation,
    built on ``device`` in ``dtype``, eval mode.

    Raises:
        ModelLoadError: transformers does not know the config's model_type.
    """
    import torch  # lazy: torch (optional: the local extra)
    from transformers import AutoConfig, AutoModelForImageTextToText  # lazy: transformers (optional: the local extra)

    prepare_kernels()  # before transformers imports NemotronH (the Omni class), as every loader in this process does

    fields = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
    try:
        built = AutoConfig.for_model(str(config.get("model_type")), **fields)
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"transformers cannot build a config for model_type {config.get('model_type')!r}: "
                             f"{exc}") from exc
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(built, dtype=dtype)
    return model.eval()


__all__ = [
    "FULL_SIZE",
    "NEMOTRON_3_NANO_OMNI",
    "NEMOTRON_3_NANO_PATTERN",
    "PARAKEET_ENCODER_PARAMETERS",
    "PUBLISHED_MAX_PIXELS",
    "QWEN3_VL_8B",
    "full_size_model",
    "qwen3_5_moe_35b_a3b",
]
