"""A tiny random checkpoint in Holotron-12B's PUBLISHED layout, for tests and demos (a tool, not runtime API),
and the writer behind it (:func:`write_checkpoint`), which also writes the full-size one of the cold-start
bench (:func:`holodesk.bench.model.write_full_checkpoint`) one shard at a time.

The folder looks like the hub repo: a remote-code style ``config.json``
(``model_type`` ``NemotronH_Nano_VL_V2`` with ``llm_config`` / ``vision_config``), sharded safetensors
with the original key names (``vision_model.radio_model.*``, ``mlp1.*``, ``language_model.backbone.*``,
``language_model.lm_head.*``) plus ``model.safetensors.index.json``, and a small byte-level BPE
tokenizer carrying the model's special tokens and a chat template reproducing the Nemotron Nano 2 layout.

The key names and shapes are written here from the published description, independently of
transformers' conversion mapping, so loading this folder tests that mapping.

Write one with ``holodesk tiny-checkpoint DIR`` or ``python -m holodesk.bench.tiny_checkpoint DIR``.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from holodesk.policy.holotron.checkpoint import first

if TYPE_CHECKING:
    import torch

SPECIAL_TOKENS = [
    "<unk>", "<s>", "</s>", "<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<img>", "</img>", "<image>",
    "<think>", "</think>", "<pad>",
]
"""Special tokens of the tiny tokenizer, ids 0..11 in this order."""

CHAT_TEMPLATE = (
    "{%- macro text_of(content) -%}"
    "{%- if content is string -%}{{- content -}}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'image' -%}{{- '<image>' -}}"
    "{%- elif part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- set ns = namespace(system='', reasoning=true) -%}"
    "{%- for message in messages -%}"
    "{%- set text = text_of(message['content']) -%}"
    "{%- if message['role'] in ['system', 'user'] -%}"
    "{%- if '/no_think' in text -%}{%- set ns.reasoning = false -%}"
    "{%- elif '/think' in text -%}{%- set ns.reasoning = true -%}{%- endif -%}"
    "{%- endif -%}"
    "{%- if message['role'] == 'system' -%}{%- set ns.system = text -%}{%- endif -%}"
    "{%- endfor -%}"
    "{{- bos_token + '<SPECIAL_10>System\\n' + ns.system.replace('/no_think', '').replace('/think', '').strip()"
    " + '\\n' -}}"
    "{%- for message in messages -%}"
    "{%- set text = text_of(message['content']) -%}"
    "{%- if message['role'] == 'user' -%}"
    "{{- '<SPECIAL_11>User\\n' + text.replace('/no_think', '').replace('/think', '').strip() + '\\n' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{{- '<SPECIAL_11>Assistant\\n' + text.strip() + '\\n<SPECIAL_12>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<SPECIAL_11>Assistant\\n' + ('<think>\\n' if ns.reasoning else '<think></think>') -}}"
    "{%- endif -%}"
)
"""Nemotron Nano 2 chat layout (docs/holotron-runtime.md) as a Jinja template written the way
NVIDIA's iterates content: BOS first; list-form parts concatenated, ``{"type": "image"}`` as ``<image>``."""

_TRAINING_TEXT = """
{"note": null, "thought": "Open the browser and search.", "tool_call": {"tool_name": "click", "x": 512, "y": 87}}
{"note": "logged in", "thought": "Type the query.", "tool_call": {"tool_name": "type", "text": "weather"}}
{"thought": "Press enter", "tool_call": {"tool_name": "key", "keys": ["ctrl", "enter"]}}
{"tool_call": {"tool_name": "scroll", "direction": "down", "amount": 3}} {"tool_name": "wait", "seconds": 1.5}
{"tool_name": "answer", "text": "The answer is 42."} {"tool_name": "done", "success": true}
You are a desktop agent. Look at the screenshot and take one step toward the user's task.
Reply with one JSON object. Coordinates are integers from 0 to 1000 on the screenshot you see.
System User Assistant task screenshot history step click double_click right_click move drag scroll
0 1 2 3 4 5 6 7 8 9 10 100 250 333 500 750 999 1000 true false null [ ] { } : , " \\ \\n
"""


