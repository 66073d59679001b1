"""A remote step's request ends by its deadline however the server sends (issue 31): a reply that trickles one
byte at a time, one that announces a body and never sends it, the task's wall-time cap coming before
``timeout_s``; and a reply body longer than ``MAX_REPLY_BYTES`` is cut. All against the scripted HTTP server
on loopback (a real server process)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from holodesk.errors import PolicyError
from holodesk.policy.base import Observation
from holodesk.policy.chat_server import MAX_REPLY_BYTES, ReplyTooLargeError
from holodesk.policy.remote import RemotePolicy
from tests.policy.remote_helpers import ProtocolDouble, ScriptedServer, click_reply, make_observation

MODEL = "Holotron-12B"
HANG_BOUND_S = 12.0
"""How long a test waits for ``propose`` before calling it hung (a failure, not a wait for the fix)."""


@pytest.fixture(scope="module")
def server():
    srv = ScriptedServer("--models", MODEL, "--default-content", click_reply())
    yield srv
    srv.stop()


def propose_bounded(pol: RemotePolicy, obs: Observation | None = None) -> tuple[BaseException | None, float]:
    """Run ``pol.propose`` (on ``obs``, default a plain observation) in a thread; returns (what it raised,
    seconds it took). Fails the test when it is still running after ``HANG_BOUND_S``."""
    outcome: dict[str, Any] = {}

    def call() -> None:
        t0 = time.monotonic()
        try:
            pol.propose(obs if obs is not None else make_observation())
        except BaseException as exc:
            outcome["error"] = exc
        outcome["took"] = time.monotonic() - t0

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(HANG_BOUND_S)
    assert not thread.is_alive(), f"propose was still waiting for the server after {HANG_BOUND_S} s"
    return outcome.get("error"), outcome["took"]


def remote(server: ScriptedServer, **kw: Any) -> RemotePolicy:
    return RemotePolicy(server.url, MODEL, api_key=None, protocol=ProtocolDouble(), retries=0, **kw)


@pytest.mark.parametrize("behaviour", [{"trickle_s": 0.2}, {"trickle_s": 0.05}], ids=["5 B/s", "20 B/s"])
def test_a_trickling_reply_is_cut_at_the_request_timeout(server, behaviour):
    server.script(behaviour)
    with remote(server, timeout_s=1.5) as pol:
        error, took = propose_bounded(pol)
    assert isinstance(error, PolicyError), error
    assert "no reply within 1.5 s" in error.message and "request_timeout_s" in error.hint
    assert 1.4 <= took < 3.0


def test_a_reply_that_never_ends_is_cut_at_the_task_wall_time_cap(server):
    """The request timeout is a minute, but the task's cap ends in 1.5 s: the cap wins."""
    server.script({"trickle_s": 0.5})
    plain = make_observation()
    obs = Observation(plain.task, plain.frame, plain.history, deadline=time.monotonic() + 1.5)
    with remote(server, timeout_s=60) as pol:
        error, took = propose_bounded(pol, obs)
    assert isinstance(error, PolicyError), error
    assert "wall-time cap (--max-seconds)" in error.message and "--max-seconds" in error.hint
    assert 1.3 <= took < 3.0


def test_a_reply_larger_than_the_bound_is_cut_with_a_clear_error(server):
    chunks = MAX_REPLY_BYTES // 65536 + 2
    server.script({"endless_chunks": chunks})
    with remote(server, timeout_s=30) as pol:
        error, _ = propose_bounded(pol)
    assert isinstance(error, ReplyTooLargeError), error
    assert "longer than Holodesk keeps" in error.message and "OpenAI-compatible" in error.hint


def test_a_long_but_bounded_reply_is_read_whole(server):
    """The control: a chunked reply just under the bound is read and answered (spaces before ``{}``)."""
    server.script({"endless_chunks": 4})
    with remote(server, timeout_s=30) as pol:
        error, _ = propose_bounded(pol)
    assert isinstance(error, PolicyError) and "no choices" in error.message  # the body "{}" parsed as JSON


def test_a_run_with_max_seconds_ends_at_its_cap_while_the_server_trickles(server, tmp_path):
    """The session's wall-time cap (``--max-seconds``) reaches into the policy's request: the run ends at the
    cap, recorded as the cap, although the server is still sending and the request timeout is a minute."""
    import numpy as np

    from holodesk.capture.fake import FakeCapture
    from holodesk.control.recording import RecordingExecutor
    from holodesk.session.approval import ApprovalPolicy, ApprovalResponse, Decision
    from holodesk.session.episode import load_episode
    from holodesk.session.loop import Session
    from holodesk.session.state import STOPPED_BY_WALL_CAP, SessionLimits, State

    server.script({"trickle_s": 0.2})
    executor = RecordingExecutor()
    with remote(server, timeout_s=60) as pol:
        session = Session(pol, FakeCapture([np.zeros((200, 320, 3), np.uint8)]), executor,
                          ApprovalPolicy("step", lambda request: ApprovalResponse(Decision.APPROVE)),
                          SessionLimits(max_wall_s=2.0), episodes_dir=tmp_path)
        outcome: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: outcome.update(result=session.run("open the settings")),
                                  daemon=True)
        t0 = time.monotonic()
        thread.start()
        thread.join(HANG_BOUND_S)
        took = time.monotonic() - t0
    assert not thread.is_alive(), f"the run was still waiting for the server after {HANG_BOUND_S} s"
    result = outcome["result"]
    assert result.status is State.FAILED and result.stopped_by == STOPPED_BY_WALL_CAP, result
    assert "wall-time cap" in result.reason
    assert 1.8 <= took < 4.0 and executor.calls == []
    assert session.recorder is not None
    episode = load_episode(session.recorder.path)
    assert "time left of the task's wall-time cap (--max-seconds)" in episode.steps[0]["error"], episode.steps
    assert episode.end is not None and episode.end.get("stopped_by") == STOPPED_BY_WALL_CAP, episode.end
