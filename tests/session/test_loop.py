"""The agent loop: states, approval gate, caps, loop detection, episode records.

Uses the replaying FakeCapture, the RecordingExecutor fake and the real ScriptedPolicy + protocol parser.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from holodesk.capture.fake import FakeCapture
from holodesk.control.base import ActionResult
from holodesk.control.recording import RecordingExecutor
from holodesk.core.actions import Click, Plan, Point, Type
from holodesk.core.geometry import Frame, Monitor, PlacedAction
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session import loop
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.episode import list_episodes, load_episode
from holodesk.session.loop import SCREEN_SETTLE_S, SETTLE_GRABS, Session
from holodesk.session.state import SessionEvent, SessionLimits, State
from tests.field_cases.fakes import ActionsPolicy


def click(x: int, y: int, thought: str = "") -> dict[str, Any]:
    return {"note": None, "thought": thought, "tool_call": {"tool_name": "click", "x": x, "y": y}}


def type_(text: str) -> dict[str, Any]:
    return {"note": None, "thought": "type", "tool_call": {"tool_name": "type", "text": text}}


def answer(text: str) -> dict[str, Any]:
    return {"note": None, "thought": "done", "tool_call": {"tool_name": "answer", "text": text}}


def frames(n: int, w: int = 320, h: int = 200) -> list[np.ndarray]:
    """n frames that all differ (so loop detection sees a changing screen)."""
    out = []
    for i in range(n):
        img = np.zeros((h, w, 3), np.uint8)
        img[0, 0] = (i % 256, i // 256, 7)
        out.append(img)
    return out


class Spy:
    """A user approver that answers from a list and logs what it saw into a shared log."""

    def __init__(self, answers: list[ApprovalResponse], log: list[tuple[str, Any]]) -> None:
        self.answers = list(answers)
        self.log = log
        self.requests: list[ApprovalRequest] = []

    def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        self.requests.append(request)
        resp = self.answers.pop(0)
        self.log.append(("approval", (request.step, resp.decision)))
        return resp


class LoggingExecutor(RecordingExecutor):
    def __init__(self, log: list[tuple[str, Any]]) -> None:
        super().__init__()
        self.log = log

    def execute(self, placed: PlacedAction) -> ActionResult:
        self.log.append(("execute", placed.action))
        return super().execute(placed)

    def end_episode(self) -> None:
        self.log.append(("end_episode", None))


def make_session(replies: list[Any], answers: list[ApprovalResponse], tmp_path: Path, *, mode: str = "step",
                 limits: SessionLimits | None = None, n_frames: int = 50, capture: Any = None,
                 ) -> tuple[Session, Spy, LoggingExecutor, list[tuple[str, Any]]]:
    log: list[tuple[str, Any]] = []
    spy = Spy(answers, log)
    executor = LoggingExecutor(log)
    session = Session(ScriptedPolicy(replies), capture or FakeCapture(frames(n_frames)), executor,
                      ApprovalPolicy(mode, spy), limits or SessionLimits(), episodes_dir=tmp_path)
    return session, spy, executor, log


A = ApprovalResponse(Decision.APPROVE)
S = ApprovalResponse(Decision.SKIP)
Q = ApprovalResponse(Decision.STOP)


def test_step_mode_never_executes_without_an_approval_event(tmp_path: Path) -> None:
    session, spy, executor, log = make_session(
        [click(100, 100), click(200, 200), click(300, 300), answer("ok")], [A, S, A], tmp_path)
    result = session.run("click three times")
    assert result.status is State.FINISHED and result.answer == "ok"
    assert executor.actions == [Click(Point(100, 100)), Click(Point(300, 300))]
    # every execute is immediately preceded by an APPROVE event for the same step
    for i, (kind, _value) in enumerate(log):
        if kind == "execute":
            assert log[i - 1][0] == "approval" and log[i - 1][1][1] is Decision.APPROVE
    assert [r.step for r in spy.requests] == [0, 1, 2]


def test_every_episode_end_is_told_to_the_executor_once(tmp_path: Path) -> None:
    """The executor gives back what it held between steps (the typer's keyboard bindings) when an
    episode finishes, is stopped, or fails."""
    for replies, answers, status in [([click(1, 1), answer("ok")], [A], State.FINISHED),
                                     ([click(1, 1), click(2, 2)], [A, Q], State.STOPPED),
                                     (["not an action"] * 5, [], State.FAILED)]:
        session, _spy, _executor, log = make_session(replies, answers, tmp_path)
        assert session.run("a task").status is status
        assert [kind for kind, _ in log].count("end_episode") == 1
        assert log[-1][0] == "end_episode"


def test_a_prompt_that_read_no_answer_says_so_not_that_the_user_stopped(tmp_path: Path) -> None:
    """The terminal approver at the end of its input stops the run by that, not by the user: the result, the
    episode's end and the step's ``decided_by`` say so."""
    from holodesk.session.state import STOPPED_BY_NO_INPUT

    no_input = ApprovalResponse(Decision.STOP, by=STOPPED_BY_NO_INPUT)
    session, _spy, executor, _ = make_session([click(10, 10), click(20, 20)], [A, no_input], tmp_path)
    result = session.run("nobody answers the second")
    assert result.status is State.STOPPED and result.stopped_by == STOPPED_BY_NO_INPUT
    assert result.reason == "stopped at the approval prompt by the end of the terminal's input"
    assert len(executor.calls) == 1
    (folder,) = list_episodes(tmp_path)
    assert [s.get("decided_by") for s in load_episode(folder).steps] == ["user", STOPPED_BY_NO_INPUT]


def test_stop_ends_the_run_and_the_record_lists_every_decision(tmp_path: Path) -> None:
    session, _spy, executor, _ = make_session([click(10, 10), click(20, 20), click(30, 30)], [A, S, Q], tmp_path)
    result = session.run("stop at the third")
    assert result.status is State.STOPPED and "stopped by user" in result.reason
    assert len(executor.calls) == 1
    (folder,) = list_episodes(tmp_path)
    ep = load_episode(folder)
    assert ep.task == "stop at the third"
    assert [s["decision"] for s in ep.steps] == ["approve", "skip", "stop"]
    assert [s["action"]["kind"] for s in ep.steps] == ["click"] * 3
    assert ep.steps[0]["result"]["status"] == "performed"
    assert "result" not in ep.steps[1]
    assert all((folder / s["frame"]).is_file() for s in ep.steps)
    assert ep.status == "stopped"
    assert json.loads(ep.steps[0]["raw_text"])["tool_call"] == {"tool_name": "click", "x": 10, "y": 10}


def test_autopilot_approves_low_risk_and_asks_for_high_risk(tmp_path: Path) -> None:
    session, spy, executor, _ = make_session([click(5, 5), type_("rm -rf ~\n"), answer("x")], [S], tmp_path,
                                             mode="auto")
    session.focus_probe = lambda: "mousepad Mousepad"  # a fake focus probe: a known, non-terminal window
    result = session.run("mixed risk")
    assert result.status is State.FINISHED
    assert len(spy.requests) == 1 and spy.requests[0].risk.level.value == "high"
    assert executor.actions == [Click(Point(5, 5))]
    ep = load_episode(list_episodes(tmp_path)[0])
    assert [s.get("decided_by") for s in ep.steps[:2]] == ["autopilot", "user"]


def test_edit_runs_the_edited_action(tmp_path: Path) -> None:
    edited = Type("hello")
    session, _spy, executor, _ = make_session([click(1, 1), answer("ok")],
                                              [ApprovalResponse(Decision.EDIT, action=edited)], tmp_path)
    assert session.run("edit").status is State.FINISHED
    assert executor.actions == [edited]
    assert load_episode(list_episodes(tmp_path)[0]).steps[0]["edited_action"]["text"] == "hello"


def test_consecutive_unparseable_replies_stop_the_run_with_raw_text_recorded(tmp_path: Path) -> None:
    bad = ["", "!" * 2000, "```json\n{\"tool_call\": {\"tool_name\": \"fly\"}}\n```"]
    session, spy, executor, _ = make_session(bad, [], tmp_path, limits=SessionLimits(max_parse_failures=3))
    result = session.run("bad replies")
    assert result.status is State.FAILED and "3 consecutive replies were not valid actions" in result.reason
    assert result.steps == 3  # rejected replies are steps taken (the end record said 2 before)
    assert executor.calls == [] and spy.requests == []
    ep = load_episode(list_episodes(tmp_path)[0])
    assert [s["raw_text"] for s in ep.steps] == bad
    assert all(s["error"] for s in ep.steps)
    # a rejected reply keeps what the policy reported about it: timings by stage and its details
    assert all("policy.policy" in s["timings_ms"] for s in ep.steps)
    assert [s["policy_extra"]["script_step"] for s in ep.steps] == [1, 2, 3]


def test_a_good_reply_resets_the_failure_count(tmp_path: Path) -> None:
    session, *_ = make_session(["nope", click(1, 1), "nope", "nope", answer("ok")], [A], tmp_path,
                               limits=SessionLimits(max_parse_failures=3))
    assert session.run("recover").status is State.FINISHED


def test_same_action_on_unchanged_screen_warns_then_stops(tmp_path: Path) -> None:
    still = FakeCapture([np.zeros((100, 100, 3), np.uint8)])
    session, _spy, executor, _ = make_session([click(50, 50)] * 5, [A, A, A, A], tmp_path, capture=still)
    events: list[SessionEvent] = []
    session.subscribe(events.append)
    result = session.run("loop")
    assert result.status is State.FAILED and "3 times on an unchanged screen" in result.reason
    assert len(executor.calls) == 2
    assert result.steps == 3
    assert load_episode(list_episodes(tmp_path)[0]).end["steps"] == 3
    assert any(e.kind == "warning" and "one more repeat" in e.message for e in events)


def test_step_cap_and_wall_time_cap(tmp_path: Path) -> None:
    session, *_ = make_session([click(i, i) for i in range(10)], [A] * 10, tmp_path,
                               limits=SessionLimits(max_steps=4))
    result = session.run("cap")
    assert result.status is State.FAILED and "step cap (4 steps)" in result.reason and result.steps == 4
    session, *_ = make_session([click(i, i) for i in range(10)], [A] * 10, tmp_path,
                               limits=SessionLimits(max_wall_s=1e-9))
    assert "wall-time cap" in session.run("cap").reason


def test_failsafe_result_is_a_clean_stop(tmp_path: Path) -> None:
    session, _spy, executor, _ = make_session([click(1, 1), click(2, 2)], [A, A], tmp_path)
    executor.fail_at(0, "pointer in a screen corner (fail-safe)", status="stopped_by_user")
    result = session.run("failsafe")
    assert result.status is State.STOPPED and "fail-safe" in result.reason


def test_request_stop_during_approval_prevents_execution(tmp_path: Path) -> None:
    holder: dict[str, Session] = {}

    def approver(request: ApprovalRequest) -> ApprovalResponse:
        t = threading.Thread(target=holder["s"].request_stop)
        t.start()
        t.join()
        return A

    executor = RecordingExecutor()
    session = Session(ScriptedPolicy([click(1, 1)]), FakeCapture(frames(3)), executor,
                      ApprovalPolicy("step", approver), episodes_dir=tmp_path)
    holder["s"] = session
    result = session.run("stop from elsewhere")
    assert result.status is State.STOPPED and executor.calls == []


def test_points_are_mapped_with_the_frame_the_model_saw(tmp_path: Path) -> None:
    mon = Monitor(2, 1920, 0, 1280, 720)  # a 2560x1440 panel at 2x, right of monitor 1
    cap = FakeCapture({2: [np.zeros((1440, 2560, 3), np.uint8)]}, monitors=[Monitor(1, 0, 0, 1920, 1080), mon])
    executor = RecordingExecutor()
    session = Session(ScriptedPolicy([click(500, 500), answer("ok")]), cap, executor,
                      ApprovalPolicy("auto", lambda r: A), SessionLimits(monitor=2), episodes_dir=tmp_path)
    assert session.run("on monitor 2").status is State.FINISHED
    (call,) = executor.calls
    assert (call.input_points[0].x, call.input_points[0].y) == (1920 + 640, 360)


def test_the_executor_performs_the_points_the_approval_showed(tmp_path: Path) -> None:
    """The input points are mapped once, shown for approval and performed as shown: a mapping that
    would give another answer after the approval (here the frame's monitor moved 300 px) changes nothing."""
    mon = Monitor(1, 0, 0, 1280, 720)
    cap = FakeCapture({1: [np.zeros((1440, 2560, 3), np.uint8)] * 2}, monitors=[mon])
    shown: list[tuple[Any, ...]] = []

    def approver(request: ApprovalRequest) -> ApprovalResponse:
        shown.append(request.input_points)
        object.__setattr__(request.frame, "monitor", Monitor(1, 300, 0, 1280, 720))  # a later mapping differs
        return A

    executor = RecordingExecutor()
    session = Session(ScriptedPolicy([click(500, 500), answer("ok")]), cap, executor,
                      ApprovalPolicy("step", approver), episodes_dir=tmp_path)
    assert session.run("click the middle").status is State.FINISHED
    (call,) = executor.calls
    assert shown == [call.input_points] and (call.input_points[0].x, call.input_points[0].y) == (640, 360)
    step = load_episode(list_episodes(tmp_path)[0]).steps[0]
    assert step["result"]["details"]["input_points"] == [[640, 360]]


def test_capture_hooks_wrap_every_grab(tmp_path: Path) -> None:
    calls: list[str] = []
    session, *_ = make_session([click(1, 1), answer("ok")], [A], tmp_path)
    session.before_capture = lambda: calls.append("hide")
    session.after_capture = lambda: calls.append("show")
    session.run("hooks")
    assert calls == ["hide", "show", "hide", "show"]


def test_empty_task_is_refused() -> None:
    session = Session(ScriptedPolicy([]), FakeCapture(frames(1)), RecordingExecutor(),
                      ApprovalPolicy("step", lambda r: A))
    with pytest.raises(ValueError, match="task is empty"):
        session.run("  ")


def test_the_request_and_the_record_name_the_window_and_the_field_typed_into(tmp_path: Path) -> None:
    from holodesk.core.actions import Done, Key
    from holodesk.core.wording import WindowInfo

    form = WindowInfo("Demo form", "Tk", (10, 10, 200, 100))
    probed: list[tuple[int, ...]] = []

    def window_probe(*at: int) -> WindowInfo:
        probed.append(at)
        return form

    log: list[tuple[str, Any]] = []
    spy = Spy([A, A, A, A], log)
    actions = [Click(Point(500, 500), element="Your name"), Type("John Smith"), Key(("tab",)), Type("x"), Done()]
    session = Session(ActionsPolicy(actions, thought="next"), FakeCapture(frames(10)), LoggingExecutor(log),
                      ApprovalPolicy("step", spy), SessionLimits(), episodes_dir=tmp_path, window_probe=window_probe)
    assert session.run("fill the name").status is State.FINISHED
    heads = [r.description for r in spy.requests]
    assert heads == ["Click ‘Your name’ in Demo form", "Type ‘John Smith’ into ‘Your name’ in Demo form",
                     "Press Tab in Demo form", "Type ‘x’ in Demo form"]  # after Tab the focused field is unknown
    assert probed[0] == (160, 100) and probed[1:] == [(), (), ()]  # under the click's point; then the focus
    steps = load_episode(list_episodes(tmp_path)[0]).steps
    assert [s["headline"] for s in steps[:4]] == heads
    assert steps[1]["window"] == form.to_dict() and steps[1]["focus_element"] == "Your name"

def test_a_failed_action_is_reported_to_the_model_and_the_run_cannot_end_finished(tmp_path: Path) -> None:
    session, _spy, executor, _ = make_session([click(1, 1), click(2, 2), answer("all done")], [A, A], tmp_path)
    executor.fail_at(0, "the pointer could not reach the target (3, 3); did not click")
    result = session.run("click twice")
    assert result.status is State.FAILED and result.answer == "all done"
    assert result.reason == ("the model answered, but 1 approved action(s) could not be performed (step 1: the "
                             "pointer could not reach the target (3, 3); did not click); check the screen")
    assert len(executor.calls) == 2  # the run went on after the failure
    ep = load_episode(list_episodes(tmp_path)[0])
    assert ep.end is not None and ep.end["status"] == "failed"


class GeometryCheckingExecutor(LoggingExecutor):
    """A fake executor with a start-up geometry check that fails (as the real one does on a mismatch)."""

    def __init__(self, log: list[tuple[str, Any]], fail: bool) -> None:
        super().__init__(log)
        self.fail = fail
        self.checked: list[Any] = []

    def check_geometry(self, monitor: Any) -> None:
        from holodesk.errors import GeometryMismatch

        self.checked.append(monitor)
        if self.fail:
            raise GeometryMismatch("start-up geometry check failed: FAKE mismatch", hint="Check the layout.")


@pytest.mark.parametrize("fail", [False, True])
def test_geometry_self_check_runs_once_before_anything_and_a_mismatch_refuses_the_run(
        tmp_path: Path, fail: bool) -> None:
    log: list[tuple[str, Any]] = []
    executor = GeometryCheckingExecutor(log, fail)
    policy = ScriptedPolicy([click(1, 1), click(2, 2), answer("ok")])
    session = Session(policy, FakeCapture(frames(5)), executor, ApprovalPolicy("auto", Spy([], log)),
                      episodes_dir=tmp_path)
    session.focus_probe = lambda: "mousepad Mousepad"  # a fake focus probe: a known, non-terminal window
    result = session.run("click")
    assert [m.index for m in executor.checked] == [1]
    if fail:
        assert result.status is State.FAILED and result.steps == 0
        assert result.reason == "start-up geometry check failed: FAKE mismatch. Check the layout."
        assert log == [("end_episode", None)] and executor.calls == []
    else:
        assert result.status is State.FINISHED and len(executor.calls) == 2


class ObservingPolicy(ScriptedPolicy):
    """The real ScriptedPolicy in agent-loop-v1 that keeps every observation it was given."""

    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies, protocol="agent-loop-v1")
        self.observations: list[Any] = []

    def propose(self, observation: Any) -> Any:
        self.observations.append(observation)
        return super().propose(observation)


def test_update_plan_is_recorded_shown_and_returned_to_the_model_as_the_tool_output(tmp_path: Path) -> None:
    goals = [{"title": "Open the form", "status": "running"}, {"title": "Submit it", "status": "todo"}]
    policy = ObservingPolicy([
        {"note": None, "thought": "plan first", "tool_call": {"tool_name": "update_plan", "goals": goals}},
        {"note": None, "thought": "done", "tool_call": {"tool_name": "answer", "content": "ok"}},
    ])
    log: list[tuple[str, Any]] = []
    spy, executor = Spy([A], log), LoggingExecutor(log)
    session = Session(policy, FakeCapture(frames(5)), executor, ApprovalPolicy("auto", spy), SessionLimits(),
                      episodes_dir=tmp_path)
    session.focus_probe = lambda: None  # the focused window is unknown: a plan is low risk all the same
    result = session.run("fill the form")
    assert result.status is State.FINISHED and result.answer == "ok"
    assert spy.requests == []  # the autopilot approved it without asking
    plan = Plan((("Open the form", "running"), ("Submit it", "todo")))
    assert executor.actions == [plan]
    step = load_episode(list_episodes(tmp_path)[0]).steps[0]
    assert step["action"] == {"kind": "plan", "goals": [["Open the form", "running"], ["Submit it", "todo"]]}
    assert (step["decided_by"], step["result"]["status"]) == ("autopilot", "performed")
    assert step["headline"] == "Update the plan: now ‘Open the form’"
    messages = policy.protocol.build_messages(policy.observations[1])
    texts = [part.get("text", "") for m in messages if m["role"] == "user" for part in m["content"]]
    assert '<tool_output tool="update_plan">\n1. [running] Open the form\n2. [todo] Submit it\n</tool_output>' in texts


class LateRepaintScreen:
    """A fake screen (capture backend) of a program that redraws late: what an action did shows only from
    the ``lag``-th grab after the action was performed (mousepad on a loaded Xvfb desktop showed typed text
    in a later grab than the first one after the typer returned). ``changing``: every grab differs (a video)."""

    name = "late-repaint fake"

    def __init__(self, lag: int, *, changing: bool = False) -> None:
        self.lag, self.changing = lag, changing
        self.drawn = 0  # actions the screen shows
        self.performed = 0  # actions performed
        self.grabs_since_action = 0
        self.grabs = 0
        self.monitor = Monitor(index=1, left=0, top=0, width=320, height=200, name="Fake monitor 1")

    def monitors(self) -> list[Monitor]:
        return [self.monitor]

    def action_performed(self) -> None:
        self.performed += 1
        self.grabs_since_action = 0

    def grab(self, monitor_index: int) -> Frame:
        self.grabs += 1
        self.grabs_since_action += 1
        if self.grabs_since_action >= self.lag:
            self.drawn = self.performed
        pixels = np.zeros((200, 320, 3), np.uint8)
        pixels[0, 0] = (self.drawn, self.grabs % 256 if self.changing else 0, 0)
        return Frame(pixels=pixels, monitor=self.monitor, captured_at=0.0)

    def close(self) -> None:
        """Nothing to release."""


class TellingExecutor(RecordingExecutor):
    """Performs into a :class:`LateRepaintScreen` (tells it an action happened)."""

    def __init__(self, screen: LateRepaintScreen) -> None:
        super().__init__()
        self.screen = screen

    def execute(self, placed: PlacedAction) -> ActionResult:
        result = super().execute(placed)
        self.screen.action_performed()
        return result


def test_the_frame_after_an_action_shows_what_the_action_did(tmp_path: Path) -> None:
    """The next step's frame waits for the program to redraw (SCREEN_SETTLE_S): the model sees the text it
    typed, and the loop guard (F09) does not call a changed screen unchanged."""
    screen = LateRepaintScreen(lag=2)
    session = Session(ScriptedPolicy([type_("hi"), type_("hi"), answer("ok")]), screen, TellingExecutor(screen),
                      ApprovalPolicy("step", lambda r: A), SessionLimits(), episodes_dir=tmp_path,
                      settle_s=SCREEN_SETTLE_S)
    result = session.run("type hi twice")
    assert result.status is State.FINISHED, result.reason
    ep = load_episode(list_episodes(tmp_path)[0])
    seen = [int(np.asarray(Image.open(ep.path / s["frame"]))[0, 0, 0]) for s in ep.steps]
    assert seen == [0, 1, 2]  # each frame shows every action performed before it
    assert screen.grabs >= 1 + 2 * SETTLE_GRABS


def test_a_screen_that_keeps_changing_is_taken_as_it_is_after_the_settle_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop, "SETTLE_TIMEOUT_S", 0.3)
    screen = LateRepaintScreen(lag=1, changing=True)
    session = Session(ScriptedPolicy([click(1, 1), answer("ok")]), screen, TellingExecutor(screen),
                      ApprovalPolicy("step", lambda r: A), SessionLimits(), settle_s=SCREEN_SETTLE_S)
    result = session.run("click once")
    assert result.status is State.FINISHED, result.reason
    assert screen.drawn == 1


