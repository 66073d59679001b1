"""A session meets an action class the vocabulary does not declare (tests/helpers/new_action.py's TripleTap),
proposed by a policy, on a real desktop (openbox, the Tk form, the real pyautogui executor): the autopilot asks
with the card calling it unknown, the approved step is refused by the executor with nothing pressed (the form
counts no click), and the episode record keeps the action's own kind and the refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.core.actions import Click, Done, Point
from holodesk.core.geometry import frame_pixel_to_point, place
from holodesk.policy.base import Observation, Proposal
from holodesk.policy.contract import AgentLoopProtocol
from holodesk.session.approval import ApprovalPolicy
from holodesk.session.episode import list_episodes, load_episode
from holodesk.session.loop import Session
from holodesk.session.state import SessionLimits, State
from tests.field_cases.fakes import SpyApprover
from tests.helpers.desktop import Desktop
from tests.helpers.new_action import TripleTap


class NewActionPolicy:
    """Fake policy (a model that proposes an action class Holodesk does not declare cannot run here): proposes
    ``TripleTap`` at ``point``, then finishes."""

    name = "new-action"
    protocol = AgentLoopProtocol()

    def __init__(self, point: Point) -> None:
        self.proposals = [Proposal(TripleTap(point, element="Count button")), Proposal(Done("done"))]

    def propose(self, observation: Observation) -> Proposal:
        return self.proposals.pop(0)

    def close(self) -> None:
        pass


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_an_unknown_action_asks_is_refused_and_is_recorded_as_itself(desktop: Desktop, tmp_path: Path) -> None:
    form = desktop.tk_form()
    with MssCapture() as capture:
        frame = capture.grab(1)
        count = frame_pixel_to_point(frame, *form.center("Count"))
        executor = PyAutoGUIExecutor()
        executor.move_pointer_out_of_corner()
        spy = SpyApprover()
        session = Session(NewActionPolicy(count), capture, executor, ApprovalPolicy("auto", spy), SessionLimits(),
                          episodes_dir=tmp_path)
        result = session.run("press Count three times")
    (request,) = spy.requests  # the autopilot asked for the unknown step (Done needs no approval)
    assert request.description.startswith("Unknown action \u2018triple_tap\u2019 at (")
    assert "do not know the action type \u2018triple_tap\u2019" in request.risk.reason
    assert result.status is State.FAILED and "could not be performed" in result.reason
    (step, _) = load_episode(list_episodes(tmp_path)[0]).steps
    assert step["action"] == {"kind": "triple_tap", "point": {"x": count.x, "y": count.y}, "element": "Count button"}
    assert step["result"]["ok"] is False and "cannot perform the action 'triple_tap'" in step["result"]["message"]
    # Nothing was pressed: a real click on Count afterwards is the form's first and only one. X delivers input in
    # order, so once the form reports the focus moved by a later click, every earlier click has been handled.
    assert executor.execute(place(Click(count), frame)).ok
    desktop.click(*form.center("name"))
    assert form.wait_layout(lambda layout: layout.get("focus") == "name")["count"] == 1
