"""``holodesk mcp`` over stdio, driven by the MCP SDK's own client, acting on a real Tk window under
openbox. No Holodesk app runs, so the MCP server hosts the task itself (headless app: the approval
overlay and the autopilot countdown still show on the desktop).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from holodesk.core.actions import Click, Done, Wait
from tests.agent_server.mcp_helpers import (
    episode_lines,
    holodesk_env,
    outcome_of,
    screen_point,
    script,
    stdio_client_for,
)
from tests.helpers.desktop import Desktop, wait_until
from tests.helpers.processes import pids_running

pytestmark = [pytest.mark.gui, pytest.mark.e2e]

W, H = 1280, 800


@pytest.fixture
def scene(make_desktop: Any, tmp_path: Path) -> tuple[Desktop, Any]:
    desk = make_desktop("openbox", W, H)
    form = desk.tk_form(300, 200)
    return desk, form


def count_clicks(form: Any, n: int) -> list[Any]:
    return [Click(screen_point(W, H, *form.center("Count"))) for _ in range(n)]


def test_run_task_acts_on_a_real_window_reports_each_step_and_returns_the_outcome(scene: Any, tmp_path: Path,
                                                                                  caplog: Any) -> None:
    desk, form = scene
    steps = script(tmp_path / "steps.jsonl", [*count_clicks(form, 2), Done("clicked Count twice")])
    env = holodesk_env(desk.env(), tmp_path, mcp_allowed_modes="step,auto", autopilot_countdown_s="0.3")
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async def main() -> tuple[Any, Any, Any, Any]:
        async with stdio_client_for(env, tmp_path, "--script", str(steps)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"run_task", "get_status", "list_episodes"} <= tools
            result = await client.call_tool("run_task", {"task": "click Count twice", "mode": "auto"},
                                            progress_callback=on_progress)
            episodes = await client.call_tool("list_episodes", {})
            outcome = outcome_of(result)
            record = await client.read_resource(f"holodesk://episodes/{outcome['episode_id']}")
            try:
                await client.read_resource(f"holodesk://episodes/{outcome['episode_id']}/step-000.png")
            except MCPError as exc:
                shot = exc
            else:
                raise AssertionError("a screenshot was shared although the user did not allow it")
            return result, episodes, record, shot

    result, episodes, record, shot = anyio.run(main)
    outcome = outcome_of(result)
    assert outcome["status"] == "finished" and outcome["answer"] == "clicked Count twice", outcome
    assert outcome["steps"] == 3
    # The target program's own state: two clicks on its Count button.
    assert form.wait_layout(lambda lay: lay["count"] == 2)["count"] == 2
    time.sleep(0.5)
    assert form.layout()["count"] == 2
    # One progress notification per performed step, in plain words.
    assert [v for v, _ in progress] == [1.0, 2.0]
    for _, message in progress:
        assert message is not None and "Click" in message and "approved by the autopilot" in message
        assert message.endswith("performed") or "verified" in message or "clicked" in message.lower()
    assert [r["decision"] for r in outcome["step_reports"]] == ["approved by the autopilot"] * 2
    # The episode is listed and readable as a resource; its screenshots are not shared by default.
    listed = episodes.structured_content["result"]
    assert listed[0]["episode_id"] == outcome["episode_id"] and listed[0]["status"] == "finished"
    text = record.contents[0].text
    assert '"type": "end"' in text and "click Count twice" in text
    assert "not allowed sharing screenshots" in str(shot)
    # Nothing but protocol messages on the server's stdout (python-xlib prints warnings to stdout, and this
    # test display's empty Xauthority file makes it print them).
    assert not [r for r in caplog.records if "Failed to parse JSONRPC message" in r.getMessage()]


def test_cancelling_run_task_leaves_the_next_action_unperformed_and_the_record_says_who(scene: Any,
                                                                                        tmp_path: Path) -> None:
    desk, form = scene
    first, second = count_clicks(form, 2)
    steps = script(tmp_path / "steps.jsonl", [first, Wait(20), second, Done("never reached")])
    env = holodesk_env(desk.env(), tmp_path, mcp_allowed_modes="step,auto", autopilot_countdown_s="0.3")

    box: dict[str, float] = {}

    async def main() -> Any:
        async with stdio_client_for(env, tmp_path, "--script", str(steps)) as client:
            stepped = anyio.Event()

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                if value >= 1:
                    stepped.set()

            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    await client.call_tool("run_task", {"task": "click, wait, click", "mode": "auto"},
                                           progress_callback=on_progress)

                tg.start_soon(call)
                with anyio.fail_after(120):
                    await stepped.wait()  # the first click was performed; the wait (step 2) is under way
                await anyio.sleep(1.5)
                box["cancelled_at"] = time.time()
                tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled for the call
            cancelled_at = time.monotonic()
            # The server records the stop; the same client can still ask.
            with anyio.fail_after(60):
                while True:
                    listed = (await client.call_tool("list_episodes", {})).structured_content["result"]
                    if listed and listed[0]["status"] != "running or interrupted":
                        return listed[0], time.monotonic() - cancelled_at
                    await anyio.sleep(0.1)

    latest, took = anyio.run(main)
    assert latest["status"] == "stopped", latest
    assert took < 5, f"the run took {took:.1f} s to stop after the cancellation"
    end = episode_lines(tmp_path / "data", latest["episode_id"])[-1]
    assert end["type"] == "end" and end["stopped_by"] == "the MCP client (it cancelled the call)", end
    assert end["reason"] == "stopped by the MCP client (it cancelled the call)"
    # The wait in progress ended at the stop request, and the run ended within 1 s of the cancellation.
    assert end["ended_at"] - box["cancelled_at"] < 1.0
    # The target program's state: the first click happened, the one after the wait never did.
    time.sleep(1.0)
    assert form.layout()["count"] == 1


def test_step_mode_shows_the_overlay_a_rejected_step_is_reported_and_a_second_call_is_busy(scene: Any,
                                                                                           tmp_path: Path) -> None:
    desk, form = scene
    steps = script(tmp_path / "steps.jsonl", [*count_clicks(form, 1), Done("the user said no")])
    env = holodesk_env(desk.env(), tmp_path)  # the defaults: callers get step mode only
    progress: list[str] = []

    def overlay() -> str:
        ids = desk.xdotool("search", "--onlyvisible", "--name", "^Holodesk approval$", check=False).split()
        return ids[0] if ids else ""

    async def main() -> tuple[Any, Any, Any]:
        async with stdio_client_for(env, tmp_path, "--script", str(steps)) as client:
            box: dict[str, Any] = {}

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(message or "")

            async def call() -> None:
                box["first"] = await client.call_tool("run_task", {"task": "click Count, if you may"},
                                                      progress_callback=on_progress)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                with anyio.fail_after(120):  # the approval overlay is on the user's screen, waiting
                    while not (window := await anyio.to_thread.run_sync(overlay)):
                        await anyio.sleep(0.1)
                box["busy"] = await client.call_tool("run_task", {"task": "a second task"})
                assert form.layout()["count"] == 0  # nothing happens before the decision
                await anyio.to_thread.run_sync(lambda: desk.xdotool("windowactivate", window, check=False))
                await anyio.to_thread.run_sync(lambda: wait_until(
                    lambda: desk.xdotool("getactivewindow", check=False).strip() == window, 30,
                    "the overlay to have the keyboard focus"))
                await anyio.to_thread.run_sync(lambda: desk.xdotool("key", "s"))  # S: skip (reject) the step
            # The user allowed callers step mode only: asking for the autopilot is refused.
            refused = await client.call_tool("run_task", {"task": "autopilot please", "mode": "auto"})
            return box["first"], box["busy"], refused

    first, busy, refused = anyio.run(main)
    outcome = outcome_of(first)
    assert outcome["status"] == "finished", outcome
    report = outcome["step_reports"][0]
    assert report["decision"] == "rejected (skipped) by the user" and report["performed"] is False
    assert len(progress) == 1 and "rejected (skipped) by the user" in progress[0]
    assert outcome_of(busy)["status"] == "busy" and "busy" in outcome_of(busy)["reason"]
    assert refused.is_error and "not allowed" in refused.content[0].text
    time.sleep(0.5)
    assert form.layout()["count"] == 0  # the rejected click was never performed


@pytest.mark.parametrize("how", ["host killed", "server terminated"])
def test_the_host_exiting_stops_the_task_before_its_next_action(scene: Any, tmp_path: Path, how: str) -> None:
    """The MCP host (the agent that spawned ``holodesk mcp``) is killed mid-task, so the server sees its
    stdin close; or the host ends the server with SIGTERM. Either way the task stops before the next
    action, the record says who stopped it, and the server exits."""
    import json
    import signal
    import subprocess
    import sys

    desk, form = scene
    first, second = count_clicks(form, 2)
    steps = script(tmp_path / "steps.jsonl", [first, Wait(20), second, Done("never reached")])
    env = holodesk_env(desk.env(), tmp_path, mcp_allowed_modes="step,auto", autopilot_countdown_s="0.3")
    (tmp_path / "env.json").write_text(json.dumps(env))
    host = subprocess.Popen([sys.executable, str(Path(__file__).parent / "mcp_host.py"), str(tmp_path / "env.json"),
                             "click, wait, click", "auto", str(tmp_path / "mcp.log"), "--script", str(steps)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
    try:
        assert host.stdout is not None
        line = host.stdout.readline()  # blocks until the first step was performed
        assert line.startswith("STEP 1"), line
        time.sleep(1.5)  # the wait (step 2) is under way
        if how == "host killed":
            host.send_signal(signal.SIGKILL)  # the host dies; its child, the MCP server, sees its stdin close
        else:
            for pid in server_pids(steps):
                os.kill(pid, signal.SIGTERM)
        killed_at = time.time()
        episodes = tmp_path / "data" / "episodes"
        folder = wait_until(lambda: next(iter(episodes.iterdir()), None), 30, "the episode folder")
        end = wait_until(lambda: [r for r in episode_lines(tmp_path / "data", folder.name) if r["type"] == "end"],
                         30, "the episode's end record")[0]
        by = ("the MCP client (it went away: disconnected)" if how == "host killed"
              else "the MCP client (its host ended the server)")
        assert end["status"] == "stopped" and end["stopped_by"] == by, end
        assert end["ended_at"] - killed_at < 5.0
        time.sleep(1.0)
        assert form.layout()["count"] == 1  # the click after the wait never happened
        wait_until(lambda: not server_pids(steps), 30, "the MCP server to exit")
    finally:
        host.kill()
        host.wait(10)
        for pid in server_pids(steps):  # only if the server outlived its host (a failure above)
            os.kill(pid, signal.SIGKILL)


def server_pids(steps: Path) -> list[int]:
    """Process ids of the ``holodesk mcp`` started with this test's own script file."""
    return pids_running("-m holodesk mcp --script", str(steps))


