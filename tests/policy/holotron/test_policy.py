"""HolotronPolicy end to end on the tiny checkpoint (CPU), plus the GPU checks."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

from holodesk.core.actions import Action
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import PolicyError, PolicyOutputError
from holodesk.policy.base import HistoryStep, Observation, Policy, Proposal
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.holotron import HolotronPolicy, kernel_report


def _frame(w: int, h: int, seed: int = 0) -> Frame:
    pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return Frame(pixels, Monitor(1, 0, 0, w, h))


@pytest.fixture(scope="module")
def policy(tiny_loaded) -> HolotronPolicy:  # type: ignore[no-untyped-def]
    # strings capped so the random model closes its object well inside the token budget
    return HolotronPolicy(tiny_loaded, GenerationOptions(max_reply_tokens=256, max_string_chars=16))


def test_proposes_valid_action_for_1080p_frame(policy: HolotronPolicy) -> None:
    assert isinstance(policy, Policy)
    proposal = policy.propose(Observation(task="Open the browser", frame=_frame(1920, 1080)))
    assert isinstance(proposal, Proposal) and isinstance(proposal.action, Action)
    assert proposal.raw_text.startswith("{") and json.loads(proposal.raw_text)
    assert policy.protocol.parse(proposal.raw_text).action == proposal.action
    assert proposal.extra["tiles"] == [9] and proposal.extra["image_tokens"] == 2304
    assert proposal.extra["grids"] == [(4, 2)]
    assert set(proposal.timings_ms) == {"preprocess", "vision", "prefill", "decode"}
    assert all(v >= 0 for v in proposal.timings_ms.values())
    assert proposal.extra["stop_reason"] == "eos"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_constrained_reply_parses(policy: HolotronPolicy, seed: int) -> None:
    history = (HistoryStep(index=0, frame=_frame(640, 400, seed + 10), action=None, outcome="skipped by user"),)
    obs = Observation(task=f"task {seed}", frame=_frame(800, 600, seed), history=history)
    proposal = policy.propose(obs)
    assert proposal.extra["images"] == 2
    assert isinstance(proposal.action, Action)


def test_reasoning_then_json(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    policy = HolotronPolicy(tiny_loaded,
                            GenerationOptions(reasoning=True, max_reply_tokens=200, think_budget=12,
                                              max_string_chars=16))
    proposal = policy.propose(Observation(task="t", frame=_frame(512, 512)))
    assert "</think>" in proposal.raw_text
    assert proposal.extra["reasoning"] is True
    # the thought is read as the step's reasoning (split_reasoning), not tolerated as text before the reply
    assert not any("reasoning block" in w for w in proposal.extra.get("parse_warnings", [])), proposal.extra


def test_unconstrained_garbage_raises_with_raw_text(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    policy = HolotronPolicy(tiny_loaded, GenerationOptions(constrained_decoding=False, max_reply_tokens=24))
    with pytest.raises(PolicyOutputError) as err:
        policy.propose(Observation(task="t", frame=_frame(512, 512)))
    assert err.value.raw_text


def _fail_first_calls(monkeypatch: pytest.MonkeyPatch, policy: HolotronPolicy, failures: int) -> list[int]:
    """Make the decoder's prefill raise CUDA out-of-memory for its first ``failures`` calls (a fake: the
    CPU cannot run out of GPU memory). Returns the list that counts the calls."""
    from holodesk.policy.holotron import runtime

    seen: list[int] = []
    if policy.engine is None:
        real = runtime.generate
        target: object = runtime
        name = "generate"
    else:
        real = policy.engine.decoder.prefill
        target = policy.engine.decoder
        name = "prefill"

    def flaky(*args, **kw):  # type: ignore[no-untyped-def]
        seen.append(1)
        if len(seen) <= failures:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 147.00 GiB")
        return real(*args, **kw)

    monkeypatch.setattr(target, name, flaky)
    return seen


@pytest.mark.parametrize("decoder", ["static", "stock"])
def test_oom_retries_with_fewer_images(tiny_loaded, decoder: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    policy = HolotronPolicy(tiny_loaded, GenerationOptions(max_reply_tokens=256, max_string_chars=16), decoder=decoder)
    seen = _fail_first_calls(monkeypatch, policy, 1)
    history = tuple(
        HistoryStep(index=i, frame=_frame(640, 400, i), action=None, outcome="performed") for i in range(3)
    )
    proposal = policy.propose(Observation(task="t", frame=_frame(640, 400, 9), history=history))
    assert len(seen) == 2
    assert proposal.extra["max_images_used"] == 2 and proposal.extra["images"] == 2
    assert proposal.extra["decoder"] == decoder
    assert "retried with 2" in proposal.extra["warnings"][0]
    assert proposal.notices == tuple(proposal.extra["warnings"])  # told to the user (F21)


@pytest.mark.parametrize("decoder", ["static", "stock"])
def test_oom_with_one_image_is_policy_error(tiny_loaded, decoder: str, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    policy = HolotronPolicy(tiny_loaded, GenerationOptions(max_images=1, max_string_chars=16), decoder=decoder)
    _fail_first_calls(monkeypatch, policy, 99)
    with pytest.raises(PolicyError, match="out of memory"):
        policy.propose(Observation(task="t", frame=_frame(512, 512)))


def test_load_classmethod_and_close(tiny_dir: Path) -> None:
    policy = HolotronPolicy.load(tiny_dir, GenerationOptions(max_string_chars=16, max_reply_tokens=200),
                                 dtype="float32", device="cpu")
    assert policy.name == "holotron-local"
    assert "fast_path" in policy.kernel_report()
    policy.close()
    policy.close()
    with pytest.raises(PolicyError, match="closed"):
        policy.propose(Observation(task="t", frame=_frame(512, 512)))


def test_load_freezes_the_loaded_objects_out_of_collections_and_close_releases_them(tiny_dir: Path) -> None:
    """The end of a load moves what lives into the collector's permanent generation (a full collection in a
    later step walks only what steps made); close unfreezes, so a reference cycle through the closed model is
    collected rather than kept for the process's life."""
    policy = HolotronPolicy.load(tiny_dir, GenerationOptions(max_string_chars=16, max_reply_tokens=200),
                                 dtype="float32", device="cpu")
    model = policy.loaded.model
    assert gc.get_freeze_count() > 0
    assert not any(o is model for o in gc.get_objects())  # frozen: no generation holds it
    policy.propose(Observation(task="t", frame=_frame(512, 512)))
    assert not any(o is model for o in gc.get_objects())  # steps leave it frozen
    model.cycle = [model]  # a cycle through the model, made after the freeze
    gone = weakref.ref(model)
    del model
    policy.close()
    assert gone() is None


