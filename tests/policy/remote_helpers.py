"""Shared pieces of the remote-policy tests: start/stop the scripted server process, frames, and a small
action-protocol double for tests that exercise HTTP behaviour rather than the protocol itself."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from holodesk.core.actions import action_from_dict
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import PolicyOutputError
from holodesk.policy.base import HistoryStep, Observation
from tests.helpers.processes import stop_process

SERVER_SCRIPT = Path(__file__).with_name("scripted_openai_server.py")
START_TIMEOUT_S = 20.0


class ScriptedServer:
    """The scripted OpenAI-compatible server (scripted_openai_server.py) as a child process on 127.0.0.1."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("PORT "):
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"scripted server exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
        else:
            self.stop()
            raise RuntimeError("scripted server did not start in time")
        self.port = int(line.split()[1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/v1"

    def _control(self, path: str, payload: Any | None = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.base + path, data=data, method="GET" if data is None else "POST")
        with urllib.request.urlopen(req, timeout=10) as resp:  # loopback only
            return json.loads(resp.read())

    def script(self, *behaviours: dict[str, Any]) -> None:
        self._control("/_control/script", {"chat": list(behaviours)})

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        reqs = self._control("/_control/requests")
        return [r for r in reqs if path is None or r["path"] == path]

    def chat_requests(self) -> list[dict[str, Any]]:
        return self.requests("/v1/chat/completions")

    def reset(self) -> None:
        self._control("/_control/reset", {})

    def release(self) -> None:
        """Let a stream held at ``hold_after`` go on."""
        self._control("/_control/release", {})

    def stop(self) -> None:
        stop_process(self.proc)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


def make_frame(width: int = 320, height: int = 200, seed: int = 0, monitor: Monitor | None = None) -> Frame:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    mon = monitor or Monitor(index=1, left=0, top=0, width=width, height=height)
    return Frame(pixels, mon)


def make_observation(
    task: str = "open the settings", history: int = 0, size: tuple[int, int] = (320, 200)
) -> Observation:
    steps = tuple(
        HistoryStep(index=i, frame=make_frame(*size, seed=100 + i), action=None, thought=f"step {i}",
                    raw_text="{}", outcome="performed")
        for i in range(history)
    )
    return Observation(task=task, frame=make_frame(*size, seed=1), history=steps)


def click_reply(x: int = 500, y: int = 250, thought: str = "click the gear", note: str | None = None) -> str:
    return json.dumps({"note": note, "thought": thought, "tool_call": {"tool_name": "click", "x": x, "y": y}})


@dataclass
class ParsedReplyDouble:
    action: Any
    thought: str
    note: str | None
    raw_text: str
    warnings: list[str] = field(default_factory=list)


class ProtocolDouble:
    """Implements the ActionProtocol interface with a tiny click-only schema. Used where the test is about
    HTTP behaviour; the real protocol is exercised by test_remote_protocol_roundtrip."""

    name = "double-v0"
    SYSTEM = "You operate a computer. Reply with one JSON object."

    def system_prompt(self, *, reasoning: bool = False, reasoning_line: bool = True) -> str:
        if not reasoning_line:
            return self.SYSTEM
        return self.SYSTEM + (" /think" if reasoning else " /no_think")

    def json_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "note": {"type": ["string", "null"]},
                "thought": {"type": "string"},
                "tool_call": {
                    "type": "object",
                    "properties": {
                        "tool_name": {"const": "click"},
                        "x": {"type": "integer", "minimum": 0, "maximum": 1000},
                        "y": {"type": "integer", "minimum": 0, "maximum": 1000},
                    },
                    "required": ["tool_name", "x", "y"],
                },
            },
            "required": ["note", "thought", "tool_call"],
        }

    def parse(self, raw_text: str, *, pointer: Any = None) -> ParsedReplyDouble:
        try:
            data = json.loads(raw_text)
            call = data["tool_call"]
            action = action_from_dict({"kind": call["tool_name"], "point": {"x": call["x"], "y": call["y"]}})
        except Exception as exc:
            raise PolicyOutputError(f"not a valid reply: {exc}", raw_text=raw_text) from exc
        return ParsedReplyDouble(action, data.get("thought", ""), data.get("note"), raw_text)

    def build_messages(self, observation: Observation, *, max_images: int = 3, reasoning: bool = False,
                       reasoning_line: bool = True) -> list[dict]:
        past = [s.frame for s in observation.history if s.frame is not None]
        frames = past[max(0, len(past) - (max_images - 1)):] if max_images > 1 else []
        user: list[dict[str, Any]] = [{"type": "text", "text": f"Task: {observation.task}"}]
        for f in frames:
            user.append({"type": "image", "frame": f})
        user.append({"type": "image", "frame": observation.frame})
        return [
            {"role": "system", "content": [{"type": "text", "text": self.system_prompt(reasoning=reasoning,
                                                                                   reasoning_line=reasoning_line)}]},
            {"role": "user", "content": user},
        ]
