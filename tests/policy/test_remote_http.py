"""RemotePolicy against a real HTTP server process on 127.0.0.1.

The server is tests/policy/scripted_openai_server.py: an OpenAI-compatible HTTP server with vLLM's
status codes and error bodies that answers from a script (it runs no model). Every request loop here
is bounded by ``retries`` and counted at the server.
"""

from __future__ import annotations

import base64
import io
import itertools
import logging
import socket
import time

import numpy as np
import pytest
from PIL import Image

from holodesk.core.actions import Click, Point
from holodesk.core.geometry import InputPoint, Monitor, point_to_frame_pixel, to_input_point
from holodesk.errors import PolicyError, PolicyOutputError
from holodesk.policy.base import Observation, Policy
from holodesk.policy.chat_server import ServerUnreachableError, TooManyImagesError, normalize_base_url
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.registry import get_protocol
from holodesk.policy.remote import RemotePolicy, ReplyCutOffError
from tests.policy.remote_helpers import ProtocolDouble, ScriptedServer, click_reply, make_frame, make_observation

KEY = "sk-test-key-for-http-tests"
MODEL = "Holotron-12B"


@pytest.fixture(scope="module")
def server():
    srv = ScriptedServer("--api-key", KEY, "--models", f"{MODEL},other-model", "--default-content", click_reply())
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def _reset(request):
    if "server" in request.fixturenames:
        request.getfixturevalue("server").reset()


def policy(server: ScriptedServer, **kw) -> RemotePolicy:
    kw.setdefault("api_key", KEY)
    kw.setdefault("protocol", ProtocolDouble())
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("backoff_max_s", 0.05)
    return RemotePolicy(server.url, kw.pop("model", MODEL), **kw)


def decode_data_url(url: str) -> tuple[str, Image.Image]:
    head, b64 = url.split(",", 1)
    return head, Image.open(io.BytesIO(base64.b64decode(b64)))


def images_of(body: dict) -> list[str]:
    return [p["image_url"]["url"] for m in body["messages"] if isinstance(m["content"], list)
            for p in m["content"] if p["type"] == "image_url"]


# ---------------------------------------------------------------------------------------------- round trip

def test_full_step_round_trips(server):
    obs = make_observation(history=1)
    server.script({"content": click_reply(640, 360, "open settings", note="gear top right")})
    with policy(server) as pol:
        assert isinstance(pol, Policy)
        prop = pol.propose(obs)

    assert prop.action == Click(Point(640, 360))
    assert prop.thought == "open settings"
    assert prop.note == "gear top right"
    assert prop.raw_text == click_reply(640, 360, "open settings", note="gear top right")
    for stage in ("build_prompt", "encode_images", "request", "request_all_attempts", "parse", "total"):
        assert prop.timings_ms[stage] >= 0.0
    assert prop.extra["attempts"] == 1
    assert prop.extra["structured_output"] == "json_schema"
    assert prop.extra["finish_reason"] == "stop"
    assert prop.extra["usage"]["prompt_tokens"] > 0

    (req,) = server.chat_requests()
    assert req["auth_ok"]
    body = req["body"]
    assert body["model"] == MODEL
    assert body["messages"][0] == {"role": "system", "content": ProtocolDouble().system_prompt()}
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == ProtocolDouble().json_schema()
    urls = images_of(body)
    assert len(urls) == 2  # one history frame + the current one
    head, img = decode_data_url(urls[-1])
    assert head == "data:image/png;base64"
    assert img.size == (obs.frame.width, obs.frame.height)
    assert np.array_equal(np.asarray(img.convert("RGB")), obs.frame.pixels)  # PNG: lossless, same frame
    assert prop.extra["images_sent"][-1] == {
        "width": 320, "height": 200, "frame_width": 320, "frame_height": 200, "resized": False,
        "format": "png", "bytes": prop.extra["images_sent"][-1]["bytes"],
    }


