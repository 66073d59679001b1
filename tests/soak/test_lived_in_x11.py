"""Lived in, on X11: one Holodesk process runs task after task under openbox against a third-party Tk
program: ``holodesk mcp`` hosting the tasks itself, or the desktop app (with a tray host, and without one)
running the tasks an MCP client hands it, with the user active between tasks (copying text, switching the
keyboard layout, focusing and moving another program's window). Every task's effect is read from the Tk
form's own state; the user's clipboard is what the user left; the fds, threads and memory of the process
running the tasks after the last task stay within a small bound of task 5.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from holodesk.core.actions import Click, Done, Key, Type
from tests.agent_server.mcp_helpers import holodesk_env, outcome_of, screen_point, script, stdio_client_for
from tests.helpers.app_instance import start_app, wait_for_channel
from tests.helpers.desktop import Desktop
from tests.helpers.processes import stop_process
from tests.soak.conftest import SOAK_TASKS, Usage, child_pid, lock_keyboard_group, usage
from tests.ui.conftest import start_trayer

pytestmark = [pytest.mark.soak, pytest.mark.gui, pytest.mark.e2e]

W, H = 1280, 800
TYPED = "ab1"
"""What each task types into the form's name field: Latin letters and a digit, as on a US layout."""
TASK_WALL_S = 120
"""Each task's wall-time cap (seconds): a task takes about 4 s here, and a task that waits for an approval ends
failed at the cap (the MCP tool call's own timeout is the cap plus 60 s; the test's client waits 240 s)."""


def clipboard(desk: Desktop) -> str:
    """The CLIPBOARD selection's text on the desktop, as another program reads it (xclip)."""
    res = subprocess.run(["xclip", "-o", "-selection", "clipboard"], env=desk.env(), capture_output=True,
                         text=True, timeout=15)
    return res.stdout if res.returncode == 0 else ""


def user_copies(desk: Desktop, text: str) -> None:
    """The user copies ``text`` in another program (xclip owns the CLIPBOARD selection until replaced)."""
    subprocess.run(["xclip", "-i", "-selection", "clipboard"], input=text, env=desk.env(), text=True, timeout=15,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.parametrize("host", ["mcp", "app-with-tray", "app-without-tray"])
def test_one_process_runs_25_tasks_with_the_user_active_in_between(host: str, make_desktop: Any,
                                                                   tmp_path: Path) -> None:
    desk = make_desktop("openbox", W, H)
    desk.run("setxkbmap", "-layout", "us,ru")  # a bilingual keyboard: US first, Russian second
    form = desk.tk_form(60, 60)
    term = desk.launch(["xterm", "-geometry", "60x10+700+420", "-e", "cat"], wm_class="xterm")
    count, name = form.center("Count"), form.center("name")
    steps = script(tmp_path / "steps.jsonl", [Click(screen_point(W, H, *count)), Click(screen_point(W, H, *name)),
                                                Key(("end",)), Type(TYPED), Done("counted and typed")])
    # A step the autopilot should approve but asks instead waits for a user who is not there: the wall-time cap
    # (TASK_WALL_S) ends that task with the product's own answer (its step reports), before the MCP client's
    # 240 s read timeout would end the test with none.
    env = holodesk_env(desk.env(), tmp_path, mcp_allowed_modes="step,auto", autopilot_countdown_s="0.2",
                       max_wall_s=str(TASK_WALL_S))
    with contextlib.ExitStack() as stack:
        app_pid = None
        if host != "mcp":  # the desktop app runs the tasks the MCP server hands it
            if host == "app-with-tray":
                trayer = start_trayer(env)
                stack.callback(stop_process, trayer)
            # a user who set the app up before: a settings file exists (no first-run wizard), naming the policy
            config = Path(env["HOLODESK_CONFIG"])
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(f'policy = "script"\nscript_file = "{steps}"\n', encoding="utf-8")
            app_env = dict(env)
            log = tmp_path / "app.log"
            app = stack.enter_context(start_app(app_env, log))
            wait_for_channel(app_env, app, log)
            app_pid = app.pid
        seen = run_tasks(desk, form, term, env, steps, tmp_path, app_pid)
    first, last = seen[5], seen[SOAK_TASKS]
    growth = (last.fds - first.fds, last.threads - first.threads, last.rss_mib - first.rss_mib)
    print(f"X11 soak, {host}: growth from task 5 to {SOAK_TASKS} (fds, threads, MiB): {growth}")
    assert last.fds <= first.fds + 5, f"{last.fds - first.fds} more fds: {last.new_fds(first)}"
    assert last.threads <= first.threads + 2, (first, last)
    assert last.rss_mib <= first.rss_mib + 30, (first, last)


def run_tasks(desk: Desktop, form: Any, term: Any, env: dict[str, str], steps: Path, tmp_path: Path,
              app_pid: int | None) -> dict[int, Usage]:
    """Run :data:`SOAK_TASKS` tasks through one MCP client session, the user active before each; returns the
    usage of the process running them (the app, or the MCP server) after task 5 and the last task."""
    seen: dict[int, Usage] = {}

    def between(i: int) -> None:
        """What the user does before task ``i`` (1-based)."""
        user_copies(desk, f"the user's own copy {i} — ünïcode")
        kind = i % 4
        if kind == 1:
            assert lock_keyboard_group(desk.display, 1) == 1  # the Russian layout is active
        elif kind == 2:
            term.activate()  # another program has the focus
        elif kind == 3:
            desk.xdotool("windowmove", str(term.window), str(640 + 10 * (i % 7)), "400")  # moved about
        else:
            assert lock_keyboard_group(desk.display, 0) == 0

    async def main() -> None:
        async with stdio_client_for(env, tmp_path, "--script", str(steps)) as client:
            pid = app_pid if app_pid is not None else child_pid("holodesk mcp")
            for i in range(1, SOAK_TASKS + 1):
                between(i)
                result = await client.call_tool("run_task", {"task": f"task {i}: count and type", "mode": "auto"})
                outcome = outcome_of(result)
                assert outcome["status"] == "finished", (i, outcome)
                state = form.wait_layout(lambda lay, i=i: lay["count"] == i and lay["name"] == TYPED * i)
                assert state["count"] == i and state["name"] == TYPED * i, (i, state)
                assert clipboard(desk) == f"the user's own copy {i} — ünïcode", i
                if i in (5, SOAK_TASKS):
                    seen[i] = usage(pid)

    anyio.run(main)
    return seen
