"""The static decoder (StaticEngine) inside HolotronPolicy against the stock decoder, on the tiny
checkpoint in float32 on the CPU: same replies, step k+1 resumes from step k, nothing stale is reused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from holodesk.core.geometry import Frame, Monitor  # noqa: E402
from holodesk.errors import PolicyError  # noqa: E402
from holodesk.policy.base import HistoryStep, Observation, Proposal  # noqa: E402
from holodesk.policy.generation import GenerationOptions  # noqa: E402
from holodesk.policy.holotron import HolotronPolicy  # noqa: E402
from tests.helpers.holotron_reference import stock_logits  # noqa: E402


def _doctor_record() -> Any:
    """What ``holodesk doctor`` shows of the last static decoder's record, as on a machine with a CUDA GPU runtime
    (faked: the section is one line without one)."""
    from holodesk import doctor

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(doctor, "_no_gpu_runtime", lambda: None)
        return doctor._kernels()[doctor.EARLIER_LOAD]


def _frame(w: int, h: int, seed: int) -> Frame:
    pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    return Frame(pixels, Monitor(1, 0, 0, w, h))


def _episode(policy: HolotronPolicy, frames: list[Frame], task: str = "open the settings",
             observations: list[Observation] | None = None) -> list[Proposal]:
    """Propose for each frame in turn; each step's frame and reply become the next step's history (the same
    Frame objects, as the session passes them)."""
    history: list[HistoryStep] = []
    out = []
    for i, frame in enumerate(frames):
        obs = Observation(task=task, frame=frame, history=tuple(history))
        if observations is not None:
            observations.append(obs)
        proposal = policy.propose(obs)
        out.append(proposal)
        history.append(HistoryStep(index=i, frame=frame, action=proposal.action, thought=proposal.thought,
                                   note=proposal.note, raw_text=proposal.raw_text, outcome="performed"))
    return out


@pytest.fixture(scope="module")
def frames() -> list[Frame]:
    return [_frame(640, 400, 30 + i) for i in range(4)]


def _spy_prefill_logits(policy: HolotronPolicy, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """Record the last-position logits each (real) static prefill returns."""
    assert policy.engine is not None
    static = policy.engine.decoder
    real = static.prefill
    seen: list[torch.Tensor] = []

    def spy(*args, **kw):  # type: ignore[no-untyped-def]
        logits, report = real(*args, **kw)
        seen.append(logits[0].clone())
        return logits, report

    monkeypatch.setattr(static, "prefill", spy)
    return seen


def _reference_logits(policy: HolotronPolicy, obs: Observation) -> torch.Tensor:
    """Last-position logits of the whole prompt through transformers' forward, no cache (the reference)."""
    prepared = policy.prepare(obs, max_images=policy.max_images)
    logits = stock_logits(policy.loaded, prepared["input_ids"], [f.pixels for f in prepared["frames"]])
    return logits[-1]


def test_static_decoder_equals_stock_and_resumes_each_step(  # type: ignore[no-untyped-def]
    tiny_loaded, frames: list[Frame], monkeypatch: pytest.MonkeyPatch
) -> None:
    options = GenerationOptions(max_reply_tokens=96, max_string_chars=12, max_images=3)
    stock = _episode(HolotronPolicy(tiny_loaded, options, decoder="stock"), frames)
    static_policy = HolotronPolicy(tiny_loaded, options, decoder="static")
    first_logits = _spy_prefill_logits(static_policy, monkeypatch)
    observations: list[Observation] = []
    static = _episode(static_policy, frames, observations=observations)
    for a, b in zip(static, stock, strict=True):
        assert a.raw_text == b.raw_text  # greedy + constrained, float32: the same reply token for token
        assert a.extra["decoder"] == "static" and b.extra["decoder"] == "stock"
    # The replies of a random tiny model hardly depend on the prompt, so the state itself is checked:
    # every step's prefill logits (cold, resumed, or rebuilt) equal a full uncached forward.
    assert len(first_logits) == len(frames)
    for got, obs in zip(first_logits, observations, strict=True):
        ref = _reference_logits(static_policy, obs)
        assert torch.allclose(got, ref, rtol=1e-4, atol=1e-4), float((got - ref).abs().max())
    image_tokens = static[0].extra["image_tokens"]  # one 640x400 frame
    # step 1 is cold; steps 2 and 3 resume after the previous screenshot and encode only the new frame
    assert static[0].extra["reused_tokens"] == 0 and static[0].extra["images_encoded"] == 1
    for k in (1, 2):
        extra = static[k].extra
        assert extra["images_encoded"] == 1
        assert extra["reused_tokens"] >= k * image_tokens
        assert extra["prefill_tokens"] < extra["prompt_tokens"] - k * image_tokens
    # step 4: the window (3 images) drops step 1's screenshot, so the prompt changes at its <img>: the state is
    # taken from the snapshot at that observation's turn header (system prompt, task and the turns before it),
    # nothing past it; the two kept frames' embeddings are not recomputed.
    last = static[3].extra
    assert last["images"] == 3
    ids = static_policy.prepare(observations[3], max_images=3)["input_ids"]
    previous = static_policy.prepare(observations[2], max_images=3)["input_ids"]
    changed = next(i for i, (a, b) in enumerate(zip(ids, previous, strict=False)) if a != b)
    assert previous[changed] == tiny_loaded.img_start_id  # the dropped screenshot's <img>
    assert 0 < changed - 32 < last["reused_tokens"] < changed  # resumed within a few tokens of the change
    assert last["images_encoded"] == 1


