"""Driving ``holodesk mcp`` with the official MCP SDK's own client, against a real desktop.

The server is the real ``python -m holodesk mcp`` child process (stdio) on a :class:`Desktop` (Xvfb with
a window manager); the target is a third-party-toolkit program (the Tk form), read back through its own
state. A scripted policy (``--script``) replays the model's replies.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from holodesk.core.actions import Action, Point
from holodesk.core.geometry import Frame, Monitor, frame_pixel_to_point
from holodesk.policy.scripted import write_script
from tests.helpers.app_instance import private_runtime_dir

ROOT = Path(__file__).resolve().parents[2]


def holodesk_env(desktop_env: dict[str, str], tmp_path: Path, **settings: str) -> dict[str, str]:
    """The desktop's environment plus isolated Holodesk settings/data, a short private runtime folder and
    this worktree's code; ``settings`` become ``HOLODESK_<NAME>`` variables."""
    env = {k: v for k, v in desktop_env.items() if not k.startswith("HOLODESK_") or k == "HOLODESK_TESTING"}
    env["XDG_RUNTIME_DIR"] = str(private_runtime_dir())
    env["HOLODESK_CONFIG"] = str(tmp_path / "config" / "settings.toml")
    env["HOLODESK_DATA_DIR"] = str(tmp_path / "data")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "app"), str(ROOT)])
    env.update({f"HOLODESK_{k.upper()}": v for k, v in settings.items()})
    return env


def screen_point(width: int, height: int, x: int, y: int) -> Point:
    """The model point of screen pixel (x, y) on a ``width`` x ``height`` single-monitor screen."""
    screen = Frame(np.zeros((height, width, 3), dtype=np.uint8), Monitor(1, 0, 0, width, height))
    return frame_pixel_to_point(screen, x, y)


def script(path: Path, actions: Sequence[Action]) -> Path:
    return write_script(path, list(actions))


def stdio_client_for(env: dict[str, str], tmp_path: Path, *args: str) -> Client:
    """An SDK :class:`Client` that spawns ``python -m holodesk mcp ARGS`` (its stderr in tmp_path/mcp.log)."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "holodesk", "mcp", *args], env=env,
                                   cwd=str(ROOT))
    errlog = open(tmp_path / "mcp.log", "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the client
    return Client(stdio_client(params, errlog=errlog), read_timeout_seconds=240)


def outcome_of(result: Any) -> dict[str, Any]:
    """The run_task outcome (the tool's structured result)."""
    assert not result.is_error, result.content
    content = result.structured_content
    assert isinstance(content, dict), result
    return dict(content.get("result", content))


def episode_lines(data_dir: Path, episode_id: str) -> list[dict[str, Any]]:
    """The records of an episode's ``episode.jsonl``, one dict per line that ends in a newline: a record
    being written while a test polls the file (its tail, with no newline yet) is left for the next read."""
    import json

    path = data_dir / "episodes" / episode_id / "episode.jsonl"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]
