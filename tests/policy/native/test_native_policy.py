"""NativePolicy on the tiny random checkpoints of each native family, on the CPU: loaded through
transformers' own classes from the published layout, each reply constrained into a valid agent-loop-v1 action."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open

from holodesk.core.actions import Action
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import ModelLoadError
from holodesk.policy.base import HistoryStep, Observation, Policy, Proposal
from holodesk.policy.contract import IMAGE_PLACEHOLDER, Reply
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.native import NativePolicy
from holodesk.policy.native.policy import CACHE_STEP, ReplyRule
from tests.policy.native.conftest import NATIVE_KEYS

STRING_CAP = 8
"""Every JSON string of a reply is capped at this many characters (max_string_chars), so a random model closes
its object well inside the token budget."""

PUBLISHED_NAMES = {
    "qwen3_vl": ["model.visual.blocks.0.attn.qkv.weight", "model.visual.deepstack_merger_list.0.linear_fc1.weight",
                 "model.language_model.layers.1.self_attn.q_norm.weight", "lm_head.weight"],
    "qwen3_vl_moe": ["model.visual.deepstack_merger_list.0.linear_fc1.weight",
                     "model.language_model.layers.1.mlp.experts.gate_up_proj",
                     "model.language_model.layers.1.mlp.experts.down_proj",
                     "model.language_model.layers.0.mlp.gate.weight"],
    "qwen3_5": ["model.visual.merger.linear_fc1.weight",
                "model.language_model.layers.0.linear_attn.in_proj_qkv.weight",
                "model.language_model.layers.1.self_attn.q_proj.weight",
                "model.language_model.layers.0.mlp.gate_proj.weight"],
    "qwen3_5_moe": ["model.language_model.layers.0.mlp.experts.3.gate_proj.weight",
                    "model.language_model.layers.0.mlp.shared_expert_gate.weight",
                    "model.language_model.layers.0.mlp.gate.weight"],
    "nemotron_h_omni": ["language_model.backbone.layers.1.mixer.experts.3.up_proj.weight",
                        "language_model.backbone.layers.0.mixer.A_log", "mlp1.1.weight",
                        "vision_model.radio_model.model.blocks.0.attn.qkv.weight", "language_model.lm_head.weight"],
}
"""Parameter names of each family's published checkpoints, as its safetensors files spell them."""


def _frame(w: int = 1920, h: int = 1080, seed: int = 0) -> Frame:
    pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return Frame(pixels, Monitor(1, 0, 0, w, h))


def _keys(folder: Path) -> set[str]:
    keys: set[str] = set()
    for path in folder.glob("*.safetensors"):
        with safe_open(str(path), "pt") as fh:
            keys.update(fh.keys())
    return keys


_POLICIES: dict[str, NativePolicy] = {}
LoadPolicy = Callable[[str], NativePolicy]
Generated = tuple[str, dict[str, float], dict[str, Any]]


@pytest.fixture
def load_policy(family_dirs: dict[str, Path]) -> LoadPolicy:
    def load(key: str) -> NativePolicy:
        if key not in _POLICIES:
            options = GenerationOptions(max_reply_tokens=1024, max_string_chars=STRING_CAP)
            _POLICIES[key] = NativePolicy.load(family_dirs[key], options, dtype="float32", device="cpu")
        return _POLICIES[key]

    return load