def test_without_settle_s_one_grab_per_step() -> None:
    screen = LateRepaintScreen(lag=1)
    session = Session(ScriptedPolicy([click(1, 1), answer("ok")]), screen, TellingExecutor(screen),
                      ApprovalPolicy("step", lambda r: A), SessionLimits())
    assert session.run("click once").status is State.FINISHED
    assert screen.grabs == 2


# -- who stopped a run (issue 30, item 6) ---------------------------------------------------------------
class CornerExecutor(LoggingExecutor):
    """A RecordingExecutor that also logs the start-of-run pointer moves the loop asks of real executors."""

    def move_pointer_out_of_corner(self) -> None:
        self.log.append(("move_pointer_out_of_corner", None))

    def check_geometry(self, monitor: Monitor) -> None:
        self.log.append(("check_geometry", monitor))


def test_a_stop_that_came_while_the_task_was_queued_moves_nothing_and_ends_the_record(tmp_path: Path) -> None:
    """The stop (a host's SIGTERM) arrives after the task was handed over, before its run starts: the run
    moves no pointer, performs nothing, and its record ends saying who stopped it."""
    log: list[tuple[str, Any]] = []
    executor = CornerExecutor(log)
    session = Session(ScriptedPolicy([click(1, 1), answer("ok")]), FakeCapture(frames(3)), executor,
                      ApprovalPolicy("auto", lambda r: A), episodes_dir=tmp_path)
    session.request_stop("the MCP client (its host ended the server)")
    result = session.run("queued when the signal came")
    assert result.status is State.STOPPED and result.steps == 0, result
    assert log == [("end_episode", None)]  # no corner move, no geometry sweep, no action
    ep = load_episode(list_episodes(tmp_path)[0])
    assert ep.end["stopped_by"] == "the MCP client (its host ended the server)", ep.end
    assert ep.end["reason"] == "stopped by the MCP client (its host ended the server)"
    # The stop belonged to that run: the same session runs the next task.
    assert session.run("the next task").status is State.FINISHED


