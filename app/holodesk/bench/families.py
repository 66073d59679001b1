"""Tiny random-weight checkpoints of the native families (Holo2 dense and MoE, Holo3 / Holo3.1, Holotron-3-Nano), for
tests and the bench.

:func:`write_family_checkpoint` writes a tiny checkpoint folder laid out as the family's hub repos are: a
``config.json`` in the family's format with tiny dimensions, safetensors weights under the checkpoint's
parameter names (written by the model class's own ``save_pretrained``, which saves in the checkpoint layout,
e.g. Qwen3.5-MoE's experts one tensor per expert; Qwen3-VL-MoE's fused experts then put in their published
orientation, :data:`SAVED_TRANSPOSED`), ``generation_config.json``, and the files the family's processor
loads: ``tokenizer.json`` / ``tokenizer_config.json`` (a tiny byte-level BPE trained as
:func:`holodesk.bench.tiny_checkpoint.train_tokenizer` does, carrying the family's special and image
placeholder tokens), ``chat_template.jinja`` and ``preprocessor_config.json``.

The full-size configs of the same families, for ``holodesk bench --family``, are in
:mod:`holodesk.bench.full_size`.

Write a tiny one with ``holodesk tiny-checkpoint DIR --family qwen3_vl`` (or any other native family key of
:data:`~holodesk.policy.native.families.NATIVE_FAMILIES`: qwen3_vl_moe, qwen3_5, qwen3_5_moe, nemotron_h_omni).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from holodesk.bench.tiny_checkpoint import CHAT_TEMPLATE as NEMOTRON_CHAT_TEMPLATE
from holodesk.bench.tiny_checkpoint import train_tokenizer, write_tiny_checkpoint
from holodesk.policy.holotron.kernels import prepare_kernels
from holodesk.policy.native.families import NATIVE_FAMILIES, family_by_key

QWEN_SPECIAL_TOKENS: Final = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<think>", "</think>",
]
"""Qwen3-VL / Qwen3.5 special tokens the tiny tokenizer carries (the processor's image placeholder
``<|image_pad|>`` and its ``<|vision_start|>`` / ``<|vision_end|>`` frame included)."""

NEMOTRON_SPECIAL_TOKENS: Final = [
    "<unk>", "<s>", "</s>", "<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<img>", "</img>", "<image>",
    "<video>", "<so_embedding>", "<so_start>", "<so_end>", "<think>", "</think>", "<pad>",
]
"""Nemotron-H Omni special tokens (the Omni processor's ``<img>``, ``<image>``, ``</img>``, ``<video>`` and the
audio placeholders)."""

QWEN_CHAT_TEMPLATE: Final = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking -%}{{- '<think>\\n' -}}"
    "{%- else -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{%- endif -%}"
)
"""The Qwen chat layout (ChatML turns, an image as ``<|vision_start|><|image_pad|><|vision_end|>``, the Qwen3.5
thinking switch ``enable_thinking``), written for the tiny Holo3 / Holo3.1 checkpoints."""

HOLO2_CHAT_TEMPLATE: Final = QWEN_CHAT_TEMPLATE.replace(
    "{%- if enable_thinking is defined and enable_thinking -%}", "{%- if thinking is not defined or thinking -%}")
"""The Qwen chat layout with Holo2's switch: the variable ``thinking``, on when not given (hai-cookbook
holo2/deploy_with_vllm.md: thinking by default, ``chat_template_kwargs {"thinking": false}`` turns it off),
written for the tiny Holo2 (Qwen3-VL) checkpoints."""

OMNI_CHAT_TEMPLATE: Final = NEMOTRON_CHAT_TEMPLATE.replace(
    "namespace(system='', reasoning=true)",
    "namespace(system='', reasoning=(enable_thinking if enable_thinking is defined else true))")
"""The Nemotron turn layout with Nemotron 3's switch: the variable ``enable_thinking``, on when not given
(NVIDIA's holo-nano loop sends ``{"enable_thinking": false}`` to turn it off), written for the tiny
Holotron-3-Nano (Nemotron-H Omni) checkpoints."""

_TRAINING_TEXT: Final = (
    '{"note": null, "thought": "Click the OK button.", "tool_call": {"tool_name": "click_desktop", '
    '"element": "OK button", "x": 512, "y": 87, "button": "left"}}\n'
    '{"thought": "Type it.", "tool_call": {"tool_name": "write_desktop", "content": "hello", "press_enter": true}}\n'
    '{"tool_call": {"tool_name": "scroll_desktop", "direction": "down", "scroll_size": 3}} wait_desktop seconds\n'
    "hotkey_desktop keys ctrl shift tab update_plan goals title status todo running done answer\n"
    "<observation> </observation> Task: system user assistant 0 1 2 3 4 5 6 7 8 9 100 250 500 999 1000\n"
)


def _tiny_qwen_vision(model_type: str, out_hidden: int) -> dict[str, Any]:
    vision = {"model_type": model_type, "depth": 2, "hidden_size": 32, "hidden_act": "gelu_pytorch_tanh",
              "intermediate_size": 64, "num_heads": 2, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2,
              "temporal_patch_size": 2, "out_hidden_size": out_hidden, "num_position_embeddings": 64,
              "initializer_range": 0.02}
    if model_type in ("qwen3_vl", "qwen3_vl_moe"):
        vision["deepstack_visual_indexes"] = [1]
    return vision


def _tiny_config(key: str, ids: dict[str, int], vocab: int) -> dict[str, Any]:
    """The tiny config.json of family ``key`` in the family's published format."""
    hidden = 32
    if key == "nemotron_h_omni":
        pattern = "ME*E"
        return {
            "architectures": ["NemotronH_Omni_Reasoning_V3"], "model_type": "nemotron_h_omni",
            "downsample_ratio": 0.5, "projector_hidden_size": 4 * hidden, "vision_hidden_size": 32,
            "image_token_id": ids["<image>"], "video_token_id": ids["<video>"], "audio_token_id": ids["<so_embedding>"],
            "audio_config": None, "video_temporal_patch_size": 2,
            "text_config": {
                "model_type": "nemotron_h", "vocab_size": vocab, "hidden_size": hidden,
                "layers_block_type": [{"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}[c] for c in pattern],
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 64,
                "mamba_num_heads": 8, "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4,
                "expand": 2, "chunk_size": 64, "n_routed_experts": 4, "n_shared_experts": 1,
                "moe_intermediate_size": 16, "moe_shared_expert_intermediate_size": 16, "num_experts_per_tok": 2,
                "bos_token_id": ids["<s>"], "eos_token_id": ids["<SPECIAL_12>"], "pad_token_id": ids["<pad>"],
                "tie_word_embeddings": False,
            },
            "vision_config": {"model_type": "radio", "hidden_size": 32, "num_hidden_layers": 2,
                              "num_attention_heads": 2, "intermediate_size": 128, "patch_size": 16,
                              "video_temporal_patch_size": 2},
        }
    image_ids = {"image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
                 "vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"]}
    if key in ("qwen3_vl", "qwen3_vl_moe"):
        qwen3_vl_text: dict[str, Any] = {
            "model_type": "qwen3_vl_text", "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
            "hidden_act": "silu", "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
            "attention_bias": False, "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
            "rope_scaling": {"rope_type": "default", "mrope_interleaved": True, "mrope_section": [2, 1, 1]},
            "rope_theta": 5000000, "tie_word_embeddings": False,
        }
        if key == "qwen3_vl_moe":  # Qwen3-VL-30B-A3B's text block: every layer sparse, routed experts only
            # moe_intermediate_size 8: 2 * 8 != hidden, so the published expert tensors' shape tells their layout
            qwen3_vl_text.update(model_type="qwen3_vl_moe_text", moe_intermediate_size=8, num_experts=4,
                                 num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
                                 norm_topk_prob=True)
        architecture = "Qwen3VLMoeForConditionalGeneration" if key == "qwen3_vl_moe" else \
            "Qwen3VLForConditionalGeneration"
        return {"architectures": [architecture], "model_type": key, **image_ids, "tie_word_embeddings": False,
                "text_config": qwen3_vl_text, "vision_config": _tiny_qwen_vision(key, hidden)}
    text: dict[str, Any] = {
        "vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "hidden_act": "silu", "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "full_attention_interval": 2,
        "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.5,
                            "mrope_interleaved": True, "mrope_section": [1, 1, 0]},
        "eos_token_id": ids["<|im_end|>"], "tie_word_embeddings": False,
    }
    if key == "qwen3_5":
        return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", **image_ids,
                "tie_word_embeddings": False,
                "text_config": {**text, "model_type": "qwen3_5_text", "intermediate_size": 64},
                "vision_config": _tiny_qwen_vision("qwen3_5", hidden)}
    return {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe", **image_ids,
            "tie_word_embeddings": False,
            "text_config": {**text, "model_type": "qwen3_5_moe_text", "moe_intermediate_size": 16,
                            "shared_expert_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2},
            "vision_config": _tiny_qwen_vision("qwen3_5_moe", hidden)}


SAVED_TRANSPOSED: Final[dict[str, tuple[str, ...]]] = {
    "qwen3_vl_moe": (".mlp.experts.gate_up_proj", ".mlp.experts.down_proj"),
}
"""Per family, the weights the published checkpoints hold with their last two dimensions swapped against what
transformers 5.23's ``save_pretrained`` writes. Qwen3-VL-MoE's experts are published fused as
``(experts, hidden, 2 * moe_intermediate)`` and ``(experts, moe_intermediate, hidden)``; transformers holds them
as ``(experts, 2 * moe_intermediate, hidden)`` and ``(experts, hidden, moe_intermediate)`` and transposes at load
(its conversion mapping ``qwen3_vl_moe``: ``Transpose(1, 2, check_dims=True)``), but that rule's reverse keeps a
tensor whose shape already matches the model's, so ``save_pretrained`` writes its in-memory layout."""


def _to_published_layout(key: str, out: Path) -> None:
    """Swap the last two dimensions of family ``key``'s :data:`SAVED_TRANSPOSED` weights in the safetensors files
    of ``out`` (their metadata kept); nothing for the other families."""
    suffixes = SAVED_TRANSPOSED.get(key)
    if not suffixes:
        return
    from safetensors import safe_open  # lazy: safetensors (optional: the local extra)
    from safetensors.torch import save_file  # lazy: safetensors (optional: the local extra)

    for path in sorted(out.glob("model*.safetensors")):
        with safe_open(str(path), "pt") as fh:
            metadata = fh.metadata()
            tensors = {name: fh.get_tensor(name) for name in fh.keys()}  # noqa: SIM118 (safe_open is no mapping)
        save_file({name: tensor.transpose(-2, -1).contiguous() if name.endswith(suffixes) else tensor
                   for name, tensor in tensors.items()}, str(path), metadata=metadata)


def _processor_files(key: str, out: Path, max_pixels: int) -> None:
    """preprocessor_config.json and chat_template.jinja of family ``key`` (the files its processor reads)."""
    if key == "nemotron_h_omni":
        pre = {"image_processor_type": "NemotronH_Omni_Reasoning_V3ImageProcessor",
               "processor_class": "NemotronH_Omni_Reasoning_V3Processor", "patch_size": 16, "downsample_ratio": 0.5,
               "min_num_patches": 4, "max_num_patches": max(4, max_pixels // 256), "max_model_len": 8192,
               "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
               # the processor class also holds the sound encoder's feature extractor (transformers' Omni
               # processor mirrors ParakeetFeatureExtractor); AutoProcessor builds it from this key even though
               # Holodesk sends no audio, and refuses a folder without it
               "feature_extractor_type": "ParakeetFeatureExtractor"}
        template = OMNI_CHAT_TEMPLATE
    else:
        pre = {"image_processor_type": "Qwen2VLImageProcessorFast", "processor_class": "Qwen3VLProcessor",
               "size": {"shortest_edge": 32 * 32, "longest_edge": max_pixels}, "patch_size": 16,
               "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
               "do_rescale": True, "do_normalize": True, "do_convert_rgb": True}
        template = HOLO2_CHAT_TEMPLATE if key.startswith("qwen3_vl") else QWEN_CHAT_TEMPLATE
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    (out / "chat_template.jinja").write_text(template)


def _tokenizer_files(key: str, out: Path, vocab_size: int) -> tuple[int, dict[str, int]]:
    """tokenizer.json / tokenizer_config.json of family ``key``; returns (tokenizer size, special ids)."""
    if key == "nemotron_h_omni":
        specials = NEMOTRON_SPECIAL_TOKENS
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "<SPECIAL_12>",
                  "unk_token": "<unk>", "pad_token": "<pad>", "model_max_length": 262144,
                  "clean_up_tokenization_spaces": False}
    else:
        specials = QWEN_SPECIAL_TOKENS
        config = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|im_end|>",
                  "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 262144, "errors": "replace",
                  "add_prefix_space": False, "clean_up_tokenization_spaces": False}
    size, ids = train_tokenizer(out, specials, vocab_size=vocab_size, text=_TRAINING_TEXT)
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return size, ids


