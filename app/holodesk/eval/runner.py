"""Running a suite: each task through the real agent loop on the harness's own disposable desktop.

For each task and repeat: the desktop is reset and proven fresh (:meth:`EvalDesktop.reset`), the task's
files are written into a new folder, its programs started and placed, then one
:class:`~holodesk.session.loop.Session` built by :func:`~holodesk.session.factory.build_session` (the same
capture, executor, risk rules and episode recording as ``holodesk run``) carries out the instruction with the
chosen policy, and the task's checker reads the programs' state. Approval is the autopilot's: low-risk steps
run; a step the autopilot rules would ask a person about is approved only with ``unattended`` (recorded in
the episode's start record and the report), else the run stops there ("refused by the autopilot rules").

The process's DISPLAY is pointed at the harness's Xvfb before anything opens a display connection, so the
user's own desktop is never captured or driven.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image, ImageDraw, ImageFont

from holodesk.control.accessibility import AccessibilityProbe
from holodesk.errors import HolodeskError
from holodesk.eval.desktop import EvalDesktop, Program, wait_for
from holodesk.eval.tasks import CheckContext, Rect, Task, expand, resolve_reply, run_check
from holodesk.policy.base import Observation, Proposal
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.desktop import close_desktop
from holodesk.session.episode import load_episode
from holodesk.session.factory import PolicyCache, build_policy, build_session, default_focus_probe, default_window_probe

if TYPE_CHECKING:
    from holodesk.policy.base import Policy
    from holodesk.session.state import EpisodeResult
    from holodesk.settings import Settings

log = logging.getLogger(__name__)

FAILURE_CLASSES = ("wrong target", "loop", "budget exhausted", "refused by the autopilot rules", "error")
ORACLE = "oracle"
CHECK_WAIT_S = 2.0
"""Seconds a failing checker is read again after the run (programs that save asynchronously)."""


class OraclePolicy(ScriptedPolicy):
    """Plays a task's oracle (or sabotaged) replies in the agent-loop-v1 contract, with ``"@NAME"``
    coordinates resolved against the screen as it is at each step (see :func:`resolve_reply`).

    Args:
        replies: the reply lines. rects: returns the named rectangles now on screen (root pixels).
        screen: (width, height) of the screen in pixels.
    """

    def __init__(self, replies: list[str], rects: Callable[[], dict[str, Rect]], screen: tuple[int, int],
                 name: str) -> None:
        super().__init__(replies, protocol="agent-loop-v1")
        self._rects = rects
        self._screen = screen
        self.name = name

    def propose(self, observation: Observation) -> Proposal:
        """Resolve the next reply's coordinates, then parse it as :class:`ScriptedPolicy` does.

        Raises:
            SuiteError: a named rectangle is not on screen. PolicyOutputError / PolicyError: as the script's.
        """
        if self.steps_played < len(self.replies):
            self.replies[self.steps_played] = resolve_reply(self.replies[self.steps_played], self._rects(),
                                                            self._screen)
        return super().propose(observation)


@dataclass
class Attempt:
    """One run of one task.

    Attributes:
        task: the task id. repeat: 0-based repeat number. passed: the checker's verdict.
        verdict: the checker's words. status / reason / answer: how the run ended (loop's result).
        steps: steps taken. seconds: wall time of the run (setup and check excluded).
        failure: a :data:`FAILURE_CLASSES` entry when not passed, else None.
        episode: the episode folder. unattended: every step could be approved without a person.
        step_records: per step ``{frame, thought, action, decision, result, ms, reply_tokens, reasoning_text,
            step_seed, elements}`` (``reasoning_text``: the model's thought before acting, None when it did not
            reason; ``step_seed``: the step's sampling seed, None when greedy or not generated here);
            ``elements`` is the autopilot's accessibility lookup as the episode recorded it (``{"at_points":
            [element or null per point of the action], "focused": element or null, "lookup_ms"}``, each element
            ``{"role", "name", "states", "bounds": [x, y, w, h] screen pixels, "application", "active_window"}``,
            :meth:`holodesk.core.element.Element.to_dict`), or None when the lookup did not run for the step.
    """

    task: str
    repeat: int
    passed: bool
    verdict: str
    status: str
    reason: str
    answer: str | None
    steps: int
    seconds: float
    failure: str | None
    episode: str | None
    unattended: bool
    step_records: list[dict[str, Any]] = field(default_factory=list)


class _AbsentUser:
    """The approver of an evaluation: nobody is at this desktop. With ``unattended`` it approves (recorded as
    decided by "unattended"); without, the step is refused and the run stops."""

    def __init__(self, unattended: bool) -> None:
        self.unattended = unattended
        self.refused: str | None = None

    def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        if self.unattended:
            return ApprovalResponse(Decision.APPROVE, by="unattended")
        self.refused = (f"step {request.step + 1} ({request.description}) needs a person: {request.risk.reason}; "
                        "nobody is at the evaluation desktop (--unattended approves such steps there)")
        return ApprovalResponse(Decision.STOP, by="autopilot rules")


def classify(result: EpisodeResult, passed: bool, refused: str | None) -> str | None:
    """The failure class of a run (None when it passed): :data:`FAILURE_CLASSES`."""
    if passed:
        return None
    reason = result.reason
    if refused:
        return "refused by the autopilot rules"
    if "step cap" in reason or "wall-time cap" in reason:
        return "budget exhausted"
    if "same action was proposed" in reason:
        return "loop"
    if result.status.value == "finished":
        return "wrong target"
    return "error"


def _tokens(extra: dict[str, Any]) -> int | None:
    usage = extra.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"])
    value = extra.get("generated_tokens")
    return int(value) if isinstance(value, int) else None


def policy_runtime(policy: object) -> dict[str, str | None]:
    """Where ``policy``'s model runs in this process: a local policy's ``runtime_device``
    (:class:`~holodesk.policy.local_core.LocalPolicy`: ``{"device": "cuda:0" or "cpu", "device_name": the GPU's name
    or None}``); both None for a policy without a model loaded here (none kept, the oracle, a script, a remote
    endpoint: the server's device is not known here)."""
    device = getattr(policy, "runtime_device", None)
    return dict(device) if isinstance(device, dict) else {"device": None, "device_name": None}


def policy_generation(policy: object) -> dict[str, Any] | None:
    """How ``policy`` generates, as it was built (its ``options``,
    :class:`~holodesk.policy.generation.GenerationOptions`): ``{"reasoning": "on" | "off", "sampling": {"greedy",
    "temperature", "top_p", "seed"}}`` (:meth:`~holodesk.policy.models.Sampling.record`); None for a policy that
    generates nothing (the oracle, a script) or none kept."""
    options = getattr(policy, "options", None)
    if not isinstance(options, GenerationOptions):
        return None
    return {"reasoning": "on" if options.reasoning else "off", "sampling": options.sampling.record()}


def step_ms(timings: dict[str, Any]) -> float:
    """A step's milliseconds from its episode ``timings_ms``: the sum of the loop's own stages (capture, policy,
    approval, execute ...); the policy's parts (``"policy.decode"`` ...) are inside ``"policy"`` and not added."""
    return round(sum(v for k, v in timings.items() if "." not in k and isinstance(v, (int, float))), 1)


def step_records(episode: Path | None) -> list[dict[str, Any]]:
    """The report's view of each recorded step of ``episode``."""
    if episode is None:
        return []
    records = []
    for step in load_episode(episode).steps:
        extra = step.get("policy_extra") or {}
        timings = step.get("timings_ms") or {}
        result = step.get("result") or {}
        records.append({"step": step.get("step"), "frame": step.get("frame"), "thought": step.get("thought"),
                        "action": step.get("action"), "error": step.get("error"), "decision": step.get("decision"),
                        "decided_by": step.get("decided_by"), "result": result.get("message"),
                        "ms": step_ms(timings),
                        "policy_ms": timings.get("policy"), "reply_tokens": _tokens(extra),
                        "reasoning_text": extra.get("reasoning_text"), "step_seed": extra.get("step_seed"),
                        "elements": step.get("elements")})
    return records


class SuiteRunner:
    """Runs tasks on one :class:`EvalDesktop` with one policy configuration.

    Args:
        desktop: the harness's desktop (its display is the process's DISPLAY).
        settings: the effective settings (policy, model, endpoint ...); ``desktop_backend`` must be "mss".
        policy: "oracle" to play each task's oracle, or "settings" for the settings' policy.
        sabotage: with the oracle, play each task's sabotaged replies instead.
        unattended: approve every step without a person (only ever on this desktop).
        out: the run's folder (task folders and episodes go under it).
    """

    def __init__(self, desktop: EvalDesktop, settings: Settings, *, policy: str, sabotage: bool, unattended: bool,
                 out: Path) -> None:
        self.desktop = desktop
        self.settings = settings
        self.policy = policy
        self.sabotage = sabotage
        self.unattended = unattended
        self.out = out
        self._cache = PolicyCache()
        self._layouts: list[Path] = []
        # the autopilot's accessibility lookup asks this desktop's bus, never the user's
        self._elements = AccessibilityProbe(desktop.env["DBUS_SESSION_BUS_ADDRESS"])

    def runtime(self) -> dict[str, str | None]:
        """Where the kept policy's model runs (:func:`policy_runtime`); call before :meth:`close`."""
        return policy_runtime(self._cache.policy)

    def generation(self) -> dict[str, Any] | None:
        """How the kept policy generates (:func:`policy_generation`); call before :meth:`close`."""
        return policy_generation(self._cache.policy)

    def close(self) -> None:
        """Release what the runs held, before the desktop's X server stops: the kept policy (a loaded model), the
        accessibility bus connection and the process's desktop backend (its capture and its watch of the X
        server, :func:`~holodesk.session.desktop.close_desktop`), so the server's expected end warns nobody."""
        self._cache.close()
        self._elements.close()
        close_desktop()

    def _rects(self) -> dict[str, Rect]:
        rects: dict[str, Rect] = {}
        for index, program in enumerate(self.desktop.programs):
            if program.window and program.process.poll() is None:
                with contextlib.suppress(HolodeskError):
                    rects[f"win{index}"] = self.desktop.geometry(program.window)
        for layout in self._layouts:
            try:
                data = json.loads(layout.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            rects.update({name: (r[0], r[1], r[2], r[3]) for name, r in data.get("rects", {}).items()})
        return rects

    def _setup(self, task: Task, folder: Path) -> None:
        """Write the task's files, start its programs, place them, focus the last one."""
        for name, text in task.files.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(expand(text, folder), encoding="utf-8")
        for name, word in task.images.items():
            draw_word(folder / name, word)
        self._layouts = []
        for launch in task.launch:
            argv = [expand(a, folder) for a in launch.argv]
            program = self.desktop.launch(argv, window_class=launch.window_class, window_name=launch.window_name,
                                          cwd=folder)
            if launch.geometry is not None:
                self.desktop.place(program.window, *launch.geometry)
            if launch.layout is not None:
                layout = folder / launch.layout
                self._layouts.append(layout)
                wait_for(partial(_layout_current, self.desktop, layout, program.window), 30,
                         f"{argv[0]} to report its layout")
        if self.desktop.programs:
            self.desktop.activate(self.desktop.programs[-1].window)

    def _make_policy(self, task: Task) -> Callable[[Settings], Policy]:
        if self.policy == ORACLE:
            replies = list(task.sabotage if self.sabotage else task.oracle)
            name = f"oracle{'-sabotage' if self.sabotage else ''}:{task.id}"
            return lambda _settings: OraclePolicy(replies, self._rects, (self.desktop.width, self.desktop.height),
                                                  name)
        return lambda settings: self._cache.get(settings, build_policy)

    def run_task(self, task: Task, repeat: int) -> Attempt:
        """Set up, run and check one task. Setup failures are an "error" attempt, not an exception."""
        self.desktop.reset()
        folder = self.out / "tasks" / f"{task.id}-{repeat}"
        folder.mkdir(parents=True, exist_ok=True)
        user = _AbsentUser(self.unattended)
        try:
            self._setup(task, folder)
            settings = self.settings.model_copy(update={"max_steps": task.max_steps,
                                                        "max_wall_s": 60.0 + 30.0 * task.max_steps})
            session = build_session(
                settings, ApprovalPolicy("auto", user), policy=self._make_policy(task),
                stop_event=threading.Event(), episodes_dir=self.out / "episodes",
                focus_probe=default_focus_probe(), window_probe=default_window_probe(),
                element_probe=lambda _s: self._elements,
                meta={"eval": {"task": task.id, "repeat": repeat, "unattended": self.unattended,
                               "display": self.desktop.display, "sabotage": self.sabotage}})
        except HolodeskError as exc:
            return Attempt(task.id, repeat, False, f"setup failed: {exc}", "failed", str(exc), None, 0, 0.0, "error",
                           None, self.unattended)
        started = time.monotonic()
        try:
            result = session.run(task.instruction)
        finally:
            session.close()  # the run's element probe reconnects on its next lookup
        seconds = time.monotonic() - started
        passed, verdict = self._check(task, folder, result.answer)
        reason = user.refused or result.reason
        return Attempt(task.id, repeat, passed, verdict, result.status.value, reason, result.answer,
                       result.steps, round(seconds, 2), classify(result, passed, user.refused),
                       str(result.episode_path) if result.episode_path else None, self.unattended,
                       step_records(result.episode_path))

    def _check(self, task: Task, folder: Path, answer: str | None) -> tuple[bool, str]:
        """The checker's verdict. A program may still be writing when the run ends (a file chooser saves after
        its dialog has closed), so a failing verdict is read again until it passes or :data:`CHECK_WAIT_S`
        has passed; the last reading counts."""
        context = self._context(task, folder, answer)
        deadline = time.monotonic() + CHECK_WAIT_S
        while True:
            passed, verdict = run_check(task.check, context)
            if passed or time.monotonic() >= deadline:
                return passed, verdict
            time.sleep(0.2)

    def _context(self, task: Task, folder: Path, answer: str | None) -> CheckContext:
        programs = list(self.desktop.programs)

        def stdout(index: int) -> str:
            program = programs[index]
            _wait_exit(program, 5.0)
            return program.stdout()

        def exit_code(index: int) -> int | None:
            program = programs[index]
            _wait_exit(program, 5.0)
            return program.process.poll()

        def title(index: int) -> str:
            return self.desktop.window_title(programs[index].window)

        return CheckContext(folder, stdout, exit_code, title, lambda index: programs[index].process.poll(), answer,
                            {name: expand(text, folder) for name, text in task.files.items()})


def draw_word(path: Path, word: str) -> None:
    """Write a 480x320 PNG showing ``word`` in large dark letters on a light background (DejaVu Sans Bold)."""
    image = Image.new("RGB", (480, 320), (236, 232, 220))
    try:
        font: Any = ImageFont.truetype("DejaVuSans-Bold.ttf", 96)
    except OSError:
        font = ImageFont.load_default(96)
    ImageDraw.Draw(image).text((240, 160), word, fill=(30, 30, 60), font=font, anchor="mm")
    image.save(path, format="PNG")


def _wait_exit(program: Program, timeout: float) -> None:
    try:
        program.process.wait(timeout=timeout)
    except Exception:  # still running: the checker reads what it printed so far
        log.debug("%s still running", program.argv[0])


def _layout_current(desktop: EvalDesktop, layout: Path, window: int) -> bool:
    try:
        data = json.loads(layout.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    x, y, _, _ = desktop.geometry(window)
    return list(data.get("window", [None, None])[:2]) == [x, y]


def point_process_at(desktop: EvalDesktop) -> None:
    """Make this process's display the harness's desktop (before any display connection is opened).

    Raises:
        HolodeskError: pyautogui was already imported (bound to another display).
    """
    if "pyautogui" in sys.modules:
        raise HolodeskError("pyautogui was imported before the evaluation desktop started",
                            hint="Run holodesk eval in its own process.")
    for key in ("WAYLAND_DISPLAY", "XAUTHORITY"):
        os.environ.pop(key, None)
    os.environ.update(DISPLAY=desktop.display, XDG_SESSION_TYPE="x11")
