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


def _ask(server: ScriptedServer, *, model: str, reasoning: bool | str = False, protocol: str = "auto",
         **more: object) -> dict:
    """One step through the policy the settings build; returns the chat request the server received."""
    server.reset()
    settings = Settings(policy="remote", endpoint=server.url, model=model, reasoning=reasoning,
                        protocol=protocol, **more)
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
    protocol = get_protocol(spec.family.protocol)
    assert body["response_format"]["json_schema"]["schema"] == protocol.json_schema()
    switch = spec.family.reasoning
    assert _system_text(body) == protocol.system_prompt(reasoning=False, reasoning_line=switch.prompt_line)
    if spec.family.reasoning.switch == "chat_template_kwargs":
        assert body["chat_template_kwargs"] == {spec.family.reasoning.template_kwarg: False}
        assert "/no_think" not in _system_text(body)  # a Nemotron Nano 2 switch: text to this model
    else:
        assert "chat_template_kwargs" not in body
        assert _system_text(body).endswith("\n/no_think")


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
    assert _system_text(body) == holo_v1.system_prompt(reasoning=False, reasoning_line=False)
    assert body["chat_template_kwargs"] == {"thinking": False}  # the reasoning switch still follows the model


def test_unknown_model_gets_the_default_contract_and_no_template_switch(server) -> None:
    body = _ask(server, model="holotron-12b-served")
    default = get_protocol(DEFAULT_PROTOCOL)
    assert body["response_format"]["json_schema"]["schema"] == default.json_schema()
    assert "chat_template_kwargs" not in body


@pytest.mark.parametrize("spec", MODELS, ids=[m.key for m in MODELS])
def test_auto_runs_each_model_with_its_profile(server, spec: ModelSpec) -> None:
    """Reasoning "auto" and unset sampling take the model's published profile (docs/model-fidelity.md)."""
    body = _ask(server, model=spec.hub_id, reasoning="auto", seed=41)
    profile = spec.family.profile
    if spec.family.reasoning.switch == "chat_template_kwargs":
        assert body["chat_template_kwargs"] == {spec.family.reasoning.template_kwarg: profile.reasoning}
    else:
        assert _system_text(body).endswith("\n/think" if profile.reasoning else "\n/no_think")
    assert body.get("reasoning_effort") == (profile.reasoning_effort if profile.reasoning else None)
    assert (body["temperature"], body["top_p"]) == (profile.temperature, profile.top_p)
    assert body["seed"] == 41 + 1  # step n draws with seed + n; make_observation(history=1) is step 1
    assert body["max_tokens"] == 1024 + (profile.think_budget if profile.reasoning else 0)  # the thought counts


def test_published_switches_per_family(server) -> None:
    """The makers' own words: Holo3.x and Holotron-3-Nano think with effort "medium" and Holo2 thinks, all
    sampled at 0.8 (top_p 0.95 for Holotron-3-Nano); Holotron-12B, unpublished, acts without thinking."""
    nano = _ask(server, model="Hcompany/Holotron-3-Nano", reasoning="auto", seed=0)
    assert (nano["chat_template_kwargs"], nano["reasoning_effort"]) == ({"enable_thinking": True}, "medium")
    assert (nano["temperature"], nano["top_p"]) == (0.8, 0.95)
    holo3 = _ask(server, model="Hcompany/Holo3-35B-A3B", reasoning="auto", seed=0)
    assert (holo3["chat_template_kwargs"], holo3["reasoning_effort"]) == ({"enable_thinking": True}, "medium")
    holo2 = _ask(server, model="Hcompany/Holo2-8B", reasoning="auto", seed=0)
    assert holo2["chat_template_kwargs"] == {"thinking": True} and "reasoning_effort" not in holo2
    holotron = _ask(server, model="Hcompany/Holotron-12B", reasoning="auto", seed=0)
    assert _system_text(holotron).endswith("\n/no_think") and "reasoning_effort" not in holotron


def test_greedy_sends_temperature_zero_and_no_seed(server) -> None:
    body = _ask(server, model="Hcompany/Holo3-35B-A3B", reasoning="off", greedy=True)
    assert body["temperature"] == 0.0 and "seed" not in body and "top_p" not in body
    assert "reasoning_effort" not in body  # effort is sent only with reasoning on