def test_close_walks_the_objects_once(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full collection costs 130-340 ms in a process with a model loaded (freeze_loaded's docstring): unfreezing
    collects, and returning the CUDA cache after it does not collect again."""
    policy = HolotronPolicy.load(tiny_dir, GenerationOptions(max_string_chars=16, max_reply_tokens=200),
                                 dtype="float32", device="cpu")
    calls: list[tuple[object, ...]] = []
    collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or collect(*a))
    policy.close()
    assert len(calls) == 1


def test_closing_one_of_two_loaded_policies_keeps_the_other_frozen(tiny_dir: Path) -> None:
    options = GenerationOptions(max_string_chars=16, max_reply_tokens=200)
    first = HolotronPolicy.load(tiny_dir, options, dtype="float32", device="cpu")
    second = HolotronPolicy.load(tiny_dir, options, dtype="float32", device="cpu")
    model = second.loaded.model
    first.close()
    assert gc.get_freeze_count() > 0 and not any(o is model for o in gc.get_objects())
    second.close()


def test_kernel_report_on_cpu() -> None:
    report = kernel_report()
    assert set(report["functions"]) == {
        "mamba_chunk_scan_combined", "selective_state_update", "causal_conv1d_fn", "causal_conv1d_update",
    }
    json.dumps(report)
    if not torch.cuda.is_available():
        assert report["fast_path"] is False and report["reasons"]


_AUTOTUNE_CHILD = """
import json, os, sys, types
import triton, triton.language as tl
from holodesk.policy.holotron.kernels import autotune_cache, prepare_kernels
prepare_kernels()
# A stand-in for one mamba-ssm module (mamba-ssm needs CUDA to install): a real triton.autotune kernel
# defined after prepare_kernels, as importing mamba_ssm defines them.
@triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 32})], key=["n"])
@triton.jit
def kernel(x, n, B: tl.constexpr):
    pass
