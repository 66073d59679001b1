"""The remote policy speaks each registry model's contract: over real loopback HTTP (the scripted
OpenAI-compatible server process of tests/policy), the request for a model carries the protocol the model
registry declares for it (system prompt, reply schema) and the model's reasoning switch
(``chat_template_kwargs``); the ``protocol`` setting overrides the protocol; an unknown served name gets the
default contract and no template switch."""

from __future__ import annotations

import pytest

from holodesk.core.actions import Answer
from holodesk.policy.models import MODELS, ModelSpec
from holodesk.policy.protocol import DEFAULT_PROTOCOL
from holodesk.policy.registry import get_protocol
from holodesk.session.factory import build_policy
from holodesk.settings import Settings
from tests.policy.remote_helpers import ScriptedServer, make_observation

SERVED = [m.hub_id for m in MODELS] + ["holotron-12b-served", "Holo2-8B"]
"""Names the server lists: every registry hub id, an unknown served name, and a served name that is a
registry repo name without its owner (vLLM ``--served-model-name Holo2-8B``)."""


@pytest.fixture(scope="module")
def server():
    srv = ScriptedServer("--models", ",".join(SERVED))
    yield srv
    srv.stop()


def _ask(server: ScriptedServer, *, model: str, reasoning: bool = False, protocol: str = "auto") -> dict:
    """One step through the policy the settings build; returns the chat request the server received."""
    server.reset()
    settings = Settings(policy="remote", endpoint=server.url, model=model, reasoning=reasoning,
                        protocol=protocol)
    policy = build_policy(settings)
    server.script({"content": policy.protocol.to_reply(Answer("ok"), thought="done")})
    try:
        proposal = policy.propose(make_observation(history=1))
    finally:
        policy.close()
    assert proposal.action == Answer("ok")
    requests = server.chat_requests()
    assert len(requests) == 1
    body: dict = requests[0]["body"]
    assert body["model"] == model
    return body


def _system_text(body: dict) -> str:
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content if p["type"] == "text")


@pytest.mark.parametrize("spec", MODELS, ids=[m.key for m in MODELS])
def test_each_model_request_carries_its_contract(server, spec: ModelSpec) -> None:
    body = _ask(server, model=spec.hub_id)
    protocol = get_protocol(spec.protocol)
    assert body["response_format"]["json_schema"]["schema"] == protocol.json_schema()
    assert _system_text(body) == protocol.system_prompt(reasoning=False)
    if spec.reasoning.switch == "chat_template_kwargs":
        assert body["chat_template_kwargs"] == {spec.reasoning.template_kwarg: False}
    else:
        assert "chat_template_kwargs" not in body


def test_reasoning_on_flips_the_models_own_switch(server) -> None:
    holo2 = _ask(server, model="Hcompany/Holo2-8B", reasoning=True)
    assert holo2["chat_template_kwargs"] == {"thinking": True}
    holo31 = _ask(server, model="Hcompany/Holo-3.1-9B", reasoning=True)
    assert holo31["chat_template_kwargs"] == {"enable_thinking": True}
    holotron = _ask(server, model="Hcompany/Holotron-12B", reasoning=True)
    assert "chat_template_kwargs" not in holotron
    assert _system_text(holotron).endswith("/think")


def test_served_name_without_owner_finds_the_model(server) -> None:
    body = _ask(server, model="Holo2-8B")
    assert body["chat_template_kwargs"] == {"thinking": False}


def test_protocol_setting_overrides_the_registry(server) -> None:
    body = _ask(server, model="Hcompany/Holo2-8B", protocol="holo-v1")
    holo_v1 = get_protocol("holo-v1")
    assert body["response_format"]["json_schema"]["schema"] == holo_v1.json_schema()
    assert _system_text(body) == holo_v1.system_prompt(reasoning=False)
    assert body["chat_template_kwargs"] == {"thinking": False}  # the reasoning switch still follows the model


def test_unknown_model_gets_the_default_contract_and_no_template_switch(server) -> None:
    body = _ask(server, model="holotron-12b-served")
    default = get_protocol(DEFAULT_PROTOCOL)
    assert body["response_format"]["json_schema"]["schema"] == default.json_schema()
    assert "chat_template_kwargs" not in body