def _tiny_config(
    *, vocab_size: int, vision_hidden: int, vision_layers: int, vision_heads: int, llm_hidden: int, pattern: str,
    tile_size: int, patch_size: int, max_img_size: int, num_prefix_tokens: int, special_ids: dict[str, int],
    dtype: str,
) -> dict[str, Any]:
    """The remote-code style config.json (NemotronH_Nano_VL_V2) for the tiny model."""
    mamba_heads, mamba_head_dim = 8, llm_hidden * 2 // 8
    return {
        "architectures": ["NemotronH_Nano_VL_V2"],
        "auto_map": {
            "AutoConfig": "configuration.NemotronH_Nano_VL_V2_Config",
            "AutoModel": "modeling.NemotronH_Nano_VL_V2",
            "AutoModelForCausalLM": "modeling.NemotronH_Nano_VL_V2",
        },
        "model_type": "NemotronH_Nano_VL_V2",
        "downsample_ratio": 0.5,
        "force_image_size": tile_size,
        "patch_size": patch_size,
        "img_context_token_id": special_ids["<image>"],
        "max_num_tiles": 12,
        "use_thumbnail": True,
        "ps_version": "v2",
        "projector_hidden_size": 4 * llm_hidden,
        "vit_hidden_size": vision_hidden,
        "template": "nemotron_h",
        "torch_dtype": dtype,
        "norm_mean": [0.48145466, 0.4578275, 0.40821073],
        "norm_std": [0.26862954, 0.26130258, 0.27577711],
        "llm_config": {
            "architectures": ["NemotronHForCausalLM"],
            "model_type": "nemotron_h",
            "vocab_size": vocab_size,
            "hidden_size": llm_hidden,
            "hybrid_override_pattern": pattern,
            "num_hidden_layers": len(pattern),
            "intermediate_size": 2 * llm_hidden,
            "mlp_hidden_act": "relu2",
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "attention_head_dim": llm_hidden // 4,
            "mamba_num_heads": mamba_heads,
            "mamba_head_dim": mamba_head_dim,
            "ssm_state_size": 16,
            "n_groups": 2,
            "conv_kernel": 4,
            "expand": 2,
            "chunk_size": 128,
            "mamba_hidden_act": "silu",
            "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": False,
            "bos_token_id": special_ids["<s>"],
            "eos_token_id": special_ids["<SPECIAL_12>"],
            "pad_token_id": special_ids["<pad>"],
            "torch_dtype": dtype,
        },
        "vision_config": {
            "architectures": ["RADIOModel"],
            "model_type": "radio",
            "auto_map": {"AutoConfig": "radio.RADIOConfig", "AutoModel": "radio.RADIOModel"},
            "version": "radio_v2.5-h",
            "patch_size": patch_size,
            "max_resolution": max_img_size,
            "preferred_resolution": [tile_size, tile_size],
            "args": {
                "model": "vit_tiny_test",
                "cpe_max_size": max_img_size,
                "num_prefix_tokens": num_prefix_tokens,
                "embed_dim": vision_hidden,
                "depth": vision_layers,
                "num_heads": vision_heads,
            },
            "torch_dtype": dtype,
        },
    }


def train_tokenizer(path: Path, special_tokens: list[str], *, vocab_size: int = 480,
                    text: str = _TRAINING_TEXT) -> tuple[int, dict[str, int]]:
    """Train a tiny byte-level BPE on ``text`` with ``special_tokens`` first (ids 0.. in order) and write it as
    ``path / "tokenizer.json"`` (the folder must exist).

    Returns:
        (number of tokens in the tokenizer, special token -> id).
    Raises:
        RuntimeError: when the trained tokenizer lost a special token.
    """
    # lazy: tokenizers (optional: the local extra)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([text] * 4, trainer=trainer)
    tokenizer.save(str(path / "tokenizer.json"))
    special_ids: dict[str, int] = {}
    for tok in special_tokens:
        token_id = tokenizer.token_to_id(tok)
        if token_id is None:
            raise RuntimeError(f"the trained tokenizer lost the special token {tok}")
        special_ids[tok] = int(token_id)
    return int(tokenizer.get_vocab_size()), special_ids


def write_tokenizer(path: Path, *, vocab_size: int = 480) -> tuple[int, dict[str, int]]:
    """Train a tiny byte-level BPE with :data:`SPECIAL_TOKENS` and the chat template, and write
    tokenizer.json, tokenizer_config.json and special_tokens_map.json into the existing folder ``path``.

    Returns:
        (number of tokens in the tokenizer, special token -> id).
    """
    size, special_ids = train_tokenizer(path, SPECIAL_TOKENS, vocab_size=vocab_size)
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "<SPECIAL_12>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": 131072,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (path / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "<SPECIAL_12>", "unk_token": "<unk>", "pad_token": "<pad>"})
    )
    return size, special_ids


