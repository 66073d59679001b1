"""The autopilot on a desktop where other windows go away while Holodesk reads the windows (an approval overlay
that openbox stops managing, a tooltip, a notification): a harmless step is approved by the autopilot and performed,
never asked nor refused because a window that is not the target vanished between two X requests.

A real session (openbox, the Tk form, the real pyautogui executor and the real window and focus probes) runs the X11
soak's task (count, then type into the name field) while every read of the X server's windows meets one that is
destroyed just before its first request (tests/helpers/vanishing.py); the outcome is read from the form's own state.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.control.window import focused_window_class, window_at
from holodesk.core.actions import Click, Done, Key, Type
from holodesk.core.geometry import frame_pixel_to_point
from holodesk.session.approval import ApprovalPolicy
from holodesk.session.episode import list_episodes, load_episode
from holodesk.session.loop import Session
from holodesk.session.state import SessionLimits, State
from tests.field_cases.fakes import ActionsPolicy, SpyApprover
from tests.helpers.desktop import Desktop
from tests.helpers.vanishing import vanishing_windows

pytestmark = pytest.mark.gui


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_the_autopilot_performs_harmless_steps_while_other_windows_go_away(
        desktop: Desktop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    form = desktop.tk_form()
    with MssCapture() as capture:
        frame = capture.grab(1)
        count = frame_pixel_to_point(frame, *form.center("Count"))
        name = frame_pixel_to_point(frame, *form.center("name"))
        executor = PyAutoGUIExecutor()
        executor.move_pointer_out_of_corner()
        user = SpyApprover()  # nobody should be asked: every step is harmless
        session = Session(ActionsPolicy([Click(count), Click(name), Key(("end",)), Type("ab1"), Done("typed")]),
                          capture, executor, ApprovalPolicy("auto", user), SessionLimits(), episodes_dir=tmp_path,
                          focus_probe=focused_window_class, window_probe=window_at)
        fx, fy, fw, _ = form.geometry()
        with vanishing_windows(monkeypatch, (fx + fw + 40, fy, 60, 60)) as others:
            result = session.run("count and type")
        assert others.vanished > 0
    steps = load_episode(list_episodes(tmp_path)[0]).steps[:4]  # the Done step is not approved
    assert [s["decided_by"] for s in steps] == ["autopilot"] * 4, [(s["decided_by"], s["risk"]) for s in steps]
    assert user.requests == []
    assert [s["result"]["status"] for s in steps] == ["performed"] * 4, [s["result"] for s in steps]
    assert result.status is State.FINISHED, result.reason
    state = form.wait_layout(lambda layout: layout["count"] == 1 and layout["name"] == "ab1")
    assert (state["count"], state["name"]) == (1, "ab1")
