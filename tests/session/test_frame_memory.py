"""An episode keeps in memory only the screenshots its policy will send again (issue 31: 2.9 MB a step was
665 MB at 200 steps): a 200-step scripted run, frames counted as the capture hands them out."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.capture.fake import FakeCapture
from holodesk.control.base import ActionResult
from holodesk.core.geometry import Frame, PlacedAction
from holodesk.policy.base import Observation, Proposal
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.episode import load_episode
from holodesk.session.loop import Session
from holodesk.session.state import SessionLimits, State

STEPS = 200


class FrameCountingCaptureFake(FakeCapture):
    """A named fake capture (no screen is needed to count frames): every grab is a new frame of one image;
    at each grab it counts how many frames it handed out earlier are still alive somewhere in the process."""

    def __init__(self) -> None:
        super().__init__([np.zeros((200, 320, 3), np.uint8)])
        self.handed_out: list[weakref.ref[Frame]] = []
        self.most_alive = 0

    def grab(self, monitor_index: int) -> Frame:
        alive = sum(1 for ref in self.handed_out if ref() is not None)
        self.most_alive = max(self.most_alive, alive)
        frame = super().grab(monitor_index)
        self.handed_out.append(weakref.ref(frame))
        return frame


class ImagesSeenPolicy(ScriptedPolicy):
    """The scripted policy, saying it sends ``max_images`` screenshots; it notes how many history frames each
    observation carried."""

    def __init__(self, replies: list[Any], max_images: int) -> None:
        super().__init__(replies)
        self.max_images = max_images
        self.history_frames: list[int] = []

    def propose(self, observation: Observation) -> Proposal:
        self.history_frames.append(sum(1 for step in observation.history if step.frame is not None))
        return super().propose(observation)


class NoInputExecutorFake:
    """A named fake executor (input is not what is measured): performs nothing and keeps nothing."""

    name = "no-input"

    def execute(self, placed: PlacedAction) -> ActionResult:
        return ActionResult(ok=True, status="performed", message=f"nothing done for {placed.action.kind}")


def approve(request: ApprovalRequest) -> ApprovalResponse:
    return ApprovalResponse(Decision.APPROVE)


@pytest.mark.parametrize("max_images", [1, 3, 6])
def test_a_200_step_episode_keeps_only_the_frames_its_policy_sends(tmp_path: Path, max_images: int) -> None:
    replies = [{"note": None, "thought": f"step {i}", "tool_call": {"tool_name": "click", "x": 10 + i % 900,
                                                                     "y": 20 + i // 900}} for i in range(STEPS)]
    policy = ImagesSeenPolicy(replies, max_images)
    capture = FrameCountingCaptureFake()
    session = Session(policy, capture, NoInputExecutorFake(), ApprovalPolicy("step", approve),
                      SessionLimits(max_steps=STEPS), episodes_dir=tmp_path)
    result = session.run("click along the screen")
    assert result.status is State.FAILED and "step cap" in result.reason, result.reason  # all 200 steps ran
    assert len(capture.handed_out) >= STEPS
    # the history's frames, the step's frame and the one being grabbed: not one frame per step
    assert capture.most_alive <= max_images + 2, capture.most_alive
    # the policy still gets every frame it sends: the last max_images - 1 history steps', once there are that many
    assert policy.history_frames[:4] == [min(i, max_images - 1) for i in range(4)]
    assert set(policy.history_frames[max_images:]) == {max_images - 1}
    # every frame is still in the episode folder
    assert session.recorder is not None
    assert len(list(load_episode(session.recorder.path).path.glob("step-*.png"))) == STEPS