def test_two_mcp_servers_and_a_terminal_run_never_drive_the_desktop_at_once(scene: Any, tmp_path: Path) -> None:
    """No app runs; two agents each start their own ``holodesk mcp`` on the same desktop. While the first
    one's task waits at its overlay, the second server's call is busy, and so is ``holodesk run``."""
    import subprocess
    import sys

    desk, form = scene
    steps = script(tmp_path / "steps.jsonl", [*count_clicks(form, 1), Done("done")])
    env = holodesk_env(desk.env(), tmp_path)

    def overlay() -> bool:
        return bool(desk.xdotool("search", "--onlyvisible", "--name", "^Holodesk approval$", check=False).split())

    async def main() -> tuple[Any, Any]:
        async with stdio_client_for(env, tmp_path, "--script", str(steps)) as first, \
                stdio_client_for(env, tmp_path, "--script", str(steps)) as second, \
                anyio.create_task_group() as tg:
            tg.start_soon(first.call_tool, "run_task", {"task": "click Count"})
            with anyio.fail_after(120):
                while not await anyio.to_thread.run_sync(overlay):
                    await anyio.sleep(0.1)
            busy = await second.call_tool("run_task", {"task": "another agent's task"})
            terminal = await anyio.to_thread.run_sync(lambda: subprocess.run(
                [sys.executable, "-m", "holodesk", "run", "click Count", "--script", str(steps)], env=env,
                capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL))
            tg.cancel_scope.cancel()  # the first agent gives up: its task stops
            return busy, terminal

    busy, terminal = anyio.run(main)
    outcome = outcome_of(busy)
    assert outcome["status"] == "busy" and "another Holodesk task is driving this desktop" in outcome["reason"]
    assert terminal.returncode == 2 and "another Holodesk task is driving this desktop" in terminal.stderr
    assert "Traceback" not in terminal.stderr
    time.sleep(0.5)
    assert form.layout()["count"] == 0  # nobody clicked: the one task that drove the desktop was stopped


