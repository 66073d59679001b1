"""RemotePolicy on recorded server replies (httpx.MockTransport): reply shapes and error bodies that the
scripted server does not produce -- older vLLM error bodies, content parts, the ``reasoning`` field,
non-JSON bodies, servers that echo the Authorization header back, Retry-After, 413."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from holodesk.core.actions import Click, Point
from holodesk.errors import PolicyError
from holodesk.policy.chat_server import TooManyImagesError
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.remote import RemotePolicy
from tests.policy.remote_helpers import ProtocolDouble, click_reply, make_observation

KEY = "sk-recorded-replies-key-42"
MODEL = "Holotron-12B"
MODELS = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}


def chat_ok(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def make(replies: list[httpx.Response], **kw: Any) -> tuple[RemotePolicy, list[httpx.Request]]:
    seen: list[httpx.Request] = []
    queue = list(replies)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json=MODELS)
        return queue.pop(0)

    kw.setdefault("backoff_s", 0.0)
    pol = RemotePolicy("http://recorded.invalid/v1", MODEL, api_key=KEY, protocol=ProtocolDouble(),
                       transport=httpx.MockTransport(handler), **kw)
    return pol, seen


def test_content_as_parts_and_reasoning_field():
    reply = chat_ok({"content": [{"type": "text", "text": click_reply(10, 20)}], "reasoning": "look top left"})
    pol, _ = make([httpx.Response(200, json=reply)])
    prop = pol.propose(make_observation())
    assert prop.action == Click(Point(10, 20))
    assert prop.extra["reasoning_text"] == "look top left"


def test_a_reasoning_block_in_the_content_is_the_steps_reasoning():
    """A server without a reasoning parser returns the ``<think>`` block in the content: it is read as every
    policy reads one (``split_reasoning``), recorded as the step's reasoning, and the reply after it parsed."""
    reply = chat_ok({"content": "<think>look top left</think>\n" + click_reply(10, 20)})
    pol, _ = make([httpx.Response(200, json=reply)])
    prop = pol.propose(make_observation())
    assert prop.action == Click(Point(10, 20))
    assert prop.extra["reasoning_text"] == "look top left"
    assert prop.raw_text.startswith("<think>look top left</think>")


def test_null_content_is_an_output_error_with_empty_raw_text():
    from holodesk.errors import PolicyOutputError

    pol, _ = make([httpx.Response(200, json=chat_ok({"content": None}))])
    with pytest.raises(PolicyOutputError) as ei:
        pol.propose(make_observation())
    assert ei.value.raw_text == ""


def test_no_choices_and_non_json_bodies():
    pol, _ = make([httpx.Response(200, json={"object": "chat.completion", "choices": []})])
    with pytest.raises(PolicyError, match="no choices"):
        pol.propose(make_observation())
    pol, _ = make([httpx.Response(200, text="<html>proxy login</html>")])
    with pytest.raises(PolicyError, match="is not JSON"):
        pol.propose(make_observation())


def test_older_vllm_error_body_for_image_limit():
    # vLLM before the nested {"error": {...}} body answered {"object": "error", "message": ...}
    body = {"object": "error", "type": "BadRequestError", "code": 400,
            "message": "At most 2 image(s) may be provided in one prompt."}
    pol, _ = make([httpx.Response(400, json=body)])
    with pytest.raises(TooManyImagesError) as ei:
        pol.propose(make_observation(history=3))
    assert ei.value.server_limit == 2 and ei.value.sent == 3


def test_limit_without_a_number_still_gives_the_advice():
    body = {"error": {"message": "too many images; see --limit-mm-per-prompt", "code": 400}}
    pol, _ = make([httpx.Response(400, json=body)])
    with pytest.raises(TooManyImagesError) as ei:
        pol.propose(make_observation())
    assert ei.value.server_limit is None
    assert "screenshots kept in the prompt" in ei.value.hint


def test_context_too_long():
    body = {"error": {"message": "This model's maximum context length is 8192 tokens. However, you requested "
                                 "9000 tokens.", "code": 400}}
    pol, _ = make([httpx.Response(400, json=body)])
    with pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    assert "--max-model-len" in ei.value.hint and "fewer screenshots" in ei.value.hint


def test_413_payload_too_large():
    pol, _ = make([httpx.Response(413, text="Request Entity Too Large")])
    with pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    assert "too large (HTTP 413)" in str(ei.value) and "JPEG" in ei.value.hint


def test_server_echoing_the_key_is_scrubbed():
    body = {"error": {"message": f"invalid token Bearer {KEY} for this deployment"}}
    pol, _ = make([httpx.Response(403, json=body), httpx.Response(500, json=body)], retries=0)
    with pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    assert KEY not in str(ei.value)
    with pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    assert KEY not in str(ei.value) and "***" in str(ei.value)


def test_retry_after_is_honoured_but_capped(monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr("holodesk.policy.remote.time.sleep", sleeps.append)
    busy = httpx.Response(429, headers={"Retry-After": "30"}, json={"error": {"message": "busy"}})
    pol, seen = make([busy, busy, httpx.Response(200, json=chat_ok({"content": click_reply()}))],
                     backoff_s=0.5, backoff_max_s=4.0)
    prop = pol.propose(make_observation())
    assert sleeps == [4.0, 4.0]
    assert prop.extra["attempts"] == 3 and len(seen) == 3


def test_bearer_header_and_request_shape():
    pol, seen = make([httpx.Response(200, json=chat_ok({"content": click_reply()}))],
                     options=GenerationOptions(max_reply_tokens=256))
    pol.propose(make_observation())
    req = seen[0]
    assert req.headers["Authorization"] == f"Bearer {KEY}"
    body = json.loads(req.content)
    assert body["max_tokens"] == 256 and body["temperature"] == 0.0 and body["stream"] is False
    assert body["response_format"]["json_schema"]["name"] == "holodesk_double-v0"
    assert body["response_format"]["json_schema"]["strict"] is True


def test_repr_hides_the_key():
    pol, _ = make([])
    assert KEY not in repr(pol) and "api_key=<set>" in repr(pol)