def test_holo_v1_protocol_round_trip_with_history(server):
    """The real holo-v1 protocol: same prompt, schema and history policy as the local runtime."""
    proto = get_protocol("holo-v1")
    obs = make_observation(history=5)
    reply = proto.to_reply(Click(Point(812, 94)), thought="open the gear menu", note="settings in gear")
    server.script({"content": reply})
    with RemotePolicy(server.url, MODEL, api_key=KEY,
                      options=GenerationOptions(protocol="holo-v1", max_images=3)) as pol:
        prop = pol.propose(obs)
    assert prop.action == Click(Point(812, 94))
    assert (prop.thought, prop.note, prop.raw_text) == ("open the gear menu", "settings in gear", reply)
    assert prop.extra["protocol"] == "holo-v1" and prop.extra["warnings"] == []

    body = server.chat_requests()[0]["body"]
    assert body["messages"][0] == {"role": "system", "content": proto.system_prompt(reasoning=False)}
    assert body["response_format"]["json_schema"]["schema"] == proto.json_schema()
    expected = proto.build_messages(obs, max_images=3)
    user = body["messages"][1]["content"]
    assert [p["type"] for p in user] == [
        {"text": "text", "image": "image_url"}[p["type"]] for p in expected[1]["content"]
    ]
    assert [p["text"] for p in user if p["type"] == "text"] == [
        p["text"] for p in expected[1]["content"] if p["type"] == "text"
    ]
    urls = images_of(body)
    assert len(urls) == 3  # F21: current frame + the 2 most recent history frames
    sent = [np.asarray(decode_data_url(u)[1].convert("RGB")) for u in urls]
    frames = [obs.history[3].frame, obs.history[4].frame, obs.frame]
    assert all(np.array_equal(a, f.pixels) for a, f in zip(sent, frames, strict=True))


def test_resize_only_when_asked_and_points_map_to_the_same_frame(server):
    mon = Monitor(index=2, left=1920, top=0, width=1280, height=720)  # a 1.5x scaled monitor
    frame = make_frame(1920, 1080, seed=3, monitor=mon)
    obs = Observation(task="t", frame=frame)
    server.script({"content": click_reply(250, 750)})
    with policy(server, max_image_side=960, image_format="jpeg") as pol:
        prop = pol.propose(obs)
    head, img = decode_data_url(images_of(server.chat_requests()[0]["body"])[0])
    assert head == "data:image/jpeg;base64"
    assert img.size == (960, 540)
    sent = prop.extra["images_sent"][0]
    assert (sent["width"], sent["height"], sent["frame_width"], sent["frame_height"]) == (960, 540, 1920, 1080)
    assert sent["resized"] is True
    # normalised coordinates of the sent image designate the same spot of the original frame
    assert point_to_frame_pixel(frame, prop.action.point) == (480, 810)
    assert to_input_point(frame, prop.action.point) == InputPoint(2240, 540)


def test_history_images_are_encoded_once(server):
    obs = make_observation(history=2)
    with policy(server, options=GenerationOptions(max_images=3)) as pol:
        pol.propose(obs)
        cached = dict(pol._image_cache)
        pol.propose(obs)
        assert all(pol._image_cache[f] is cached[f] for f in cached)


def test_structured_output_off_sends_no_schema(server):
    with policy(server, options=GenerationOptions(constrained_decoding=False)) as pol:
        prop = pol.propose(make_observation())
    assert "response_format" not in server.chat_requests()[0]["body"]
    assert prop.extra["structured_output"] == "off"


def test_reasoning_text_is_recorded(server):
    server.script({"content": click_reply(), "reasoning": "The gear is top right."})
    with policy(server, options=GenerationOptions(reasoning=True)) as pol:
        prop = pol.propose(make_observation())
    assert prop.extra["reasoning_text"] == "The gear is top right."
    assert server.chat_requests()[0]["body"]["messages"][0]["content"].endswith("/think")


def test_invalid_model_reply_raises_policy_output_error_with_raw_text(server):
    server.script({"content": "Sure! I will click the gear."})
    with policy(server) as pol, pytest.raises(PolicyOutputError) as ei:
        pol.propose(make_observation())
    assert ei.value.raw_text == "Sure! I will click the gear."
    # the rejected step keeps what the request cost and who answered (recorded with the step)
    assert {"build_prompt", "encode_images", "request"} <= set(ei.value.timings_ms)
    assert ei.value.extra["endpoint"] and ei.value.extra["attempts"] == 1


# ---------------------------------------------------------------------------------------------- errors

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connection_refused_is_retried_then_explained():
    pol = RemotePolicy(f"http://127.0.0.1:{free_port()}/v1", MODEL, api_key=None, protocol=ProtocolDouble(),
                       retries=2, backoff_s=0.05, backoff_max_s=0.1)
    t0 = time.monotonic()
    with pytest.raises(ServerUnreachableError) as ei:
        pol.propose(make_observation())
    elapsed = time.monotonic() - t0
    msg = str(ei.value)
    assert "connection refused" in msg and "3 attempts" in msg
    assert "server is running" in ei.value.hint
    assert 0.15 <= elapsed < 5  # two backoffs of 0.05 and 0.1 s, bounded


def test_wrong_key_401_is_not_retried_and_never_printed(server):
    bad = "sk-WRONG-distinctive-0123456789"
    with policy(server, api_key=bad) as pol, pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    msg = str(ei.value)
    assert "rejected the API key (HTTP 401)" in msg and "keychain" in msg and "HOLODESK_API_KEY" in msg
    assert bad not in msg and bad not in repr(pol)
    assert len(server.chat_requests()) == 1


