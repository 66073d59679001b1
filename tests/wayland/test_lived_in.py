"""One Holodesk process, several tasks in a row, on a real headless GNOME Wayland session: the desktop
backend (Mutter session, PipeWire stream, GStreamer pipeline, D-Bus connection, clipboard thread) is opened
once and reused, so every task gets frames and acts on the GTK4 target, and the process does not grow.

The process is ``tests/wayland/task_host.py``: tasks built by :func:`holodesk.session.factory.build_session`
with the real capture and executor factories, as the tray app and ``holodesk mcp`` build them.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.mutter import MutterSession, TargetApp
from tests.helpers.processes import stop_process
from tests.wayland.test_wayland_cli import ROOT, point, reply, session_env

pytestmark = [pytest.mark.wayland, pytest.mark.e2e]


def write_script(path: Path, calls: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(reply(call) for call in calls) + "\n", encoding="utf-8")
    return path


def host(mutter: MutterSession, tmp_path: Path, scripts: list[Path]) -> subprocess.Popen[str]:
    """The task host process on the session (no DISPLAY: only the Wayland backend can see the desktop)."""
    env = {**session_env(mutter), "HOLODESK_CONFIG": str(tmp_path / "settings.toml"),
           "HOLODESK_DATA_DIR": str(tmp_path / "data")}
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}{':' if env['PYTHONPATH'] else ''}{ROOT}"
    with open(tmp_path / "host.log", "w", encoding="utf-8") as log:
        return subprocess.Popen([sys.executable, "-m", "tests.wayland.task_host", str(tmp_path / "episodes"),
                                 *map(str, scripts)], env=env, cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, text=True)


def next_task(proc: subprocess.Popen[str], tmp_path: Path, timeout_s: float = 180.0) -> dict[str, Any]:
    """The host's line about its task that ends next (it writes one, then waits for stdin)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    log = (tmp_path / "host.log").read_text(encoding="utf-8", errors="replace")[-3000:]
    assert ready, f"no task ended within {timeout_s:g} s: {log}"
    line = proc.stdout.readline()
    assert line, f"the task host ended early: {log}"
    return dict(json.loads(line))


def test_three_tasks_in_one_process_each_get_frames_and_act(mutter: MutterSession, gtk_app: TargetApp,
                                                            tmp_path: Path) -> None:
    button = {"tool_name": "click", **point(mutter, gtk_app, "button")}
    entry = {"tool_name": "click", **point(mutter, gtk_app, "entry")}
    scripts = [
        write_script(tmp_path / "press.jsonl", [button, {"tool_name": "answer", "text": "pressed"}]),
        write_script(tmp_path / "type.jsonl", [entry, {"tool_name": "type", "text": "lived in"},
                                               {"tool_name": "answer", "text": "typed"}]),
        write_script(tmp_path / "press2.jsonl", [button, {"tool_name": "answer", "text": "pressed again"}]),
    ]
    proc = host(mutter, tmp_path, scripts)
    assert proc.stdin is not None
    try:
        first = next_task(proc, tmp_path)
        assert first["status"] == "finished", first
        assert gtk_app.wait_state(lambda s: s["clicks"] == 1)["clicks"] == 1
        proc.stdin.write("next\n")
        proc.stdin.flush()
        second = next_task(proc, tmp_path)
        assert second["status"] == "finished", second
        assert gtk_app.wait_state(lambda s: s["text"] == "lived in")["clicks"] == 1
        proc.stdin.write("next\n")
        proc.stdin.flush()
        third = next_task(proc, tmp_path)
        assert third["status"] == "finished", third
        assert gtk_app.wait_state(lambda s: s["clicks"] == 2)["text"] == "lived in"
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        stop_process(proc)
    # The backend was opened by the first task and reused: nothing grew by the third.
    assert third["fds"] - first["fds"] <= 2, (first, third)
    assert third["threads"] - first["threads"] <= 1, (first, third)
    assert third["rss_kb"] - first["rss_kb"] <= 30_000, (first, third)
