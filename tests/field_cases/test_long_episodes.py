"""Field case F21: long episodes.

The screenshot bound runs for real: the real Session drives the real RemotePolicy (built from settings
by the session factory, as ``holodesk run --endpoint`` does) against a real HTTP server process that
answers from a script (tests/policy/scripted_openai_server.py) and records every request, so the
images actually sent are counted. The out-of-memory retry needs a GPU that runs out of memory: see
test_F21_out_of_memory_retry_* below (the GPU is faked; the runtime is real).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image

from holodesk.capture.fake import FakeCapture
from holodesk.control.recording import RecordingExecutor
from holodesk.core.geometry import Monitor
from holodesk.policy.base import Proposal
from holodesk.policy.generation import GenerationOptions
from holodesk.session.approval import ApprovalPolicy
from holodesk.session.factory import build_policy
from holodesk.session.loop import Session
from holodesk.session.state import SessionEvent, SessionLimits, State
from holodesk.settings import Settings, load_settings
from tests.field_cases.fakes import FakePanel, SpyApprover, reply, single_frame_capture
from tests.policy.remote_helpers import ScriptedServer

MODEL = "Holotron-12B"
STEPS = 8


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer("--models", MODEL)
    yield srv
    srv.stop()


def _frames(n: int) -> list[np.ndarray[Any, Any]]:
    """n distinct screenshots (so no step looks like a loop), 320x200."""
    frames = []
    for i in range(n):
        img = np.zeros((200, 320, 3), np.uint8)
        img[:, :, 0] = 20 * i
        img[10 * i:10 * i + 10, :, 1] = 255
        frames.append(img)
    return frames


def _images(body: dict[str, Any]) -> list[np.ndarray[Any, Any]]:
    out = []
    for message in body["messages"]:
        if not isinstance(message["content"], list):
            continue
        for part in message["content"]:
            if part["type"] == "image_url":
                b64 = part["image_url"]["url"].split(",", 1)[1]
                out.append(np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB")))
    return out


def _text(body: dict[str, Any]) -> str:
    parts = []
    for message in body["messages"]:
        content = message["content"]
        parts += [content] if isinstance(content, str) else [p.get("text", "") for p in content]
    return "\n".join(parts)


@pytest.mark.parametrize("protocol", ["holo-v1", "agent-loop-v1"])
@pytest.mark.parametrize("max_images", [None, 1, 5])
def test_F21_screenshots_in_the_prompt_are_bounded_older_steps_stay_as_text(server: ScriptedServer,
                                                                          max_images: int | None,
                                                                          protocol: str) -> None:
    server.reset()
    if protocol == "holo-v1":
        server.script(*[{"content": reply({"tool_name": "click", "x": 100 + 10 * i, "y": 500}, f"step {i + 1}")}
                        for i in range(STEPS)], {"content": reply(None, "all clicked")})
    else:
        server.script(*[{"content": reply({"tool_name": "click_desktop", "element": f"cell {i + 1}",
                                           "x": 100 + 10 * i, "y": 500}, f"step {i + 1}")} for i in range(STEPS)],
                      {"content": reply({"tool_name": "answer", "content": "all clicked"}, "done")})
    settings = load_settings(policy="remote", endpoint=server.url, model=MODEL, max_images=max_images,
                             protocol=protocol)
    expected_bound = 3 if max_images is None else max_images
    assert settings.max_images == expected_bound  # default 3, configurable
    frames = _frames(STEPS + 1)
    capture = FakeCapture(frames, [Monitor(1, 0, 0, 320, 200, name="FAKE")])
    policy = build_policy(settings)
    try:
        session = Session(policy, capture, RecordingExecutor(), ApprovalPolicy("step", SpyApprover()),
                          SessionLimits(max_steps=STEPS + 5))
        result = session.run("click along the row")
    finally:
        policy.close()
    assert result.status is State.FINISHED and result.answer == "all clicked", result
    requests = [r["body"] for r in server.chat_requests()]
    assert len(requests) == STEPS + 1
    for step, body in enumerate(requests):
        images = _images(body)
        assert len(images) == min(step + 1, expected_bound), step  # bounded
        assert np.array_equal(images[-1], frames[step])  # the current screenshot is always the last image
        if len(images) > 1:  # the others are the most recent history screenshots, in order
            assert np.array_equal(images[-2], frames[step - 1])
        text = _text(body)
        for earlier in range(step):  # every earlier step is still there, as text
            if protocol == "holo-v1":
                assert f"Step {earlier + 1}: " in text and f'"thought": "step {earlier + 1}"' in text, (step, earlier)
            else:  # the parsed reply re-added as an assistant turn, its result as a tool_output turn
                assert f'"thought":"step {earlier + 1}"' in text, (step, earlier)
        if protocol == "agent-loop-v1":  # screenshots beyond the budget: the placeholder in its wrapper
            omitted = "<observation>\n\n[Image omitted by context cleaning]\n\n</observation>"  # parts joined by \\n
            assert text.count(omitted) == step + 1 - len(images), step
            assert text.count('<tool_output tool="click_desktop">') == step


def test_F21_a_policy_fallback_is_told_to_the_user() -> None:
    """A policy that had to fall back (fewer screenshots after running out of memory) says so in
    Proposal.notices; the session shows each notice as a warning and records it."""

    class FallbackPolicySpy:
        name = "fallback-spy"

        def propose(self, observation: Any) -> Proposal:
            from holodesk.core.actions import Answer

            return Proposal(Answer("done"), notices=("GPU memory ran out with 3 screenshot(s); retried with 2",))

        def close(self) -> None:
            """Nothing to release."""

    events: list[SessionEvent] = []
    session = Session(FallbackPolicySpy(), single_frame_capture(FakePanel((320, 200), 1.0).frame()),
                      RecordingExecutor(), ApprovalPolicy("step", SpyApprover()))
    session.subscribe(events.append)
    assert session.run("answer").status is State.FINISHED
    (warning,) = [e for e in events if e.kind == "warning"]
    assert warning.message == "GPU memory ran out with 3 screenshot(s); retried with 2"
    assert warning.data["notice"] is True


def test_F21_default_bound_is_declared_once() -> None:
    assert Settings.model_fields["max_images"].default == 3


# -- F21: out of memory during generation -----------------------------------------------------------------
class FakeGpuOutOfMemory:
    """Stands in for a GPU with too little memory: a step of the static engine raises torch's
    OutOfMemoryError whenever more than ``max_images`` screenshots are in its prompt (install it with
    :meth:`install`)."""

    def __init__(self, max_images: int) -> None:
        self.max_images = max_images
        self.attempts: list[int] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeGpuOutOfMemory:
        from holodesk.policy.holotron.engine import StaticEngine

        real = StaticEngine.run
        fake = self

        def run(engine: Any, input_ids: Any, images: Any, **kwargs: Any) -> Any:
            import torch

            fake.attempts.append(len(images))
            if len(images) > fake.max_images:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake GPU)")
            return real(engine, input_ids, images, **kwargs)

        monkeypatch.setattr(StaticEngine, "run", run)
        return self


@pytest.fixture(scope="module")
def tiny_holotron(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real local policy on a tiny random Holotron-shaped checkpoint, on the CPU. Strings in the
    constrained reply are capped so that random weights still produce a complete JSON reply."""
    pytest.importorskip("torch")
    from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint
    from holodesk.policy.holotron.policy import HolotronPolicy

    path = write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-holotron") / "ckpt", seed=0)
    options = GenerationOptions(max_images=3, max_string_chars=8, max_reply_tokens=256)
    policy = HolotronPolicy.load(str(path), options, device="cpu")
    yield policy
    policy.close()


