"""``holodesk bench --cold-start`` on the CPU: the tiny checkpoint written in the published layout, its read
floor with the page cache dropped per file (``--cold-start-drop files``: never the whole machine's cache
here), and the phases of fresh processes up to a real 1080p proposal; plus the full-size checkpoint's
tensors and shards, computed without writing them."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.slow
def test_cold_start_runs_fresh_processes_on_the_tiny_checkpoint(tmp_path: Path) -> None:
    pytest.importorskip("transformers.models.nemotron_h_omni")
    pytest.importorskip("xgrammar")
    from holodesk.bench.cli import main

    folder, out = tmp_path / "ckpt", tmp_path / "cold.json"
    status = main(["--device", "cpu", "--tiny", "--cold-start", "--cold-start-dir", str(folder),
                   "--cold-start-drop", "files", "--cold-start-steps", "1", "--json", str(out)])
    result: dict[str, Any] = json.loads(out.read_text())
    assert status == 0 and result["checks_failed"] == []
    cold_start = result["cold_start"]

    checkpoint = cold_start["checkpoint"]
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "preprocessor_config.json", "model.safetensors.index.json", "tokenizer.json",
            "tokenizer_config.json", "model-00001-of-00002.safetensors"} <= names
    files = [p for p in folder.iterdir() if not p.name.startswith(".")]
    assert checkpoint["written"] is True and checkpoint["files"] == len(files)
    assert checkpoint["bytes"] == sum(p.stat().st_size for p in files)

    floor = cold_start["read_floor"]
    assert floor["bytes"] == checkpoint["bytes"]
    assert floor["cold"]["drop"]["method"] == "fadvise"  # --cold-start-drop files: no drop_caches
    if floor["cold"]["drop"]["resident_after"] is not None:  # mincore answered: the drop is checked
        assert floor["cold"]["drop"]["dropped"] is True
        assert floor["warm"]["resident"] == 1.0
    assert floor["cold"]["seconds"] > 0 and floor["warm"]["seconds"] > 0

    cold, warm = cold_start["runs"]
    assert (cold["mode"], warm["mode"]) == ("cold", "warm")
    assert len({cold["pid"], warm["pid"], os.getpid()}) == 3  # two fresh processes
    if cold["page_cache"]["resident_after"] is not None:
        assert cold["page_cache"]["dropped"] is True
    for run in (cold, warm):
        t = [run["spawn"]] + [run["timestamps"][k] for k in ("interpreter", "imports", "weights", "graphs",
                                                              "first_proposal")]
        assert t == sorted(t)
        assert math.isclose(run["total_s"], sum(run[k] for k in ("startup_s", "imports_s", "load_s", "capture_s",
                                                                 "first_proposal_s")), abs_tol=0.01)
        assert run["load_over_floor"] == round(run["load_s"] / floor[run["mode"]]["seconds"], 2)
        assert run["target"].startswith(("target met", "target NOT met"))
        (step,) = run["steps"]
        assert step["tiles"] == [9] and step["image_tokens"] == 2304  # a real propose() on a 1080p frame
        assert step["generated_tokens"] > 0 and run["propose_error"] is None
        assert run["engine"]["decoder"] == "static" and run["engine"]["eager"] is True  # CPU: no graphs
        assert run["engine"]["capture_seconds"] == {} and run["prefill_capture_s"] is None  # nothing captured
        assert step["lazy_captures"] == {"count": 0, "seconds": 0.0}  # nor recorded on first use (eager)
        assert 0 <= run["engine_build_s"] <= run["engine_setup_s"] <= run["capture_s"] + 0.01  # (rounded)
        split = run["imports_split"]  # each import step timed; no CUDA context on the CPU
        assert list(split) == ["torch", "transformers", "tokenizer_class", "model_class", "policy", "bench"]
        assert all(v >= 0 for v in split.values()) and split["torch"] > 0 and split["model_class"] > 0
        assert math.isclose(sum(split.values()), run["imports_s"], abs_tol=0.01)
        bytecode = run["bytecode"]
        assert bytecode["modules"] > 500 and 0 <= bytecode["without_bytecode"] <= bytecode["modules"]
        assert run["recorded_files"] > 0  # each start keeps the files it read for the next (start_files)
    # the second process read ahead what the first recorded, before its imports
    ahead = warm["read_ahead"]
    assert ahead is not None and ahead["files"] == cold["recorded_files"] and 0 < ahead["advised"] <= ahead["files"]

    # an existing folder (--checkpoint): measured as it is, nothing written; one warm process
    status = main(["--device", "cpu", "--tiny", "--cold-start", "--checkpoint", str(folder), "--cold-start-runs",
                   "warm", "--cold-start-drop", "files", "--cold-start-steps", "1", "--json", str(out)])
    given = json.loads(out.read_text())
    assert status == 0 and given["checks_failed"] == []
    measured = given["cold_start"]["checkpoint"]
    assert measured["size"] == "given" and measured["written"] is False and measured["bytes"] == checkpoint["bytes"]
    (run,) = given["cold_start"]["runs"]
    assert run["mode"] == "warm" and run["steps"][0]["image_tokens"] == 2304


def test_a_checkpoint_this_bench_wrote_is_reused_until_a_file_changes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from holodesk.bench.cold_checkpoint import MARKER, prepare_checkpoint

    first = prepare_checkpoint(tmp_path, tiny=True, seed=0, device="cpu")
    assert first["written"] is True and first["write_s"] is not None and (tmp_path / MARKER).exists()
    again = prepare_checkpoint(tmp_path, tiny=True, seed=0, device="cpu")
    assert again["written"] is False and again["bytes"] == first["bytes"]
    assert prepare_checkpoint(tmp_path, tiny=True, seed=1, device="cpu")["written"] is True  # another seed
    with (tmp_path / "config.json").open("a") as fh:
        fh.write(" ")
    assert prepare_checkpoint(tmp_path, tiny=True, seed=1, device="cpu")["written"] is True


def test_the_tekken_stand_in_changes_only_the_tokenizer_and_the_config_ids(tmp_path: Path) -> None:
    """use_tokenizer gives a full-size folder the tekken stand-in (131,072 ids) and back the test tokenizer, with
    config.json's and generation_config.json's token ids those of the tokenizer written; the tiny checkpoint
    refuses tekken."""
    pytest.importorskip("torch")
    from holodesk.bench.cold_checkpoint import prepare_checkpoint, use_tokenizer
    from holodesk.bench.model import full_size_config
    from holodesk.errors import HolodeskError
    from holodesk.policy.holotron.loader import load_tokenizer

    with pytest.raises(HolodeskError, match="full-size"):
        prepare_checkpoint(tmp_path / "tiny", tiny=True, seed=0, device="cpu", tokenizer="tekken")
    (tmp_path / "weights.safetensors").write_bytes(b"x" * 64)  # the weights: left as they are
    for name, size in (("tekken", 131072), ("test", 480)):
        use_tokenizer(tmp_path, name)
        tokenizer = load_tokenizer(tmp_path)
        vocab = tokenizer.get_vocab()
        assert len(vocab) == size
        config = json.loads((tmp_path / "config.json").read_text())
        assert config == full_size_config(vocab["<image>"], vocab["<SPECIAL_12>"], vocab["<s>"], vocab["<pad>"])
        assert config["img_context_token_id"] == vocab["<image>"]
        generation = json.loads((tmp_path / "generation_config.json").read_text())
        assert generation == {"bos_token_id": vocab["<s>"], "eos_token_id": vocab["<SPECIAL_12>"]}
        assert (tmp_path / "weights.safetensors").read_bytes() == b"x" * 64


def test_page_cache_drop_residency_and_read(tmp_path: Path) -> None:
    from holodesk.bench import page_cache

    files = []
    for i in range(3):
        f = tmp_path / f"f{i}.bin"
        f.write_bytes(os.urandom(2 * 2**20 + i))
        files.append(f)
    page_cache.flush(files)
    how = page_cache.drop(files, system=False)
    assert how["method"] == "fadvise" and "not asked for" in how["why"]
    resident = page_cache.resident_fraction(files)
    if resident is None:
        pytest.skip("mincore is not available here")
    assert resident < 0.05
    assert page_cache.read_seconds(files, threads=2) > 0
    assert page_cache.resident_fraction(files) == 1.0


def test_filesystem_names_the_mount_of_a_path(tmp_path: Path) -> None:
    from holodesk.bench.page_cache import filesystem

    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    root = [kind for _dev, point, kind, *_ in mounts if point == "/"][-1]  # the last mount on / is the one seen
    assert filesystem(Path("/")) == root
    assert filesystem(Path("/proc/self")) == "proc"


def test_full_size_checkpoint_has_holotron_12b_tensors_in_5_gb_shards() -> None:
    """The full-size checkpoint's tensors, computed from the config without drawing them: the shapes the
    loader reads, every parameter of the native model but the parts a v2 checkpoint lacks (the Omni video
    projection, RADIO's layer scales) plus the two normalisation buffers and ``summary_idxs``, and shards
    of at most 5 GB in key order."""
    pytest.importorskip("transformers.models.nemotron_h_omni")
    import torch

    from holodesk.bench.model import (
        FULL,
        FULL_SHARD_BYTES,
        build_random_model,
        full_size_config,
        full_size_shapes,
        random_config,
    )
    from holodesk.bench.tiny_checkpoint import _shards_by_bytes, tensor_specs

    config = full_size_config(8, 2, 1, 0)
    specs = tensor_specs(config, vision_layers=FULL["vision_layers"], num_prefix_tokens=8)
    for key, shape in full_size_shapes(config).items():
        assert specs[key].shape == shape
    model = build_random_model(random_config(FULL).config, torch.device("meta"), torch.bfloat16, seed=0)
    lacking = sum(p.numel() for name, p in model.named_parameters()
                  if "video_patch_projection" in name or "layer_scale" in name)
    stored_only = 3 + 3 + 2  # input_conditioner.norm_mean / norm_std, summary_idxs
    assert sum(math.prod(s.shape) for s in specs.values()) == (
        sum(p.numel() for p in model.parameters()) - lacking + stored_only)
    plan = _shards_by_bytes(specs, 2, FULL_SHARD_BYTES)
    assert [name for part in plan for name in part] == list(specs)
    sizes = [sum(specs[k].nbytes(2) for k in part) for part in plan]
    assert len(plan) == 6 and max(sizes) <= FULL_SHARD_BYTES
    assert sum(sizes) / 2**30 == pytest.approx(24.53, abs=0.01)


def test_cold_start_runs_are_cold_or_warm() -> None:
    from holodesk.bench.cold_start import modes
    from holodesk.errors import HolodeskError

    assert modes("cold, warm,cold") == ["cold", "warm", "cold"]
    with pytest.raises(HolodeskError, match="cold and warm"):
        modes("hot")


def test_a_steps_graphs_recorded_on_first_use_in_words() -> None:
    from holodesk.bench.cold_start import _lazy_words

    assert _lazy_words({"lazy_captures": {"count": 14, "seconds": 0.52}}) == "14 in 0.52 s"
    assert _lazy_words({"lazy_captures": {"count": 0, "seconds": 0.0}}) == "0 in 0.0 s"
    assert _lazy_words({"lazy_captures": None}) == "-" and _lazy_words({}) == "-"


def test_imports_split_times_each_step_from_the_one_before() -> None:
    from holodesk.bench.cold_start import IMPORT_STEPS, imports_split

    stamps = {"interpreter": 100.0, "import_torch": 101.5, "import_transformers": 102.0,
              "import_tokenizer_class": 102.25, "import_model_class": 105.0, "import_policy": 105.5,
              "import_bench": 105.625, "imports": 105.625, "weights": 120.0}
    assert imports_split(stamps) == {"torch": 1.5, "transformers": 0.5, "tokenizer_class": 0.25,
                                     "model_class": 2.75, "policy": 0.5, "bench": 0.125}  # no CUDA context
    with_cuda = imports_split({**stamps, "import_cuda_context": 101.75})
    assert list(with_cuda) == list(IMPORT_STEPS) and with_cuda["cuda_context"] == 0.25
    assert with_cuda["transformers"] == 0.25 and sum(with_cuda.values()) == 5.625
    assert imports_split({"weights": 1.0}) == {}  # a child that sent no import stamps


def test_bytecode_report_counts_the_modules_without_cached_bytecode(tmp_path: Path) -> None:
    (tmp_path / "holodesk_bytecode_probe.py").write_text("VALUE = 1\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "bytecode")  # the bytecode written goes here, not into app/
    probe = ("import json, sys, holodesk_bytecode_probe\n"
             "from holodesk.bench.cold_start import bytecode_report\n"
             "probe = sys.modules['holodesk_bytecode_probe']\n"
             "print(json.dumps(bytecode_report({'holodesk_bytecode_probe': probe, 'alias': probe, 'sys': sys})))\n")

    def report(*flags: str) -> dict[str, Any]:
        res = subprocess.run([sys.executable, *flags, "-c", probe], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
        assert res.returncode == 0, res.stderr
        result: dict[str, Any] = json.loads(res.stdout)
        return result

    # -B: nothing written, so every process compiles the module again ('sys' has no source file: not counted; the
    # module under a second name counted once)
    assert report("-B") == {"modules": 1, "without_bytecode": 1, "dont_write_bytecode": True,
                            "packages": {"holodesk_bytecode_probe": 1}}
    assert report("-B")["without_bytecode"] == 1
    # written at the first import that may write it: that process and every later one find it
    assert report() == {"modules": 1, "without_bytecode": 0, "dont_write_bytecode": False, "packages": {}}
    assert report("-B")["without_bytecode"] == 0
