"""A load that builds the model and the static engine while its weights are still being read
(``load_holotron(..., background=True)``, :meth:`LoadedHolotron.finish_weights`, ``StaticEngine.weights_written``):
once the read ends, the policy holds and proposes exactly what one built after the read does. The reads are held
back (:func:`tests.policy.holotron.test_stream.gate_reads`) and, on the CPU, the unread tensors filled with NaN, so
that any value read before the end of the read, and kept, shows in the results (on CUDA they keep the reader's
zeros, so that the kernel choices made beside the read can be compared with those made after it)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from holodesk.core.geometry import Frame  # noqa: E402
from holodesk.policy.base import Observation  # noqa: E402
from holodesk.policy.generation import GenerationOptions  # noqa: E402
from holodesk.policy.holotron import HolotronPolicy, loader, stream  # noqa: E402
from holodesk.policy.holotron.checkpoint import read_checkpoint  # noqa: E402
from holodesk.policy.holotron.layout import qkv_groups  # noqa: E402
from tests.policy.holotron.test_engine import _episode, _frame, _reference_logits, _spy_prefill_logits  # noqa: E402
from tests.policy.holotron.test_stream import gate_reads  # noqa: E402

OPTIONS = GenerationOptions(max_reply_tokens=96, max_string_chars=12, max_images=3)


def _unread_nan(reading: Any) -> None:
    """Fill every tensor of a held ``reading`` with NaN (integers with -1): what a value read too early then is."""
    for t in reading.tensors.values():
        t.fill_(float("nan") if t.is_floating_point() else -1)


def _build_beside(tiny_dir: Path, device: str, monkeypatch: pytest.MonkeyPatch, fail: Exception | None = None,
                  nan: bool = True) -> tuple[Any, threading.Event]:
    """The loader's build on a held read of the tiny checkpoint (float32, as stored: no conversion) onto ``device``:
    the :class:`LoadedHolotron` with its read still running, and the event that lets the read go on (or fail with
    ``fail``); with ``nan`` the unread tensors hold NaN (else the reader's zeros)."""
    gate, _done = gate_reads(monkeypatch, fail=fail)
    info = read_checkpoint(tiny_dir)
    target = torch.device(device)
    reading = stream.start_reading(info.weight_files, target, groups=qkv_groups(info))
    assert all(not t.any() for t in reading.tensors.values())  # zeros until read
    if nan:
        _unread_nan(reading)
    loaded = loader._build(info, reading, "page-locked (held by the test)", torch_dtype=torch.float32,
                           quantization=None, quant_config=None, target=target, progress=None,
                           attn_implementation="sdpa")
    assert loaded.reading is reading and not reading.done()
    return loaded, gate


def _frames() -> list[Frame]:
    return [_frame(640, 400, 70 + i) for i in range(2)]


def test_the_model_is_built_on_the_tensors_being_read_and_they_become_the_checkpoints(  # type: ignore[no-untyped-def]
        tiny_dir: Path, tiny_loaded, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded, gate = _build_beside(tiny_dir, "cpu", monkeypatch)
    reading = loaded.reading
    unexpected = [k for k in reading.tensors if "input_conditioner" in k]  # read, not loaded into the model
    assert unexpected and loader._copied_keys(loaded.model, reading.tensors, {"unexpected_keys": unexpected}, {}) == []
    from holodesk.policy.holotron.blocks import fused_qkv_weight

    mixers = [m for m in loaded.model.language_model.modules() if hasattr(m, "q_proj")]
    assert mixers and all(fused_qkv_weight(m) is not None for m in mixers)  # read into one buffer: nothing copied
    assert torch.isnan(mixers[0].q_proj.weight).all()  # the model holds the unread values
    assert loaded.weights_ready_at is None
    released = time.time()
    gate.set()
    assert loaded.finish_weights() is True and loaded.finish_weights() is False
    assert released <= loaded.weights_ready_at <= time.time()  # the read's last byte
    assert loaded.reading is None and loaded.weights_ready_at is not None
    assert loaded.weights_reader.startswith("page-locked (held by the test), ")
    ours, theirs = loaded.model.state_dict(), tiny_loaded.model.state_dict()
    assert ours.keys() == theirs.keys()
    differ = [k for k in theirs if "video_patch_projection" not in k and not torch.equal(ours[k], theirs[k])]
    assert not differ, differ  # the part the checkpoint lacks is initialised at random by either load
    layers = loaded.model.vision_model.encoder.layer  # finish_weights skipped the unit layer scales
    assert all(type(layer.layer_scale1).__name__ == "UnitScale" for layer in layers)


def test_a_policy_built_beside_the_read_proposes_as_one_built_after_it(  # type: ignore[no-untyped-def]
        tiny_dir: Path, tiny_loaded, monkeypatch: pytest.MonkeyPatch) -> None:
    """The static engine is built and warmed up on the unread (NaN) weights, as a load on CUDA does beside the read;
    after ``ready()`` its prefill logits equal a full forward of the finished model at every step, its replies
    equal those of a policy built after the read, and a prompt shorter than the warm-up's (whose masked cache
    entries the warm-up wrote) decodes as there."""
    from holodesk.policy.holotron.engine import StaticEngine, static_cache_tokens

    loaded, gate = _build_beside(tiny_dir, "cpu", monkeypatch)
    policy = HolotronPolicy(loaded, OPTIONS, decoder="static")
    max_len = static_cache_tokens(loaded, max_images=3, max_new_tokens=96, max_think_tokens=0, reasoning=False)
    policy.engine = StaticEngine(loaded, max_len=max_len, max_images=3, warm_up=True)  # the warm-up: CUDA's default
    engine = policy.engine
    assert torch.isnan(next(iter(engine.decoder.state.k.values()))).any()  # what the warm-up left behind
    gate.set()
    policy.ready()
    assert loaded.reading is None
    reference = HolotronPolicy(tiny_loaded, OPTIONS, decoder="static")
    marks = {loaded.image_token_id, loaded.img_start_id, loaded.img_end_id}
    short = [t for t in range(3, 80) if t not in marks][:57]  # the warm-up wrote the cache entries after these
    assert reference.engine is not None
    decoded = [e.run(short, [], max_new_tokens=8, constraint=None, reasoning=False, max_think_tokens=0)[0].token_ids
               for e in (engine, reference.engine)]
    assert decoded[0] == decoded[1]
    engine.reset()
    reference.engine.reset()
    seen = _spy_prefill_logits(policy, monkeypatch)
    observations: list[Observation] = []
    got = _episode(policy, _frames(), observations=observations)
    assert [p.raw_text for p in got] == [p.raw_text for p in _episode(reference, _frames())]
    for logits, obs in zip(seen, observations, strict=True):
        ref = _reference_logits(reference, obs)
        assert torch.isfinite(logits).all() and torch.allclose(logits, ref, rtol=1e-4, atol=1e-4)


def test_every_use_of_the_model_waits_for_the_read(  # type: ignore[no-untyped-def]
        tiny_dir: Path, tiny_loaded, monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy used without ``ready()`` (built on a load still reading) finishes the weights before its first
    step: the step never sees an unread value, and replies as a policy on the finished weights."""
    loaded, gate = _build_beside(tiny_dir, "cpu", monkeypatch)
    policy = HolotronPolicy(loaded, OPTIONS, decoder="stock")
    threading.Timer(0.3, gate.set).start()
    obs = Observation(task="open the settings", frame=_frames()[0])
    proposal = policy.propose(obs)
    assert loaded.reading is None
    assert proposal.raw_text == HolotronPolicy(tiny_loaded, OPTIONS, decoder="stock").propose(obs).raw_text


def test_a_parameter_transformers_copied_makes_the_load_build_again_after_the_read(  # type: ignore[no-untyped-def]
        tiny_dir: Path, tiny_loaded, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """FAKE: transformers here takes every tensor as given; the check that it did (``_copied_keys``) is made to name
    one, as a transformers that copied a parameter would: the load says so and builds the model again after the
    read, on the finished values."""
    real_check, built = loader._copied_keys, []
    real_build = loader._from_pretrained
    gate, _done = gate_reads(monkeypatch)

    def check(*args: Any) -> list[str]:
        gate.set()  # the read goes on once the model is built on its unfinished tensors
        return ["language_model.lm_head.weight", *real_check(*args)]

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(args[-1].done())  # whether the read had ended when transformers built the model
        return real_build(*args, **kwargs)

    monkeypatch.setattr(loader, "_copied_keys", check)
    monkeypatch.setattr(loader, "_from_pretrained", counting)
    info = read_checkpoint(tiny_dir)
    reading = stream.start_reading(info.weight_files, torch.device("cpu"), groups=qkv_groups(info))
    with caplog.at_level(logging.WARNING, logger="holodesk.policy.holotron.loader"):
        loaded = loader._build(info, reading, "page-locked", torch_dtype=torch.float32, quantization=None,
                               quant_config=None, target=torch.device("cpu"), progress=None, attn_implementation="sdpa")
    assert built == [False, True]
    assert any("built again after the read" in r.getMessage() and "lm_head" in r.getMessage() for r in caplog.records)
    loaded.finish_weights()
    head = loaded.model.language_model.lm_head.weight
    assert torch.equal(head, tiny_loaded.model.language_model.lm_head.weight)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_a_policy_built_while_its_weights_arrive_equals_one_built_after(  # type: ignore[no-untyped-def]
        tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA: the static engine compiles, captures its graphs and warms up while the readers copy the weights in
    (released during the build), as ``HolotronPolicy.load`` does; the captures see no interference (no note), and
    the policy's prefill logits and replies equal those of one built after the read."""
    loaded, gate = _build_beside(tiny_dir, "cuda", monkeypatch, nan=False)  # zeros until read, as a load has
    threading.Timer(1.0, gate.set).start()  # the copies land while the engine is being built
    policy = HolotronPolicy(loaded, OPTIONS, decoder="static")
    policy.ready()
    assert loaded.reading is None
    report = policy.kernel_report()["decoder"]
    assert report["notes"] == [] and report["decode_graphs"], report
    assert report["weights_reader"].startswith("page-locked (held by the test), ")
    reference = HolotronPolicy(loader.load_holotron(tiny_dir, dtype="float32", device="cuda"), OPTIONS)
    assert reference.engine is not None  # the kernels chosen beside the read are those chosen after it
    assert report["gemv"] == reference.kernel_report()["decoder"]["gemv"]
    frames = [_frame(1280, 720, 80 + i) for i in range(3)]
    seen = _spy_prefill_logits(policy, monkeypatch)
    observations: list[Observation] = []
    got = _episode(policy, frames, observations=observations)
    assert [p.raw_text for p in got] == [p.raw_text for p in _episode(reference, frames)]
    for logits, obs in zip(seen, observations, strict=True):
        ref = _reference_logits(reference, obs)
        assert torch.isfinite(logits).all() and torch.allclose(logits, ref, rtol=1e-3, atol=1e-3)


def test_a_failed_read_fails_the_load_and_closing_stops_a_running_one(  # type: ignore[no-untyped-def]
        tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that fails while the policy is built beside it fails ``ready()`` with a ModelLoadError (the load's
    error, not a model of unread values); closing a policy whose read still runs stops the readers."""
    from holodesk.errors import ModelLoadError

    loaded, gate = _build_beside(tiny_dir, "cpu", monkeypatch, fail=OSError("Input/output error"))
    policy = HolotronPolicy(loaded, OPTIONS, decoder="stock")
    gate.set()
    with pytest.raises(ModelLoadError, match="Input/output error"):
        policy.ready()
    policy.close()
    assert loaded.reading is None

    monkeypatch.undo()
    loaded, gate = _build_beside(tiny_dir, "cpu", monkeypatch)
    reading = loaded.reading
    policy = HolotronPolicy(loaded, OPTIONS, decoder="stock")
    closer = threading.Thread(target=policy.close)
    closer.start()
    gate.set()
    closer.join(30)
    assert not closer.is_alive() and reading.done() and loaded.reading is None


def test_a_background_load_says_so_and_finishes_at_the_first_use(  # type: ignore[no-untyped-def]
        tiny_dir: Path, tiny_loaded, monkeypatch: pytest.MonkeyPatch) -> None:
    """FAKE: the page-locked reader is the CUDA path's choice; here ``_start_reading`` starts it on the CPU, so that
    ``load_holotron(background=True)`` runs as on a GPU machine. Its progress ends on "preparing the decoder while
    the weights are read", not "ready", and the weights are the checkpoint's once finished."""
    gate, _done = gate_reads(monkeypatch)
    monkeypatch.setattr(loader, "_start_reading", lambda info, quant, target: (
        stream.start_reading(info.weight_files, target, groups=qkv_groups(info)), "page-locked (CPU)"))
    stages: list[str] = []
    loaded = loader.load_holotron(tiny_dir, dtype="float32", device="cpu", background=True,
                                  progress=lambda stage, _fraction: stages.append(stage))
    assert stages[-1] == loader.BUILT_BESIDE_READ and "ready" not in stages and loaded.reading is not None
    gate.set()
    assert loaded.finish_weights() and loaded.load_seconds > 0
    lm_head = loaded.model.language_model.lm_head.weight
    assert torch.equal(lm_head, tiny_loaded.model.language_model.lm_head.weight)


def test_a_failed_read_from_the_hub_cache_carries_the_repair_advice_once(  # type: ignore[no-untyped-def]
        tiny_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that fails in a hub-cache snapshot says how to check and fetch the files again, once, whether it is
    raised by the first use (``finish_weights``) or inside ``load_holotron``, which adds the same advice to the
    errors it passes on."""
    import shutil

    from holodesk.errors import ModelLoadError

    snapshot = tmp_path / "models--hcompany--Holotron-12B" / "snapshots" / "abc123"
    shutil.copytree(tiny_dir, snapshot)
    gate, _done = gate_reads(monkeypatch, fail=OSError("Input/output error"))
    gate.set()
    monkeypatch.setattr(loader, "_start_reading", lambda info, quant, target: (
        stream.start_reading(info.weight_files, target, groups=qkv_groups(info)), "page-locked (CPU)"))
    for background in (True, False):
        with pytest.raises(ModelLoadError, match="Input/output error") as err:
            loader.load_holotron(snapshot, dtype="float32", device="cpu", background=background).finish_weights()
        assert err.value.hint.count("holodesk download hcompany/Holotron-12B") == 1, err.value.hint
        assert err.value.__cause__ is not err.value