@pytest.mark.parametrize("key", [*NATIVE_KEYS, "nemotron_h_omni"])
def test_tiny_checkpoint_has_the_published_layout(family_dirs: dict[str, Path], key: str) -> None:
    folder = family_dirs[key]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == key and "text_config" in config and "vision_config" in config
    assert set(PUBLISHED_NAMES[key]) <= _keys(folder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    placeholder = "<image>" if key == "nemotron_h_omni" else "<|image_pad|>"
    assert added[placeholder] == config["image_token_id"]  # the token the processor writes is the model's
    assert (folder / "chat_template.jinja").exists() and (folder / "preprocessor_config.json").exists()


def test_qwen3_vl_moe_experts_are_published_fused_and_transposed(family_dirs: dict[str, Path]) -> None:
    """Qwen3-VL-MoE checkpoints hold each layer's experts as two fused tensors, ``gate_up_proj``
    ``(experts, hidden, 2 * moe_intermediate)`` and ``down_proj`` ``(experts, moe_intermediate, hidden)``;
    transformers transposes them into its own layout at load, with nothing missing."""
    from transformers import AutoModelForImageTextToText

    folder = family_dirs["qwen3_vl_moe"]
    text = json.loads((folder / "config.json").read_text())["text_config"]
    experts, hidden, inner = text["num_experts"], text["hidden_size"], text["moe_intermediate_size"]
    prefix = "model.language_model.layers.0.mlp.experts."
    with safe_open(str(folder / "model.safetensors"), "pt") as fh:
        gate_up, down = fh.get_tensor(prefix + "gate_up_proj"), fh.get_tensor(prefix + "down_proj")
    assert gate_up.shape == (experts, hidden, 2 * inner) and down.shape == (experts, inner, hidden)
    model, info = AutoModelForImageTextToText.from_pretrained(str(folder), dtype=torch.float32,
                                                              output_loading_info=True)
    assert type(model).__name__ == "Qwen3VLMoeForConditionalGeneration"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    loaded = model.model.language_model.layers[0].mlp.experts
    assert torch.equal(loaded.gate_up_proj, gate_up.transpose(1, 2))
    assert torch.equal(loaded.down_proj, down.transpose(1, 2))


@pytest.mark.parametrize("key", NATIVE_KEYS)
def test_proposes_a_valid_action_for_a_1080p_frame(load_policy: LoadPolicy, key: str) -> None:
    policy = load_policy(key)
    assert isinstance(policy, Policy)
    assert policy.describe()["cache"] == "static" and policy.describe()["compiled"] is False  # CPU: eager
    proposal = policy.propose(Observation(task="Click OK", frame=_frame()))
    assert isinstance(proposal, Proposal) and isinstance(proposal.action, Action)
    reply = Reply.model_validate_json(proposal.raw_text)  # the reply schema itself, strictly
    assert policy.protocol.parse(proposal.raw_text).action == proposal.action
    free = [json.loads(proposal.raw_text)["tool_call"].get(k) for k in ("element", "content")]
    free += [reply.thought, reply.note]  # type: ignore[attr-defined]
    assert all(len(s) <= STRING_CAP for s in free if s is not None)  # the grammar's cap (max_string_chars)
    extra = proposal.extra
    assert extra["family"] == key and extra["images"] == 1 and extra["stop_reason"] == "eos"
    assert extra["generated_tokens"] > 10 and extra["prompt_tokens"] > 1000
    assert set(proposal.timings_ms) == {"preprocess", "prefill", "decode"}
    assert all(v > 0 for v in proposal.timings_ms.values())
    assert extra["ttfa_ms"] == pytest.approx(proposal.timings_ms["preprocess"] + proposal.timings_ms["prefill"])
    assert extra["decode_ms_per_token"] > 0
    # transformers built a StaticCache for this generate, sized to a multiple of CACHE_STEP tokens
    assert policy.loaded.model._previous_max_cache_length % CACHE_STEP == 0
    assert policy.loaded.model._previous_max_cache_length >= extra["prompt_tokens"] + policy.options.max_reply_tokens


@pytest.mark.parametrize("key", NATIVE_KEYS)
def test_each_screenshot_gets_the_processors_placeholder_count(load_policy: LoadPolicy, key: str) -> None:
    policy = load_policy(key)
    history = tuple(HistoryStep(i, _frame(1280, 720, seed=i), None, outcome="performed") for i in range(3))
    prepared = policy.prepare(Observation(task="Click OK", frame=_frame(), history=history))
    inputs = prepared["inputs"]
    assert prepared["images"] == policy.max_images == 3  # the current frame and the last two of history
    assert prepared["prompt_text"].count(IMAGE_PLACEHOLDER) == 1  # the oldest screenshot is text only
    grids = inputs["image_grid_thw"]
    assert grids.shape == (3, 3)
    image_id = policy.loaded.model.config.image_token_id
    merge = policy.loaded.processor.image_processor.merge_size
    assert int((inputs["input_ids"] == image_id).sum()) == int(grids.prod(dim=1).sum()) // merge**2


def test_load_refuses_weights_that_do_not_fit_the_config(family_dirs: dict[str, Path], tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(family_dirs["qwen3_vl"], broken)
    config = json.loads((broken / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] += 1  # a block the weights do not have: never random-filled
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="missing"):
        NativePolicy.load(broken, dtype="float32", device="cpu")


def test_dispatch_loads_each_checkpoint_with_its_runtime(family_dirs: dict[str, Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Each family loads with its runtime; the process's first successful load keeps the files it read besides
    the checkpoint's for the next start to read ahead (holodesk.policy.start_files), later and failed loads keep
    that list."""
    from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint
    from holodesk.policy import start_files
    from holodesk.policy.holotron import HolotronPolicy
    from holodesk.policy.local import load_local_policy

    monkeypatch.setattr(start_files, "_SAVED", False)  # this test's first load is the process's first
    start_files.list_path().unlink(missing_ok=True)
    free = GenerationOptions(constrained_decoding=False)
    native = load_local_policy(family_dirs["qwen3_5_moe"], free, dtype="float32", device="cpu")
    assert isinstance(native, NativePolicy) and native.loaded.family.key == "qwen3_5_moe"
    native.close()
    kept = json.loads(start_files.list_path().read_text())["files"]
    assert kept and not any(f.startswith(str(family_dirs["qwen3_5_moe"])) for f in kept)
    assert any(Path(f).name.startswith("libtorch") for f in kept)  # torch's libraries, mapped by the load
    holotron = load_local_policy(write_tiny_checkpoint(tmp_path / "holotron"), free, dtype="float32", device="cpu",
                                 decoder="stock")
    assert isinstance(holotron, HolotronPolicy)
    holotron.close()
    with pytest.raises(ModelLoadError, match="Holotron-12B only"):
        load_local_policy(family_dirs["qwen3_vl"], quantization="4bit", device="cpu")
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelLoadError, match="qwen3_vl"):
        load_local_policy(tmp_path / "llama", device="cpu")
    assert json.loads(start_files.list_path().read_text())["files"] == kept


def test_holotron_3_nano_tiny_loads_through_transformers_class(family_dirs: dict[str, Path]) -> None:
    """The Omni MoE checkpoint loads with nothing missing and decodes on transformers' static cache (its
    proposal: tests/policy/native/test_omni_processor.py)."""
    from transformers import AutoModelForImageTextToText

    folder = family_dirs["nemotron_h_omni"]
    model, info = AutoModelForImageTextToText.from_pretrained(str(folder), dtype=torch.float32,
                                                              output_loading_info=True)
    assert type(model).__name__ == "NemotronH_Omni_Reasoning_V3"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert "moe" in model.config.text_config.layers_block_type
    ids = torch.tensor([[1, 20, 30, 40]])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                         cache_implementation="static", disable_compile=True, pad_token_id=0)
    assert out.shape == (1, 8)


class FakeConstraint:
    """A stand-in for the xgrammar Constraint (named fake): accepts every token but ``bad``; masks nothing."""

    def __init__(self, bad: int) -> None:
        self.bad, self.started, self.accepted = bad, 0, []  # type: ignore[var-annotated]

    def start(self) -> None:
        self.started += 1

    def mask(self, logits: torch.Tensor) -> None:
        pass

    def accept(self, token: int) -> bool:
        self.accepted.append(token)
        return token != self.bad


def test_reply_rule_thinking_budget_then_grammar() -> None:
    think_end, eos, vocab = 5, 2, 16
    fake = FakeConstraint(bad=13)
    rule = ReplyRule(fake, reasoning=True, think_end_id=think_end, max_think_tokens=2, eos_ids=(eos,),  # type: ignore[arg-type]
                     device=torch.device("cpu"))
    ids = torch.tensor([[7, 7, 7]])

    def call(last: int) -> torch.Tensor:
        nonlocal ids
        if rule.calls:
            ids = torch.cat([ids, torch.tensor([[last]])], dim=1)
        return rule(ids, torch.zeros(1, vocab))[0]

    assert torch.isfinite(call(0)).all() and fake.started == 1  # thinking: free
    assert torch.isfinite(call(9)).all()  # one thinking token
    forced = call(9)  # the budget of 2 is spent: only </think> is possible
    assert torch.isfinite(forced).nonzero().flatten().tolist() == [think_end]
    assert torch.isfinite(call(think_end)).all() and fake.accepted == []  # thinking over, grammar from here
    call(11)
    assert fake.accepted == [11] and rule.stop_reason is None
    stopped = call(13)  # the grammar rejects 13: only the stop token is left
    assert rule.stop_reason == "grammar"
    assert torch.isfinite(stopped).nonzero().flatten().tolist() == [eos]


def test_tiny_checkpoint_cli_writes_each_family(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from holodesk.cli import main

    assert main(["tiny-checkpoint", str(tmp_path / "holo3"), "--family", "qwen3_5"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "holo3")
    assert json.loads((tmp_path / "holo3" / "config.json").read_text())["model_type"] == "qwen3_5"
    assert main(["tiny-checkpoint", str(tmp_path / "holotron")]) == 0  # the default stays Holotron-12B
    assert json.loads((tmp_path / "holotron" / "config.json").read_text())["model_type"] == "NemotronH_Nano_VL_V2"
    with pytest.raises(SystemExit):
        main(["tiny-checkpoint", str(tmp_path / "x"), "--family", "llama"])


def test_out_of_gpu_memory_retries_with_fewer_screenshots(load_policy: LoadPolicy,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """F21: CUDA memory running out (a FAKE: raised for prompts with more than one screenshot, which a CPU
    cannot run out of) makes the step retry with one screenshot fewer, and the user is told."""
    policy = load_policy("qwen3_5_moe")
    real = policy.generate
    tried: list[int | None] = []

    def generate(observation: Observation, *, max_images: int | None = None) -> Generated:
        tried.append(max_images)
        if max_images is not None and max_images > 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")
        return real(observation, max_images=max_images)

    monkeypatch.setattr(policy, "generate", generate)
    history = tuple(HistoryStep(i, _frame(1280, 720, seed=i), None, outcome="performed") for i in range(2))
    proposal = policy.propose(Observation(task="Click OK", frame=_frame(), history=history))
    assert tried == [3, 2, 1]
    assert proposal.extra["images"] == 1 and proposal.extra["max_images_used"] == 1
    assert len(proposal.notices) == 2 and "retried with 1" in proposal.notices[-1]


@pytest.mark.gpu
@pytest.mark.parametrize("key", NATIVE_KEYS)
def test_gpu_static_cache_and_compiled_decode_propose(family_dirs: dict[str, Path], key: str) -> None:
    """On CUDA: the static cache and transformers' compiled decode step are used, and two steps (the second
    reusing the compiled step) each give a valid action."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    policy = NativePolicy.load(family_dirs[key], GenerationOptions(max_string_chars=STRING_CAP), device="cuda")
    try:
        assert policy.describe()["compiled"] is True and policy.describe()["cache"] == "static"
        for seed in (0, 1):
            proposal = policy.propose(Observation(task="Click OK", frame=_frame(seed=seed)))
            Reply.model_validate_json(proposal.raw_text)
            assert proposal.extra["stop_reason"] == "eos"
    finally:
        policy.close()
