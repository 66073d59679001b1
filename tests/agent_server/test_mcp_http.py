"""``holodesk mcp --http``: the SDK's streamable HTTP transport on 127.0.0.1, behind a bearer token.

The real ``python -m holodesk mcp --http`` child process; a request without the token (or with a wrong
one) is refused with 401 before it reaches the MCP layer; the SDK's own client with the token works, and
cancelling its run_task call stops the task within a second (a replayed ``wait`` on a plain Xvfb).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from holodesk.core.actions import Done, Wait
from holodesk.policy.scripted import write_script
from tests.agent_server.mcp_helpers import ROOT, episode_lines, holodesk_env
from tests.helpers.processes import stop_process

pytestmark = pytest.mark.gui

TOKEN = "test-token-4f1c9b2e7a"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "1"}}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_http_transport_needs_the_token_and_a_cancelled_call_stops_the_task(make_xvfb: Any, tmp_path: Path) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    server = make_xvfb(1024, 768)
    env = holodesk_env(server.env(), tmp_path, mcp_token=TOKEN, mcp_allowed_modes="step,auto",
                       autopilot_countdown_s="0.2")
    steps = write_script(tmp_path / "steps.jsonl", [Wait(30), Done("never reached")])
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    log = open(tmp_path / "mcp-http.log", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen([sys.executable, "-m", "holodesk", "mcp", "--http", "--port", str(port),
                             "--script", str(steps)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(ROOT))
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "mcp-http.log").read_text()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.1)
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        bare = httpx.post(url, json=INITIALIZE, headers=headers, timeout=10)
        assert bare.status_code == 401 and "bearer token" in bare.text
        wrong = httpx.post(url, json=INITIALIZE, headers={**headers, "Authorization": "Bearer nope"}, timeout=10)
        assert wrong.status_code == 401
        assert "mcp-session-id" not in {k.lower() for k in wrong.headers}

        async def with_token() -> tuple[set[str], Any]:
            import httpx2

            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as http, \
                    Client(streamable_http_client(url, http_client=http)) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                status = await client.call_tool("get_status", {})
                # Cancelling a call over HTTP stops the task too (the wait in progress ends at once).
                box: dict[str, Any] = {}

                async def call() -> None:
                    box["result"] = await client.call_tool("run_task", {"task": "wait a while", "mode": "auto"})

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    with anyio.fail_after(60):
                        while not (await client.call_tool("get_status", {})).structured_content["running"]:
                            assert "result" not in box, box["result"]  # it ended before it was seen running
                            await anyio.sleep(0.1)
                    await anyio.sleep(1.5)
                    assert "result" not in box, box["result"]
                    cancelled_at = time.time()
                    tg.cancel_scope.cancel()
                with anyio.fail_after(30):
                    while (await client.call_tool("get_status", {})).structured_content["running"]:
                        await anyio.sleep(0.1)
                latest = (await client.call_tool("list_episodes", {})).structured_content["result"][0]
                return tools, status, latest, cancelled_at

        tools, status, latest, cancelled_at = anyio.run(with_token)
        end = episode_lines(tmp_path / "data", latest["episode_id"])[-1]
        assert end["status"] == "stopped" and end["stopped_by"] == "the MCP client", end
        assert end["ended_at"] - cancelled_at < 1.0
        assert {"run_task", "get_status", "list_episodes"} <= tools
        assert status.structured_content["running"] is False
        assert "this MCP server" in status.structured_content["host"]
    finally:
        stop_process(proc)
        log.close()
