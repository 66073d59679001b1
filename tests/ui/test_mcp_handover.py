"""One desktop, one owner: while the desktop app runs, ``holodesk mcp`` hands a caller's task to it over
the single-instance channel, so the approval appears in the app the user knows.

The app is a real HolodeskApp in this process (real capture and input on the UI display, a scripted
policy), answering on the channel exactly as ``run_app`` wires it; ``holodesk mcp`` is a real child
process driven by the MCP SDK's client from a thread while this thread serves Qt (and the user's keys).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from PySide6.QtCore import Qt

from holodesk import instance
from holodesk.core.actions import Click, Done
from holodesk.core.geometry import Frame, Monitor, frame_pixel_to_point
from holodesk.policy.scripted import ScriptedPolicy, write_script
from holodesk.session.state import State
from holodesk.settings import Settings
from holodesk.ui.app import HolodeskApp
from holodesk.ui.remote import AppRemote
from tests.agent_server.mcp_helpers import holodesk_env, outcome_of, stdio_client_for
from tests.helpers.app_instance import private_runtime_dir
from tests.helpers.processes import pids_running
from tests.helpers.target import TargetWindow
from tests.ui.conftest import wait_overlay

pytestmark = [pytest.mark.gui, pytest.mark.e2e]


@pytest.fixture
def running_app(qtbot: Any, ui_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Factory ``running_app(script) -> HolodeskApp`` answering on this desktop's channel."""
    runtime = private_runtime_dir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    made: list[tuple[HolodeskApp, instance.ChannelServer]] = []

    def make(script: Path) -> HolodeskApp:
        app = HolodeskApp(Settings(data_dir=tmp_path / "app-data"), hotkeys=False, dialogs=False,
                          policy_factory=lambda s, progress: ScriptedPolicy(script),
                          settings_path=tmp_path / "settings.toml")
        lock = instance.InstanceLock.acquire()
        assert lock is not None
        server = instance.ChannelServer(lock, AppRemote(app).handle)
        server.start()
        app.start()
        made.append((app, server))
        return app

    yield make
    for app, server in made:
        app.shutdown(wait_s=10.0)
        server.close()
        server.lock.release()


def click_ok_script(server: Any, target: TargetWindow, path: Path) -> Path:
    screen = Frame(np.zeros((server.height, server.width, 3), dtype=np.uint8),
                   Monitor(1, 0, 0, server.width, server.height))
    return write_script(path, [Click(frame_pixel_to_point(screen, *target.center("OK"))), Done("clicked OK")])


def mcp_env(tmp_path: Path) -> dict[str, str]:
    # Its own (empty) data folder: the episode must land in the app's, because the app ran the task.
    env = holodesk_env(dict(os.environ), tmp_path / "mcp")
    env["XDG_RUNTIME_DIR"] = os.environ["XDG_RUNTIME_DIR"]  # the same desktop session as the app
    return env


def in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = anyio.run(fn)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_mcp_hands_the_task_to_the_running_app_whose_overlay_asks_the_user(qtbot: Any, ui_env: Any,
                                                                           running_app: Any, tmp_path: Path) -> None:
    with TargetWindow.start(tmp_path / "target", x=700, y=500) as target:
        app = running_app(click_ok_script(ui_env, target, tmp_path / "steps.jsonl"))
        progress: list[str] = []

        async def call() -> Any:
            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(message or "")

            async with stdio_client_for(mcp_env(tmp_path), tmp_path) as client:
                status = await client.call_tool("get_status", {})
                result = await client.call_tool("run_task", {"task": "click OK"}, progress_callback=on_progress)
                return status, result

        thread, box = in_thread(call)
        qtbot.waitUntil(lambda: app.approval.pending is not None or not thread.is_alive(), timeout=60000)
        assert "error" not in box, box.get("error")
        overlay = wait_overlay(qtbot, app, timeout_ms=60000)  # the app's own overlay, on the user's screen
        assert target.state()["clicks"] == []
        told = [n for n in app.notifier.history if n.title == "A task from another program"]
        assert len(told) == 1 and told[0].text.startswith("click OK\n")  # the user sees whose task it is
        qtbot.keyClick(overlay, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: not thread.is_alive(), timeout=60000)
        assert "error" not in box, box.get("error")
        status, result = box["value"]
        assert status.structured_content["host"] == "the Holodesk app"
        outcome = outcome_of(result)
        assert outcome["status"] == "finished" and outcome["answer"] == "clicked OK", outcome
        assert (tmp_path / "app-data" / "episodes" / outcome["episode_id"]).is_dir()
        assert not (tmp_path / "mcp" / "data" / "episodes").exists()
        assert len(progress) == 1 and "approved by the user" in progress[0]
        qtbot.waitUntil(lambda: target.state().get("clicks") == ["OK"], timeout=10000)
        assert app.last_result is not None and app.last_result.status is State.FINISHED


