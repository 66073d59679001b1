"""Text that is not text, and JSON nested beyond Python's recursion limit, in every place Holodesk reads
JSON or TOML from outside (issue 31): a model's reply (both protocols, and as a server sends it), a script
line, the settings file. Each gives an error that says what is wrong, never a traceback. A lone surrogate in
a reply's words is recorded losslessly (F24: shown and written as an escape); text to type with one is a
clear error (it cannot be typed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from holodesk.errors import PolicyError, PolicyOutputError, SettingsError
from holodesk.policy.protocol import PROTOCOL_NAMES
from holodesk.policy.registry import get_protocol
from holodesk.policy.remote import RemotePolicy
from holodesk.policy.scripted import read_script
from holodesk.settings import read_settings_file
from tests.policy.remote_helpers import ScriptedServer, click_reply, make_observation

DEPTH = 100_000
DEEP_LIST = "[" * DEPTH + "]" * DEPTH
SURROGATE_REPLY = {"note": None, "thought": "ok", "tool_call": {"tool_name": "type", "text": "a\ud800b"}}


def reply_of(name: str, **tool: object) -> dict[str, object]:
    """A valid reply of protocol ``name`` with the tool call's fields overridden."""
    call: dict[str, object] = ({"tool_name": "write_desktop", "content": "hi"} if name == "agent-loop-v1"
                               else {"tool_name": "type", "text": "hi"})
    call.update(tool)
    return {"note": None, "thought": "type it", "tool_call": call}


@pytest.mark.parametrize("name", PROTOCOL_NAMES)
def test_a_lone_surrogate_in_the_words_is_kept_and_one_to_type_is_a_clear_error(name):
    proto = get_protocol(name)
    thought = json.dumps({**reply_of(name), "thought": "half \ud83d of an emoji"})  # "\ud83d" as a JSON escape
    assert proto.parse(thought, pointer=None).thought == "half \ud83d of an emoji"  # F24: kept, lossless
    if name == "agent-loop-v1":  # the contract checks the text to type
        escaped = json.dumps(reply_of(name, content="a\ud800b"))
        with pytest.raises(PolicyOutputError, match="lone UTF-16 surrogate"):
            proto.parse(escaped, pointer=None)


@pytest.mark.parametrize("name", PROTOCOL_NAMES)
def test_a_reply_nested_100000_deep_is_rejected_by_the_parser(name):
    deep = '{"note": null, "thought": "x", "tool_call": ' + "[" * 90_000 + "]" * 90_000 + "}"
    with pytest.raises(PolicyOutputError):
        get_protocol(name).parse(deep, pointer=None)


@pytest.fixture(scope="module")
def server():
    srv = ScriptedServer("--models", "Holotron-12B", "--default-content", click_reply())
    yield srv
    srv.stop()


def test_a_server_reply_with_a_lone_surrogate_or_nested_100000_deep(server):
    server.script({"content": json.dumps(SURROGATE_REPLY)},
                  {"body": DEEP_LIST}, {"body": '{"choices": ' + DEEP_LIST + "}"})
    with RemotePolicy(server.url, "Holotron-12B", api_key=None, protocol=get_protocol("holo-v1"),
                      retries=0) as pol:
        assert pol.propose(make_observation()).action.text == "a\ud800b"  # received losslessly (F24)
        for _ in range(2):
            with pytest.raises(PolicyError, match="is not JSON"):
                pol.propose(make_observation())
        assert pol.propose(make_observation()).action is not None  # the control: the default reply parses


def test_a_script_line_with_a_lone_surrogate_or_nested_100000_deep(tmp_path: Path):
    good = json.dumps(reply_of("holo-v1"))
    path = tmp_path / "deep.jsonl"
    path.write_text(f"{good}\n{DEEP_LIST}\n", encoding="utf-8")
    with pytest.raises(PolicyError) as ei:
        read_script(path)
    assert f"{path}:2: " in ei.value.message and "nested deeper" in ei.value.message
    kept = tmp_path / "surrogate.jsonl"  # F24: a lone surrogate is kept for the parser and the record
    kept.write_text(f"{good}\n{json.dumps(SURROGATE_REPLY)}\n\"say \\udfff\"\n", encoding="utf-8")
    assert read_script(kept)[1:] == [json.dumps(SURROGATE_REPLY, ensure_ascii=False), "say \udfff"]
    control = tmp_path / "good.jsonl"
    control.write_text(f"{good}\n\"caf\\u00e9 \\ud83d\\ude00\"\n", encoding="utf-8")  # a pair is a character
    assert read_script(control)[1] == "café \U0001f600"


def test_a_settings_file_nested_100000_deep(tmp_path: Path):
    deep = {"array": "policy = " + DEEP_LIST, "table": "policy = " + "{a=" * DEPTH + "1" + "}" * DEPTH}
    for label, text in deep.items():
        path = tmp_path / f"{label}.toml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(SettingsError, match="deeper than can be read") as ei:
            read_settings_file(path)
        assert str(path) in ei.value.message and "delete it" in ei.value.hint
    surrogate = tmp_path / "surrogate.toml"
    surrogate.write_text('endpoint = "http://a\\ud800b"\n', encoding="utf-8")
    with pytest.raises(SettingsError, match="not valid TOML"):  # tomllib refuses the escape itself
        read_settings_file(surrogate)