def write_tiny_checkpoint(
    path: str | Path,
    *,
    seed: int = 0,
    vision_hidden: int = 32,
    vision_layers: int = 2,
    vision_heads: int = 2,
    llm_hidden: int = 32,
    pattern: str = "M-M*-",
    tile_size: int = 512,
    patch_size: int = 16,
    max_img_size: int = 128,
    num_prefix_tokens: int = 8,
    dtype: str = "float32",
    shards: int = 2,
    tokenizer_vocab: int = 480,
    vocab_size: int = 512,
    chat_template: bool = True,
    preprocessor: bool = False,
) -> Path:
    """Write a tiny random Holotron-shaped checkpoint to ``path`` and return the folder.

    Shapes follow the published model with small sizes: RADIO ViT (``vision_layers`` blocks of width
    ``vision_hidden``, fused ``attn.qkv`` with bias, CPE table of ``(max_img_size/patch_size)^2``
    positions, ``num_prefix_tokens`` cls+register tokens), ``mlp1`` (RMSNorm(4*vision_hidden) ->
    Linear -> relu2 -> Linear, no bias) and a Nemotron-H LM with ``pattern`` (M = Mamba-2,
    ``*`` = attention, ``-`` = MLP). Tiles stay 512 px by default so token counts are the real ones
    (256 per tile). Weights are seeded normal draws (:func:`tensor_specs`).

    Args:
        path: folder to create (may exist; files are overwritten).
        seed: torch RNG seed; same seed -> identical tensors.
        dtype: ``"float32"`` or ``"bfloat16"`` for the stored tensors.
        shards: number of safetensors files (an index json is written when > 1).
        tokenizer_vocab: BPE vocabulary size to train; ``vocab_size``: LM rows (>= tokenizer size).
        chat_template: include the Jinja chat template in tokenizer_config.json (False tests the fallback).
        preprocessor: also write a ``preprocessor_config.json`` that agrees with config.json.
    Returns:
        The checkpoint folder as a Path.
    Raises:
        ValueError: for an impossible size combination.
    """
    if set(pattern) - set("M*-") or not pattern:
        raise ValueError(f"pattern may only contain M, * and -, got {pattern!r}")
    if max_img_size % patch_size or tile_size % (2 * patch_size):
        raise ValueError("max_img_size must be a multiple of patch_size and tile_size of 2*patch_size")

    def config(special_ids: dict[str, int]) -> dict[str, Any]:
        return _tiny_config(
            vocab_size=vocab_size, vision_hidden=vision_hidden, vision_layers=vision_layers,
            vision_heads=vision_heads, llm_hidden=llm_hidden, pattern=pattern, tile_size=tile_size,
            patch_size=patch_size, max_img_size=max_img_size, num_prefix_tokens=num_prefix_tokens,
            special_ids=special_ids, dtype=dtype,
        )

    return write_checkpoint(path, config, vision_layers=vision_layers, num_prefix_tokens=num_prefix_tokens,
                            seed=seed, dtype=dtype, shards=shards, tokenizer_vocab=tokenizer_vocab,
                            chat_template=chat_template, preprocessor=preprocessor)