module = types.ModuleType("mamba_ssm.ops.triton.ssd_chunk_scan")
module.kernel = kernel
sys.modules[module.__name__] = module
print(json.dumps(autotune_cache()))
"""


@pytest.mark.parametrize("preset", [None, "0"])
def test_prepare_kernels_keeps_autotuning_on_disk_unless_the_user_says_no(preset: str | None,
                                                                          tmp_path: Path) -> None:
    """prepare_kernels turns on Triton's on-disk autotuning cache (the kernels defined after it cache their
    timings, read from Triton's own Autotuner) and leaves a user's TRITON_CACHE_AUTOTUNING=0 alone, which
    autotune_cache then reports as the slow path it is."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_CACHE_AUTOTUNING"}
    if preset is not None:
        env["TRITON_CACHE_AUTOTUNING"] = preset
    child = tmp_path / "child.py"  # Triton reads a kernel's source from its file
    child.write_text(_AUTOTUNE_CHILD)
    out = subprocess.run([sys.executable, str(child)], capture_output=True, text=True, check=False, env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["kernels"] == 1
    if preset is None:
        assert report["env"] == "1" and report["cached"] == 1 and report["on"] is True
    else:
        assert report["env"] == "0" and report["cached"] == 0 and report["on"] is False
        assert "again in each process" in report["detail"]


def test_package_imports_without_torch() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'transformers'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import holodesk.policy.holotron as h\n"
        "assert h.tile_grid(1920, 1080) == (4, 2)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr


def test_tiny_cli(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "holodesk.bench.tiny_checkpoint", str(tmp_path / "ck")],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert cfg["model_type"] == "NemotronH_Nano_VL_V2"
    assert set(cfg["llm_config"]["hybrid_override_pattern"]) == set("M*-")
    index = json.loads((tmp_path / "ck" / "model.safetensors.index.json").read_text())
    assert any(k.startswith("vision_model.radio_model.") for k in index["weight_map"])
    assert "language_model.lm_head.weight" in index["weight_map"] and "mlp1.1.weight" in index["weight_map"]


# ----------------------------------------------------------------------------------------------- GPU
gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_kernels_are_prepared_before_any_test_imports_nemotron_h() -> None:
    """The import-order invariant behind test_gpu_kernels_live, checkable without a GPU: in this test
    process the kernels were prepared before transformers' NemotronH module was imported (it picks its
    kernels at import, once)."""
    report = kernel_report(import_transformers=False)
    assert report["prepared_before_transformers"] is True, report


@pytest.mark.gpu
@gpu
def test_gpu_kernels_live() -> None:
    report = kernel_report()
    assert report["fast_path"], report
    assert report["autotune_cache"]["on"] is True and report["autotune_cache"]["kernels"] > 0, report


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gpu_tiny_proposes(tiny_dir: Path, dtype: str) -> None:
    policy = HolotronPolicy.load(tiny_dir, GenerationOptions(max_string_chars=16, max_reply_tokens=256),
                                 dtype=dtype, device="cuda")
    proposal = policy.propose(Observation(task="t", frame=_frame(1920, 1080)))
    assert proposal.extra["image_tokens"] == 2304 and isinstance(proposal.action, Action)
    policy.close()


@pytest.mark.gpu
@gpu
def test_gpu_logits_match_cpu_reference(tiny_dir: Path) -> None:
    """mamba-ssm Triton kernels on CUDA against the CPU torch path, float32."""
    import subprocess as sp

    from holodesk.policy.holotron.loader import load_holotron
    from tests.helpers.holotron_reference import stock_logits

    image = np.random.default_rng(5).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    ids = [3, 4] + [6] + [8] * 768 + [7] + list(range(20, 60)) * 8 + [4]
    gpu_logits = stock_logits(load_holotron(tiny_dir, dtype="float32", device="cuda"), ids, [image]).cpu()
    # the CPU reference runs in a process without mamba-ssm (its Triton kernels cannot take CPU tensors)
    script = (
        "import sys, numpy as np, torch\n"
        "sys.modules['mamba_ssm'] = None\n"
        "torch.set_num_threads(4)\n"
        "from holodesk.policy.holotron.loader import load_holotron\n"
        "from tests.helpers.holotron_reference import stock_logits\n"
        f"image = np.random.default_rng(5).integers(0, 256, (720, 1280, 3), dtype=np.uint8)\n"
        f"l = stock_logits(load_holotron({str(tiny_dir)!r}, dtype='float32', device='cpu'), {ids!r}, [image])\n"
        "torch.save(l, sys.argv[1])\n"
    )
    target = tiny_dir.parent / "cpu_logits.pt"
    sp.run([sys.executable, "-c", script, str(target)], check=True, capture_output=True,
           cwd=Path(__file__).resolve().parents[3])  # the repository root, where tests.helpers is found
    cpu_logits = torch.load(target)
    rel = (gpu_logits - cpu_logits).norm() / cpu_logits.norm()
    assert rel.item() < 1e-3, rel.item()