def wait_for_stop(session_box: dict[str, Session]) -> Any:
    """An approver like the app's overlay: it waits until the run's stop event is set, then answers STOP
    (as the user, the overlay's own words)."""
    def approver(request: ApprovalRequest) -> ApprovalResponse:
        assert session_box["s"]._stop.wait(30), "the stop never came"
        return Q
    return approver


def test_the_wall_time_cap_is_recorded_as_the_cap_not_the_user(tmp_path: Path) -> None:
    box: dict[str, Session] = {}
    session = Session(ScriptedPolicy([click(1, 1)]), FakeCapture(frames(3)), RecordingExecutor(),
                      ApprovalPolicy("step", wait_for_stop(box)), SessionLimits(max_wall_s=0.5), episodes_dir=tmp_path)
    box["s"] = session
    from holodesk.session.report import StepReporter

    reports: list[dict[str, Any]] = []
    session.subscribe(StepReporter(reports.append))
    result = session.run("wait for the user")
    assert result.status is State.FAILED and "wall-time cap (0.5 s)" in result.reason, result
    ep = load_episode(list_episodes(tmp_path)[0])
    assert ep.steps[0]["decision"] == "stop" and ep.steps[0]["decided_by"] == "the wall-time cap", ep.steps[0]
    assert ep.end["stopped_by"] == "the wall-time cap", ep.end
    assert reports[0]["decision"] == "stopped by the wall-time cap", reports