def write_checkpoint(
    path: str | Path,
    config_for: Callable[[dict[str, int]], dict[str, Any]],
    *,
    vision_layers: int,
    num_prefix_tokens: int,
    seed: int,
    dtype: str,
    shards: int | None = None,
    shard_bytes: int | None = None,
    device: str = "cpu",
    tokenizer_vocab: int = 480,
    chat_template: bool = True,
    preprocessor: bool = False,
) -> Path:
    """Write a random checkpoint in the published layout to ``path``: the tiny test tokenizer, the
    config.json that ``config_for(special token -> id)`` returns, generation_config.json, optionally an
    agreeing preprocessor_config.json, and the tensors of :func:`tensor_specs` as safetensors files.

    Args:
        vision_layers, num_prefix_tokens: RADIO depth and cls+register tokens (config.json does not say).
        dtype: ``"float32"`` or ``"bfloat16"`` for the stored floating-point tensors.
        shards: split into this many files by tensor count; or ``shard_bytes``: files of at most this
            many bytes (a larger single tensor gets a file of its own). Neither: one file.
        device: where the normal draws are made (the values depend on it; the CPU's match earlier
            versions of this writer).
    Returns:
        The checkpoint folder as a Path.
    Raises:
        ValueError: the tokenizer has more tokens than the LM's vocabulary.
    """
    import torch  # lazy: torch (optional: the local extra)

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    n_tokens, special_ids = write_tokenizer(out, vocab_size=tokenizer_vocab)
    if not chat_template:
        cfg_path = out / "tokenizer_config.json"
        tok_cfg = json.loads(cfg_path.read_text())
        tok_cfg.pop("chat_template")
        cfg_path.write_text(json.dumps(tok_cfg, indent=2))
    config = config_for(special_ids)
    vocab_size = int(config["llm_config"]["vocab_size"])
    if vocab_size < n_tokens:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer's {n_tokens} tokens")
    write_token_configs(out, config, special_ids)
    if preprocessor:
        (out / "preprocessor_config.json").write_text(json.dumps(_preprocessor_config(config), indent=2))
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    specs = tensor_specs(config, vision_layers=vision_layers, num_prefix_tokens=num_prefix_tokens)
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    if shards is not None:
        plan = _shards_by_count(list(specs), shards)
    else:
        plan = _shards_by_bytes(specs, itemsize, shard_bytes)
    _save(specs, plan, out, _Draws(seed, device), torch_dtype, itemsize)
    return out


def write_token_configs(out: Path, config: dict[str, Any], special_ids: dict[str, int]) -> None:
    """Write ``config`` as config.json and generation_config.json with the start and end ids of ``special_ids``
    (special token -> id of the checkpoint's tokenizer): the files that name token ids."""
    (out / "config.json").write_text(json.dumps(config, indent=2))
    generation = {"bos_token_id": special_ids["<s>"], "eos_token_id": special_ids["<SPECIAL_12>"]}
    (out / "generation_config.json").write_text(json.dumps(generation))


