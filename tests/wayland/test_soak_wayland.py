"""Lived in, on GNOME Wayland: one Holodesk process on a private headless GNOME session runs
:data:`~tests.soak.conftest.SOAK_TASKS` tasks in a row against the native GTK4 target, the user copying text in
that app before every task through an input session of their own. Each task's effect is read from the app's own
state; the clipboard the app reads after each task is the user's copy; the process's fds, threads and memory
after the last task stay within a small bound of task 5.

The process is ``tests/wayland/task_host.py`` (tasks built by ``build_session`` with the real capture and executor
factories, as the tray app and ``holodesk mcp`` build them). Its approvals are a stand-in that approves every step:
on Wayland no window probe exists, so the autopilot asks for every pointer action, and the overlay that asks
cannot be answered from a test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from holodesk.core.actions import Action, Click, Key
from holodesk.core.geometry import Frame, frame_pixel_to_point, place
from tests.helpers.mutter import MutterSession, TargetApp
from tests.helpers.processes import stop_process
from tests.soak.conftest import SOAK_TASKS
from tests.wayland.conftest import GnomeDesktop
from tests.wayland.test_lived_in import host, next_task, write_script
from tests.wayland.test_wayland_cli import point

pytestmark = [pytest.mark.soak, pytest.mark.wayland, pytest.mark.e2e]

TYPED = "ab1"
OWN_CLIPBOARD = "the user's own clipboard ✓"
"""What the GTK4 target puts on the clipboard at its first button click (tests/apps/gtk4_wayland_target.py)."""


def user_does(gnome: GnomeDesktop, frame: Frame, action: Action) -> None:
    """The user's own input (a remote-desktop session of the test's, not Holodesk's)."""
    result = gnome.executor.execute(place(action, frame))
    assert result.ok, result


def user_clicks(gnome: GnomeDesktop, frame: Frame, app: TargetApp, widget: str) -> None:
    user_does(gnome, frame, Click(frame_pixel_to_point(frame, *app.center(widget))))


def test_one_process_runs_25_tasks_on_gnome_wayland(mutter: MutterSession, gnome: GnomeDesktop,
                                                     gtk_app: TargetApp, tmp_path: Path) -> None:
    steps = write_script(tmp_path / "steps.jsonl", [
        {"tool_name": "click", **point(mutter, gtk_app, "button")},
        {"tool_name": "click", **point(mutter, gtk_app, "entry")},
        {"tool_name": "key", "keys": ["end"]},
        {"tool_name": "type", "text": TYPED},
        {"tool_name": "answer", "text": "pressed and typed"},
    ])
    frame = gnome.capture.grab(1)
    proc = host(mutter, tmp_path, [steps] * SOAK_TASKS)
    assert proc.stdin is not None
    seen: dict[int, dict[str, int]] = {}
    clicks, user_copy = 0, OWN_CLIPBOARD
    try:
        for i in range(1, SOAK_TASKS + 1):
            if i > 1:  # the user selects the field's text and copies it, then the next task starts
                user_clicks(gnome, frame, gtk_app, "entry")
                gtk_app.wait_state(lambda s: s["entry_focused"])
                user_does(gnome, frame, Key(("ctrl", "a")))
                user_does(gnome, frame, Key(("ctrl", "c")))
                user_does(gnome, frame, Key(("end",)))
                user_copy = TYPED * (i - 1)
                proc.stdin.write("next\n")
                proc.stdin.flush()
            line = next_task(proc, tmp_path)
            assert line["status"] == "finished", (i, line)
            clicks += 1
            state = gtk_app.wait_state(lambda s, i=i, c=clicks: s["text"] == TYPED * i and s["clicks"] == c)
            assert state["text"] == TYPED * i, (i, state)
            # The clipboard, as the app reads it at the user's next button click, is still the user's copy.
            user_clicks(gnome, frame, gtk_app, "button")
            clicks += 1
            state = gtk_app.wait_state(lambda s, c=clicks: s["clicks"] == c)
            assert state["clipboard"] == user_copy, (i, state["clipboard"], user_copy)
            if i in (5, SOAK_TASKS):
                seen[i] = line
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        stop_process(proc)
    first, last = seen[5], seen[SOAK_TASKS]
    growth = (last["fds"] - first["fds"], last["threads"] - first["threads"], (last["rss_kb"] - first["rss_kb"]) / 1024)
    print(f"Wayland soak: growth from task 5 to {SOAK_TASKS} (fds, threads, MiB): {growth}")
    assert growth[0] <= 5, (first, last)
    assert growth[1] <= 2, (first, last)
    assert growth[2] <= 30, (first, last)