def _long_observation() -> Any:
    from holodesk.core.actions import Click, Point
    from holodesk.core.geometry import Frame
    from holodesk.policy.base import HistoryStep, Observation

    frames = [Frame(img, Monitor(1, 0, 0, 320, 200)) for img in _frames(6)]
    history = tuple(HistoryStep(i, frames[i], Click(Point(100 + i, 500)), f"step {i + 1}", None, "", "performed")
                    for i in range(5))
    return Observation("click along the row", frames[5], history)


@pytest.mark.slow
def test_F21_out_of_memory_retry_with_fewer_images(tiny_holotron: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGpuOutOfMemory(max_images=1).install(monkeypatch)
    proposal = tiny_holotron.propose(_long_observation())
    assert fake.attempts == [3, 2, 1]  # 3 screenshots, then 2, then only the current one
    assert proposal.extra["max_images_used"] == 1 and proposal.extra["images"] == 1
    assert proposal.extra["warnings"] == [
        "GPU memory ran out with 3 screenshot(s); retried with 2 (older screenshots sent as text only)",
        "GPU memory ran out with 2 screenshot(s); retried with 1 (older screenshots sent as text only)",
    ]


@pytest.mark.slow
def test_F21_out_of_memory_with_one_image_fails_with_advice(tiny_holotron: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from holodesk.errors import PolicyError

    FakeGpuOutOfMemory(max_images=0).install(monkeypatch)
    with pytest.raises(PolicyError, match="ran out of memory even with only the current screenshot") as info:
        tiny_holotron.propose(_long_observation())
    assert "4-bit" in info.value.hint


@pytest.mark.slow
def test_F21_out_of_memory_retry_is_told_to_the_user(tiny_holotron: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry reaches the user: the runtime puts it in Proposal.notices, which the session shows as
    a warning event (test_F21_a_policy_fallback_is_told_to_the_user)."""
    FakeGpuOutOfMemory(max_images=2).install(monkeypatch)
    proposal = tiny_holotron.propose(_long_observation())
    assert proposal.notices == (
        "GPU memory ran out with 3 screenshot(s); retried with 2 (older screenshots sent as text only)",)