def test_progress_keeps_flowing_while_a_step_waits_for_the_user(scene: Any, tmp_path: Path) -> None:
    """A step waits on the approval overlay (step mode): the host still gets progress notifications, with
    increasing values below the next step, so it sees the call is alive (hosts end silent calls)."""
    desk, form = scene
    steps = script(tmp_path / "steps.jsonl", [*count_clicks(form, 1), Done("never reached")])
    env = holodesk_env(desk.env(), tmp_path)  # callers get step mode: the step waits for the user
    progress: list[tuple[float, str]] = []

    async def main() -> None:
        async with stdio_client_for(env, tmp_path, "--script", str(steps)) as client:
            beats = anyio.Event()

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append((value, message or ""))
                if len(progress) >= 2:
                    beats.set()

            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    await client.call_tool("run_task", {"task": "click Count, when allowed"},
                                           progress_callback=on_progress)

                tg.start_soon(call)
                with anyio.fail_after(120):
                    await beats.wait()
                tg.cancel_scope.cancel()

    anyio.run(main)
    values = [v for v, _ in progress]
    assert values == sorted(set(values)) and 0 < values[0] < values[1] < 1, progress
    assert all("waiting for the user's approval" in m for _, m in progress), progress
    assert form.layout()["count"] == 0  # nothing was approved, nothing happened
