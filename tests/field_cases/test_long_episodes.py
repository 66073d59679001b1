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
from holodesk.session.approval import ApprovalPolicy
from holodesk.session.factory import build_policy
from holodesk.session.loop import Session, SessionEvent, SessionLimits, State
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


@pytest.mark.parametrize("max_images", [None, 1, 5])
def test_F21_screenshots_in_the_prompt_are_bounded_older_steps_stay_as_text(server: ScriptedServer,
                                                                          max_images: int | None) -> None:
    server.reset()
    server.script(*[{"content": reply({"tool_name": "click", "x": 100 + 10 * i, "y": 500}, f"step {i + 1}")}
                    for i in range(STEPS)], {"content": reply(None, "all clicked")})
    settings = load_settings(policy="remote", endpoint=server.url, model=MODEL, max_images=max_images)
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
            assert f"Step {earlier + 1}: " in text and f'"thought": "step {earlier + 1}"' in text, (step, earlier)


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