def test_a_callers_stop_during_the_approval_is_the_callers_in_every_record(tmp_path: Path) -> None:
    box: dict[str, Session] = {}
    session = Session(ScriptedPolicy([click(1, 1)]), FakeCapture(frames(3)), RecordingExecutor(),
                      ApprovalPolicy("step", wait_for_stop(box)), episodes_dir=tmp_path)
    box["s"] = session
    threading.Timer(0.2, session.request_stop, args=("the MCP client (it cancelled the call)",)).start()
    threading.Timer(0.4, session.request_stop, args=("user",)).start()  # a later stop does not rename it
    result = session.run("cancelled by the caller")
    assert result.status is State.STOPPED and result.reason == "stopped by the MCP client (it cancelled the call)"
    ep = load_episode(list_episodes(tmp_path)[0])
    assert ep.steps[0]["decided_by"] == "the MCP client (it cancelled the call)"
    assert ep.end["stopped_by"] == "the MCP client (it cancelled the call)"


def test_the_fail_safe_is_recorded_as_the_fail_safe(tmp_path: Path) -> None:
    session, _spy, executor, _ = make_session([click(1, 1), click(2, 2)], [A, A], tmp_path)
    executor.scripted[0] = ActionResult(False, "stopped_by_user", "stopped by the fail-safe", {"failsafe": True})
    result = session.run("failsafe")
    assert result.status is State.STOPPED and result.stopped_by == "the fail-safe"
    assert load_episode(list_episodes(tmp_path)[0]).end["stopped_by"] == "the fail-safe"


