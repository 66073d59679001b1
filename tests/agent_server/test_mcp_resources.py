"""Episodes through MCP: listed newest first, the JSONL record readable, screenshots only when the user
allowed sharing them, nothing outside the episodes folder. The SDK's client talks to the real server
object in-process (no desktop needed: these calls never drive the screen)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from holodesk.mcp_server import Desk, build_server
from holodesk.settings import Settings


def make_episode(root: Path, name: str, task: str, status: str) -> Path:
    folder = root / "episodes" / name
    folder.mkdir(parents=True)
    lines = [{"type": "start", "task": task, "started_at": 1.0},
             {"type": "step", "step": 0, "frame": "step-000.png"},
             {"type": "end", "status": status, "reason": "because", "steps": 1}]
    (folder / "episode.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    (folder / "step-000.png").write_bytes(b"\x89PNG\r\n\x1a\nfake-frame")  # a fake frame: bytes are compared
    return folder


def serve(settings: Settings, body: Any) -> Any:
    async def main() -> Any:
        async with Client(build_server(Desk(None), settings)) as client:
            return await body(client)

    return anyio.run(main)


@pytest.mark.parametrize("share", [False, True])
def test_episodes_are_listed_and_readable_screenshots_only_when_shared(tmp_path: Path, share: bool) -> None:
    make_episode(tmp_path, "20261201-100000-first", "first task", "finished")
    make_episode(tmp_path, "20261201-110000-second", "second task", "stopped")
    settings = Settings(data_dir=tmp_path, mcp_share_screenshots=share)

    async def body(client: Any) -> Any:
        listed = (await client.call_tool("list_episodes", {})).structured_content["result"]
        record = await client.read_resource("holodesk://episodes/20261201-100000-first")
        try:
            shot: Any = await client.read_resource("holodesk://episodes/20261201-100000-first/step-000.png")
        except MCPError as exc:
            shot = exc
        return listed, record, shot

    listed, record, shot = serve(settings, body)
    assert [e["episode_id"] for e in listed] == ["20261201-110000-second", "20261201-100000-first"]
    assert listed[0]["status"] == "stopped" and listed[1]["task"] == "first task"
    assert '"type": "end"' in record.contents[0].text
    if share:
        import base64

        assert base64.b64decode(shot.contents[0].blob) == b"\x89PNG\r\n\x1a\nfake-frame"
    else:
        assert isinstance(shot, MCPError) and "not allowed sharing screenshots" in str(shot)


@pytest.mark.parametrize("uri", ["holodesk://episodes/..%2F..%2Fetc", "holodesk://episodes/nope",
                                 "holodesk://episodes/20261201-100000-first/..%2Fepisode.jsonl",
                                 "holodesk://episodes/20261201-100000-first/secret.txt"])
def test_nothing_outside_an_episode_is_served(tmp_path: Path, uri: str) -> None:
    make_episode(tmp_path, "20261201-100000-first", "first task", "finished")
    (tmp_path / "secret.txt").write_text("not for callers")
    settings = Settings(data_dir=tmp_path, mcp_share_screenshots=True)

    async def body(client: Any) -> Any:
        with pytest.raises(MCPError):
            await client.read_resource(uri)

    serve(settings, body)