def test_the_system_prompt_is_prefilled_once_for_every_task(  # type: ignore[no-untyped-def]
    tiny_loaded, frames: list[Frame], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second task on the same policy resumes from the snapshot at the end of the system turn (the system
    prompt and tool schema are not prefilled again) and its logits equal a full uncached forward; the
    snapshots kept are bounded by the engine's slots, whose memory is reported."""
    from holodesk.policy.holotron.engine import SNAPSHOT_SLOTS

    policy = HolotronPolicy(tiny_loaded, GenerationOptions(max_reply_tokens=96, max_string_chars=12), decoder="static")
    first_logits = _spy_prefill_logits(policy, monkeypatch)
    policy.propose(Observation(task="open the settings", frame=frames[0]))
    obs = Observation(task="close every window", frame=frames[1])
    second = policy.propose(obs)
    ids = policy.prepare(obs, max_images=3)["input_ids"]
    specials = set(tiny_loaded.tokenizer.convert_tokens_to_ids(["<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>"]))
    system_end = next(i for i, t in enumerate(ids) if i > 2 and t in specials)  # the task turn's header
    assert second.extra["reused_tokens"] == system_end > 1000  # the whole system prompt, none of the task
    assert torch.allclose(first_logits[-1], _reference_logits(policy, obs), rtol=1e-4, atol=1e-4)
    assert policy.engine is not None
    kept = policy.engine.describe()["snapshots"]
    state = policy.engine.decoder.state
    one = sum(t.numel() * t.element_size() for i in state.conv for t in (state.conv[i], state.ssm[i]))
    assert kept["slots"] == SNAPSHOT_SLOTS and kept["bytes"] == SNAPSHOT_SLOTS * one
    assert system_end in kept["positions"] and len(kept["positions"]) <= SNAPSHOT_SLOTS


def test_changed_history_text_is_not_reused(  # type: ignore[no-untyped-def]
    tiny_loaded, frames: list[Frame], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoder state is keyed by content: the same frames with a different outcome text for step 1
    must not resume past that text (and must give the stock reply)."""
    options = GenerationOptions(max_reply_tokens=96, max_string_chars=12)
    policy = HolotronPolicy(tiny_loaded, options, decoder="static")
    first_logits = _spy_prefill_logits(policy, monkeypatch)
    first = policy.propose(Observation(task="t", frame=frames[0]))
    step = HistoryStep(index=0, frame=frames[0], action=first.action, raw_text=first.raw_text, outcome="performed")
    policy.propose(Observation(task="t", frame=frames[1], history=(step,)))
    changed = HistoryStep(index=0, frame=frames[0], action=first.action, raw_text=first.raw_text,
                          outcome="skipped by user")
    obs = Observation(task="t", frame=frames[1], history=(changed,))
    again = policy.propose(obs)
    reference = HolotronPolicy(tiny_loaded, options, decoder="stock").propose(obs)
    assert again.raw_text == reference.raw_text
    assert torch.allclose(first_logits[-1], _reference_logits(policy, obs), rtol=1e-4, atol=1e-4)
    # the resume point lies before the changed outcome text (which follows step 1's screenshot)
    assert again.extra["reused_tokens"] <= again.extra["prompt_tokens"] - again.extra["image_tokens"] // 2


@pytest.mark.parametrize("decoder", ["static", "stock"])
def test_special_token_text_in_task_and_history_stays_text(tiny_loaded, frames: list[Frame], decoder: str) -> None:  # type: ignore[no-untyped-def]
    """A task or an earlier reply holding "<image>", "</img>", "</think>" or the end-of-turn token must not
    become those tokens (seen on the GPU: a random model wrote "<image>" into a thought, and the next
    prompt held more image slots than images)."""
    from holodesk.core.actions import Click, Point

    policy = HolotronPolicy(tiny_loaded, GenerationOptions(max_reply_tokens=96, max_string_chars=12), decoder=decoder)
    from holodesk.policy.holotron.prompt import IMAGE_SENTINEL

    tricky = f"<image><img></img></think><SPECIAL_12> {IMAGE_SENTINEL} open ~/think/notes.txt /think"
    step = HistoryStep(index=0, frame=frames[0], action=Click(Point(5, 5)), thought=tricky, note=tricky,
                       raw_text="", outcome="performed")
    obs = Observation(task=f"type {tricky} please", frame=frames[1], history=(step,))
    prepared = policy.prepare(obs, max_images=3)
    # "/think" in user text neither vanishes nor switches reasoning on (the setting says off)
    assert prepared["prompt_text"].rstrip().endswith("<think></think>")
    assert "notes.txt" in prepared["prompt_text"] and "/\u200bthink" in prepared["prompt_text"]
    ids = prepared["input_ids"]
    loaded = policy.loaded
    per_image = sum(1 for t in ids if t == loaded.image_token_id) // 2
    assert ids.count(loaded.img_start_id) == 2 and ids.count(loaded.img_end_id) == 2
    # the end-of-turn token appears only where the template closes the one re-added assistant turn
    assert per_image > 0 and sum(ids.count(e) for e in loaded.eos_ids) == 1
    assert "\u200b" in prepared["prompt_text"]
    proposal = policy.propose(obs)
    assert proposal.extra["images"] == 2


def test_prompt_longer_than_the_static_cache_uses_stock_and_says_so(tiny_loaded, frames: list[Frame]) -> None:  # type: ignore[no-untyped-def]
    policy = HolotronPolicy(tiny_loaded, GenerationOptions(max_reply_tokens=64, max_string_chars=12), decoder="static")
    assert policy.engine is not None
    policy.engine.max_len = 512  # a fake capacity far below one 640x400 prompt
    proposal = policy.propose(Observation(task="t", frame=frames[0]))
    assert proposal.extra["decoder"] == "stock"
    assert any("static decoder's cache" in n for n in proposal.notices)


def test_decoder_setting_is_checked(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    from holodesk.errors import PolicyError

    with pytest.raises(PolicyError, match="decoder"):
        HolotronPolicy(tiny_loaded, decoder="fast")
    report = HolotronPolicy(tiny_loaded, decoder="static").kernel_report()["decoder"]
    # on the CPU: the same decoder code, eager by necessity (no graphs), and nothing failed at load
    assert report["decoder"] == "static" and report["eager"] is True and report["decode_graphs"] == []
    assert report["notes"] == []


def test_warm_up_runs_every_path_and_leaves_no_state(tiny_loaded, frames: list[Frame]) -> None:  # type: ignore[no-untyped-def]
    """The load-time warm-up (default on CUDA) prefills, resumes and decodes dummy tokens; afterwards the
    engine holds nothing of them, and the first real step equals the stock decoder."""
    from holodesk.policy.holotron.engine import StaticEngine, static_cache_tokens

    options = GenerationOptions(max_reply_tokens=96, max_string_chars=12)
    policy = HolotronPolicy(tiny_loaded, options, decoder="static")
    max_len = static_cache_tokens(tiny_loaded, max_images=3, max_new_tokens=96, max_think_tokens=0, reasoning=False)
    policy.engine = StaticEngine(tiny_loaded, max_len=max_len, warm_up=True)
    engine = policy.engine
    assert engine.warm_up_seconds is not None and engine.describe()["warm_up_seconds"] is not None
    state = engine.decoder.state
    assert state.length == 0 and state.keys == [] and state.snapshots == {}
    obs = Observation(task="t", frame=frames[0])
    got = policy.propose(obs)
    assert got.extra["reused_tokens"] == 0
    assert got.raw_text == HolotronPolicy(tiny_loaded, options, decoder="stock").propose(obs).raw_text


def test_a_failing_warm_up_is_noted_logged_shown_by_doctor_and_steps_still_run(  # type: ignore[no-untyped-def]
        tiny_loaded, frames: list[Frame], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A kernel that fails in the load-time warm-up (e.g. a Triton compile error) is recorded once: a note in
    describe(), a warning in the log, the same note in doctor's report of the last load; the engine is not
    rebuilt, and the steps that follow run and equal the stock decoder."""
    from holodesk.policy.holotron.decoder import StaticDecoder
    from holodesk.policy.holotron.engine import StaticEngine, static_cache_tokens

    real = StaticDecoder.prefill
    failures = []

    def fails_once(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not failures:
            failures.append(1)
            raise RuntimeError("simulated kernel failure")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(StaticDecoder, "prefill", fails_once)
    options = GenerationOptions(max_reply_tokens=96, max_string_chars=12)
    policy = HolotronPolicy(tiny_loaded, options, decoder="stock")
    max_len = static_cache_tokens(tiny_loaded, max_images=3, max_new_tokens=96, max_think_tokens=0, reasoning=False)
    with caplog.at_level("WARNING", logger="holodesk.policy.holotron.engine"):
        policy.engine = StaticEngine(tiny_loaded, max_len=max_len, warm_up=True)
    (note,) = policy.engine.describe()["notes"]
    assert "warm-up failed at load (RuntimeError: simulated kernel failure)" in note
    assert [r.getMessage() for r in caplog.records] == [f"Holotron: {note}"]
    assert policy.engine.warm_up_seconds is None
    section = _doctor_record()
    assert section["notes"] == [note]
    assert f"loading {tiny_loaded.info.folder}; not this doctor run" in section["about"], section["about"]
    obs = Observation(task="t", frame=frames[0])
    got = policy.propose(obs)
    assert got.extra["decoder"] == "static" and failures == [1]
    assert got.raw_text == HolotronPolicy(tiny_loaded, options, decoder="stock").propose(obs).raw_text


def test_torchs_own_analysis_failure_is_heard_on_the_logger_torch_writes_to() -> None:
    """torch's analysis of a user Triton kernel, run for real (offline, a fake sm_90 driver): a kernel it reads
    adds nothing; one it cannot read (side-effecting inline asm) is listed once per distinct failure, with the
    reason, from the logger torch actually uses (``torch._dynamo``, not one named after the module)."""
    pytest.importorskip("triton")
    from holodesk.policy.holotron.kernels import (
        KERNEL_ANALYSIS_FAILURE,
        kernel_analysis_failures,
        kernel_analysis_warnings,
        watch_kernel_analysis,
    )
    from tests.policy.holotron.analysis_cases import analyse

    since = watch_kernel_analysis()
    assert analyse(pure=True) == ["y_ptr"]
    assert kernel_analysis_failures(since) == []
    with kernel_analysis_warnings() as during:
        assert analyse(pure=False) == ["x_ptr", "y_ptr"]  # torch then copies x at every call
        analyse(pure=False)
    (line,) = kernel_analysis_failures(since)
    assert during == [line]
    assert KERNEL_ANALYSIS_FAILURE in line and "tt.elementwise_inline_asm" in line and "Traceback" not in line


def test_a_kernel_torch_cannot_analyse_is_noted_logged_and_shown_by_doctor(  # type: ignore[no-untyped-def]
        tiny_loaded, frames: list[Frame], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """When torch cannot analyse a user Triton kernel as the decode compiles (it then copies every input,
    weights included, at each call: run 10d's NF4 decode at 11.5 ms/token, 11c's at 4.73), the engine says so
    once per distinct failure: a note in describe(), a warning in the log, the note in doctor's report; at
    load, and also after a recompile during the steps. The decode compiles only on CUDA, so the load's capture
    runs torch's real analysis of a kernel it cannot read instead (offline, :mod:`.analysis_cases`)."""
    pytest.importorskip("triton")
    from holodesk.policy.holotron.decoder import StaticDecoder
    from holodesk.policy.holotron.engine import StaticEngine, static_cache_tokens
    from tests.policy.holotron.analysis_cases import analyse

    real = StaticDecoder.capture

    def capture_and_analyse(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        for _ in range(3):  # torch analyses again at each compile of a call site
            analyse(pure=False)
        return real(self, *args, **kwargs)

    max_len = static_cache_tokens(tiny_loaded, max_images=3, max_new_tokens=96, max_think_tokens=0, reasoning=False)
    quiet = StaticEngine(tiny_loaded, max_len=max_len, warm_up=False)  # nothing fails at its load
    assert quiet.describe()["notes"] == []
    monkeypatch.setattr(StaticDecoder, "capture", capture_and_analyse)
    with caplog.at_level("WARNING", logger="holodesk.policy.holotron.engine"):
        engine = StaticEngine(tiny_loaded, max_len=max_len, warm_up=False)
    (note,) = engine.describe()["notes"]
    assert "torch could not analyse a Triton kernel" in note and "assuming every input is mutated" in note
    assert "tt.elementwise_inline_asm" in note and "Traceback" not in note
    assert [r.getMessage() for r in caplog.records if r.name == "holodesk.policy.holotron.engine"] == [
        f"Holotron: {note}"]
    assert _doctor_record()["notes"] == [note]
    analyse(pure=False)  # the same failure again, at a later compile: still one note
    assert engine.describe()["notes"] == [note]
    assert quiet.describe()["notes"] == [note]  # a recompile during the other engine's steps is its note too

    # a recompile during a step (the prefill's, here): the step's engine notes it and doctor's record shows it
    monkeypatch.setattr(StaticDecoder, "capture", real)
    stepping = StaticEngine(tiny_loaded, max_len=max_len, warm_up=False)
    real_prefill = StaticDecoder.prefill

    def prefill_and_analyse(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        analyse(pure=False)
        return real_prefill(self, *args, **kwargs)

    monkeypatch.setattr(StaticDecoder, "prefill", prefill_and_analyse)
    policy = HolotronPolicy(tiny_loaded, GenerationOptions(max_reply_tokens=96, max_string_chars=12), decoder="static")
    policy.engine = stepping
    assert _doctor_record()["notes"] == "none"  # recorded when built
    policy.propose(Observation(task="t", frame=frames[0]))
    assert stepping.notes == [note]
    assert _doctor_record()["notes"] == [note]


def test_a_graph_failing_on_its_first_use_in_a_step_is_noted_logged_and_shown_by_doctor(  # type: ignore[no-untyped-def]
        tiny_loaded, frames: list[Frame], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Recording a prefill length's graph on its first use in a step fails (the CUDA capture replaced by fakes,
    as on a GPU: it cannot run here): the step still gives the stock decoder's reply, and the note is in
    describe(), in the log and in doctor's record, which the step rewrote."""
    from holodesk.policy.holotron.decoder import Setup
    from holodesk.policy.holotron.engine import StaticEngine, static_cache_tokens
    from tests.policy.holotron.test_decoder import _fake_capture

    options = GenerationOptions(max_reply_tokens=96, max_string_chars=12)
    policy = HolotronPolicy(tiny_loaded, options, decoder="static")
    max_len = static_cache_tokens(tiny_loaded, max_images=3, max_new_tokens=96, max_think_tokens=0, reasoning=False)
    engine = StaticEngine(tiny_loaded, max_len=max_len, warm_up=False)
    d = engine.decoder
    attempts = _fake_capture(monkeypatch, lambda body, args: len(args) == 2 and args[1] != d.chunk)
    d.eager = False
    d._apply(Setup(compiled=False, gemv={}, graphs=True))
    d.capture()  # as on a GPU at load: the decode window of a 0-token state and a full chunk
    assert d.notes == [] and set(d.graphs) == {(d.state.bucket,)} | {(k, d.chunk) for k in range(len(d._segs))}
    policy.engine = engine
    assert _doctor_record()["notes"] == "none"  # recorded when built
    obs = Observation(task="t", frame=frames[0])
    with caplog.at_level("WARNING", logger="holodesk.policy.holotron.decoder"):
        got = policy.propose(obs)
    assert got.raw_text == HolotronPolicy(tiny_loaded, options, decoder="stock").propose(obs).raw_text
    notes = engine.describe()["notes"]
    assert notes and all(n.startswith("recording the CUDA graph of the prefill over") for n in notes), notes
    assert [r.getMessage() for r in caplog.records if r.name == "holodesk.policy.holotron.decoder"] == [
        f"static decoder: {n}" for n in notes]
    assert len(notes) == len({args[1] for args in attempts if args[1:] and args[1] != d.chunk})  # one per length
    assert _doctor_record()["notes"] == notes


def _engine_as_on_a_gpu(tiny_loaded: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[HolotronPolicy, Any, list[str]]:
    """A static policy whose engine is set up as on a GPU and captured at load, the CUDA capture replaced by fakes
    (it cannot run here) that take 10 ms each; the steps' model calls (prefill, decode step, jump-forward pass)
    add a line to the returned list when a recording is in progress."""
    import threading
    import time

    from holodesk.policy.holotron.decoder import Setup, StaticDecoder
    from holodesk.policy.holotron.engine import StaticEngine, static_cache_tokens
    from tests.policy.holotron.test_decoder import _fake_capture

    _fake_capture(monkeypatch)
    fake, recording, overlaps = StaticDecoder._record, threading.Event(), []

    def slow(self: StaticDecoder, body: Any, *args: int) -> Any:
        recording.set()
        try:
            time.sleep(0.01)
            return fake(self, body, *args)
        finally:
            recording.clear()

    def watched(name: str) -> Any:
        real = getattr(StaticDecoder, name)

        def call(self: StaticDecoder, *a: Any, **kw: Any) -> Any:
            if recording.is_set():
                overlaps.append(f"{name} while a graph was being recorded")
            return real(self, *a, **kw)
        return call

    monkeypatch.setattr(StaticDecoder, "_record", slow)
    for name in ("prefill", "step", "extend"):
        monkeypatch.setattr(StaticDecoder, name, watched(name))
    options = GenerationOptions(max_reply_tokens=96, max_string_chars=12, max_images=3)
    policy = HolotronPolicy(tiny_loaded, options, decoder="static")
    max_len = static_cache_tokens(tiny_loaded, max_images=3, max_new_tokens=96, max_think_tokens=0, reasoning=False)
    engine = StaticEngine(tiny_loaded, max_len=max_len, warm_up=False)
    engine.decoder.eager = False
    engine.decoder._apply(Setup(compiled=False, gemv={}, graphs=True))
    engine.decoder.capture()
    policy.engine = engine
    return policy, engine, overlaps


def test_the_engine_records_its_graphs_ahead_between_steps_never_during_one(  # type: ignore[no-untyped-def]
        tiny_loaded, frames: list[Frame], monkeypatch: pytest.MonkeyPatch) -> None:
    """The recording thread of an engine as on a GPU (:func:`_engine_as_on_a_gpu`) started as an episode begins:
    it records every pending graph, never while a step uses the model; the steps give the stock decoder's
    replies; once it has ended, an episode records nothing on first use; the record doctor shows says what was
    recorded ahead; close() stops it, and it does not start again."""
    policy, engine, overlaps = _engine_as_on_a_gpu(tiny_loaded, monkeypatch)
    d = engine.decoder
    pending = d.pending_graphs()
    assert len(pending) > 10 and engine.describe()["recording_ahead"] == "not started"
    assert engine.start_recording_ahead() and not engine.start_recording_ahead()  # one thread
    stock = _episode(HolotronPolicy(tiny_loaded, policy.options, decoder="stock"), frames[:3])
    first = _episode(policy, frames[:3])  # beside the recording thread
    assert engine.wait_recorded(timeout=300)
    info = engine.describe()
    assert info["recording_ahead"] == "ended" and info["ahead_captures"]["pending"] == 0, info["ahead_captures"]
    assert info["ahead_captures"]["count"] + info["lazy_captures"]["count"] == len(pending)  # ahead, or first used
    recorded = info["lazy_captures"]["count"]
    second = _episode(policy, frames[:3], task="another task")
    assert [p.raw_text for p in first] == [p.raw_text for p in stock]
    assert second[0].extra["reused_tokens"] > 0
    assert engine.describe()["lazy_captures"]["count"] == recorded and overlaps == []
    assert _doctor_record()["ahead_captures"]["count"] == info["ahead_captures"]["count"]
    engine.close()
    engine.close()  # idempotent
    assert not engine.start_recording_ahead()


def test_close_stops_the_recording_ahead_after_the_graph_in_progress(  # type: ignore[no-untyped-def]
        tiny_loaded, monkeypatch: pytest.MonkeyPatch) -> None:
    """close() right after the start: the thread ends after at most the graph it was recording, leaving the rest
    pending (recorded on their first use)."""
    _policy, engine, _overlaps = _engine_as_on_a_gpu(tiny_loaded, monkeypatch)
    pending = len(engine.decoder.pending_graphs())
    assert engine.start_recording_ahead()
    engine.close()
    info = engine.describe()
    assert info["recording_ahead"] == "ended" and info["ahead_captures"]["count"] <= 1
    assert info["ahead_captures"]["pending"] == pending - info["ahead_captures"]["count"] > 0


@pytest.mark.parametrize("record_ahead", [True, False])
def test_a_ready_policy_records_ahead_where_switched_on_and_close_stops_it(  # type: ignore[no-untyped-def]
        tiny_dir, monkeypatch: pytest.MonkeyPatch, record_ahead: bool) -> None:
    """ready() starts the engine's recording ahead once the weights are complete where ``RECORD_AHEAD`` says so;
    close() stops the engine's thread before the model goes (the engine's methods replaced by spies: on the CPU
    nothing is pending)."""
    from holodesk.policy.holotron import engine
    from holodesk.policy.holotron.engine import StaticEngine
    from holodesk.policy.holotron.loader import load_holotron

    calls: list[str] = []
    monkeypatch.setattr(engine, "RECORD_AHEAD", record_ahead)
    monkeypatch.setattr(StaticEngine, "start_recording_ahead", lambda self: calls.append("start") or True)
    monkeypatch.setattr(StaticEngine, "close", lambda self: calls.append("close"))
    policy = HolotronPolicy(load_holotron(tiny_dir, dtype="float32"), GenerationOptions(), decoder="static")
    policy.ready()
    assert calls == (["start"] if record_ahead else [])
    policy.close()
    policy.close()
    assert calls == (["start", "close"] if record_ahead else ["close"]) and policy.engine is None


def test_a_rejected_reply_carries_its_timings_and_decoder(tiny_loaded, frames: list[Frame]) -> None:  # type: ignore[no-untyped-def]
    """A reply cut before its JSON closes is rejected; the error carries the step's timings and details so
    the episode record keeps them (the newcomer check found them missing)."""
    from holodesk.errors import PolicyOutputError

    policy = HolotronPolicy(tiny_loaded, GenerationOptions(max_reply_tokens=6, max_string_chars=12), decoder="static")
    with pytest.raises(PolicyOutputError) as info:
        policy.propose(Observation(task="t", frame=frames[0]))
    assert "cut at 6 tokens" in str(info.value.hint)
    assert {"vision", "prefill", "decode"} <= set(info.value.timings_ms)
    assert info.value.extra["decoder"] == "static" and info.value.extra["generated_tokens"] == 6


def test_planned_decoder_names_the_slow_paths() -> None:
    from holodesk.policy.holotron.engine import planned_decoder

    assert "fast path" in planned_decoder("static", cuda=True, precision="bf16")
    for slow in (planned_decoder("stock", cuda=True, precision="bf16"),
                 planned_decoder("static", cuda=False, precision="bf16"),
                 planned_decoder("static", cuda=False, precision="4bit")):
        assert "slow path" in slow and "fast path" not in slow
    nf4, int8 = (planned_decoder("static", cuda=True, precision=p) for p in ("4bit", "8bit"))
    assert "fast path" in nf4 and "NF4 storage" in nf4 and "int8 weight-only storage" in int8


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_static_engine_graphs_equal_stock(tiny_dir, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """On CUDA the static decoder compiles its blocks and replays CUDA graphs; in float32 it must give the
    stock decoder's replies and, at every step of an episode, the logits of a full uncached forward."""
    from holodesk.policy.holotron.loader import load_holotron

    loaded = load_holotron(tiny_dir, dtype="float32", device="cuda")
    frames = [_frame(1280, 720, 50 + i) for i in range(3)]
    options = GenerationOptions(max_reply_tokens=96, max_string_chars=12, max_images=3)
    stock = _episode(HolotronPolicy(loaded, options, decoder="stock"), frames)
    policy = HolotronPolicy(loaded, options, decoder="static")
    report = policy.kernel_report()["decoder"]
    assert report["decode"].startswith("compiled blocks") and report["decode_graphs"], report
    assert report["prefill"].startswith("Triton") and report["notes"] == [], report
    # the warm-up recorded the graphs of its shapes the load did not (e.g. its 3-token jump-forward pass)
    assert report["warm_up_captures"]["count"] > 0 and report["lazy_captures"]["count"] == 0, report
    assert policy.engine is not None
    at_load = set(policy.engine.decoder.graphs)
    first_logits = _spy_prefill_logits(policy, monkeypatch)
    observations: list[Observation] = []
    static = _episode(policy, frames, observations=observations)
    assert [p.raw_text for p in static] == [p.raw_text for p in stock]
    assert static[1].extra["reused_tokens"] > 0
    after = policy.kernel_report()["decoder"]  # the steps' shapes the warm-up did not use: recorded on first use
    recorded = [tuple(key) for key in after["lazy_captures"]["graphs"]]
    assert after["notes"] == [] and len(recorded) == after["lazy_captures"]["count"], after
    assert set(recorded) == set(policy.engine.decoder.graphs) - at_load and len(set(recorded)) == len(recorded)
    for got, obs in zip(first_logits, observations, strict=True):
        ref = _reference_logits(policy, obs)
        assert torch.allclose(got, ref, rtol=1e-3, atol=1e-3), float((got - ref).abs().max())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_a_loaded_policy_records_its_steps_graphs_ahead(tiny_dir) -> None:  # type: ignore[no-untyped-def]
    """On CUDA, in float32: the engine's recording thread records every pending graph ahead of its first use
    without a failure or a note; the episodes after it give the stock decoder's replies and record nothing on
    first use."""
    from holodesk.policy.holotron.loader import load_holotron

    loaded = load_holotron(tiny_dir, dtype="float32", device="cuda")
    frames = [_frame(1280, 720, 50 + i) for i in range(3)]
    options = GenerationOptions(max_reply_tokens=96, max_string_chars=12, max_images=3)
    tasks = ("open the settings", "another task")
    stock = {task: _episode(HolotronPolicy(loaded, options, decoder="stock"), frames, task=task) for task in tasks}
    policy = HolotronPolicy(loaded, options, decoder="static")
    assert policy.engine is not None
    pending = len(policy.engine.decoder.pending_graphs())
    assert pending > 0 and policy.engine.start_recording_ahead()
    assert policy.engine.wait_recorded(timeout=600)
    report = policy.kernel_report()["decoder"]
    assert report["ahead_captures"]["count"] == pending and report["ahead_captures"]["failed"] == [], report
    assert report["ahead_captures"]["pending"] == 0 and report["notes"] == [], report
    for task in tasks:
        static = _episode(policy, frames, task=task)
        assert [p.raw_text for p in static] == [p.raw_text for p in stock[task]], task
    report = policy.kernel_report()["decoder"]
    assert report["lazy_captures"]["count"] == 0 and report["notes"] == [], report
    policy.engine.close()


def test_prompt_embeddings_read_in_slices_equal_the_whole_merge(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    """The engine hands the prefill a prompt's embeddings built one chunk at a time: every slice, across
    and inside image-token runs, equals the same slice of the whole prompt's merge."""
    from holodesk.policy.holotron import runtime

    image = int(tiny_loaded.image_token_id)
    hidden = int(tiny_loaded.model.get_input_embeddings().weight.shape[1])
    t = [x for x in range(20, 40) if x != image]  # text tokens
    ids = [t[0], t[1], *[image] * 7, t[2], t[3], t[4], *[image] * 4, t[5]]
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randn(7, hidden, generator=gen), torch.randn(4, hidden, generator=gen)]
    whole = runtime.embed_prompt(tiny_loaded, ids, rows)
    lazy = runtime.PromptEmbeddings(tiny_loaded, ids, rows)
    assert tuple(lazy.shape) == tuple(whole.shape)
    for a, b in [(0, len(ids)), (0, 3), (3, 12), (4, 6), (8, 16), (10, 11), (15, 16)]:
        assert torch.equal(lazy[:, a:b], whole[:, a:b]), (a, b)
    with pytest.raises(PolicyError, match="image tokens"):
        runtime.PromptEmbeddings(tiny_loaded, ids, rows[:1])


def test_embed_prompt_places_image_rows_split_across_runs(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    """The merge by the definition: text positions hold their embedding rows, the ``<image>`` positions the
    image rows in order, also when the row tensors split differently from the runs of image tokens."""
    from holodesk.policy.holotron import runtime

    image = int(tiny_loaded.image_token_id)
    table = tiny_loaded.model.get_input_embeddings().weight
    t = [x for x in range(20, 40) if x != image]
    ids = [t[0], *[image] * 7, t[1], t[2], *[image] * 4, t[3]]
    gen = torch.Generator().manual_seed(1)
    rows = [torch.randn(n, int(table.shape[1]), generator=gen) for n in (5, 0, 4, 2)]  # runs are 7 and 4
    got = runtime.embed_prompt(tiny_loaded, ids, rows)
    images = iter(torch.cat(rows))
    want = torch.stack([next(images) if x == image else table[x] for x in ids])[None].to(got.dtype)
    assert torch.equal(got, want)
    with pytest.raises(PolicyError, match="11 image tokens but 10"):
        runtime.embed_prompt(tiny_loaded, ids, [*rows[:3], rows[3][:1]])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_embed_prompt_never_waits_for_the_gpu(tiny_dir) -> None:  # type: ignore[no-untyped-def]
    """On CUDA the merge queues its copies without a host synchronisation (torch's sync debug mode raises on
    one), from page-locked host rows and from GPU rows, and gives the definition's embeddings."""
    from holodesk.policy.holotron import runtime
    from holodesk.policy.holotron.loader import load_holotron

    loaded = load_holotron(tiny_dir, dtype="float32", device="cuda")
    image = int(loaded.image_token_id)
    table = loaded.model.get_input_embeddings().weight
    t = [x for x in range(20, 40) if x != image]
    ids = [t[0], *[image] * 7, t[1], *[image] * 4, t[2]]
    gen = torch.Generator().manual_seed(2)
    host = torch.randn(7, int(table.shape[1]), generator=gen).pin_memory()
    gpu = torch.randn(4, int(table.shape[1]), generator=gen).cuda()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = runtime.embed_prompt(loaded, ids, [host, gpu])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    images = iter(torch.cat([host.cuda(), gpu]))
    want = torch.stack([next(images) if x == image else table[x] for x in ids])[None]
    assert torch.equal(got, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_new_frame_is_prefilled_from_the_gpu_and_kept_on_the_host(  # type: ignore[no-untyped-def]
        tiny_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    """The step's new frame goes into the prefill from the GPU while its page-locked host copy is made in the
    background: after the step the host slot holds the vision tower's rows bit for bit, and a later prompt
    that reads the frame back from the slot (nothing reused, nothing encoded) replies as a fresh engine
    that encodes it."""
    from holodesk.policy.holotron import runtime
    from holodesk.policy.holotron.engine import StaticEngine
    from holodesk.policy.holotron.loader import load_holotron

    loaded = load_holotron(tiny_dir, dtype="float32", device="cuda")
    pixels = _frame(1280, 720, 7).pixels
    tiling = loaded.info.tiling(1280, 720)
    images = [(pixels, tiling)]
    image = [loaded.img_start_id, *[loaded.image_token_id] * tiling.tokens, loaded.img_end_id]
    first, second = [21, 22, 23, *image, 24, 25], [31, 22, 23, *image, 24, 25]
    encoded: list[torch.Tensor] = []
    real = runtime.encode_tiles

    def spy(*args: object) -> torch.Tensor:
        out = real(*args)  # type: ignore[arg-type]
        encoded.append(out[: tiling.tokens].detach().cpu())
        return out

    kw = {"max_new_tokens": 6, "constraint": None, "reasoning": False, "max_think_tokens": 0}
    engine = StaticEngine(loaded, max_len=1024, max_images=2)
    monkeypatch.setattr(runtime, "encode_tiles", spy)
    engine.run(first, images, **kw)
    (held,) = engine._embeds.values()
    assert held.device.type == "cpu" and held.is_pinned() and len(encoded) == 1
    assert torch.equal(held, encoded[0])
    again, details = engine.run(second, images, **kw)
    assert details["images_encoded"] == 0 and details["reused_tokens"] == 0 and len(encoded) == 1
    fresh, fresh_details = StaticEngine(loaded, max_len=1024, max_images=2).run(second, images, **kw)
    assert fresh_details["images_encoded"] == 1
    assert again.token_ids == fresh.token_ids


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_kept_prefix_after_cleaning_and_for_a_new_task_equals_a_full_forward(  # type: ignore[no-untyped-def]
    tiny_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA (compiled blocks, CUDA graphs): step 4 of an episode, whose prompt drops step 1's screenshot,
    and the first step of a second task resume from kept snapshots (more than 0 tokens reused), and the
    logits of every step equal a full uncached forward."""
    from holodesk.policy.holotron.loader import load_holotron

    loaded = load_holotron(tiny_dir, dtype="float32", device="cuda")
    frames = [_frame(1280, 720, 70 + i) for i in range(4)]
    policy = HolotronPolicy(loaded,
                            GenerationOptions(max_reply_tokens=96, max_string_chars=12, max_images=3), decoder="static")
    first_logits = _spy_prefill_logits(policy, monkeypatch)
    observations: list[Observation] = []
    steps = _episode(policy, frames, observations=observations)
    assert steps[3].extra["images"] == 3 and steps[3].extra["reused_tokens"] > 0
    obs = Observation(task="a second task", frame=frames[0])
    observations.append(obs)
    new_task = policy.propose(obs)
    assert new_task.extra["reused_tokens"] > 1000  # the system prompt
    for got, seen in zip(first_logits, observations, strict=True):
        ref = _reference_logits(policy, seen)
        assert torch.allclose(got, ref, rtol=1e-3, atol=1e-3), float((got - ref).abs().max())
