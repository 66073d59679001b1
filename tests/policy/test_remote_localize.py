"""Element localization ("Click more precisely") of the remote policy against a real HTTP server on 127.0.0.1
(tests/policy/scripted_openai_server.py, which answers from a script and runs no model): the request carries the
crop and the published localization prompt in one user turn, at temperature 0 with reasoning off and the
localization schema, and the point read from the reply lands on the frame where the crop says."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from holodesk.core.actions import Point
from holodesk.core.geometry import Frame, Monitor, point_to_frame_pixel
from holodesk.core.refine import crop_point_to_frame, refine_crop
from holodesk.errors import PolicyOutputError
from holodesk.policy.base import Localizer
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.remote import RemotePolicy
from tests.policy.remote_helpers import ScriptedServer

KEY = "sk-test-key-for-localize"
MODEL = "Hcompany/Holo2-8B"


@pytest.fixture(scope="module")
def server():
    srv = ScriptedServer("--api-key", KEY, "--models", MODEL)
    yield srv
    srv.stop()


def sampled_thinking_policy(server: ScriptedServer, **kw: object) -> RemotePolicy:
    """A policy whose steps sample and think (Holo2's profile), so the localization request must say otherwise."""
    options = GenerationOptions.for_model(MODEL, reasoning="on", greedy=False, seed=7)
    assert options.reasoning and not options.sampling.greedy
    return RemotePolicy(server.url, MODEL, api_key=KEY, options=options, backoff_s=0.01, backoff_max_s=0.05,
                        **kw)  # type: ignore[arg-type]


def test_the_request_is_the_published_localization_prompt_at_temperature_zero(server: ScriptedServer) -> None:
    server.reset()
    server.script({"content": json.dumps({"x": 250, "y": 750})})
    frame = Frame(np.zeros((600, 800, 3), np.uint8), Monitor(1, 0, 0, 800, 600))
    frame.pixels[100:140, 300:340] = (220, 30, 30)
    crop = refine_crop(frame, Point(400, 200))
    left, top, width, height = crop
    pixels = np.ascontiguousarray(frame.pixels[top:top + height, left:left + width])
    policy = sampled_thinking_policy(server)
    try:
        assert isinstance(policy, Localizer)
        found = policy.localize(pixels, "the red square")
    finally:
        policy.close()
    assert found == Point(250, 750)
    (request,) = server.chat_requests()
    body = request["body"]
    assert request["auth_ok"]
    assert body["temperature"] == 0.0 and "seed" not in body and "top_p" not in body
    assert "reasoning_effort" not in body and body["chat_template_kwargs"] == {"thinking": False}
    assert body["max_tokens"] == 32
    assert body["response_format"]["json_schema"]["schema"] == policy.protocol.localization_schema()
    (message,) = body["messages"]
    assert message["role"] == "user"
    image_part, text_part = message["content"]
    assert text_part == {"type": "text", "text": policy.protocol.localization_prompt("the red square")}
    assert "Localize an element on the GUI image" in text_part["text"]
    sent = Image.open(io.BytesIO(base64.b64decode(image_part["image_url"]["url"].split(",", 1)[1])))
    assert np.array_equal(np.asarray(sent.convert("RGB")), pixels)
    # the point in the crop lands on the frame pixel a quarter across and three quarters down the crop
    on_frame = crop_point_to_frame(frame, crop, found)
    assert point_to_frame_pixel(frame, on_frame) == (left + width // 4, top + height * 3 // 4)


def test_a_reply_that_is_not_a_point_is_an_output_error_with_the_text(server: ScriptedServer) -> None:
    server.reset()
    server.script({"content": "the button is at the top right"})
    policy = sampled_thinking_policy(server)
    try:
        with pytest.raises(PolicyOutputError) as err:
            policy.localize(np.zeros((64, 64, 3), np.uint8), "the gear")
    finally:
        policy.close()
    assert err.value.raw_text == "the button is at the top right"