def write_family_checkpoint(path: str | Path, family: str, *, seed: int = 0, tokenizer_vocab: int = 480,
                            vocab_size: int = 512, max_pixels: int = 128 * 128) -> Path:
    """Write a tiny random checkpoint of the native family ``family`` (a ``--family`` key) to ``path``.

    Args:
        path: folder to create (may exist; its files are overwritten).
        family: a native family key (``qwen3_vl``, ``qwen3_vl_moe``, ``qwen3_5``, ``qwen3_5_moe`` or
            ``nemotron_h_omni``).
        seed: torch RNG seed of the weight draws (transformers' own initialisation); same seed, same tensors.
        tokenizer_vocab: BPE vocabulary to train; vocab_size: the LM's rows (>= the tokenizer's size).
        max_pixels: the image processor's pixel budget per image (screenshots are scaled down to it; small
            keeps the tiny model's prompts short).
    Returns:
        The checkpoint folder.
    Raises:
        ModelLoadError: an unknown or non-native family.
        ValueError: ``vocab_size`` below the tokenizer's size.
    """
    import torch  # lazy: torch (optional: the local extra)
    from transformers import AutoConfig, AutoModelForImageTextToText  # lazy: transformers (optional: the local extra)

    prepare_kernels()  # before transformers imports NemotronH (the Omni class), as every loader in this process does
    chosen = family_by_key(family)
    if chosen not in NATIVE_FAMILIES:
        raise ValueError(f"{family} is not a native family; Holotron-12B has its own writer (tiny_checkpoint.py)")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    size, ids = _tokenizer_files(chosen.key, out, tokenizer_vocab)
    if vocab_size < size:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer's {size} tokens")
    _processor_files(chosen.key, out, max_pixels)
    published = _tiny_config(chosen.key, ids, vocab_size)
    (out / "config.json").write_text(json.dumps(published, indent=2))
    config = AutoConfig.from_pretrained(str(out), local_files_only=True)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    for old in out.glob("model*.safetensors"):
        old.unlink()
    model.save_pretrained(str(out))  # the class's checkpoint layout (conversion mapping reversed)
    _to_published_layout(chosen.key, out)
    (out / "config.json").write_text(json.dumps(published, indent=2))  # the published format, not the re-save
    stops = [ids["<|im_end|>"], ids["<|endoftext|>"]] if "<|im_end|>" in ids else [ids["<SPECIAL_12>"]]
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": stops, "do_sample": False}))
    return out


def write_checkpoint(path: str | Path, *, family: str = "holotron", seed: int = 0) -> Path:
    """A tiny random checkpoint of ``family`` (any :data:`~holodesk.policy.native.families.FAMILIES` key:
    ``holotron`` goes to :func:`holodesk.bench.tiny_checkpoint.write_tiny_checkpoint`, the others to
    :func:`write_family_checkpoint`) in ``path``; returns the folder. The writer of ``holodesk tiny-checkpoint``.

    Raises:
        ModelLoadError: an unknown family.
    """
    if family_by_key(family).runtime == "holotron":
        return write_tiny_checkpoint(path, seed=seed)
    return write_family_checkpoint(path, family, seed=seed)


__all__ = [
    "HOLO2_CHAT_TEMPLATE",
    "NEMOTRON_SPECIAL_TOKENS",
    "OMNI_CHAT_TEMPLATE",
    "QWEN_CHAT_TEMPLATE",
    "QWEN_SPECIAL_TOKENS",
    "SAVED_TRANSPOSED",
    "write_checkpoint",
    "write_family_checkpoint",
]