def test_missing_key_401_says_a_key_is_needed(server):
    with policy(server, api_key=None) as pol, pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    assert "requires an API key (HTTP 401) and none is set" in str(ei.value)


def test_unknown_model_404_lists_served_models(server):
    with policy(server, model="Holotron-13B") as pol, pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    msg = str(ei.value)
    assert "Model 'Holotron-13B' is not served" in msg
    assert "The server has: Holotron-12B, other-model." in msg


def test_wrong_path_404_points_at_v1(server):
    pol = RemotePolicy(server.base + "/api", MODEL, api_key=KEY, protocol=ProtocolDouble())
    with pol, pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    assert "ending in /v1" in str(ei.value)


def test_429_retries_are_bounded_and_counted(server):
    busy = {"status": 429, "error": {"error": {"message": "rate limited"}}, "headers": {"Retry-After": "0"}}
    server.script(*[busy] * 10)
    with policy(server, retries=3) as pol, pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    assert len(server.chat_requests()) == 4  # 1 + 3 retries, then stop
    assert "rate limiting requests (HTTP 429) on all 4 attempts" in str(ei.value)
    assert "fewer agents" in ei.value.hint


def test_backoff_is_exponential(server):
    server.script(*[{"status": 503, "error": {"error": {"message": "loading"}}}] * 4)
    with policy(server, retries=3, backoff_s=0.1, backoff_max_s=0.25) as pol, pytest.raises(PolicyError):
        pol.propose(make_observation())
    times = [r["t"] for r in server.chat_requests()]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) == 3
    assert gaps[0] >= 0.09 and gaps[1] >= 0.19 and 0.24 <= gaps[2] < 1.0  # 0.1, 0.2, capped 0.25


def test_429_then_success_records_attempts(server):
    server.script({"status": 429, "error": {"error": {"message": "busy"}}}, {"content": click_reply(1, 2)})
    with policy(server) as pol:
        prop = pol.propose(make_observation())
    assert prop.action == Click(Point(1, 2))
    assert prop.extra["attempts"] == 2
    assert len(server.chat_requests()) == 2


def test_5xx_on_every_attempt(server):
    server.script(*[{"status": 500, "error": {"error": {"message": "CUDA out of memory"}}}] * 3)
    with policy(server, retries=2) as pol, pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    assert len(server.chat_requests()) == 3
    assert "HTTP 500 on all 3 attempts" in str(ei.value) and "CUDA out of memory" in str(ei.value)
    assert "server's log" in ei.value.hint


def test_dropped_connection_is_retried_as_a_connection_error(server):
    server.script({"drop": True}, {"content": click_reply(7, 8)})
    with policy(server) as pol:
        prop = pol.propose(make_observation())
    assert prop.action == Click(Point(7, 8)) and prop.extra["attempts"] == 2


def test_timeout_is_explained_and_not_retried(server):
    server.script({"delay_s": 1.5, "content": click_reply()})
    with policy(server, timeout_s=0.4) as pol, pytest.raises(PolicyError) as ei:
        pol.propose(make_observation())
    assert "no reply within 0.4 s" in str(ei.value)
    assert len(server.chat_requests()) == 1


def test_too_many_images_tells_the_user_to_keep_fewer_screenshots():
    srv = ScriptedServer("--models", MODEL, "--limit-images", "1")
    try:
        pol = RemotePolicy(srv.url, MODEL, api_key=None, protocol=ProtocolDouble(),
                           options=GenerationOptions(max_images=3))
        with pol, pytest.raises(TooManyImagesError) as ei:
            pol.propose(make_observation(history=4))
        err = ei.value
        assert (err.server_limit, err.sent) == (1, 3)
        assert "accepts at most 1 image(s) per request, but this step sent 3" in str(err)
        assert "Lower 'screenshots kept in the prompt' (now 3) to 1 or less" in err.hint
        assert "--limit-mm-per-prompt" in err.hint
        assert len(srv.chat_requests()) == 1
    finally:
        srv.stop()


def test_reply_cut_off_at_token_limit(server):
    server.script({"content": '{"note": null, "thought": "I will', "finish_reason": "length"})
    with policy(server, options=GenerationOptions(max_reply_tokens=16)) as pol, pytest.raises(ReplyCutOffError) as ei:
        pol.propose(make_observation())
    assert "cut off at the token limit" in str(ei.value) and "max_tokens=16" in str(ei.value)
    assert ei.value.raw_text == '{"note": null, "thought": "I will'


