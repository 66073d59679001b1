""""Click more precisely" with a remote policy: the session's refine path asks the server (a real HTTP server on
127.0.0.1, tests/policy/scripted_openai_server.py, answering from a script) for the target's point in the crop
around the proposed point, and the step is performed at the refined point. The executor records instead of
clicking (the step's point is the subject)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from holodesk.capture.fake import FakeCapture
from holodesk.control.recording import RecordingExecutor
from holodesk.core.actions import Click
from holodesk.core.geometry import Frame, Monitor, frame_pixel_to_point, point_to_frame_pixel
from holodesk.core.refine import refine_crop
from holodesk.policy.remote import RemotePolicy
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.episode import load_episode
from holodesk.session.loop import Session
from holodesk.session.state import State
from tests.policy.remote_helpers import ScriptedServer

MODEL = "Hcompany/Holo2-8B"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer("--models", MODEL)
    yield srv
    srv.stop()


def reply(tool_call: dict[str, object]) -> str:
    return json.dumps({"note": None, "thought": "press the target", "tool_call": tool_call})


def test_refine_asks_the_server_and_performs_at_the_refined_point(server: ScriptedServer, tmp_path: Path) -> None:
    server.reset()
    pixels = np.zeros((400, 640, 3), np.uint8)
    frame = Frame(pixels, Monitor(1, 0, 0, 640, 400))
    proposed = frame_pixel_to_point(frame, 300, 200)
    crop = refine_crop(frame, proposed)
    left, top, width, height = crop
    server.script(
        {"content": reply({"tool_name": "click_desktop", "element": "the OK button", "x": proposed.x,
                           "y": proposed.y})},
        {"content": json.dumps({"x": 100, "y": 900})},  # the localization reply: a tenth across, 9/10 down
        {"content": reply({"tool_name": "answer", "content": "pressed"})},
    )
    requests: list[ApprovalRequest] = []
    answers = [ApprovalResponse(Decision.REFINE), ApprovalResponse(Decision.APPROVE)]

    def approver(request: ApprovalRequest) -> ApprovalResponse:
        requests.append(request)
        return answers.pop(0)

    executor = RecordingExecutor()
    policy = RemotePolicy(server.url, MODEL, api_key=None, backoff_s=0.01, backoff_max_s=0.05)
    session = Session(policy, FakeCapture([pixels]), executor, ApprovalPolicy("step", approver),
                      episodes_dir=tmp_path)
    try:
        result = session.run("press OK")
    finally:
        policy.close()
    assert result.status is State.FINISHED and result.answer == "pressed"
    assert requests[0].can_refine
    localization = server.chat_requests()[1]["body"]
    assert localization["temperature"] == 0.0 and len(localization["messages"]) == 1
    assert "Your target is:\nthe OK button" in localization["messages"][0]["content"][1]["text"]
    (call,) = executor.calls
    assert isinstance(call.action, Click)
    assert point_to_frame_pixel(frame, call.action.point) == (left + width // 10, top + height * 9 // 10)
    (step, *_rest) = load_episode(next(tmp_path.iterdir())).steps
    assert step["refinements"][0]["target"] == "the OK button"
    assert step["refined_action"]["point"] == {"x": call.action.point.x, "y": call.action.point.y}
