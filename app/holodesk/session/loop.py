"""The agent loop as an explicit state machine.

One step: CAPTURING (grab the monitor) -> THINKING (policy proposes) -> AWAITING_APPROVAL (approval
policy decides) -> EXECUTING (executor performs) -> recorded -> next step. The run ends FINISHED (the
model answered or said done and every approved action was performed), STOPPED (user stop, failsafe
corner, quit in the prompt) or FAILED (step cap, wall-time cap, repeated unparseable replies, a loop of
identical actions, an error, the start-up geometry check, or the model said it was done although an
approved action could not be performed). A failed action is reported to the model, which may try
again, but the run can then no longer end FINISHED: the end reason names the failed steps.

The CLI, the tray app and the tests all drive :class:`Session`. Listeners receive :class:`SessionEvent`
objects from the thread that runs the loop; the UI marshals them onto its own thread.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from holodesk.capture.base import CaptureBackend
from holodesk.control.base import ActionResult, Executor
from holodesk.core.actions import Action, Answer, Click, Done, Move, Type
from holodesk.core.element import ElementProbe
from holodesk.core.geometry import Frame, PlacedAction, place
from holodesk.core.refine import crop_point_to_frame, refine_crop
from holodesk.core.risk import selection_after
from holodesk.core.wording import WindowInfo
from holodesk.errors import GeometryMismatch, HolodeskError, PolicyError, PolicyOutputError, TaskError
from holodesk.policy.base import (
    HistoryStep,
    Localizer,
    Observation,
    Policy,
    Proposal,
    StreamsThought,
    ThoughtSink,
    forget_unused_frames,
)
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.episode import RESULT_UNKNOWN, EpisodeRecorder
from holodesk.session.judge import Judgement, Probes, StepJudge
from holodesk.session.memory import release_free_memory
from holodesk.session.settle import screen_changed
from holodesk.session.state import (
    FAILSAFE_STOP_REASON,
    REASON_ANSWERED,
    STOPPED_BY_FAILSAFE,
    STOPPED_BY_USER,
    STOPPED_BY_WALL_CAP,
    EpisodeResult,
    Listener,
    SessionEvent,
    SessionLimits,
    State,
)

log = logging.getLogger(__name__)


@dataclass
class _Run:
    """What one run carries from step to step.

    Attributes:
        task: the task in words.
        started: ``time.monotonic()`` at the start (the wall-time cap counts from it).
        step: the 0-based number of the current step.
        history: the steps so far, as the policy sees them.
        parse_failures: consecutive replies that were not a valid action.
        focus_element: the field the last performed click named (typing goes there), when known.
        repeats: (frame digest, action) of the last steps while they were all the same (F09).
        failed_actions: "step N: message" for each approved action that could not be performed.
        acted: an action was handed to the executor since the last grab (the next grab waits for the
            screen to settle).
        selection: a text selection may exist (:func:`holodesk.core.risk.selection_after`).
        judged: the judgement the current step was approved on (the executor's re-check compares with it).
    """

    task: str
    started: float
    step: int = 0
    history: list[HistoryStep] = field(default_factory=list)
    parse_failures: int = 0
    focus_element: str | None = None
    repeats: list[tuple[str, str]] = field(default_factory=list)
    failed_actions: list[str] = field(default_factory=list)
    acted: bool = False
    selection: bool = False
    judged: Judgement | None = None


SCREEN_SETTLE_S = 0.25
"""Seconds the screen must stay unchanged after a performed action before the next step's frame is taken:
a program redraws after it has read the input events, which is after the executor returns (mousepad on a
loaded 2-core Xvfb desktop showed typed text only in a later grab)."""
SETTLE_GRABS = 3
"""Equal grabs in a row, beside :data:`SCREEN_SETTLE_S`, that make a settled screen."""
SETTLE_TIMEOUT_S = 3.0
"""The longest wait for a settled screen; a screen still changing then (a video, a spinner) is taken as it is."""


class _Stop(Exception):
    """Ends the run with ``status`` and ``reason``; ``by`` names who stopped it (None: nobody did)."""

    def __init__(self, status: State, reason: str, answer: str | None = None, by: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.answer = answer
        self.by = by


def check_task(task: str) -> str:
    """The task, stripped, ready to run.

    Raises:
        TaskError: the task is empty or only white space.
    """
    if not isinstance(task, str) or not task.strip():
        raise TaskError("the task is empty", hint="Say in words what Holodesk should do, e.g. "
                        "holodesk run \"open the Downloads folder\".")
    return task.strip()


def frame_digest(frame: Frame) -> str:
    """Content hash of a frame's pixels (used to tell an unchanged screen)."""
    return hashlib.blake2b(frame.pixels.tobytes(), digest_size=16).hexdigest()


class Session:
    """Runs tasks: capture -> propose -> approve -> execute -> record.

    Args:
        policy: proposes actions.
        capture: grabs frames of ``limits.monitor``.
        executor: performs approved actions.
        approval: decides whether each action may run.
        limits: caps and monitor choice.
        episodes_dir: where episode records go (None: not recorded; tests only).
        focus_probe / window_probe / element_probe / grab_probe: the desktop's probes the steps are judged with
            (the fields of :class:`~holodesk.session.judge.Probes`; None: the desktop has none), by
            :attr:`judge` (:class:`~holodesk.session.judge.StepJudge`).
        before_capture / after_capture: hooks around each grab (the UI hides its overlay there, F13).
        meta: extra fields for the episode's start record.
        stop_event: the event :meth:`request_stop` sets; pass the executor's own stop event so that a
            stop also ends an action that is waiting (e.g. ``wait``). The wall-time cap sets it too, so
            ``limits.max_wall_s`` bounds a running action and a pending approval, not only step starts.
        settle_s: after a performed action, the next frame is the first one that has stayed unchanged for
            ``settle_s`` seconds and :data:`SETTLE_GRABS` grabs (at most :data:`SETTLE_TIMEOUT_S`), so the
            model sees what the action did, not the screen before the program redrew; 0 takes the first
            grab (replayed frames in tests; :func:`~holodesk.session.factory.build_session` passes
            :data:`SCREEN_SETTLE_S`).
    """

    def __init__(
        self,
        policy: Policy,
        capture: CaptureBackend,
        executor: Executor,
        approval: ApprovalPolicy,
        limits: SessionLimits | None = None,
        *,
        episodes_dir: Path | None = None,
        focus_probe: Callable[[], str | None] | None = None,
        window_probe: Callable[..., WindowInfo | None] | None = None,
        element_probe: ElementProbe | None = None,
        grab_probe: Callable[[Sequence[int | None]], str | None] | None = None,
        before_capture: Callable[[], None] | None = None,
        after_capture: Callable[[], None] | None = None,
        meta: dict[str, Any] | None = None,
        stop_event: threading.Event | None = None,
        settle_s: float = 0.0,
    ) -> None:
        self.policy = policy
        self.capture = capture
        self.executor = executor
        self.approval = approval
        self.limits = limits or SessionLimits()
        self.episodes_dir = episodes_dir
        self.focus_probe = focus_probe
        self.window_probe = window_probe
        self.element_probe = element_probe
        self.grab_probe = grab_probe
        self.judge = StepJudge(lambda: Probes(self.focus_probe, self.window_probe, self.element_probe, self.grab_probe),
                               lambda: tuple(getattr(self.executor, "held_keys", ())))
        self.before_capture = before_capture
        self.after_capture = after_capture
        self.meta = dict(meta or {})
        self.settle_s = settle_s
        self.state = State.IDLE
        self._listeners: list[Listener] = []
        self._stop = stop_event if stop_event is not None else threading.Event()
        self._deadline_hit = threading.Event()
        self._stop_cause: str | None = None  # the first request_stop's words since the last run ended
        self._cause_lock = threading.Lock()
        self._lock = threading.Lock()
        self.recorder: EpisodeRecorder | None = None
        self._recorded_steps: set[int] = set()  # step numbers with a record in the current run

    # ----------------------------------------------------------------- listeners and control
    def close(self) -> None:
        """Release what this task's session opened: its capture's connections (an X11 capture holds one X
        connection per thread that grabbed; a shared Wayland capture stays open for the next task) and the
        element probe's accessibility bus connection (a socket and its poller; a later lookup opens it again).
        The policy is not closed: a loaded model is kept between tasks by its owner. Idempotent."""
        for part in (self.capture, self.element_probe):
            close = getattr(part, "close", None)
            if callable(close):
                close()

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` for every event (from the loop's thread)."""
        self._listeners.append(listener)

    def request_stop(self, by: str = STOPPED_BY_USER) -> None:
        """Ask the task to stop at the next state boundary (thread-safe). An action already being performed
        finishes; nothing new starts. A stop asked before :meth:`run` starts (a task still queued) ends that
        run before it does anything. ``by`` says who asked, in words ("user", "the MCP client (it cancelled
        the call)"); the first asker of a run is kept, in the result's reason, the step's ``decided_by`` and
        the episode's end record (``stopped_by``).

        Raises:
            TypeError: ``by`` is not a non-empty string (e.g. a Qt signal's ``checked`` flag).
        """
        if not isinstance(by, str) or not by.strip():
            raise TypeError(f"request_stop(by=...) takes who stopped the task in words, not {by!r}")
        with self._cause_lock:
            if self._stop_cause is None:
                self._stop_cause = by
        self._stop.set()

    @property
    def _stopped_by(self) -> str:
        """Who stopped the run: the wall-time cap when it ran out, else the first :meth:`request_stop`'s
        words, else the user (the shared stop event was set directly, e.g. by the UI's Stop)."""
        if self._deadline_hit.is_set():
            return STOPPED_BY_WALL_CAP
        return self._stop_cause or STOPPED_BY_USER

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def _emit(self, kind: str, step: int, message: str = "", **data: Any) -> None:
        event = SessionEvent(kind, self.state, step, message, data)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # a broken listener must not kill the run, but it is logged loudly
                log.exception("session listener failed on %s event", kind)

    def _set_state(self, state: State, step: int) -> None:
        self.state = state
        self._emit("state", step, state.value)

    def _wall_cap_reason(self) -> str:
        return f"reached the wall-time cap ({self.limits.max_wall_s:g} s) without finishing"

    def _on_deadline(self) -> None:
        """Timer callback at the wall-time cap: end whatever is running (F09). The stop event is shared
        with the executor (a running ``wait`` ends) and the UI (a pending approval is answered STOP)."""
        self._deadline_hit.set()
        self._stop.set()

    def _check_limits(self, step: int, started: float) -> None:
        if self._deadline_hit.is_set() or time.monotonic() - started > self.limits.max_wall_s:
            raise _Stop(State.FAILED, self._wall_cap_reason(), by=STOPPED_BY_WALL_CAP)
        if self._stop.is_set():
            raise _Stop(State.STOPPED, f"stopped by {self._stopped_by}", by=self._stopped_by)
        if step >= self.limits.max_steps:
            cap = self.limits.max_steps
            raise _Stop(State.FAILED, f"reached the step cap ({cap} step{'' if cap == 1 else 's'}) without finishing")

    # ----------------------------------------------------------------- the loop
    def run(self, task: str) -> EpisodeResult:
        """Carry out ``task`` until it is finished, stopped or failed. Never raises for run-time
        failures: they end the run with status FAILED and are recorded.

        Raises:
            TaskError: empty task (a ValueError too).
        """
        task = check_task(task)
        with self._lock:
            # A stop already asked for (the task was queued when it came) is kept: the run ends at once.
            self._deadline_hit.clear()
            # The wall-time cap is hard (F09): a timer ends a long action or a pending approval too,
            # not only the next step boundary.
            cap = self.limits.max_wall_s
            timer = threading.Timer(cap, self._on_deadline) if 0 < cap < 10**7 else None
            if timer is not None:
                timer.daemon = True
                timer.start()
            try:
                return self._run_locked(task)
            finally:
                if timer is not None:
                    timer.cancel()
                end_episode = getattr(self.executor, "end_episode", None)
                if end_episode is not None:
                    end_episode()
                with self._cause_lock:  # the next run starts unstopped
                    self._stop.clear()
                    self._stop_cause = None
                release_free_memory()  # the run's frames are freed: its arenas' free pages go back (memory.py)

    def _run_locked(self, task: str) -> EpisodeResult:
        """The run: one :meth:`_step` after another until a :class:`_Stop` (or an error) ends it."""
        run = _Run(task, time.monotonic())
        self._recorded_steps = set()
        if self.episodes_dir is not None:
            self.recorder = EpisodeRecorder(
                self.episodes_dir,
                task,
                {"policy": getattr(self.policy, "name", type(self.policy).__name__),
                 "executor": getattr(self.executor, "name", type(self.executor).__name__),
                 "mode": self.approval.mode, "limits": self.limits.__dict__, **self.meta},
            )
        try:
            self._check_limits(run.step, run.started)  # a stop that came while queued: the pointer stays put
            self._release_left_held_keys()
            self._clear_failsafe_corner()
            self._check_geometry()
            while True:
                self._step(run)
                run.step += 1
        except _Stop as stop:
            result = self._stopped(stop, run.failed_actions)
        except KeyboardInterrupt:
            result = EpisodeResult(State.STOPPED, "interrupted by the user (Ctrl+C)", None, len(self._recorded_steps),
                                   stopped_by=STOPPED_BY_USER)
        except HolodeskError as exc:
            log.error("run failed: %s", exc)
            result = EpisodeResult(State.FAILED, str(exc), None, len(self._recorded_steps))
        except Exception as exc:  # recorded and reported, never swallowed
            log.exception("unexpected error in the session loop")
            result = EpisodeResult(State.FAILED, f"internal error: {type(exc).__name__}: {exc}", None,
                                   len(self._recorded_steps))
        self._end(result)
        self._emit("end", run.step, result.reason, result=result)
        self._emit("state", run.step, result.status.value)
        return result

    def _step(self, run: _Run) -> None:
        """One step: capture, think, approve, act; each phase writes its part of the step record.
        Returns when the step is over and the next may start.

        Raises:
            _Stop: the run ends (finished, stopped or failed) in this step.
        """
        self._check_limits(run.step, run.started)
        record: dict[str, Any] = {"type": "step", "step": run.step}
        timings: dict[str, float] = {}
        frame = self._capture(run.step, record, timings, settle=run.acted)
        run.acted = False
        self._check_limits(run.step, run.started)
        proposal = self._think(run, frame, record, timings)
        if proposal is None:  # the reply was rejected; the model is told in the next step
            return
        self._check_proposal(run, proposal, frame, record, timings)
        placed = self._approve(run, proposal, place(proposal.action, frame), record, timings)
        if placed is not None:
            self._act(run, proposal, placed, record, timings)

    # -- CAPTURING
    def _capture(self, step: int, record: dict[str, Any], timings: dict[str, float], *, settle: bool) -> Frame:
        """Grab the monitor (the hooks around the grab hide the UI's overlay, F13) and save the frame;
        ``settle``: an action was performed since the last grab, so wait for the screen to settle
        (:meth:`_settled_grab`)."""
        self._set_state(State.CAPTURING, step)
        t0 = time.perf_counter()
        if self.before_capture:
            self.before_capture()
        try:
            frame = self._settled_grab() if settle and self.settle_s > 0 else self.capture.grab(self.limits.monitor)
        finally:
            if self.after_capture:
                self.after_capture()
        timings["capture"] = (time.perf_counter() - t0) * 1000
        if self.recorder:
            record["frame"] = self.recorder.save_frame(step, frame)
        record["monitor"] = frame.monitor.__dict__
        record["frame_size"] = [frame.width, frame.height]
        return frame

    def _settled_grab(self) -> Frame:
        """The first frame that stayed unchanged over ``settle_s`` seconds and :data:`SETTLE_GRABS` grabs in a
        row, or the newest one after :data:`SETTLE_TIMEOUT_S` (logged) or a stop request. Unchanged: no
        more than a blinking caret differs from the first frame of the row (:func:`screen_changed`)."""
        frame = self.capture.grab(self.limits.monitor)
        reference, same, since = frame, 1, time.monotonic()
        deadline = since + SETTLE_TIMEOUT_S
        while not (same >= SETTLE_GRABS and time.monotonic() - since >= self.settle_s):
            if time.monotonic() >= deadline:
                log.info("the screen was still changing %.1f s after the action; taking it as it is",
                         SETTLE_TIMEOUT_S)
                break
            if self._stop.wait(self.settle_s / SETTLE_GRABS):
                break
            frame = self.capture.grab(self.limits.monitor)
            if screen_changed(reference, frame):
                reference, same, since = frame, 1, time.monotonic()
            else:
                same += 1
        return frame

    # -- THINKING
    def _think(self, run: _Run, frame: Frame, record: dict[str, Any], timings: dict[str, float]) -> Proposal | None:
        """Ask the policy; None when its reply was not a valid action (recorded, told, kept in the history).

        Raises:
            _Stop: (FAILED) the policy failed, or too many consecutive replies were rejected.
        """
        self._set_state(State.THINKING, run.step)
        forget_unused_frames(run.history, self.policy)  # memory: only the frames the policy will send
        t0 = time.perf_counter()
        streamer = self.policy if isinstance(self.policy, StreamsThought) else None
        if streamer is not None:  # the thought is shown while it is generated ("thought" events); recorded as before
            streamer.thought_sink = self._thought_sink(run.step)
        try:
            proposal = self.policy.propose(Observation(run.task, frame, tuple(run.history),
                                                       deadline=run.started + self.limits.max_wall_s))
        except PolicyOutputError as exc:
            timings["policy"] = (time.perf_counter() - t0) * 1000
            self._reply_rejected(run, frame, exc, record, timings)
            return None
        except PolicyError as exc:
            record.update(error=str(exc), timings_ms=timings)
            self._write(record)
            self._check_limits(run.step, run.started)  # the wall-time cap (or a stop) ended the request: said so
            raise _Stop(State.FAILED, f"the policy failed: {exc}") from exc
        finally:
            if streamer is not None:
                streamer.thought_sink = None
        run.parse_failures = 0
        timings["policy"] = (time.perf_counter() - t0) * 1000
        timings.update({f"policy.{k}": v for k, v in proposal.timings_ms.items()})
        record.update(raw_text=proposal.raw_text, action=proposal.action.to_dict(), thought=proposal.thought,
                      note=proposal.note, policy_extra=proposal.extra)
        if proposal.notices:
            record["notices"] = list(proposal.notices)
        for notice in proposal.notices:  # a policy fallback is told, never silent (F21)
            self._emit("warning", run.step, notice, notice=True)
        self._emit("proposal", run.step, proposal.thought, proposal=proposal, frame=frame)
        return proposal

    def _thought_sink(self, step: int) -> ThoughtSink:
        """The sink of step ``step``'s thought: each piece is emitted as a ``"thought"`` event (``message``: the
        piece; ``data["text"]``: the thought so far), on the session thread."""
        pieces: list[str] = []

        def sink(piece: str) -> None:
            pieces.append(piece)
            self._emit("thought", step, piece, text="".join(pieces))

        return sink

    def _reply_rejected(self, run: _Run, frame: Frame, exc: PolicyOutputError, record: dict[str, Any],
                        timings: dict[str, float]) -> None:
        """Record and tell a reply that was not a valid action (F05, F07); the model sees why next step.

        Raises:
            _Stop: (FAILED) ``limits.max_parse_failures`` consecutive replies were rejected.
        """
        timings.update({f"policy.{k}": v for k, v in exc.timings_ms.items()})
        run.parse_failures += 1
        record.update(raw_text=exc.raw_text, error=str(exc), decision=None, timings_ms=timings)
        if exc.extra:
            record.update(policy_extra=exc.extra)
        self._write(record)
        # str(exc) quotes the raw reply (F05, F07): the user sees what the model said.
        self._emit("warning", run.step, f"The model's reply was not a valid action, so nothing was "
                   f"done: {exc}", raw_text=exc.raw_text)
        run.history.append(HistoryStep(run.step, frame, None, raw_text=exc.raw_text,
                                       outcome=f"reply rejected: {exc.message}"))
        if run.parse_failures >= self.limits.max_parse_failures:
            raise _Stop(State.FAILED, f"{run.parse_failures} consecutive replies were not valid "
                        f"actions; last: {exc}") from exc

    def _check_proposal(self, run: _Run, proposal: Proposal, frame: Frame, record: dict[str, Any],
                        timings: dict[str, float]) -> None:
        """End the run on an answer or done, and on a loop of the same action (F09).

        Raises:
            _Stop: (FINISHED) the model answered or said done; (FAILED) the same action was proposed
                ``limits.max_repeats`` times on an unchanged screen.
        """
        action = proposal.action
        if isinstance(action, (Answer, Done)):
            record.update(decision="none needed", timings_ms=timings)
            self._write(record)
            answer = action.text if isinstance(action, Answer) else (action.message or None)
            raise _Stop(State.FINISHED, REASON_ANSWERED if isinstance(action, Answer)
                        else "the model reports the task is done", answer)
        key = (frame_digest(frame), repr(action))
        run.repeats = [*run.repeats, key] if run.repeats and run.repeats[-1] == key else [key]
        if len(run.repeats) >= self.limits.max_repeats:
            record.update(decision=None, timings_ms=timings)
            self._write(record)
            raise _Stop(State.FAILED, f"the same action was proposed {len(run.repeats)} times on an "
                        "unchanged screen; stopping to avoid a loop")
        if len(run.repeats) == self.limits.max_repeats - 1:
            self._emit("warning", run.step, "The same action was proposed again on an unchanged screen; "
                       "one more repeat stops the run.")

    # -- AWAITING_APPROVAL
    def _approve(self, run: _Run, proposal: Proposal, placed: PlacedAction, record: dict[str, Any],
                 timings: dict[str, float]) -> PlacedAction | None:
        """Show ``placed`` for approval; the approved (or edited) action with the input points to perform,
        or None when the user skipped it.

        Raises:
            _Stop: the user stopped at the prompt, a stop was requested, or the approver broke.
        """
        self._set_state(State.AWAITING_APPROVAL, run.step)
        typed_into = run.focus_element if isinstance(proposal.action, Type) else None
        t0 = time.perf_counter()
        request, response, judged = self._decide(run.step, proposal, placed, typed_into, record, run.selection)
        while response.decision is Decision.REFINE:  # never an approval: the step is asked again
            if request.can_refine:
                placed = self._refine(run.step, placed, record)
            else:
                self._emit("warning", run.step, "This step cannot be clicked more precisely; it is asked again.")
            request, response, judged = self._decide(run.step, proposal, placed, typed_into, record, run.selection)
        run.judged = judged
        timings["approval"] = (time.perf_counter() - t0) * 1000
        if not isinstance(response, ApprovalResponse):
            raise _Stop(State.FAILED, f"approver returned {response!r}, not an ApprovalResponse")
        record.update(judged.to_record(), decision=response.decision.value, decided_by=response.by,
                      headline=request.description, focus_element=typed_into)
        if response.decision is Decision.STOP and self._stop.is_set():
            # The pending approval was answered STOP for whoever stopped the run (the cap, a caller, ...).
            response = ApprovalResponse(Decision.STOP, by=self._stopped_by)
            record["decided_by"] = response.by
        self._emit("decision", run.step, response.decision.value, response=response, request=request)
        if response.decision is Decision.STOP:
            record["timings_ms"] = timings
            self._write(record)
            if self._stop.is_set():
                raise _Stop(State.STOPPED, f"stopped by {self._stopped_by}", by=self._stopped_by)
            if response.by == STOPPED_BY_USER:
                raise _Stop(State.STOPPED, "stopped by user at the approval prompt", by=STOPPED_BY_USER)
            raise _Stop(State.STOPPED, f"stopped at the approval prompt by {response.by}", by=response.by)
        if response.decision is Decision.SKIP:
            record["timings_ms"] = timings
            self._write(record)
            run.history.append(HistoryStep(run.step, placed.frame, proposal.action, proposal.thought,
                                           proposal.note, proposal.raw_text, "skipped by the user"))
            return None
        if response.decision is Decision.EDIT:
            assert response.action is not None
            # the edit was shown at the points this placement gives (the same frame, the same mapping)
            placed = place(response.action, placed.frame)
            record["edited_action"] = response.action.to_dict()
        if self._stop.is_set():
            record["timings_ms"] = timings
            self._write(record)
            raise _Stop(State.STOPPED, f"stopped by {self._stopped_by}", by=self._stopped_by)
        return placed

    def _decide(self, step: int, proposal: Proposal, placed: PlacedAction, typed_into: str | None,
                record: dict[str, Any], selection: bool) -> tuple[ApprovalRequest, ApprovalResponse, Judgement]:
        """The approval policy's answer for ``placed``, with the request shown and the judgement behind it
        (:meth:`~holodesk.session.judge.StepJudge.decide`)."""
        return self.judge.decide(self.approval, step, proposal, placed, typed_into=typed_into, selection=selection,
                                 can_refine=self._can_refine(placed.action), record=record)

    def _can_refine(self, action: Action) -> bool:
        """Whether "Click more precisely" can refine ``action``: a one-point pointer action with the model's words
        for its target, and a policy that localizes elements (:class:`~holodesk.policy.base.Localizer`)."""
        return (isinstance(action, (Click, Move)) and bool(action.element)
                and isinstance(self.policy, Localizer))

    def _refine(self, step: int, placed: PlacedAction, record: dict[str, Any]) -> PlacedAction:
        """"Click more precisely": ask the policy for the target's point in a crop around the proposed one
        (:func:`holodesk.core.refine.refine_crop`) and place the action at the refined point. Each try is
        recorded in ``record["refinements"]`` (``from``/``to`` model points, ``crop`` in frame pixels, ``target``,
        ``ms``; or ``error``) and the refined action in ``record["refined_action"]``. When the policy gives no
        point, the user is told and the proposed point stays."""
        action = placed.action
        assert isinstance(action, (Click, Move)) and action.element
        assert isinstance(self.policy, Localizer)
        frame = placed.frame
        crop = refine_crop(frame, action.point)
        left, top, width, height = crop
        entry: dict[str, Any] = {"from": [action.point.x, action.point.y], "crop": list(crop), "target": action.element}
        record.setdefault("refinements", []).append(entry)
        t0 = time.perf_counter()
        try:
            found = self.policy.localize(frame.pixels[top:top + height, left:left + width], action.element)
        except (PolicyError, PolicyOutputError) as exc:
            entry["error"] = str(exc)
            self._emit("warning", step, f"Could not click more precisely ({exc}); the proposed point is kept.")
            return placed
        finally:
            entry["ms"] = (time.perf_counter() - t0) * 1000.0
        point = crop_point_to_frame(frame, crop, found)
        refined = dataclasses.replace(action, point=point)
        entry["to"] = [point.x, point.y]
        record["refined_action"] = refined.to_dict()
        log.info("refined the target of step %d from (%d, %d) to (%d, %d)", step + 1, action.point.x, action.point.y,
                 point.x, point.y)
        return place(refined, frame)

    # -- EXECUTING
    def _act(self, run: _Run, proposal: Proposal, placed: PlacedAction, record: dict[str, Any],
             timings: dict[str, float]) -> None:
        """Perform the approved ``placed`` action (only reachable with an APPROVE or EDIT response in hand)
        and record the outcome; what happened goes into the history for the model.

        Raises:
            _Stop: the executor broke, or a stop (user, fail-safe) ended the action.
        """
        # Write-ahead (F24): the step is on disk, result unknown, before the action is performed.
        self._write({**record, "result": RESULT_UNKNOWN, "timings_ms": timings})
        self._set_state(State.EXECUTING, run.step)
        if hasattr(self.executor, "before_input") and run.judged is not None:
            self.executor.before_input = self.judge.before_input(run.judged)
        outcome = self._execute(placed)
        if outcome.status == "target_changed":
            record["target_changed"] = outcome.message
            self._emit("warning", run.step, f"Not performed: {outcome.message}. The next step is judged again.")
        run.acted = True
        timings["execute"] = outcome.duration_ms
        record.update(result={"ok": outcome.ok, "status": outcome.status, "message": outcome.message,
                              "verified": outcome.verified, "details": outcome.details},
                      timings_ms=timings)
        self._write(record)
        self._emit("result", run.step, outcome.message, result=outcome)
        if outcome.status == "unknown":  # the executor itself broke: stop, the screen is unknown
            raise _Stop(State.FAILED, f"internal error: {outcome.message}")
        if outcome.status == "stopped_by_user":  # a stop request ended the action, or the fail-safe
            if self._stop.is_set():
                raise _Stop(State.STOPPED, f"stopped by {self._stopped_by}", by=self._stopped_by)
            if outcome.details.get("failsafe"):
                raise _Stop(State.STOPPED, FAILSAFE_STOP_REASON, by=STOPPED_BY_FAILSAFE)
            raise _Stop(State.STOPPED, f"stopped by user: {outcome.message}", by=STOPPED_BY_USER)
        self._remember(run, proposal, placed, outcome)

    def _remember(self, run: _Run, proposal: Proposal, placed: PlacedAction, outcome: ActionResult) -> None:
        """Keep a performed (or failed) action in the run: its history step, a failure for the end
        reason, and the field that now has the keyboard focus."""
        action = placed.action
        if not outcome.ok:
            run.failed_actions.append(f"step {run.step + 1}: {outcome.message}")
        said = "performed" if outcome.ok else f"failed: {outcome.message}"
        if outcome.ok and outcome.verified is False:  # F15: never reported as a sure success
            said = f"sent but not verified: {outcome.message}"
            self._emit("warning", run.step, f"Could not verify that the action worked: {outcome.message}. "
                       "Check the screen.")
        run.history.append(HistoryStep(run.step, placed.frame, action, proposal.thought, proposal.note,
                                       proposal.raw_text, said))
        if outcome.status != "target_changed":  # not performed: the selection is as it was
            run.selection = selection_after(action, run.selection) if outcome.ok else True  # unknown: may exist
        if isinstance(action, Click):
            run.focus_element = action.element if outcome.ok else None
        elif not isinstance(action, Type):
            run.focus_element = None

    # -- the end
    def _stopped(self, stop: _Stop, failed_actions: list[str]) -> EpisodeResult:
        """The result of a run that a :class:`_Stop` ended."""
        if stop.status is State.STOPPED and self._deadline_hit.is_set():  # the cap stopped it, not the user
            stop = _Stop(State.FAILED, self._wall_cap_reason(), by=STOPPED_BY_WALL_CAP)
        if stop.status is State.FINISHED and failed_actions:
            # The model may believe a step worked that did not: never report such a run as done.
            stop = _Stop(State.FAILED, f"{stop.reason}, but {len(failed_actions)} approved action(s) could "
                         f"not be performed ({'; '.join(failed_actions)}); check the screen", stop.answer)
        return EpisodeResult(stop.status, stop.reason, stop.answer, len(self._recorded_steps), stopped_by=stop.by)

    def _end(self, result: EpisodeResult) -> None:
        """Set the final state and close the episode record with ``result`` (an incomplete record is
        named in ``result.reason``)."""
        self.state = result.status
        if not self.recorder:
            return
        end = {"status": result.status.value, "reason": result.reason, "answer": result.answer,
               "steps": result.steps}
        if result.stopped_by is not None:
            end["stopped_by"] = result.stopped_by
        try:
            self.recorder.close(end)
        except HolodeskError as exc:  # what was written stays; the user is told the record is incomplete
            log.error("could not finish the episode record: %s", exc)
            result.reason = f"{result.reason}; the episode record is incomplete: {exc}"
        result.episode_path = self.recorder.path

    def _release_left_held_keys(self) -> None:
        """Release the keys that a killed earlier run left held on this desktop (the executor's state file,
        :mod:`holodesk.control.held_keys`), and tell the user."""
        release = getattr(self.executor, "release_left_held_keys", None)
        released = release() if release is not None else ()
        if released:
            self._emit("warning", -1, f"An earlier run ended without releasing {'+'.join(released)} (it was "
                       "killed); released now.")

    def _clear_failsafe_corner(self) -> None:
        """F12: a pointer already resting in a fail-safe corner would stop the first action. Executors
        that can (``move_pointer_out_of_corner``) move it away; the user is told. Done here, once per
        run, so the CLI and the desktop app behave the same."""
        move_away = getattr(self.executor, "move_pointer_out_of_corner", None)
        if not callable(move_away):
            return
        try:
            moved = move_away()
        except HolodeskError as exc:  # no display: the first capture reports it properly
            log.warning("could not check the pointer for the fail-safe corner: %s", exc)
            return
        if moved is not None:
            self._emit("warning", -1, "The pointer sat in a screen corner (the fail-safe stop signal); moved it "
                       f"to ({moved.x}, {moved.y}) before the first action.", pointer=[moved.x, moved.y])

    def _check_geometry(self) -> None:
        """F28: before the first action, executors that can (``check_geometry(monitor)``) move the
        pointer to known points of the chosen monitor and read it back. A mismatch between the capture
        geometry and the input space ends the run before anything is clicked. Done here, once per run,
        so the CLI and the desktop app behave the same.

        Raises:
            _Stop: (FAILED) the check found a mismatch; the reason says what to check.
        """
        check = getattr(self.executor, "check_geometry", None)
        if not callable(check):
            return
        try:
            monitor = next(m for m in self.capture.monitors() if m.index == self.limits.monitor)
        except StopIteration:
            raise _Stop(State.FAILED, f"monitor {self.limits.monitor} does not exist") from None
        try:
            check(monitor)
        except GeometryMismatch as exc:
            self._emit("error", -1, str(exc))
            raise _Stop(State.FAILED, str(exc)) from exc
        except HolodeskError as exc:  # no display: the first pointer action reports it properly
            log.warning("could not run the start-up geometry check: %s", exc)

    def _execute(self, placed: PlacedAction) -> ActionResult:
        """Perform ``placed`` at its input points; an executor that raises gives a "failed" result
        (HolodeskError) or, for any other exception, an "unknown" one (it may have done part of the action)."""
        action = placed.action
        t0 = time.perf_counter()
        try:
            outcome = self.executor.execute(placed)
        except HolodeskError as exc:
            outcome = ActionResult(False, "failed", str(exc))
        except Exception as exc:  # recorded, then the run ends (see the loop)
            log.exception("the executor failed on %s", action.kind)
            outcome = ActionResult(False, "unknown", f"the executor failed with {type(exc).__name__}: {exc}; "
                                   "the action may have been performed in part", {"error": type(exc).__name__})
        if not outcome.duration_ms:
            outcome = ActionResult(outcome.ok, outcome.status, outcome.message, outcome.details,
                                   (time.perf_counter() - t0) * 1000, outcome.verified)
        return outcome

    def _write(self, record: dict[str, Any]) -> None:
        if record.get("type") == "step":  # steps taken = steps with a record (EpisodeResult.steps)
            self._recorded_steps.add(int(record["step"]))
        if self.recorder:
            self.recorder.write(record)