@pytest.mark.parametrize("by", [False, "", None])
def test_a_stop_must_say_who_in_words(tmp_path: Path, by: Any) -> None:
    """A Qt ``triggered(bool)`` connected straight to a stop slot gave "stopped by False"."""
    session, *_ = make_session([click(1, 1)], [A], tmp_path)
    with pytest.raises(TypeError, match="who stopped the task in words"):
        session.request_stop(by)
    assert not session.stop_requested


class _ClosingProbe:
    """A FAKE element probe (no accessibility bus here) that counts how often it was closed."""

    def __init__(self) -> None:
        self.closed = 0

    def element_at(self, x: int, y: int, window_rect: tuple[int, int, int, int] | None = None) -> None:
        return None

    def focused(self) -> None:
        return None

    def close(self) -> None:
        self.closed += 1


def test_closing_the_session_closes_its_element_probe(tmp_path: Path) -> None:
    """A task's element probe holds a connection to the accessibility bus (a socket and its poller): the task's
    session closes it, so that a process running task after task does not gather them (the GNOME Wayland soak
    counts the process's file descriptors)."""
    session, _spy, _executor, _log = make_session([answer("ok")], [], tmp_path)
    probe = _ClosingProbe()
    session.element_probe = probe
    assert session.run("say ok").status is State.FINISHED
    session.close()
    assert probe.closed == 1
