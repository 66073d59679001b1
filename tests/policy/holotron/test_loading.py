"""Loading the published layout through transformers' native classes; load-report enforcement."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from holodesk.errors import ModelLoadError
from holodesk.policy.holotron.checkpoint import read_checkpoint
from holodesk.policy.holotron.hf_config import translate_config
from holodesk.policy.holotron.loader import load_holotron
from holodesk.policy.holotron.prompt import tokenize_prompt
from holodesk.policy.holotron.tiling import plan_tiling, preprocess_pixels
from tests.helpers.holotron_reference import stock_logits

# The published -> native key layout, written here from docs/holotron.md independently of
# transformers' conversion_mapping.py (which the loader uses).
_RENAMES = [
    (r"^vision_model\.radio_model\.model\.patch_generator\.embedder\.", "vision_model.embeddings.patch_projection."),
    (r"^vision_model\.radio_model\.model\.patch_generator\.pos_embed$", "vision_model.embeddings.position_embedding"),
    (r"^vision_model\.radio_model\.model\.patch_generator\.cls_token\.token$",
     "vision_model.embeddings.cls_register_token"),
    (r"^vision_model\.radio_model\.model\.blocks\.(\d+)\.attn\.proj\.",
     r"vision_model.encoder.layer.\1.attention.o_proj."),
    (r"^vision_model\.radio_model\.model\.blocks\.", "vision_model.encoder.layer."),
    (r"^vision_model\.radio_model\.summary_idxs$", "vision_model.summary_idxs"),
    (r"^mlp1\.0\.", "multi_modal_projector.layer_norm."),
    (r"^mlp1\.1\.", "multi_modal_projector.linear_1."),
    (r"^mlp1\.3\.", "multi_modal_projector.linear_2."),
    (r"^language_model\.backbone\.", "language_model.model."),
]


def _reference_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        for key, tensor in load_file(str(f)).items():
            if "input_conditioner" in key:
                continue
            name = key
            for pattern, repl in _RENAMES:
                name = re.sub(pattern, repl, name)
            if ".attn.qkv." in name:
                q, k, v = tensor.chunk(3, dim=0)
                for part, t in zip(("q_proj", "k_proj", "v_proj"), (q, k, v), strict=True):
                    out[name.replace("attn.qkv", f"attention.{part}")] = t
            else:
                out[name] = tensor
    return out


def _pixel_shuffle(x: torch.Tensor, ratio: float = 0.5) -> torch.Tensor:
    """InternVL / Nemotron VL pixel shuffle (v2), written out: (n, w, h, c) -> (n, w*r, h*r, c/r^2)."""
    n, w, h, c = x.shape
    x = x.view(n, w, int(h * ratio), int(c / ratio)).permute(0, 2, 1, 3).contiguous()
    x = x.view(n, int(h * ratio), int(w * ratio), int(c / (ratio * ratio)))
    return x.permute(0, 2, 1, 3).contiguous()


def test_logits_match_native_reference(tiny_dir: Path, tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3

    loaded = tiny_loaded
    image = np.random.default_rng(1).integers(0, 256, (720, 1280, 3), dtype=np.uint8)  # 2x1 grid + thumbnail
    ids = tokenize_prompt(
        loaded.tokenizer,
        "<SPECIAL_10>System\nsys\n<SPECIAL_11>User\n\ue000holodesk:image\ue000\nclick the button\n"
        "<SPECIAL_11>Assistant\n<think></think>",
        [3 * 256],
        img_start_id=loaded.img_start_id,
        img_end_id=loaded.img_end_id,
        image_token_id=loaded.image_token_id,
    )
    ours = stock_logits(loaded, ids, [image])

    # reference: native modules built from the translated config, weights by our own renaming
    config = translate_config(read_checkpoint(tiny_dir), attn_implementation="eager")
    ref = NemotronH_Omni_Reasoning_V3(config).eval()
    missing, unexpected = ref.load_state_dict(_reference_state_dict(tiny_dir), strict=False)
    # C-RADIO has no LayerScale: the native lambda1 stay at their identity init (1.0)
    assert {k for k in missing if ".layer_scale" not in k} == {"vision_model.embeddings.video_patch_projection.weight"}
    assert unexpected == []
    raw = json.loads((tiny_dir / "config.json").read_text())
    tiling = plan_tiling(1280, 720, raw["max_num_tiles"], tile_size=raw["force_image_size"],
                         use_thumbnail=raw["use_thumbnail"])
    tiles = preprocess_pixels(image, tiling, mean=raw["norm_mean"], std=raw["norm_std"],
                              tile_size=raw["force_image_size"])
    assert (tiling.cols, tiling.rows) == (2, 1) and tiles.shape == (3, 3, 512, 512)
    with torch.inference_mode():
        feats = ref.vision_model(tiles).features  # (3, 1024, 32)
        feats = _pixel_shuffle(feats.reshape(3, 32, 32, -1)).reshape(3, 256, -1)
        proj = ref.multi_modal_projector
        h = proj.layer_norm(feats)
        h = proj.linear_2(torch.relu(proj.linear_1(h)) ** 2).reshape(-1, proj.linear_2.out_features)
        ids_t = torch.tensor([ids])
        emb = ref.language_model.get_input_embeddings()(ids_t)
        emb[0, ids_t[0] == loaded.image_token_id] = h
        expected = ref.language_model(inputs_embeds=emb, use_cache=False).logits[0].float()
    rel = (ours - expected).norm() / expected.norm()
    assert rel.item() < 1e-5, rel.item()


def test_load_report_is_clean(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    notes = " ".join(tiny_loaded.notes)
    assert "video_patch_projection" in notes
    assert "vision_model.radio_model.input_conditioner.norm_mean" in notes
    assert tiny_loaded.norm_source == "checkpoint input_conditioner buffers"
    assert tiny_loaded.info.num_prefix_tokens == 8 and tiny_loaded.info.max_img_size == 128
    assert tiny_loaded.info.tokens_per_tile == 256
    assert tiny_loaded.weights_reader == "transformers, onto cpu"  # the page-locked reader is for CUDA


def _rewrite(folder: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Apply ``edit(dict)`` to every shard's tensors and rewrite shards + index."""
    from safetensors.torch import load_file, save_file

    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    weight_map: dict[str, str] = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors = load_file(str(f))
        edit(tensors)
        save_file(tensors, str(f), metadata={"format": "pt"})
        weight_map.update({k: f.name for k in tensors})
    index["weight_map"] = weight_map
    index_path.write_text(json.dumps(index))


