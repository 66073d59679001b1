"""A dead X server is noticed: the Xvfb of an openbox desktop is killed while a task of a Holodesk process
waits between two clicks on a Tk form; the task ends at once with "the desktop session ended" in its reason
and end record, nothing is proposed on a frame from before (the scripted second click never reaches the
record), no Xlib traceback reaches the log, and the process's next task fails at once saying so.

The process is ``tests/wayland/task_host.py`` (tasks built as the tray app and ``holodesk mcp`` build them),
on this test's own Xvfb (killing it ends the desktop).
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from holodesk.core.actions import Answer, Click, Wait
from holodesk.session.episode import list_episodes, load_episode
from tests.agent_server.mcp_helpers import ROOT, holodesk_env, screen_point, script
from tests.helpers.desktop import wait_until
from tests.helpers.processes import stop_process

pytestmark = [pytest.mark.gui, pytest.mark.e2e]

W, H = 1024, 768


def task_lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """The task host's stdout lines, read by a thread of their own ("" at its end)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    return lines


def next_task(lines: queue.Queue[str], log_path: Path, timeout_s: float = 60.0) -> dict[str, Any]:
    """The task host's JSON line about its task that ends next (python-xlib prints its Xauthority warning
    to stdout too: other lines are skipped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no task ended within {timeout_s:g} s: {log_path.read_text()[-3000:]}") from None
        assert line, f"the task host ended early: {log_path.read_text()[-3000:]}"
        if line.startswith("{"):
            return dict(json.loads(line))


def test_x_server_killed_mid_task_ends_the_task_at_once(make_desktop: Any, tmp_path: Path) -> None:
    desk = make_desktop("openbox", W, H)
    form = desk.tk_form(60, 60)
    count = Click(screen_point(W, H, *form.center("Count")))
    steps = script(tmp_path / "steps.jsonl", [count, Wait(30), count, Answer("never reached")])
    env = holodesk_env(desk.env(), tmp_path)
    log_path = tmp_path / "host.log"
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.wayland.task_host", str(tmp_path / "episodes"),
                                 str(steps), str(steps)], env=env, cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, text=True)
    lines = task_lines(proc)
    try:
        form.wait_layout(lambda lay: lay["count"] == 1, timeout=60)  # the first click reached the form
        wait_until(lambda: "approved wait" in log_path.read_text(encoding="utf-8"), 60, "the task's 30 s wait")
        t0 = time.monotonic()
        desk.server.process.kill()
        outcome = next_task(lines, log_path)
        elapsed = time.monotonic() - t0
        assert proc.stdin is not None
        proc.stdin.write("next\n")  # the process's next task: told at once
        proc.stdin.flush()
        t1 = time.monotonic()
        later = next_task(lines, log_path)
        later_elapsed = time.monotonic() - t1
    finally:
        stop_process(proc)
    log_text = log_path.read_text(encoding="utf-8", errors="replace")
    # The X server's end stopped the task: its stop request ended the wait at once.
    assert outcome["status"] == "stopped", (outcome, log_text[-3000:])
    assert outcome["reason"].startswith("stopped by the desktop (the desktop session ended: "), outcome
    assert elapsed < 5, f"the task ended {elapsed:.1f} s after the X server died (the wait was 30 s)"
    assert later["status"] == "error" and "the desktop session ended" in later["reason"], later
    assert later_elapsed < 5, f"the next task took {later_elapsed:.1f} s to fail"
    ep = load_episode(list_episodes(tmp_path / "episodes")[0])
    assert ep.end is not None and "the desktop session ended" in ep.end["reason"], ep.end
    kinds = [s.get("action", {}).get("kind") for s in ep.steps]
    assert kinds == ["click", "wait"], kinds  # the second click was never proposed
    assert "Traceback" not in log_text and "Xlib" not in log_text, log_text[-3000:]


def test_a_capture_whose_x_server_died_says_the_desktop_session_ended(make_xvfb: Any) -> None:
    """The process's desktop backend (mss): a task's capture of an X server that is then killed fails at once
    with "the desktop session ended", not mss's own failure; so does the next task's capture."""
    from holodesk.display import choose_backend
    from holodesk.errors import DisplayError
    from holodesk.session.desktop import Desktop

    server = make_xvfb(800, 600)  # DISPLAY names it
    desktop = Desktop(choose_backend("mss"))
    try:
        capture = desktop.capture()
        assert capture.grab(1).pixels.shape == (600, 800, 3)
        server.process.kill()
        server.process.wait(10)
        t0 = time.monotonic()
        with pytest.raises(DisplayError, match=r"^the desktop session ended"):
            capture.grab(1)
        with pytest.raises(DisplayError, match=r"^the desktop session ended"):
            desktop.capture()
        assert time.monotonic() - t0 < 3
        capture.close()
    finally:
        desktop.close()
