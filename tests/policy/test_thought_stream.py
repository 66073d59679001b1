"""The thought handed out while a step is generated: the throttle and pieces of ThoughtStream (one home for every
policy), the scripted policy's stream, the session's "thought" events before the proposal, and the CLI's
growing ``thinking`` line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.capture.fake import FakeCapture
from holodesk.cli import EventPrinter
from holodesk.control.recording import RecordingExecutor
from holodesk.policy.base import StreamsThought, ThoughtStream, thought_so_far
from holodesk.policy.contract import reasoning_text
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session.approval import ApprovalPolicy, ApprovalResponse, Decision
from holodesk.session.loop import Session
from holodesk.session.state import SessionEvent, State


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pieces_are_throttled_and_join_into_the_recorded_thought() -> None:
    clock = FakeClock()
    pieces: list[str] = []
    stream = ThoughtStream(pieces.append, interval_s=0.1, clock=clock)
    made: list[int] = []

    def reply(text: str) -> Any:
        def make() -> str:
            made.append(1)
            return text
        return make

    stream.offer(reply("<think>The form"))
    stream.offer(reply("<think>The form has"))  # too soon: not even detokenized
    clock.now += 0.5
    stream.offer(reply("<think>The form has two fields \ufffd"))  # a half character is held back
    clock.now += 0.5
    stream.offer(reply("<think>The form has two fields é</think>{\"thought\": \"x\"}"))
    final = reasoning_text("<think>The form has two fields é and a button.</think>{}")
    stream.finish(final)
    assert pieces == ["The form", " has two fields", " é", " and a button."]
    assert "".join(pieces) == final and len(made) == 3


def test_a_sink_that_raises_is_dropped_and_the_step_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def broken(piece: str) -> None:
        calls.append(piece)
        raise RuntimeError("the card is gone")

    policy = ScriptedPolicy([{"note": None, "thought": "open the menu now",
                              "tool_call": {"tool_name": "click", "x": 1, "y": 2}}], protocol="holo-v1")
    policy.thought_sink = broken
    proposal = policy.propose(_observation())
    assert proposal.thought == "open the menu now" and calls == ["open"]
    assert "thought sink failed" in caplog.text


def test_the_scripted_policy_hands_out_its_thought_word_by_word() -> None:
    policy = ScriptedPolicy(["<think>I see the dialog. OK is at the bottom.</think>"
                             + json.dumps({"note": None, "thought": "press OK",
                                           "tool_call": {"tool_name": "click_desktop", "element": "OK",
                                                         "x": 5, "y": 6}})],
                            protocol="agent-loop-v1")
    assert isinstance(policy, StreamsThought)
    pieces: list[str] = []
    policy.thought_sink = pieces.append
    policy.propose(_observation())
    assert pieces[:3] == ["I", " see", " the"] and "".join(pieces) == "I see the dialog. OK is at the bottom."
    assert thought_so_far("<think>\n a b </think>") == "a b"


def _observation() -> Any:
    from holodesk.core.geometry import Frame, Monitor
    from holodesk.policy.base import Observation

    return Observation("t", Frame(np.zeros((20, 30, 3), np.uint8), Monitor(1, 0, 0, 30, 20)))


def _reply(tool_call: dict[str, Any], thought: str) -> dict[str, Any]:
    return {"note": None, "thought": thought, "tool_call": tool_call}


def test_the_session_emits_the_thought_before_the_proposal_and_the_cli_prints_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = ScriptedPolicy([_reply({"tool_name": "click", "x": 10, "y": 10}, "click the gear icon"),
                             _reply({"tool_name": "answer", "text": "done"}, "all done")])
    events: list[SessionEvent] = []
    session = Session(policy, FakeCapture([np.full((20, 30, 3), i, np.uint8) for i in range(5)]),
                      RecordingExecutor(), ApprovalPolicy("step", lambda _request: ApprovalResponse(Decision.APPROVE)),
                      episodes_dir=tmp_path)
    session.subscribe(events.append)
    session.subscribe(EventPrinter())
    assert session.run("press the gear").status is State.FINISHED
    first = [e for e in events if e.step == 0 and e.kind in ("thought", "proposal")]
    thoughts = [e for e in first if e.kind == "thought"]
    assert [e.message for e in thoughts] == ["click", " the", " gear", " icon"]
    assert [e.data["text"] for e in thoughts][-2:] == ["click the gear", "click the gear icon"]
    assert first[-1].kind == "proposal" and all(e.state is State.THINKING for e in thoughts)
    assert policy.thought_sink is None  # cleared after the step
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[step 1] thinking: click the gear icon"
    assert not any(line.startswith("[step 1] thought:") for line in out)  # the same text: shown once
    assert "[step 2] thinking: all done" in out


def test_the_thinking_line_shows_control_characters_as_escapes(capsys: pytest.CaptureFixture[str]) -> None:
    printer = EventPrinter()
    for piece in ("fine\x1b[2J", "\x1b[1A\n  risk: low\x07\u200b"):
        printer(SessionEvent("thought", State.THINKING, 0, piece))
    out = capsys.readouterr().out
    assert out == "[step 1] thinking: fine\\x1b[2J\\x1b[1A\\n  risk: low\\x07\\u200b"
