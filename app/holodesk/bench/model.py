"""Holotron-shaped models with seeded random weights, for the bench (no 25 GB download).

The config goes through the loader's own translation (:func:`~holodesk.policy.holotron.checkpoint.checkpoint_info`
and :func:`~holodesk.policy.holotron.hf_config.translate_config`) of the config.json and tensor shapes a
checkpoint of that size would have; the model is transformers' ``NemotronH_Omni_Reasoning_V3`` built
directly on the device. :func:`random_loaded` wraps it in a
:class:`~holodesk.policy.holotron.loader.LoadedHolotron` with the tiny test tokenizer
(:mod:`holodesk.bench.tiny_checkpoint`), so the engine and the policy run on it unchanged. Speed and memory
do not depend on the weight values; replies are meaningless.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from holodesk.bench.stand_in_tokenizer import write_tekken_tokenizer
from holodesk.bench.tiny_checkpoint import write_checkpoint, write_tokenizer
from holodesk.errors import HolodeskError
from holodesk.policy.holotron.checkpoint import CheckpointInfo, checkpoint_info
from holodesk.policy.holotron.hf_config import translate_config
from holodesk.policy.holotron.kernels import kernel_report, prepare_kernels
from holodesk.policy.holotron.layout import lay_out_qkv
from holodesk.policy.holotron.loader import LoadedHolotron, load_tokenizer

if TYPE_CHECKING:
    import torch
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3_Config


PATTERN = "M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M*-M-M-M-M-"
"""Holotron-12B / Nemotron-Nano-12B-v2 layer pattern: 62 blocks, 28 Mamba-2, 6 attention, 28 MLP."""

FULL: dict[str, Any] = {
    "pattern": PATTERN, "vocab": 131072, "hidden": 5120, "mlp": 20480, "attn_heads": 40, "kv_heads": 8,
    "head_dim": 128, "mamba_heads": 128, "state": 128, "groups": 8, "chunk": 128,
    "vision_width": 1280, "vision_layers": 32, "vision_heads": 16, "max_img_size": 2048,
}
"""Holotron-12B dimensions (docs/holotron-runtime.md; the Mamba head dim is ``2 * hidden / mamba_heads``, the
vision MLP ``4 * vision_width``, the projector ``4 * hidden``; ``max_img_size`` sizes the CPE table)."""
TINY: dict[str, Any] = {
    "pattern": "M*-M-M*-", "vocab": 512, "hidden": 64, "mlp": 128, "attn_heads": 4, "kv_heads": 2,
    "head_dim": 16, "mamba_heads": 8, "state": 16, "groups": 2, "chunk": 64,
    "vision_width": 32, "vision_layers": 2, "vision_heads": 2, "max_img_size": 512,
}
"""A tiny shape for CPU smoke runs (``holodesk bench --tiny``); not a Holotron measurement."""

STAND_IN_IDS = {"image": 8, "bos": 1, "eos": 2, "pad": 0}
"""Special-token ids used when no tokenizer is given (any ids inside the vocabulary work)."""


def full_size_config(
    image_token_id: int, eos_id: int, bos_id: int, pad_id: int, dims: dict[str, Any] = FULL
) -> dict[str, Any]:
    """Remote-style config.json (``NemotronH_Nano_VL_V2``) with the dimensions ``dims`` (default
    Holotron-12B; conv kernel 4, expand 2, 12 tiles of 512 px plus a thumbnail, CLIP mean/std)."""
    pattern = dims["pattern"]
    return {
        "architectures": ["NemotronH_Nano_VL_V2"],
        "model_type": "NemotronH_Nano_VL_V2",
        "downsample_ratio": 0.5,
        "force_image_size": 512,
        "patch_size": 16,
        "img_context_token_id": image_token_id,
        "max_num_tiles": 12,
        "use_thumbnail": True,
        "projector_hidden_size": 4 * dims["hidden"],
        "vit_hidden_size": dims["vision_width"],
        "torch_dtype": "bfloat16",
        "norm_mean": [0.48145466, 0.4578275, 0.40821073],
        "norm_std": [0.26862954, 0.26130258, 0.27577711],
        "llm_config": {
            "model_type": "nemotron_h",
            "architectures": ["NemotronHForCausalLM"],
            "vocab_size": dims["vocab"],
            "hidden_size": dims["hidden"],
            "hybrid_override_pattern": pattern,
            "num_hidden_layers": len(pattern),
            "intermediate_size": dims["mlp"],
            "mlp_hidden_act": "relu2",
            "num_attention_heads": dims["attn_heads"],
            "num_key_value_heads": dims["kv_heads"],
            "head_dim": dims["head_dim"],
            "mamba_num_heads": dims["mamba_heads"],
            "mamba_head_dim": 2 * dims["hidden"] // dims["mamba_heads"],
            "ssm_state_size": dims["state"],
            "n_groups": dims["groups"],
            "conv_kernel": 4,
            "expand": 2,
            "chunk_size": dims["chunk"],
            "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": False,
            "bos_token_id": bos_id,
            "eos_token_id": eos_id,
            "pad_token_id": pad_id,
        },
        "vision_config": {
            "model_type": "radio",
            "patch_size": 16,
            "max_resolution": dims["max_img_size"],
            "args": {"model": "vit_huge_patch16_224", "num_heads": dims["vision_heads"]},
        },
    }


def full_size_shapes(
    config: dict[str, Any], dims: dict[str, Any] = FULL, num_prefix_tokens: int = 8
) -> dict[str, tuple[int, ...]]:
    """The published tensor shapes the loader reads (RADIO ViT-H/16, mlp1, Nemotron-H embeddings) for a
    :func:`full_size_config` of ``dims`` (vision depth and CPE table size are not stated by config.json)."""
    v = "vision_model.radio_model."
    width = int(config["vit_hidden_size"])
    patch = int(config["patch_size"])
    side = dims["max_img_size"] // patch  # CPE table: side x side patches
    shuffled = round(width / float(config["downsample_ratio"]) ** 2)  # mlp1 input after pixel shuffle
    shapes: dict[str, tuple[int, ...]] = {
        v + "model.patch_generator.cls_token.token": (num_prefix_tokens, width),
        v + "model.patch_generator.pos_embed": (1, side * side, width),
        v + "model.patch_generator.embedder.weight": (width, 3 * patch * patch),
        v + "summary_idxs": (2,),
        "mlp1.1.weight": (int(config["projector_hidden_size"]), shuffled),
        "language_model.backbone.embeddings.weight": (
            int(config["llm_config"]["vocab_size"]), int(config["llm_config"]["hidden_size"])
        ),
    }
    for i in range(dims["vision_layers"]):
        shapes[f"{v}model.blocks.{i}.attn.qkv.weight"] = (3 * width, width)
        shapes[f"{v}model.blocks.{i}.attn.qkv.bias"] = (3 * width,)
        shapes[f"{v}model.blocks.{i}.mlp.fc1.weight"] = (4 * width, width)
    return shapes


FULL_SHARD_BYTES = 5 * 10**9
"""Largest safetensors shard of :func:`write_full_checkpoint` (the hub's usual 5 GB)."""


def write_full_checkpoint(path: str | Path, *, seed: int = 0, device: str = "cpu",
                          shard_bytes: int = FULL_SHARD_BYTES) -> Path:
    """Write a checkpoint of Holotron-12B's full size (:data:`holodesk.bench.model.FULL`, 13.2 B parameters,
    24.5 GiB of bf16) in the published layout: shards of at most ``shard_bytes`` with their index,
    config.json, preprocessor_config.json, generation_config.json and the tiny test tokenizer.

    Weights are drawn on ``device`` (``"cuda"`` draws 13 B normals in well under a second; the CPU takes
    minutes) and written one shard at a time: host memory holds one shard (plus safetensors'
    serialisation copy of it), never the whole model.

    Returns:
        The checkpoint folder as a Path.
    """
    return write_checkpoint(path, full_config_for, vision_layers=FULL["vision_layers"], num_prefix_tokens=8,
                            seed=seed, dtype="bfloat16", shard_bytes=shard_bytes, device=device, preprocessor=True)


def full_config_for(ids: dict[str, int]) -> dict[str, Any]:
    """:func:`full_size_config` of Holotron-12B's size for a tokenizer's special ids (special token -> id:
    ``<image>``, ``<SPECIAL_12>``, ``<s>``, ``<pad>``)."""
    return full_size_config(ids["<image>"], ids["<SPECIAL_12>"], ids["<s>"], ids["<pad>"], FULL)


class RandomConfig(NamedTuple):
    """:func:`random_config`'s result: the translated native config, the checkpoint facts it came from
    (``info.image_token_id`` is ``<image>``), and the remote-style config.json."""

    config: NemotronH_Omni_Reasoning_V3_Config
    info: CheckpointInfo
    raw: dict[str, Any]


def random_config(
    dims: dict[str, Any] = FULL,
    pattern: str | None = None,
    *,
    ids: dict[str, int] | None = None,
    folder: Path | None = None,
) -> RandomConfig:
    """``NemotronH_Omni_Reasoning_V3_Config`` for ``dims`` through the loader's own translation, with SDPA
    attention. No file is read or written.

    Args:
        dims: :data:`FULL`, :data:`TINY` or a dict with the same keys.
        pattern: LM block pattern replacing ``dims["pattern"]`` (reduced depth; the layer count follows).
        ids: ``image``/``bos``/``eos``/``pad`` token ids (default :data:`STAND_IN_IDS`).
        folder: recorded as ``info.folder`` (nothing is read from it).
    """
    if pattern:
        dims = {**dims, "pattern": pattern}
    t = {**STAND_IN_IDS, **(ids or {})}
    raw = full_size_config(t["image"], t["eos"], t["bos"], t["pad"], dims)
    info = checkpoint_info(folder or Path("random-weights"), raw, (), full_size_shapes(raw, dims))
    return RandomConfig(translate_config(info, attn_implementation="sdpa"), info, raw)


def build_random_model(config: NemotronH_Omni_Reasoning_V3_Config, device: torch.device, dtype: torch.dtype,
                       seed: int) -> torch.nn.Module:
    """``NemotronH_Omni_Reasoning_V3(config)`` with seeded random weights, built on ``device`` in ``dtype``
    (``torch.device("meta")`` builds the shapes only). The output projections of the LM blocks are halved
    so the residual stream stays bounded through 62 random blocks."""
    import torch  # lazy: torch (optional: the local extra)

    prepare_kernels()  # before transformers imports NemotronH, as every loader in this process does
    # lazy: transformers (optional: the local extra)
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3

    parts: tuple[Any, ...] = (config, config.text_config, config.vision_config)
    for part in parts:
        part._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model: Any = NemotronH_Omni_Reasoning_V3(config)
    finally:
        torch.set_default_dtype(previous)
    model = model.to(dtype).eval()
    with torch.no_grad():
        for name, p in model.language_model.named_parameters():
            if name.endswith(("out_proj.weight", "o_proj.weight", "down_proj.weight")):
                p.mul_(0.5)
    return model


def random_loaded(
    *,
    tiny: bool,
    device: torch.device,
    dtype: torch.dtype,
    seed: int,
    pattern: str | None = None,
    quantization: str | None = None,
    workdir: Path | None = None,
    tokenizer_name: str = "test",
) -> LoadedHolotron:
    """A :class:`LoadedHolotron` of :data:`FULL` (or :data:`TINY`) dimensions with random weights.

    The tokenizer is the tiny test tokenizer (its special tokens give ``<image>``, ``<img>``, ``</img>``,
    the stop token ``<SPECIAL_12>`` and ``</think>``; the LM keeps its full vocabulary), or with
    ``tokenizer_name="tekken"`` the stand-in of Holotron's size (:mod:`holodesk.bench.stand_in_tokenizer`;
    :data:`FULL` dimensions only). Tile settings and
    normalisation come from the translated checkpoint facts, as :func:`load_holotron` reads them.

    Args:
        quantization: None, ``"8bit"`` or ``"4bit"``: the LM's linear layers are replaced by bitsandbytes
            modules (:func:`quantize_lm`, CUDA only).
        workdir: where the tokenizer files are written (default: a new temporary folder).
        tokenizer_name: ``"test"`` or ``"tekken"``.
    Raises:
        ModelLoadError: when the tokenizer cannot be loaded.
        HolodeskError: ``"tekken"`` with ``tiny``, an unknown ``tokenizer_name``, or mistral-common missing.
    """
    prepare_kernels()  # before transformers imports NemotronH
    work = workdir or Path(tempfile.mkdtemp(prefix="holodesk-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    if tokenizer_name == "tekken":
        if tiny:
            raise HolodeskError("--tokenizer tekken needs the full-size model (131,072 ids); the tiny one has 512",
                                hint="Leave out --tiny, or use --tokenizer test.")
        write_tekken_tokenizer(work)
    elif tokenizer_name == "test":
        write_tokenizer(work)
    else:
        raise HolodeskError(f"unknown tokenizer {tokenizer_name!r}", hint="Use --tokenizer test or tekken.")
    tokenizer = load_tokenizer(work)
    vocab = tokenizer.get_vocab()
    ids = {"image": vocab["<image>"], "eos": vocab["<SPECIAL_12>"], "bos": vocab["<s>"], "pad": vocab["<pad>"]}
    config, info, raw = random_config(TINY if tiny else FULL, pattern, ids=ids, folder=work)
    (work / "config.json").write_text(json.dumps(raw, indent=2))
    model = build_random_model(config, device, dtype, seed)
    if quantization is not None:
        quantize_lm(model, quantization)
    lay_out_qkv(model)  # as load_holotron does
    assert info.norm_mean is not None and info.norm_std is not None  # config.json states them
    loaded = LoadedHolotron(
        model=model,
        tokenizer=tokenizer,
        info=info,
        mean=tuple(info.norm_mean),
        std=tuple(info.norm_std),
        norm_source="config.json (random weights)",
        image_token_id=ids["image"],
        img_start_id=vocab["<img>"],
        img_end_id=vocab["</img>"],
        eos_ids=(ids["eos"],),
        think_end_id=vocab.get("</think>"),
        device=device,
        dtype=dtype,
        quantization=quantization,
        kernels=kernel_report(),
        weights_reader="none: random weights drawn on the device",
    )
    loaded.finish_weights()  # as load_holotron does: the unit layer scales skipped
    return loaded


def quantize_lm(model: torch.nn.Module, mode: str) -> None:
    """Replace the LM's ``nn.Linear`` layers (not ``lm_head``) by bitsandbytes 8-bit (LLM.int8) or NF4
    modules, in place, as ``load_holotron(quantization=...)`` lays them out; CUDA only.

    Raises:
        ImportError: bitsandbytes is not installed.
    """
    import bitsandbytes as bnb  # lazy: bitsandbytes (optional: the quant extra)
    import torch  # lazy: torch (optional: the local extra)

    lm: Any = model.language_model
    lm = lm.model
    device = next(lm.parameters()).device
    for parent in list(lm.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, torch.nn.Linear):
                continue
            w = child.weight.data.to("cpu")
            bias = child.bias is not None
            q: Any
            if mode == "4bit":
                q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=bias, compute_dtype=torch.bfloat16,
                                      quant_type="nf4", compress_statistics=False, device="meta")
                q.weight = bnb.nn.Params4bit(w, requires_grad=False, quant_type="nf4", compress_statistics=False)
            else:
                q = bnb.nn.Linear8bitLt(child.in_features, child.out_features, bias=bias, has_fp16_weights=False,
                                        threshold=6.0, device="meta")
                q.weight = bnb.nn.Int8Params(w, requires_grad=False, has_fp16_weights=False)
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            setattr(parent, name, q)
            del child, w
            q.to(device)
    torch.cuda.empty_cache()