def _preprocessor_config(config: dict[str, Any]) -> dict[str, Any]:
    """The ``preprocessor_config.json`` of NVIDIA's image processor, agreeing with ``config``."""
    return {
        "image_processor_type": "NemotronNanoVLV2ImageProcessor",
        "image_size": config["force_image_size"], "patch_size": config["patch_size"],
        "downsample_ratio": config["downsample_ratio"], "max_num_tiles": config["max_num_tiles"],
        "use_thumbnail": config["use_thumbnail"], "norm_mean": config["norm_mean"], "norm_std": config["norm_std"],
    }


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a random checkpoint before it is drawn.

    Attributes:
        shape: the tensor's shape.
        std: a normal draw times ``std`` (unless ``near_one`` or ``const``).
        near_one: ``1 + 0.1 * normal`` (norm weights; 1-D).
        const: a fixed value instead of a draw (float32, or int64 when ``integer``).
        integer: stored as int64, not cast to the checkpoint's dtype.
    """

    shape: tuple[int, ...]
    std: float = 0.02
    near_one: bool = False
    const: Callable[[], torch.Tensor] | None = None
    integer: bool = False

    def nbytes(self, itemsize: int) -> int:
        """Bytes on disk with floating-point tensors of ``itemsize`` bytes."""
        return math.prod(self.shape) * (8 if self.integer else itemsize)


class _Draws:
    """Seeded normal draws (``torch.Generator`` on ``device``); same seed, device and call order ->
    identical tensors."""

    def __init__(self, seed: int, device: str = "cpu") -> None:
        import torch  # lazy: torch (optional: the local extra)

        self.device = torch.device(device)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def normal(self, *shape: int, std: float = 0.02) -> torch.Tensor:
        import torch  # lazy: torch (optional: the local extra)

        return torch.randn(*shape, generator=self.gen, device=self.device) * std

    def near_one(self, n: int) -> torch.Tensor:
        return 1.0 + self.normal(n, std=0.1)

    def make(self, spec: TensorSpec, dtype: torch.dtype) -> torch.Tensor:
        """The tensor of ``spec`` on the CPU, floating point in ``dtype``, contiguous."""
        if spec.const is not None:
            t = spec.const()
        elif spec.near_one:
            t = self.near_one(spec.shape[0])
        else:
            t = self.normal(*spec.shape, std=spec.std)
        return (t.to(dtype) if t.is_floating_point() else t).cpu().contiguous()


def tensor_specs(config: dict[str, Any], *, vision_layers: int, num_prefix_tokens: int) -> dict[str, TensorSpec]:
    """Every tensor of a checkpoint with the published config ``config``, published key names, in the
    order they are drawn: the RADIO ViT and ``mlp1`` (:func:`_vision_specs`), then the Nemotron-H LM
    (:func:`_lm_specs`). Weights are normal draws (std 0.02; linear layers 0.1; norm weights near 1;
    Mamba ``A_log`` = log(1..heads), ``D`` = 1)."""
    return {**_vision_specs(config, vision_layers, num_prefix_tokens), **_lm_specs(config)}


def _vision_specs(config: dict[str, Any], layers: int, prefix: int) -> dict[str, TensorSpec]:
    """RADIO ViT (``layers`` blocks, ``prefix`` cls+register tokens) and ``mlp1`` tensors, published names."""
    import torch  # lazy: torch (optional: the local extra)

    S = TensorSpec
    v = "vision_model.radio_model."
    dv, patch = int(config["vit_hidden_size"]), int(config["patch_size"])
    positions = (int(config["vision_config"]["max_resolution"]) // patch) ** 2
    mean, std = list(config["norm_mean"]), list(config["norm_std"])

    def one(n: int) -> TensorSpec:
        return S((n,), near_one=True)

    t: dict[str, TensorSpec] = {
        v + "input_conditioner.norm_mean": S((3, 1, 1), const=lambda: torch.tensor(mean).view(3, 1, 1)),
        v + "input_conditioner.norm_std": S((3, 1, 1), const=lambda: torch.tensor(std).view(3, 1, 1)),
        v + "summary_idxs": S((2,), const=lambda: torch.tensor([0, 1], dtype=torch.int64), integer=True),
        v + "model.patch_generator.cls_token.token": S((prefix, dv)),
        v + "model.patch_generator.embedder.weight": S((dv, 3 * patch * patch)),
        v + "model.patch_generator.pos_embed": S((1, positions, dv)),
    }
    for i in range(layers):
        b = f"{v}model.blocks.{i}."
        t[b + "norm1.weight"], t[b + "norm1.bias"] = one(dv), S((dv,))
        t[b + "attn.qkv.weight"], t[b + "attn.qkv.bias"] = S((3 * dv, dv), std=0.1), S((3 * dv,))
        t[b + "attn.proj.weight"], t[b + "attn.proj.bias"] = S((dv, dv), std=0.1), S((dv,))
        t[b + "norm2.weight"], t[b + "norm2.bias"] = one(dv), S((dv,))
        t[b + "mlp.fc1.weight"], t[b + "mlp.fc1.bias"] = S((4 * dv, dv), std=0.1), S((4 * dv,))
        t[b + "mlp.fc2.weight"], t[b + "mlp.fc2.bias"] = S((dv, 4 * dv), std=0.1), S((dv,))
    proj_in, proj_hidden = 4 * dv, int(config["projector_hidden_size"])
    t["mlp1.0.weight"] = one(proj_in)
    t["mlp1.1.weight"] = S((proj_hidden, proj_in), std=0.1)
    t["mlp1.3.weight"] = S((int(config["llm_config"]["hidden_size"]), proj_hidden), std=0.1)
    return t


def _lm_specs(config: dict[str, Any]) -> dict[str, TensorSpec]:
    """Nemotron-H tensors for ``llm_config`` (M = Mamba-2, ``*`` = attention, ``-`` = MLP), published names."""
    import torch  # lazy: torch (optional: the local extra)

    S = TensorSpec
    llm = config["llm_config"]
    h, vocab, pattern = int(llm["hidden_size"]), int(llm["vocab_size"]), str(llm["hybrid_override_pattern"])
    mamba_heads = int(llm["mamba_num_heads"])
    inner = mamba_heads * int(llm["mamba_head_dim"])
    conv_dim = inner + 2 * int(llm["n_groups"]) * int(llm["ssm_state_size"])
    head_dim, mlp = int(first(llm, "head_dim", "attention_head_dim")), int(llm["intermediate_size"])
    heads, kv_heads = int(llm["num_attention_heads"]), int(llm["num_key_value_heads"])
    lm = "language_model.backbone."

    def a_log() -> torch.Tensor:
        return torch.log(torch.arange(1, mamba_heads + 1, dtype=torch.float32))

    def ones() -> torch.Tensor:
        return torch.ones(mamba_heads)

    t: dict[str, TensorSpec] = {lm + "embeddings.weight": S((vocab, h), std=1.0)}
    for i, kind in enumerate(pattern):
        b = f"{lm}layers.{i}."
        t[b + "norm.weight"] = S((h,), near_one=True)
        if kind == "M":
            t[b + "mixer.in_proj.weight"] = S((inner + conv_dim + mamba_heads, h), std=0.1)
            t[b + "mixer.conv1d.weight"] = S((conv_dim, 1, int(llm["conv_kernel"])), std=0.3)
            t[b + "mixer.conv1d.bias"] = S((conv_dim,))
            t[b + "mixer.dt_bias"] = S((mamba_heads,), std=0.5)
            t[b + "mixer.A_log"] = S((mamba_heads,), const=a_log)
            t[b + "mixer.D"] = S((mamba_heads,), const=ones)
            t[b + "mixer.norm.weight"] = S((inner,), near_one=True)
            t[b + "mixer.out_proj.weight"] = S((h, inner), std=0.1 / math.sqrt(len(pattern)))
        elif kind == "*":
            t[b + "mixer.q_proj.weight"] = S((heads * head_dim, h), std=0.1)
            t[b + "mixer.k_proj.weight"] = S((kv_heads * head_dim, h), std=0.1)
            t[b + "mixer.v_proj.weight"] = S((kv_heads * head_dim, h), std=0.1)
            t[b + "mixer.o_proj.weight"] = S((h, heads * head_dim), std=0.1)
        else:
            t[b + "mixer.up_proj.weight"] = S((mlp, h), std=0.1)
            t[b + "mixer.down_proj.weight"] = S((h, mlp), std=0.1)
    t[lm + "norm_f.weight"] = S((h,), near_one=True)
    t["language_model.lm_head.weight"] = S((vocab, h), std=0.5)
    return t


def _shards_by_count(names: list[str], shards: int) -> list[list[str]]:
    """``names`` in ``shards`` consecutive runs of ``ceil(len / shards)`` names (at least one run)."""
    shards = max(1, min(shards, len(names)))
    per = math.ceil(len(names) / shards)
    return [names[s * per : (s + 1) * per] for s in range(shards)]


def _shards_by_bytes(specs: dict[str, TensorSpec], itemsize: int, limit: int | None) -> list[list[str]]:
    """Consecutive runs of tensor names of at most ``limit`` bytes each (one run when ``limit`` is None)."""
    plan: list[list[str]] = [[]]
    size = 0
    for name, spec in specs.items():
        n = spec.nbytes(itemsize)
        if limit is not None and plan[-1] and size + n > limit:
            plan.append([])
            size = 0
        plan[-1].append(name)
        size += n
    return plan


def _save(specs: dict[str, TensorSpec], plan: list[list[str]], out: Path, draw: _Draws, dtype: torch.dtype,
          itemsize: int) -> None:
    """Draw and write the tensors one file of ``plan`` at a time (with an index json when there is more
    than one file), replacing the folder's previous weight files."""
    from safetensors.torch import save_file  # lazy: safetensors (optional: the local extra)

    for old in out.glob("model*.safetensors"):
        old.unlink()
    if len(plan) == 1:
        save_file({k: draw.make(specs[k], dtype) for k in plan[0]}, str(out / "model.safetensors"),
                  metadata={"format": "pt"})
        (out / "model.safetensors.index.json").unlink(missing_ok=True)
        return
    weight_map: dict[str, str] = {}
    total = 0
    for s, part in enumerate(plan):
        fname = f"model-{s + 1:05d}-of-{len(plan):05d}.safetensors"
        tensors = {k: draw.make(specs[k], dtype) for k in part}
        save_file(tensors, str(out / fname), metadata={"format": "pt"})
        del tensors  # one shard in host memory at a time
        for k in part:
            weight_map[k] = fname
            total += specs[k].nbytes(itemsize)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def main(argv: list[str] | None = None) -> int:
    """``python -m holodesk.bench.tiny_checkpoint DIR [--seed N] [--dtype bfloat16]`` (Holotron-12B; the other
    families: ``holodesk tiny-checkpoint DIR --family NAME``)."""
    parser = argparse.ArgumentParser(description="Write a tiny random Holotron-shaped checkpoint.")
    parser.add_argument("path", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--no-chat-template", action="store_true")
    args = parser.parse_args(argv)
    print(write_tiny_checkpoint(args.path, seed=args.seed, dtype=args.dtype, chat_template=not args.no_chat_template))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