@pytest.mark.parametrize("how", ["cancel", "kill"])
def test_a_cancelled_call_or_a_dead_mcp_server_stops_the_apps_task(qtbot: Any, ui_env: Any, running_app: Any,
                                                                    tmp_path: Path, how: str) -> None:
    with TargetWindow.start(tmp_path / "target", x=700, y=500) as target:
        app = running_app(click_ok_script(ui_env, target, tmp_path / "steps.jsonl"))
        pids: list[int] = []

        async def call() -> None:
            async with stdio_client_for(mcp_env(tmp_path), tmp_path) as client, anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "run_task", {"task": "click OK"})
                while app.approval.pending is None:  # the app is waiting for the user's decision
                    await anyio.sleep(0.05)
                if how == "cancel":
                    tg.cancel_scope.cancel()
                else:  # the MCP server process dies: the channel connection closes
                    pids.extend(pids_running("-m holodesk mcp", parent=os.getpid()))
                    for pid in pids:
                        os.kill(pid, signal.SIGKILL)
                    await anyio.sleep(30)

        thread, box = in_thread(call)  # it cancels (or kills) once the app's approval is pending
        qtbot.waitUntil(lambda: (app.last_result is not None and not app.runner.running)
                        or (how == "cancel" and "error" in box), timeout=60000)
        if how == "cancel":
            assert "error" not in box, box.get("error")
        result = app.last_result
        assert result.status is State.STOPPED
        # cancel: the client cancels its call and closes its session at once, so the server may find it already
        # gone when the cancellation arrives; either way the record names the MCP client truthfully
        cancelled = ("stopped by the MCP client (it cancelled the call)",
                     "stopped by the MCP client (it went away: disconnected)")
        assert result.reason in (cancelled if how == "cancel" else ("stopped by the MCP client (it disconnected)",))
        qtbot.wait(500)
        assert target.state()["clicks"] == []  # the proposed click never happened
        if how == "kill":
            assert pids, "the holodesk mcp child process was not found"
        qtbot.waitUntil(lambda: not thread.is_alive(), timeout=60000)
        if how == "cancel":
            assert "error" not in box, box.get("error")
        else:  # the client sees its server die
            assert "Connection closed" in repr(box.get("error"))
        end = [line for line in (result.episode_path / "episode.jsonl").read_text().splitlines() if '"end"' in line]
        assert '"stopped_by": "the MCP client' in end[-1]


def test_a_call_while_the_users_own_task_runs_is_busy(qtbot: Any, ui_env: Any, running_app: Any,
                                                      tmp_path: Path) -> None:
    with TargetWindow.start(tmp_path / "target", x=700, y=500) as target:
        app = running_app(click_ok_script(ui_env, target, tmp_path / "steps.jsonl"))
        assert app.start_task("the user's own task")  # typed in the command box
        overlay = wait_overlay(qtbot, app, timeout_ms=60000)

        async def call() -> Any:
            async with stdio_client_for(mcp_env(tmp_path), tmp_path) as client:
                return await client.call_tool("run_task", {"task": "the caller's task"})

        thread, box = in_thread(call)
        qtbot.waitUntil(lambda: not thread.is_alive(), timeout=60000)
        assert "error" not in box, box.get("error")
        busy = outcome_of(box["value"])
        assert busy["status"] == "busy" and "another task is driving the desktop" in busy["reason"]
        assert app.runner.running and app.approval.pending is not None  # the user's task is untouched
        qtbot.keyClick(overlay, Qt.Key.Key_Escape)
        qtbot.waitUntil(lambda: not app.runner.running, timeout=30000)
        assert target.state()["clicks"] == []
