"""The API key never reaches a file Holodesk writes, nor its log output (F19).

A distinctive key is used for real runs of the session loop against the scripted OpenAI-compatible
server process on 127.0.0.1: one task that succeeds, one whose server rejects the key (401), and one
where the server echoes the key back in its error text. Afterwards every file under the temporary
HOME / XDG folders (settings, episode records, PNG frames, the log file) and the captured log records,
stdout and stderr are searched for the key.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from holodesk.capture.fake import FakeCapture
from holodesk.control.recording import RecordingExecutor
from holodesk.core.actions import Answer, Click, Point
from holodesk.policy.registry import get_protocol
from holodesk.policy.remote import RemotePolicy
from holodesk.session.approval import ApprovalPolicy, ApprovalResponse, Decision
from holodesk.session.loop import Session
from holodesk.session.state import SessionLimits, State
from holodesk.settings import load_settings, save_settings
from tests.policy.remote_helpers import ScriptedServer

KEY = "sk-HOLODESK-LEAK-CANARY-7c1f9a2e4b"
MODEL = "Holotron-12B"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    for sub in ("", ".config", ".local/share", ".local/state", ".cache"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local/share"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local/state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("HOLODESK_CONFIG", raising=False)
    return home


def run_task(server: ScriptedServer, api_key: str, episodes: Path) -> tuple[State, str]:
    frames = [np.full((200, 320, 3), 40 * i, np.uint8) for i in range(1, 4)]
    policy = RemotePolicy(server.url, MODEL, api_key=api_key, retries=1, backoff_s=0.01)
    approve = ApprovalPolicy("auto", lambda request: ApprovalResponse(Decision.APPROVE, by="test"))
    session = Session(policy, FakeCapture(frames), RecordingExecutor(), approve, SessionLimits(max_steps=4),
                      episodes_dir=episodes, meta={"policy": repr(policy), "endpoint": policy.endpoint})
    try:
        result = session.run("open the settings")
    finally:
        policy.close()
    return result.status, result.reason


def test_api_key_is_in_no_written_file_and_no_log(home, caplog, capfd):
    proto = get_protocol("agent-loop-v1")  # RemotePolicy's default protocol
    server = ScriptedServer("--api-key", KEY, "--models", MODEL)
    log_file = home / ".local/state/holodesk/holodesk.log"
    log_file.parent.mkdir(parents=True)
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    caplog.set_level(logging.DEBUG)
    try:
        settings = load_settings(policy="remote", endpoint=server.url, model=MODEL,
                                 data_dir=home / ".local/share/holodesk")
        save_settings(settings)
        episodes = Path(settings.data_dir) / "episodes"

        # 1. a task that works: a click, then an answer
        server.script({"content": proto.to_reply(Click(Point(500, 500)), thought="click")},
                      {"content": proto.to_reply(Answer("done"), thought="finished")})
        status, reason = run_task(server, KEY, episodes)
        assert status is State.FINISHED, reason
        assert all(r["auth_ok"] for r in server.chat_requests())

        # 2. the server rejects the key: 401 (the loop records the error)
        status, reason = run_task(server, KEY + "-revoked", episodes)
        assert status is State.FAILED and "rejected the API key" in reason

        # 3. a server that echoes the credential back in its error text, on every retry
        echo = {"status": 500, "error": {"error": {"message": f"backend auth failed for Bearer {KEY}"}}}
        server.script(echo, echo)
        status, reason = run_task(server, KEY, episodes)
        assert status is State.FAILED and "HTTP 500" in reason
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(old_level)
        server.stop()

    written = [p for p in home.rglob("*") if p.is_file()]
    names = {p.name for p in written}
    assert "settings.toml" in names and "holodesk.log" in names and any(n.endswith(".jsonl") for n in names)
    assert any(n.endswith(".png") for n in names)
    assert "rejected the API key" in "".join(p.read_text(errors="replace") for p in written if p.suffix == ".jsonl")
    canaries = (KEY.encode(), KEY[8:].encode())  # the whole key and a distinctive tail of it
    for path in written:
        data = path.read_bytes()
        for canary in canaries:
            assert canary not in data, f"API key found in {path}"
    out, err = capfd.readouterr()
    logged = "\n".join(r.getMessage() for r in caplog.records) + caplog.text
    assert caplog.records  # the log was really captured
    for text in (out, err, logged):
        assert KEY not in text and KEY[8:] not in text