@pytest.fixture
def tiny_copy(tiny_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_dir, tmp_path / "copy"))


def test_renamed_key_is_named(tiny_copy: Path) -> None:
    def rename(t: dict[str, torch.Tensor]) -> None:
        if "mlp1.1.weight" in t:
            t["mlp1.2.weight"] = t.pop("mlp1.1.weight")

    _rewrite(tiny_copy, rename)
    with pytest.raises(ModelLoadError) as err:
        load_holotron(tiny_copy, dtype="float32", device="cpu")
    msg = str(err.value)
    assert "mlp1.2.weight" in msg  # the unexpected key, as the checkpoint has it
    assert "mlp1.1.weight" in msg and "multi_modal_projector.linear_1.weight" in msg  # what is missing


def test_missing_key_is_named(tiny_copy: Path) -> None:
    key = "language_model.backbone.layers.3.mixer.q_proj.weight"

    def drop(t: dict[str, torch.Tensor]) -> None:
        t.pop(key, None)

    _rewrite(tiny_copy, drop)
    with pytest.raises(ModelLoadError) as err:
        load_holotron(tiny_copy, dtype="float32", device="cpu")
    assert key in str(err.value)
    assert "language_model.model.layers.3.mixer.q_proj.weight" in str(err.value)


def test_missing_vision_qkv_is_named(tiny_copy: Path) -> None:
    key = "vision_model.radio_model.model.blocks.1.attn.qkv.bias"

    def drop(t: dict[str, torch.Tensor]) -> None:
        t.pop(key, None)

    _rewrite(tiny_copy, drop)
    with pytest.raises(ModelLoadError) as err:
        load_holotron(tiny_copy, dtype="float32", device="cpu")
    assert key in str(err.value)


def test_shape_mismatch_fails(tiny_copy: Path) -> None:
    def shrink(t: dict[str, torch.Tensor]) -> None:
        k = "language_model.backbone.layers.0.mixer.out_proj.weight"
        if k in t:
            t[k] = t[k][:, :-8].contiguous()

    _rewrite(tiny_copy, shrink)
    with pytest.raises(ModelLoadError) as err:
        load_holotron(tiny_copy, dtype="float32", device="cpu")
    assert "out_proj" in str(err.value)


