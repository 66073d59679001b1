"""``holodesk mcp --print-config HOST``: snippets that Claude Code, Cursor and Codex can take as they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

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
    assert server == {"command": sys.executable, "args": ["-m", "holodesk", "mcp"]}
    codex = tomllib.loads(body(print_config("codex").stdout))["mcp_servers"]["holodesk"]
    assert codex == {"command": sys.executable, "args": ["-m", "holodesk", "mcp"]}
    claude = print_config("claude-code").stdout.strip()
    assert claude == f"claude mcp add holodesk -- {sys.executable} -m holodesk mcp"


def test_http_snippets_carry_the_url_and_the_token() -> None:
    cursor = json.loads(body(print_config("cursor", "--http", "--port", "9123", token="tok-123").stdout))
    assert cursor["mcpServers"]["holodesk"] == {"url": "http://127.0.0.1:9123/mcp",
                                                "headers": {"Authorization": "Bearer tok-123"}}
    codex_out = print_config("codex", "--http", "--port", "9123", token="tok-123").stdout
    codex = tomllib.loads(body(codex_out))["mcp_servers"]["holodesk"]
    assert codex == {"url": "http://127.0.0.1:9123/mcp", "bearer_token_env_var": "HOLODESK_MCP_TOKEN"}
    assert "HOLODESK_MCP_TOKEN=tok-123" in codex_out
    claude = print_config("claude-code", "--http", "--port", "9123", token="tok-123").stdout
    assert "claude mcp add --transport http holodesk http://127.0.0.1:9123/mcp" in claude
    assert "'Authorization: Bearer tok-123'" in claude


@pytest.mark.parametrize("host", ["vscode", ""])
def test_an_unknown_host_is_refused(host: str) -> None:
    res = print_config(host)
    assert res.returncode == 2 and "invalid choice" in res.stderr
