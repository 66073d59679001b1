"""A stand-in MCP host for tests: spawns ``holodesk mcp`` through the SDK's client, calls ``run_task``,
prints ``STEP <n>`` for each progress notification, and waits; the test then kills this process.

    python tests/agent_server/mcp_host.py ENV.json TASK MODE LOG [ARGS...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "app"), str(ROOT)]

from tests.agent_server.mcp_helpers import stdio_client_for  # noqa: E402


async def main() -> None:
    env = json.loads(Path(sys.argv[1]).read_text())
    task, mode, log = sys.argv[2], sys.argv[3], Path(sys.argv[4])

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        print(f"STEP {value:g} {message}", flush=True)

    async with stdio_client_for(env, log.parent, *sys.argv[5:]) as client:
        await client.call_tool("run_task", {"task": task, "mode": mode}, progress_callback=on_progress)
        print("DONE", flush=True)


if __name__ == "__main__":
    anyio.run(main)