def test_wrong_model_type(tiny_copy: Path) -> None:
    cfg = json.loads((tiny_copy / "config.json").read_text())
    cfg["model_type"] = "llama"
    (tiny_copy / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="model_type 'llama'"):
        load_holotron(tiny_copy, dtype="float32", device="cpu")


def test_missing_shard_fails(tiny_copy: Path) -> None:
    next(tiny_copy.glob("model-00002-*.safetensors")).unlink()
    with pytest.raises(ModelLoadError, match="missing"):
        load_holotron(tiny_copy, dtype="float32", device="cpu")


def test_absent_folder_and_offline_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelLoadError, match="neither an existing folder, a model Holodesk lists"):
        load_holotron(tmp_path / "nope" / "deeper" / "x", device="cpu")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelLoadError, match="not on this machine"):
        load_holotron("Hcompany/Holotron-12B", device="cpu")
    # this machine has no NVIDIA GPU: the message points at the remote server instead
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(ModelLoadError) as info:
        load_holotron("Hcompany/Holotron-12B", device="cpu")
    assert "No NVIDIA GPU was found" in str(info.value) and "--endpoint URL" in str(info.value)
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/nvidia-smi")
    with pytest.raises(ModelLoadError) as info:
        load_holotron("Hcompany/Holotron-12B", device="cpu")
    assert "No NVIDIA GPU" not in str(info.value)


