"""The remote policy's thought while the server generates it: with reasoning on and a sink set, the request asks
for a streamed reply (``"stream": true``) and the reasoning deltas (vLLM's ``reasoning_content``, or
``reasoning``) reach the sink before the reply is complete; the step's proposal and record are those of a reply
without streaming, and the deadline and the 8 MiB cap hold for a streamed reply. Against a real HTTP server on
127.0.0.1 (tests/policy/scripted_openai_server.py, answering from a script; it runs no model)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from holodesk.errors import PolicyError
from holodesk.policy import base
from holodesk.policy.base import StreamsThought
from holodesk.policy.chat_server import ReplyTooLargeError, SseEvents
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.remote import RemotePolicy
from tests.policy.remote_helpers import ScriptedServer, make_observation

MODEL = "Hcompany/Holo2-8B"
REPLY = ('{"note": null, "thought": "press OK", "tool_call": {"tool_name": "click_desktop", "element": "OK", '
         '"x": 500, "y": 250}}')
REASONING = "The dialog asks to save the file. The OK button is at the bottom right."


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    srv = ScriptedServer("--models", MODEL)
    yield srv
    srv.stop()


def thinking_policy(server: ScriptedServer, **kw: Any) -> RemotePolicy:
    options = GenerationOptions.for_model(MODEL, reasoning="on", greedy=True)
    return RemotePolicy(server.url, MODEL, api_key=None, options=options, backoff_s=0.01, backoff_max_s=0.05, **kw)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_deltas_reach_the_sink_before_the_reply_is_complete(
        server: ScriptedServer, field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "THOUGHT_INTERVAL_S", 0.0)
    server.reset()
    server.script({"content": REPLY, "reasoning": REASONING, "reasoning_field": field, "hold_after": 4})
    policy = thinking_policy(server)
    assert isinstance(policy, StreamsThought)
    pieces: list[str] = []
    policy.thought_sink = pieces.append
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(proposal=policy.propose(make_observation())))
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while "".join(pieces) != "The dialog asks to" and time.monotonic() < deadline:
            time.sleep(0.01)  # polling a condition, bounded
        assert "".join(pieces) == "The dialog asks to"  # the server holds the rest: the reply is not complete
        assert worker.is_alive() and "proposal" not in result
    finally:
        server.release()
        worker.join(20)
        policy.close()
    proposal = result["proposal"]
    assert "".join(pieces) == REASONING == proposal.extra["reasoning_text"]
    assert proposal.thought == "press OK" and proposal.extra["finish_reason"] == "stop"
    assert proposal.extra["usage"]["prompt_tokens"] == 200
    (request,) = server.chat_requests()
    assert request["body"]["stream"] is True and request["body"]["stream_options"] == {"include_usage": True}


def test_without_a_sink_the_request_is_not_streamed(server: ScriptedServer) -> None:
    server.reset()
    server.script({"content": REPLY, "reasoning": REASONING})
    policy = thinking_policy(server)
    try:
        proposal = policy.propose(make_observation())
    finally:
        policy.close()
    assert proposal.extra["reasoning_text"] == REASONING
    assert server.chat_requests()[0]["body"]["stream"] is False


def test_a_stream_that_stops_sending_ends_at_the_deadline(server: ScriptedServer) -> None:
    server.reset()
    server.script({"content": REPLY, "reasoning": REASONING, "hold_after": 2})
    policy = thinking_policy(server, timeout_s=1.5, retries=0)
    pieces: list[str] = []
    policy.thought_sink = pieces.append
    t0 = time.monotonic()
    try:
        with pytest.raises(PolicyError, match=r"sent no reply within 1\.5 s"):
            policy.propose(make_observation())
    finally:
        server.release()
        policy.close()
    assert time.monotonic() - t0 < 10
    assert pieces  # what arrived before the server stopped was shown


def test_an_endless_stream_is_cut_at_the_reply_cap(server: ScriptedServer) -> None:
    server.reset()
    server.script({"content": REPLY, "endless_reasoning": True})
    policy = thinking_policy(server, timeout_s=60, retries=0)
    policy.thought_sink = lambda _piece: None
    try:
        with pytest.raises(ReplyTooLargeError):
            policy.propose(make_observation())
    finally:
        policy.close()


def test_events_split_anywhere_are_read_whole() -> None:
    body = b'data: {"a": 1}\r\n\r\n: comment\nevent: x\ndata: {"b":\ndata: 2}\n\ndata: [DONE]\n\n'
    reader = SseEvents()
    events = [data for i in range(len(body)) for data in reader.feed(body[i:i + 1])]
    assert events == ['{"a": 1}', '{"b":\n2}', "[DONE]"]


# the first attempt fails: an error's body that looks like a stream (never streamed), or a stream the server drops
# after 4 words of the thought; the retry sends the same (greedy) thought whole: the card gets the thought once, not
# the failed attempt's words followed by the whole thought again
FAILED_ATTEMPTS = {
    "error body": {"status": 503, "raw_body": 'data: {"choices": [{"delta": {"reasoning_content": "junk"}}]}\n\n'},
    "broken-off stream": {"content": REPLY, "reasoning": REASONING, "drop_after": 4},
}


@pytest.mark.parametrize("failed", FAILED_ATTEMPTS)
def test_a_retried_request_streams_only_the_thought_of_the_reply_that_came(
        server: ScriptedServer, monkeypatch: pytest.MonkeyPatch, failed: str) -> None:
    monkeypatch.setattr(base, "THOUGHT_INTERVAL_S", 0.0)
    server.reset()
    server.script(FAILED_ATTEMPTS[failed], {"content": REPLY, "reasoning": REASONING})
    policy = thinking_policy(server, retries=1)
    pieces: list[str] = []
    policy.thought_sink = pieces.append
    try:
        proposal = policy.propose(make_observation())
    finally:
        policy.close()
    assert proposal.extra["attempts"] == 2
    assert len(pieces) > 1  # streamed in pieces (after a broken-off stream, the first ones came from it)
    assert "".join(pieces) == REASONING == proposal.extra["reasoning_text"]