def test_schema_rejection_falls_back_loudly(caplog):
    srv = ScriptedServer("--models", MODEL, "--reject-response-format", "--default-content", click_reply(3, 4))
    try:
        pol = RemotePolicy(srv.url, MODEL, api_key=None, protocol=ProtocolDouble())
        with caplog.at_level(logging.WARNING, logger="holodesk.policy.remote"), pol:
            first = pol.propose(make_observation())
            second = pol.propose(make_observation())
        bodies = [r["body"] for r in srv.chat_requests()]
        assert ["response_format" in b for b in bodies] == [True, False, False]
        assert first.action == Click(Point(3, 4)) and first.extra["attempts"] == 2
        for prop in (first, second):
            assert prop.extra["structured_output"].startswith("rejected by server, strict parse only")
        assert any("falling back to unconstrained generation" in r.getMessage() for r in caplog.records)
    finally:
        srv.stop()


# ---------------------------------------------------------------------------------------------- doctor

def test_check_endpoint_ok(server):
    with policy(server) as pol:
        report = pol.check_endpoint()
    assert report["reachable"] and report["model_listed"] and report["accepts_images"]
    assert report["structured_output"] is True and report["error"] is None
    assert report["models"] == [MODEL, "other-model"]


def test_check_endpoint_model_missing(server):
    with policy(server, model="nope") as pol:
        report = pol.check_endpoint()
    assert report["reachable"] and not report["model_listed"]
    assert "Holotron-12B, other-model" in report["error"]


def test_check_endpoint_unreachable():
    with RemotePolicy(f"http://127.0.0.1:{free_port()}", MODEL, api_key=None, protocol=ProtocolDouble()) as pol:
        report = pol.check_endpoint()
    assert report["reachable"] is False and "connection refused" in report["error"]


def test_check_endpoint_bad_key(server):
    with policy(server, api_key="sk-bad") as pol:
        report = pol.check_endpoint()
    assert report["reachable"] is True and "rejected the API key" in report["error"]


def test_check_endpoint_text_only_server_and_no_schema():
    srv = ScriptedServer("--models", MODEL, "--limit-images", "0", "--reject-response-format")
    try:
        with RemotePolicy(srv.url, MODEL, api_key=None, protocol=ProtocolDouble()) as pol:
            report = pol.check_endpoint()
        assert report["accepts_images"] is False and "at most 0 image(s)" in report["error"]
    finally:
        srv.stop()
    srv = ScriptedServer("--models", MODEL, "--reject-response-format")
    try:
        with RemotePolicy(srv.url, MODEL, api_key=None, protocol=ProtocolDouble()) as pol:
            report = pol.check_endpoint()
        assert report["accepts_images"] is True and report["structured_output"] is False
    finally:
        srv.stop()


# ---------------------------------------------------------------------------------------------- arguments

def test_base_url_normalisation():
    assert normalize_base_url("http://gpu-box:8000") == "http://gpu-box:8000/v1"
    assert normalize_base_url("http://gpu-box:8000/v1/") == "http://gpu-box:8000/v1"
    with pytest.raises(PolicyError):
        normalize_base_url("gpu-box:8000")


@pytest.mark.parametrize("kw", [{"image_format": "gif"}, {"max_images": 0}, {"retries": 11}, {"timeout_s": 0},
                                {"max_image_side": 8}])
def test_bad_arguments(kw):
    with pytest.raises(PolicyError):
        if "max_images" in kw:  # a generation option: refused where the options are built
            kw = {"options": GenerationOptions(max_images=kw["max_images"])}
        RemotePolicy("http://127.0.0.1:1/v1", MODEL, api_key=None, protocol=ProtocolDouble(), **kw)


def test_a_slow_server_gets_the_time_the_setting_gives_and_the_advice_names_the_setting(server, monkeypatch):
    """A server on loopback that takes longer than ``request_timeout_s`` to reply: the step fails after that
    setting's time, and the advice names the setting that gives it more time (no such setting existed)."""
    from holodesk.session.factory import build_policy
    from holodesk.settings import Settings

    monkeypatch.setenv("HOLODESK_API_KEY", KEY)
    server.script({"delay_s": 3.0, "content": click_reply()})
    settings = Settings(policy="remote", endpoint=server.url, model=MODEL, request_timeout_s=0.5)
    with build_policy(settings) as pol, pytest.raises(PolicyError) as ei:
        t0 = time.monotonic()
        pol.propose(make_observation())
    assert time.monotonic() - t0 < 2.5
    assert "no reply within 0.5 s" in ei.value.message
    assert "request_timeout_s" in ei.value.hint and "raise the request timeout" not in ei.value.hint
