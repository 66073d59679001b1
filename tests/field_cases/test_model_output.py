"""Field cases F07-F09: model output, through the real Session, the real ScriptedPolicy and the real
protocol parser (``holo-v1``). The screen is a FakeCapture frame; actions go to the RecordingExecutor
fake (F09's wall-time cap uses the real executor, whose ``wait`` needs no display).

The property "every text -> ParsedReply or PolicyOutputError, never another exception" is fuzzed with
hypothesis in tests/policy/test_protocol_fuzz.py (test_arbitrary_text_never_raises_anything_else and
its siblings); it is not repeated here.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from holodesk.capture.fake import FakeCapture
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.core.actions import Action, Answer, Click, Point
from holodesk.errors import PolicyOutputError
from holodesk.policy.protocol import PROTOCOL_NAMES
from holodesk.policy.registry import get_protocol
from holodesk.session.approval import ApprovalResponse, Decision
from holodesk.session.state import SessionLimits, State
from tests.field_cases.fakes import FakePanel, SpyApprover, make_run, reply, single_frame_capture

CLICK = {"tool_name": "click", "x": 500, "y": 500}
GOOD = reply(CLICK, "click the middle")


def _screen() -> FakeCapture:
    return single_frame_capture(FakePanel((1280, 800), 1.0).frame())


# Each reply and what it must become: an Action, or the start of the PolicyOutputError message.
F07_REPLIES: list[tuple[str, str, Action | str]] = [
    ("fenced", f"```json\n{GOOD}\n```", Click(Point(500, 500))),
    ("trailing_prose", GOOD + "\nI chose the middle because the button is there.", Click(Point(500, 500))),
    ("two_objects", GOOD + "\n" + reply({"tool_name": "click", "x": 10, "y": 10}), "the reply contains 2 different"),
    ("single_quotes", "{'note': None, 'thought': 't', 'tool_call': {'tool_name': 'click', 'x': 500, 'y': 500}}",
     Click(Point(500, 500))),
    ("missing_brace", GOOD[:-1], "a JSON object in the reply is never closed"),
    ("empty", "", "the reply is empty"),
    ("whitespace", " \n\t", "the reply is empty"),
    ("bangs", "!" * 2000, "the reply contains no JSON object"),
    ("unknown_tool", reply({"tool_name": "launch_missiles", "x": 1, "y": 2}), "unknown tool name"),
    ("coordinate_string", reply({"tool_name": "click", "x": "500", "y": "500"}), Click(Point(500, 500))),
    ("coordinate_float", reply({"tool_name": "click", "x": 500.0, "y": 500.0}), Click(Point(500, 500))),
    ("coordinate_fraction_float", reply({"tool_name": "click", "x": 500.5, "y": 500}), "x in the click call must be"),
    ("coordinate_word", reply({"tool_name": "click", "x": "middle", "y": 500}), "x in the click call must be"),
]


@pytest.mark.parametrize(("raw", "expected"), [(r, e) for _n, r, e in F07_REPLIES],
                         ids=[n for n, _r, _e in F07_REPLIES])
def test_F07_malformed_replies_yield_an_action_or_an_error_with_the_raw_text(raw: str, expected: Action | str) -> None:
    protocol = get_protocol()
    run = make_run([raw, reply(None, "end")], _screen())
    result = run.session.run("click the middle")
    assert result.status is State.FINISHED, result
    if isinstance(expected, Action):
        assert protocol.parse(raw).action == expected
        assert [r.action for r in run.approver.requests] == [expected]  # approval first ...
        assert run.executor.actions == [expected]  # ... then exactly that action
        assert run.kinds("warning") == []
    else:
        with pytest.raises(PolicyOutputError) as info:
            protocol.parse(raw)
        assert info.value.message.startswith(expected), info.value.message
        assert info.value.raw_text == raw
        assert run.approver.requests == [] and run.executor.calls == []  # nothing executed by default
        (warning,) = run.kinds("warning")
        assert warning.data["raw_text"] == raw and expected in warning.message


def test_F07_consecutive_failures_stop_the_run_and_say_why() -> None:
    bad = ["", "!" * 2000, reply({"tool_name": "launch_missiles"})]
    run = make_run([*bad, GOOD], _screen(), limits=SessionLimits(max_parse_failures=3))
    result = run.session.run("click the middle")
    assert result.status is State.FAILED
    assert result.reason.startswith("3 consecutive replies were not valid actions; last: unknown tool name")
    assert "launch_missiles" in result.reason  # the last raw reply is quoted
    assert run.executor.calls == [] and run.approver.requests == []
    assert run.policy.remaining == 1  # the good reply was never reached
    assert len(run.kinds("warning")) == 3


def test_F07_a_valid_reply_resets_the_failure_count() -> None:
    run = make_run(["", "", GOOD, "", "", reply(None, "end")], _screen(), limits=SessionLimits(max_parse_failures=3))
    result = run.session.run("click")
    assert result.status is State.FINISHED and result.answer == "end"
    assert run.executor.actions == [Click(Point(500, 500))]


# -- F08 ------------------------------------------------------------------------------------------------
F08_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("fractions", {"tool_name": "click", "x": 0.5, "y": 0.25}, "0..1 normalised convention"),
    ("fraction_strings", {"tool_name": "click", "x": "0.5", "y": "0.3"}, "0..1 normalised convention"),
    ("drag_fractions", {"tool_name": "drag", "start_x": 0.1, "start_y": 0.2, "end_x": 0.3, "end_y": 1.0},
     "0..1 normalised convention"),
    ("pixels", {"tool_name": "click", "x": 1500, "y": 800}, "look like pixel coordinates"),
    ("pixels_full_hd", {"tool_name": "double_click", "x": 1919, "y": 1079}, "look like pixel coordinates"),
    ("scroll_pixels", {"tool_name": "scroll", "direction": "down", "x": 640, "y": 1200},
     "look like pixel coordinates"),
]


@pytest.mark.parametrize(("call", "flag"), [(c, f) for _n, c, f in F08_CALLS], ids=[n for n, _c, _f in F08_CALLS])
def test_F08_wrong_coordinate_convention_is_flagged_not_clicked(call: dict[str, Any], flag: str) -> None:
    raw = reply(call)
    run = make_run([raw, reply(None, "end")], _screen())
    run.session.run("click")
    assert run.executor.calls == [] and run.approver.requests == []
    (warning,) = run.kinds("warning")
    assert flag in warning.message and raw in warning.message


def test_F08_localization_replies_follow_the_same_rules() -> None:
    protocol = get_protocol()
    with pytest.raises(PolicyOutputError, match=r"0\.\.1 normalised convention"):
        protocol.parse_localization('{"x": 0.42, "y": 0.7}')
    with pytest.raises(PolicyOutputError, match="pixel coordinates"):
        protocol.parse_localization('{"x": 1280, "y": 700}')
    assert protocol.parse_localization('{"x": 420, "y": 700}') == Point(420, 700)


# -- F09 ------------------------------------------------------------------------------------------------
def test_F09_same_action_on_an_unchanged_screen_warns_then_stops() -> None:
    run = make_run([GOOD] * 5, _screen(), limits=SessionLimits(max_repeats=3))
    result = run.session.run("click")
    assert result.status is State.FAILED
    assert result.reason == ("the same action was proposed 3 times on an unchanged screen; stopping to "
                             "avoid a loop")
    assert len(run.executor.calls) == 2  # third proposal is stopped before approval
    (warning,) = run.kinds("warning")
    assert warning.step == 1 and "one more repeat stops the run" in warning.message


def test_F09_the_same_action_on_a_changing_screen_is_not_a_loop() -> None:
    frames = [np.full((800, 1280, 3), shade, np.uint8) for shade in (10, 20, 30, 40)]
    run = make_run([GOOD] * 4 + [reply(None, "scrolled through")], FakeCapture(frames))
    result = run.session.run("click")
    assert result.status is State.FINISHED and len(run.executor.calls) == 4
    assert run.kinds("warning") == []


def test_F09_no_tool_call_ends_the_run_as_an_answer() -> None:
    run = make_run([reply(None, "The invoice total is 42.10 EUR.")], _screen())
    result = run.session.run("read the total")
    assert (result.status, result.answer) == (State.FINISHED, "The invoice total is 42.10 EUR.")
    assert run.executor.calls == [] and run.approver.requests == []
    assert isinstance(get_protocol().parse(reply(None, "x")).action, Answer)


def test_F09_hard_step_cap() -> None:
    replies = [reply({"tool_name": "click", "x": 100 + i, "y": 100}) for i in range(10)]
    run = make_run(replies, _screen(), limits=SessionLimits(max_steps=4))
    result = run.session.run("click forever")
    assert (result.status, result.steps) == (State.FAILED, 4)
    assert result.reason == "reached the step cap (4 steps) without finishing"
    assert len(run.executor.calls) == 4


def test_F09_a_cap_of_one_step_reads_in_the_singular() -> None:
    run = make_run([reply({"tool_name": "click", "x": 100, "y": 100})] * 2, _screen(),
                   limits=SessionLimits(max_steps=1))
    result = run.session.run("click forever")
    assert result.reason == "reached the step cap (1 step) without finishing"


def test_F09_hard_wall_time_cap_between_steps() -> None:
    executor = PyAutoGUIExecutor()  # wait needs no display
    replies = [reply({"tool_name": "wait", "seconds": 0.2 + i / 100}) for i in range(20)]
    run = make_run(replies, _screen(), executor, limits=SessionLimits(max_wall_s=0.5),
                   stop_event=executor.stop_event)
    t0 = time.monotonic()
    result = run.session.run("wait forever")
    assert result.status is State.FAILED and result.reason == "reached the wall-time cap (0.5 s) without finishing"
    assert time.monotonic() - t0 < 2.0


def test_F09_wall_time_cap_also_ends_a_long_action() -> None:
    """A 60 s wait proposed with 0.5 s of wall time left must not run for 60 s."""
    executor = PyAutoGUIExecutor()
    run = make_run([reply({"tool_name": "wait", "seconds": 60})], _screen(), executor,
                   limits=SessionLimits(max_wall_s=0.5), stop_event=executor.stop_event)
    t0 = time.monotonic()
    result = run.session.run("wait a minute")
    elapsed = time.monotonic() - t0
    assert elapsed < 3.0, elapsed
    assert result.status is State.FAILED and "wall-time cap (0.5 s)" in result.reason
    # the cap set the shared stop event (that is what ended the 60 s wait); the run clears it as it ends, so
    # the next task starts unstopped
    assert not run.executor.stop_event.is_set()


def test_F09_wall_time_cap_during_approval_runs_nothing() -> None:
    """The user leaves the approval prompt open past the cap and then approves: nothing runs."""

    class SlowApprover(SpyApprover):
        def __call__(self, request: Any) -> ApprovalResponse:
            time.sleep(0.6)
            return super().__call__(request)

    approver = SlowApprover(default=ApprovalResponse(Decision.APPROVE))
    run = make_run([GOOD], _screen(), approver=approver, limits=SessionLimits(max_wall_s=0.3))
    result = run.session.run("click")
    assert result.status is State.FAILED and "wall-time cap" in result.reason
    assert run.executor.calls == []


# -- F25 ------------------------------------------------------------------------------------------------
# 200,000-character hostile replies. Before the fix the "{...</think></think>..." shape took > 90 s
# (quadratic re-scan per closing tag: 16k chars 0.8 s, 32k 3.5 s, 64k 14.9 s); now every shape is one
# linear pass (about 0.01-0.2 s of CPU each). CPU time of this process is measured, so a loaded machine
# does not make the bound flaky; the bound (1 s) is still 5x the slowest measured shape.
F25_N = 200_000
F25_SHAPES: dict[str, str] = {
    "repeated_think_tags_inside_an_open_string": ('{"a": "' + "</think>" * F25_N)[:F25_N],
    "repeated_think_tags_in_prose": ("x</think>" * F25_N)[:F25_N],
    "nested_open_braces": "{" * F25_N,
    "nested_braces_closed": "{" * (F25_N // 2) + "}" * (F25_N // 2),
    "long_unterminated_string": '{"note": null, "thought": "' + "x" * (F25_N - 40),
    "deep_open_arrays": ('{"a": ' + "[" * F25_N)[:F25_N],
    "deep_arrays_closed": '{"a": ' + "[" * (F25_N // 2 - 4) + "]" * (F25_N // 2 - 4) + "}",
    "many_empty_objects": "{}" * (F25_N // 2),
    "many_small_objects": ('{"a":1}' * F25_N)[:F25_N],
    "repeated_quotes": ('{"' * F25_N)[:F25_N],
    "single_quoted_literal_with_braces": "{'a': '" + "}" * (F25_N - 8),
    "many_think_openers": "<think>" + "<think>" * (F25_N // 7 - 1),
}


@pytest.mark.parametrize("protocol", PROTOCOL_NAMES)
@pytest.mark.parametrize("shape", sorted(F25_SHAPES))
def test_F25_a_huge_hostile_reply_is_rejected_in_linear_time(shape: str, protocol: str) -> None:
    text = F25_SHAPES[shape]
    assert len(text) >= F25_N - 16
    parser = get_protocol(protocol)
    t0 = time.process_time()
    with pytest.raises(PolicyOutputError) as info:
        parser.parse(text)
    elapsed = time.process_time() - t0
    assert elapsed < 1.0, f"{shape}: {elapsed:.3f} s of CPU"
    assert info.value.raw_text == text  # rejected with the raw text attached, as any bad reply


def test_F25_a_reply_over_the_limit_is_rejected_before_it_is_scanned() -> None:
    text = "</think>" * 40_000  # 320,000 characters
    t0 = time.process_time()
    with pytest.raises(PolicyOutputError, match="more than 200000"):
        get_protocol("holo-v1").parse(text)
    assert time.process_time() - t0 < 1.0
