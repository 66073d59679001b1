"""A stop request ends a run on the GNOME Wayland backends: the real Session loop with the Mutter capture and
executor, a scripted policy (a long wait, then a click on the app's button), and a stop requested while the
wait runs. ``Session.request_stop`` is what the app's Stop button and the ``holodesk stop`` command call."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from holodesk.core.geometry import Frame, Monitor, frame_pixel_to_point, place
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse
from holodesk.session.loop import Session
from holodesk.session.state import SessionEvent, SessionLimits, State
from tests.helpers.mutter import MutterSession, TargetApp
from tests.wayland.conftest import GnomeDesktop

pytestmark = [pytest.mark.wayland]


def refuse(request: ApprovalRequest) -> ApprovalResponse:
    """The user approver of this test: nothing here is meant to need the user."""
    raise AssertionError(f"the autopilot asked the user about {request.description}")


def test_stop_request_ends_a_running_wait_and_nothing_more_happens(mutter: MutterSession, gnome: GnomeDesktop,
                                                                   gtk_app: TargetApp, tmp_path: Path) -> None:
    screen = Frame(np.zeros((mutter.height, mutter.width, 3), np.uint8), Monitor(1, 0, 0, mutter.width, mutter.height))
    button = frame_pixel_to_point(screen, *gtk_app.center("button"))
    replies = [
        {"note": None, "thought": "wait for the page", "tool_call": {"tool_name": "wait", "seconds": 30}},
        {"note": None, "thought": "press", "tool_call": {"tool_name": "click", "x": button.x, "y": button.y}},
    ]
    script = tmp_path / "steps.jsonl"
    script.write_text("\n".join(json.dumps(r) for r in replies) + "\n", encoding="utf-8")
    session = Session(ScriptedPolicy(script), gnome.capture, gnome.executor, ApprovalPolicy("auto", refuse),
                      SessionLimits(max_steps=5, max_wall_s=120), stop_event=gnome.executor.stop_event)
    waiting = threading.Event()

    def on_event(event: SessionEvent) -> None:
        if event.kind == "state" and event.message == State.EXECUTING.value:
            waiting.set()

    session.subscribe(on_event)
    outcome: dict[str, object] = {}
    runner = threading.Thread(target=lambda: outcome.update(result=session.run("wait, then press")))
    runner.start()
    try:
        assert waiting.wait(60), "the run never started executing its wait"
        t0 = time.monotonic()
        session.request_stop()
        runner.join(20)
        assert not runner.is_alive(), "the run did not end after the stop request"
        assert time.monotonic() - t0 < 10  # the 30 s wait ended early
    finally:
        gnome.executor.stop_event.set()
        runner.join(60)
        gnome.executor.stop_event.clear()
    result = outcome["result"]
    assert result.status is State.STOPPED, result  # type: ignore[attr-defined]
    # The click after the wait never happened: the app counted no click.
    assert gtk_app.state()["clicks"] == 0
    # A stopped executor performs nothing: a click sent while the stop is set is refused, not performed.
    gnome.executor.stop_event.set()
    try:
        from holodesk.core.actions import Click

        refused = gnome.executor.execute(place(Click(button), gnome.capture.grab(1)))
    finally:
        gnome.executor.stop_event.clear()
    assert refused.status == "stopped_by_user"
    assert gtk_app.state()["clicks"] == 0
    # Cleared again, the same backends work: a click lands.
    assert gnome.executor.execute(place(Click(button), gnome.capture.grab(1))).ok
    assert gtk_app.wait_state(lambda s: s["clicks"] == 1)["clicks"] == 1