def test_no_download_without_a_gpu_but_the_cache_is_used(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a CUDA GPU a hub repo id is never downloaded (25 GB for a model far too slow on the CPU);
    a copy already in the hub cache is still loaded. huggingface_hub's downloader is replaced by a fake
    that records how it was called (no network here)."""
    import huggingface_hub

    calls: list[dict[str, object]] = []

    def fake_snapshot_download(repo_id: str, **kw: object) -> str:
        calls.append({"repo_id": repo_id, **kw})
        if kw.get("local_files_only") and repo_id == "owner/cached":
            return str(tiny_dir)
        raise OSError("not in the fake cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    with pytest.raises(ModelLoadError, match="not downloaded for a machine without a CUDA GPU"):
        load_holotron("owner/absent", device="cpu")
    assert calls and all(c.get("local_files_only") for c in calls)
    loaded = load_holotron("owner/cached", device="cpu")
    assert loaded.model is not None and all(c.get("local_files_only") for c in calls)


def test_loading_does_not_warn_about_the_model_type(tiny_dir: Path, capfd: pytest.CaptureFixture[str],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The tokenizer lookup used to print transformers' "model of type NemotronH_Nano_VL_V2 to instantiate
    a model of type ``" warning on every load; the translated config is what is instantiated."""
    load_holotron(tiny_dir, device="cpu")
    said = capfd.readouterr().err + caplog.text
    assert "to instantiate a model of type" not in said


def test_quantization_needs_cuda(tiny_dir: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ModelLoadError, match="NVIDIA GPU"):
        load_holotron(tiny_dir, quantization="4bit", device="cpu")


def test_unknown_dtype(tiny_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        load_holotron(tiny_dir, dtype="int3", device="cpu")


def test_progress_callback(tiny_dir: Path) -> None:
    stages: list[str] = []
    load_holotron(tiny_dir, dtype="float32", device="cpu", progress=lambda stage, frac: stages.append(stage))
    assert stages[0] == "reading checkpoint" and stages[-1] == "ready"


def _attention_mixers(model) -> list:  # type: ignore[no-untyped-def]
    return [m for m in model.language_model.modules() if hasattr(m, "q_proj")]


def test_qkv_weights_share_one_buffer_and_the_stock_forward_is_unchanged(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    """The loader lays out each attention layer's q/k/v weights as consecutive rows of one buffer: the
    decoder finds that buffer, and transformers' forward gives bit-identical logits with or without it."""
    import copy

    from holodesk.policy.holotron.blocks import fused_qkv_weight
    from holodesk.policy.holotron.layout import lay_out_qkv

    mixers = _attention_mixers(tiny_loaded.model)
    assert mixers
    for mixer in mixers:
        q, k, v = mixer.q_proj.weight, mixer.k_proj.weight, mixer.v_proj.weight
        assert isinstance(q, torch.nn.Parameter) and type(mixer.q_proj) is torch.nn.Linear
        assert k.data_ptr() == q.data_ptr() + q.nbytes and v.data_ptr() == k.data_ptr() + k.nbytes
        fused = fused_qkv_weight(mixer)
        assert fused is not None and torch.equal(fused, torch.cat([q, k, v]))

    separate = copy.deepcopy(tiny_loaded.model)  # the same weights in three tensors, as transformers loads them
    for mixer in _attention_mixers(separate):
        for proj in (mixer.q_proj, mixer.k_proj, mixer.v_proj):
            proj.weight.data = proj.weight.data.clone()
        assert fused_qkv_weight(mixer) is None
    ids = torch.tensor([list(range(3, 90))])

    def logits(model) -> torch.Tensor:  # type: ignore[no-untyped-def]
        with torch.inference_mode():
            return model.language_model(input_ids=ids, use_cache=False).logits

    reference = logits(separate)
    assert torch.equal(logits(tiny_loaded.model), reference)
    copies: list[int] = []  # before_copy: called once, before the first copy (which reads the weights' values)
    assert lay_out_qkv(separate, before_copy=lambda: copies.append(1)) == len(mixers) and copies == [1]
    assert lay_out_qkv(separate, before_copy=lambda: copies.append(2)) == len(mixers) and copies == [1]  # as they are
    assert torch.equal(logits(separate), reference)
    assert all(fused_qkv_weight(m) is not None for m in _attention_mixers(separate))


def test_unit_layer_scales_pass_through_and_keep_the_state_dict(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    """The loader skips the vision layer scales whose factor is 1 (every one of the checkpoint's): the state dict
    keeps their parameters, the vision features equal those of transformers' layer scale bit for bit, and a scale
    with another factor is kept."""
    import copy

    from transformers.models.radio.modeling_radio import RadioLayerScale

    from holodesk.policy.holotron.layout import skip_unit_layer_scales

    layers = list(tiny_loaded.model.vision_model.encoder.layer)
    names = ("layer_scale1", "layer_scale2")
    assert layers and all(type(getattr(layer, n)).__name__ == "UnitScale" for layer in layers for n in names)
    stock = copy.deepcopy(tiny_loaded.model)
    for layer in stock.vision_model.encoder.layer:
        for name in names:
            scale = RadioLayerScale(stock.vision_model.config)
            scale.lambda1 = getattr(layer, name).lambda1
            setattr(layer, name, scale)
    assert stock.state_dict().keys() == tiny_loaded.model.state_dict().keys()
    size = tiny_loaded.info.tile_size
    tiles = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        ours, theirs = tiny_loaded.model.vision_model(tiles).features, stock.vision_model(tiles).features
    assert torch.equal(ours, theirs)
    first = stock.vision_model.encoder.layer[0].layer_scale1
    with torch.no_grad():
        first.lambda1.fill_(0.5)
    assert skip_unit_layer_scales(stock) == 2 * len(layers) - 1
    assert stock.vision_model.encoder.layer[0].layer_scale1 is first


def test_the_load_reads_the_tokenizers_vocabulary_once(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``get_vocab`` builds a dict of every token at each call (0.13-0.17 s of CPU with 131,072 ids): the load
    reads it once and takes the image markers, the end tokens and ``</think>`` from that one dict."""
    from holodesk.policy.holotron import loader

    calls: list[str] = []
    real_load = loader.load_tokenizer

    def counting_load(folder: Path) -> object:
        tokenizer = real_load(folder)
        real_get_vocab = tokenizer.get_vocab

        def get_vocab() -> dict[str, int]:
            calls.append("get_vocab")
            vocab: dict[str, int] = real_get_vocab()
            return vocab

        tokenizer.get_vocab = get_vocab
        return tokenizer

    monkeypatch.setattr(loader, "load_tokenizer", counting_load)
    loaded = load_holotron(tiny_dir, dtype="float32", device="cpu")
    assert calls == ["get_vocab"]
    vocab = loaded.tokenizer.get_vocab()
    assert (loaded.img_start_id, loaded.img_end_id, loaded.think_end_id) == (vocab["<img>"], vocab["</img>"],
                                                                           vocab["</think>"])
    assert vocab["<SPECIAL_12>"] in loaded.eos_ids
