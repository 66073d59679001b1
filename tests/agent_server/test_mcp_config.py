"""``holodesk mcp --print-config HOST``: snippets that Claude Code, Cursor and Codex can take as they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def print_config(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLODESK_")}
    env["PYTHONPATH"] = str(ROOT / "app")
    if token is not None:
        env["HOLODESK_MCP_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "holodesk", "mcp", "--print-config", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def body(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(("//", "#")))


def test_stdio_snippets_start_this_installations_holodesk_mcp() -> None:
    cursor = print_config("cursor")
    assert cursor.returncode == 0, cursor.stderr
    server = json.loads(body(cursor.stdout))["mcpServers"]["holodesk"]
    assert (server["command"], server["args"]) == (sys.executable, ["-m", "holodesk", "mcp"])
    codex = tomllib.loads(body(print_config("codex").stdout))["mcp_servers"]["holodesk"]
    assert (codex["command"], codex["args"]) == (sys.executable, ["-m", "holodesk", "mcp"])
    claude = body(print_config("claude-code").stdout).strip()
    assert claude.startswith("claude mcp add holodesk -e ")
    assert claude.endswith(f" -- {sys.executable} -m holodesk mcp")


def test_http_snippets_carry_the_url_and_the_token() -> None:
    cursor = json.loads(body(print_config("cursor", "--http", "--port", "9123", token="tok-123").stdout))
    assert cursor["mcpServers"]["holodesk"] == {"url": "http://127.0.0.1:9123/mcp",
                                                "headers": {"Authorization": "Bearer tok-123"}}
    codex_out = print_config("codex", "--http", "--port", "9123", token="tok-123").stdout
    codex = tomllib.loads(body(codex_out))["mcp_servers"]["holodesk"]
    assert codex == {"url": "http://127.0.0.1:9123/mcp", "bearer_token_env_var": "HOLODESK_MCP_TOKEN",
                     "tool_timeout_sec": 960}
    assert "HOLODESK_MCP_TOKEN=tok-123" in codex_out
    claude = print_config("claude-code", "--http", "--port", "9123", token="tok-123").stdout
    assert "claude mcp add --transport http holodesk http://127.0.0.1:9123/mcp" in claude
    assert "'Authorization: Bearer tok-123'" in claude


@pytest.mark.parametrize("host", ["vscode", ""])
def test_an_unknown_host_is_refused(host: str) -> None:
    res = print_config(host)
    assert res.returncode == 2 and "invalid choice" in res.stderr


# -- the snippets as hosts run them (issue 30, item 7) ---------------------------------------------------
CODEX_PASSES = ("HOME", "PATH", "USER", "LANG", "TERM", "TMPDIR", "TZ")
"""What Codex gives a stdio server of its own environment; the rest comes from the snippet's env table."""


def desktop_settings(env: dict[str, str], tmp_path: Path, steps: Path) -> None:
    """The user's settings file (``HOLODESK_CONFIG`` in ``env``): replay ``steps``; callers may use the
    autopilot, whose countdown is short."""
    from holodesk.settings import Settings, save_settings

    save_settings(Settings(policy="script", script_file=steps, mcp_allowed_modes="step,auto",
                           autopilot_countdown_s=0.3, data_dir=tmp_path / "data"), Path(env["HOLODESK_CONFIG"]))


@pytest.mark.gui
@pytest.mark.e2e
def test_the_codex_snippet_as_pasted_runs_a_task_with_only_what_codex_passes(make_desktop: Any,
                                                                            tmp_path: Path) -> None:
    """Printed in a terminal of the desktop, pasted into Codex's config.toml, started the way Codex starts
    stdio servers (HOME, PATH, USER, LANG, TERM, TMPDIR, TZ and the snippet's env): the task clicks the
    real Tk form's button."""
    import anyio

    from holodesk.core.actions import Click, Done
    from tests.agent_server.mcp_helpers import holodesk_env, outcome_of, screen_point, script

    desk = make_desktop("openbox", 1280, 800)
    form = desk.tk_form(300, 200)
    terminal = holodesk_env(desk.env(), tmp_path)  # the user's desktop terminal
    steps = script(tmp_path / "steps.jsonl", [Click(screen_point(1280, 800, *form.center("Count"))), Done("ok")])
    desktop_settings(terminal, tmp_path, steps)
    printed = subprocess.run([sys.executable, "-m", "holodesk", "mcp", "--print-config", "codex"], env=terminal,
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    pasted = tomllib.loads(printed.stdout)["mcp_servers"]["holodesk"]
    assert pasted["tool_timeout_sec"] >= 900 + 60  # longer than a task may run (max_wall_s), approvals included
    assert {"DISPLAY", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS"} <= set(pasted["env"]), pasted
    started = {k: v for k, v in terminal.items() if k in CODEX_PASSES} | pasted["env"]

    async def main() -> Any:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=pasted["command"], args=pasted["args"], env=started)
        with open(tmp_path / "mcp.log", "a", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=240) as client:
                return await client.call_tool("run_task", {"task": "click Count", "mode": "auto"})

    outcome = outcome_of(anyio.run(main))
    assert outcome["status"] == "finished", outcome
    assert form.wait_layout(lambda lay: lay["count"] == 1)["count"] == 1  # the program's own state


@pytest.mark.parametrize("host", ["cursor", "claude-code"])
def test_the_other_stdio_snippets_carry_the_desktop_session(host: str) -> None:
    env = {"DISPLAY": ":7", "XDG_RUNTIME_DIR": "/run/user/1000", "XAUTHORITY": "/home/u/.Xauthority",
           "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus"}
    res = subprocess.run([sys.executable, "-m", "holodesk", "mcp", "--print-config", host], capture_output=True,
                         text=True, timeout=60,
                         env={**{k: v for k, v in os.environ.items() if not k.startswith(("HOLODESK_", "DISPLAY",
                                                                                          "WAYLAND_"))},
                              "PYTHONPATH": str(ROOT / "app"), **env})
    assert res.returncode == 0, res.stderr
    if host == "cursor":
        server = json.loads(body(res.stdout))["mcpServers"]["holodesk"]
        assert env.items() <= server["env"].items(), server
    else:
        import shlex

        words = shlex.split(body(res.stdout))
        given = dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "-e")
        assert env.items() <= given.items(), words
        assert "MCP_TOOL_TIMEOUT=960000" in res.stdout


def test_without_a_desktop_the_server_answers_and_run_task_says_what_is_missing(tmp_path: Path) -> None:
    """Started by a host that passes no desktop variables: ``initialize`` and the tools answer; a task
    returns a tool error naming the missing desktop and how to give it (not "Connection closed")."""
    import anyio
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "PYTHONPATH": str(ROOT / "app"), "HOLODESK_CONFIG": str(tmp_path / "settings.toml"),
           "HOLODESK_DATA_DIR": str(tmp_path / "data")}

    async def main() -> tuple[set[str], Any, Any]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "holodesk", "mcp"], env=env)
        with open(tmp_path / "mcp.log", "a", encoding="utf-8") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=120) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                status = await client.call_tool("get_status", {})
                return tools, status, await client.call_tool("run_task", {"task": "click OK"})

    tools, status, result = anyio.run(main)
    assert {"run_task", "get_status", "list_episodes"} <= tools
    assert "no desktop" in str(status.structured_content), status
    assert result.is_error
    text = result.content[0].text
    assert "no desktop to work on" in text and "DISPLAY is unset" in text and "--print-config" in text, text
