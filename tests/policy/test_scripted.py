"""ScriptedPolicy: plays a JSON Lines script of holo-v1 replies through the protocol's parser."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from holodesk.core.actions import Answer, Click, Key, Point, Scroll, Type
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import PolicyError, PolicyOutputError, SettingsError
from holodesk.policy.base import Observation, Policy
from holodesk.policy.registry import get_protocol
from holodesk.policy.scripted import ScriptedPolicy, read_script, write_script

OBS = Observation(task="t", frame=Frame(np.zeros((2, 2, 3), np.uint8), Monitor(1, 0, 0, 2, 2)))

FENCED = (
    'Sure! ```json\n{"note": null, "thought": "scroll", '
    '"tool_call": {"tool_name": "scroll", "direction": "down"}}\n```'
)
TRUNCATED = '{"note": null, "thought": "x", "tool_call": {"tool_name": "click", "x": 1500'
SCRIPT = "\n".join(
    [
        "# a demo script: comments and blank lines are skipped",
        "",
        '{"note": "start", "thought": "open menu", "tool_call": {"tool_name": "click", "x": 20, "y": 15}}',
        json.dumps(FENCED),
        json.dumps(TRUNCATED),
        "   # indented comment",
        '{"note": null, "thought": "Grüße\u2028ok", "tool_call": {"tool_name": "type", "text": "$(id) <b>hi</b>"}}',
        '{"note": null, "thought": "The answer is 7", "tool_call": null}',
        "",
    ]
)


def test_plays_a_script_file_including_a_malformed_line(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    path.write_text(SCRIPT, encoding="utf-8")
    policy = ScriptedPolicy(path)
    assert isinstance(policy, Policy)
    assert policy.name == "scripted:demo.jsonl"
    assert policy.remaining == 5

    first = policy.propose(OBS)
    assert first.action == Click(Point(20, 15))
    assert first.thought == "open menu"
    assert first.note == "start"
    assert first.raw_text == json.dumps(
        {"note": "start", "thought": "open menu", "tool_call": {"tool_name": "click", "x": 20, "y": 15}}
    )
    assert set(first.timings_ms) == {"policy"}
    assert first.timings_ms["policy"] >= 0
    assert first.extra["script_step"] == 1

    second = policy.propose(OBS)
    assert second.action == Scroll("down", 3, None)
    assert second.raw_text == FENCED
    assert second.extra["warnings"] == ["the JSON object was fenced in markdown"]

    with pytest.raises(PolicyOutputError) as info:
        policy.propose(OBS)
    assert info.value.raw_text == TRUNCATED
    assert "missing closing brace" in info.value.message

    fourth = policy.propose(OBS)
    assert fourth.action == Type("$(id) <b>hi</b>")
    assert fourth.thought == "Grüße\u2028ok"  # a Unicode line separator does not split the line

    fifth = policy.propose(OBS)
    assert fifth.action == Answer("The answer is 7")

    with pytest.raises(PolicyError) as exhausted:
        policy.propose(OBS)
    assert exhausted.value.message == "script exhausted after 5 steps"
    policy.close()


def test_replies_given_in_memory() -> None:
    policy = ScriptedPolicy(
        [
            {"note": None, "thought": "", "tool_call": {"tool_name": "key", "keys": ["ctrl", "s"]}},
            "not json at all",
        ]
    )
    assert policy.name == "scripted"
    assert policy.propose(OBS).action == Key(("ctrl", "s"))
    with pytest.raises(PolicyOutputError) as info:
        policy.propose(OBS)
    assert info.value.raw_text == "not json at all"
    with pytest.raises(PolicyError, match="exhausted after 2 steps"):
        policy.propose(OBS)


def test_empty_script_is_exhausted_at_once(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("# nothing\n\n", encoding="utf-8")
    with pytest.raises(PolicyError, match="exhausted after 0 steps"):
        ScriptedPolicy(path).propose(OBS)


@pytest.mark.parametrize(("line", "words"), [("[1, 2]", "got list"), ("42", "got int"), ("{oops", "not valid JSON")])
def test_unreadable_script_line_names_file_and_line(tmp_path: Path, line: str, words: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('# header\n"ok"\n' + line + "\n", encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        read_script(path)
    assert f"{path}:3" in info.value.message
    assert words in info.value.message


def test_missing_file_and_unknown_protocol(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read script"):
        ScriptedPolicy(tmp_path / "nope.jsonl")
    with pytest.raises(SettingsError, match="holo-v1"):
        ScriptedPolicy(["x"], protocol="holo-v0")


def test_write_script_round_trip(tmp_path: Path) -> None:
    raw_bad = '{"tool_call": {"tool_name": "click", "x": 0.5, "y": 0.5}}'
    obj = {"note": "n", "thought": "t", "tool_call": {"tool_name": "click", "x": 1, "y": 2}}
    path = write_script(
        tmp_path / "s.jsonl",
        [Click(Point(3, 4)), obj, raw_bad, Type("a\u2028b\nc")],
        header="made by a test\nsecond line",
    )
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[:3] == ["# protocol: holo-v1", "# made by a test", "# second line"]
    assert lines[3] == get_protocol().to_reply(Click(Point(3, 4)))
    assert json.loads(lines[5]) == raw_bad
    assert read_script(path)[2] == raw_bad

    policy = ScriptedPolicy(path)
    assert policy.propose(OBS).action == Click(Point(3, 4))
    second = policy.propose(OBS)
    assert (second.action, second.thought, second.note) == (Click(Point(1, 2)), "t", "n")
    with pytest.raises(PolicyOutputError, match=r"0\.\.1 normalised"):
        policy.propose(OBS)
    assert policy.propose(OBS).action == Type("a\u2028b\nc")


def test_write_script_rejects_other_types(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="reply 1"):
        write_script(tmp_path / "x.jsonl", [42])  # type: ignore[list-item]


def test_a_script_without_its_protocol_line_gets_a_hint_naming_the_line_to_add(tmp_path: Path) -> None:
    """An agent-loop-v1 script whose ``# protocol:`` line was left out is read as holo-v1, so its replies
    are rejected ("unknown tool name click_desktop"); the error says which line to add."""
    path = write_script(tmp_path / "steps.jsonl", [Click(Point(10, 20)), Answer("ok")], protocol="agent-loop-v1")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert lines[0].startswith("# protocol: agent-loop-v1")
    path.write_text("".join(lines[1:]), encoding="utf-8")  # the line the user's file lacked
    with pytest.raises(PolicyOutputError) as err:
        ScriptedPolicy(path).propose(OBS)
    assert "unknown tool name" in err.value.message
    assert "add the line `# protocol: agent-loop-v1` at the top of the file" in str(err.value), str(err.value)
    # A reply that no protocol reads gets no such hint; a file that names its protocol neither.
    (tmp_path / "bad.jsonl").write_text('{"tool_call": {"tool_name": "fly"}}\n', encoding="utf-8")
    with pytest.raises(PolicyOutputError) as bad:
        ScriptedPolicy(tmp_path / "bad.jsonl").propose(OBS)
    assert "# protocol:" not in str(bad.value)


REASONED = ("<think>The dialog is open; its OK button is at the bottom.</think>\n"
            + json.dumps({"note": None, "thought": "press OK",
                          "tool_call": {"tool_name": "click_desktop", "element": "OK", "x": 500, "y": 900}}))


def test_a_reasoning_block_is_read_as_a_models_is() -> None:
    """A scripted reply with a ``<think>`` block before the JSON is read as the local and remote policies read a
    model's: the block recorded as ``reasoning_text``, nothing tolerated, the reply text kept whole, and the block
    never written into a later turn."""
    from holodesk.policy.base import HistoryStep

    policy = ScriptedPolicy([REASONED, REASONED], protocol="agent-loop-v1")
    proposal = policy.propose(OBS)
    assert proposal.extra["reasoning_text"] == "The dialog is open; its OK button is at the bottom."
    assert proposal.extra["warnings"] == [] and proposal.thought == "press OK"
    assert proposal.raw_text == REASONED
    step = HistoryStep(index=0, frame=OBS.frame, action=proposal.action, thought=proposal.thought, note=proposal.note,
                       raw_text=proposal.raw_text, outcome="performed")
    later = Observation(task="t", frame=OBS.frame, history=[step])
    turns = json.dumps(policy.protocol.build_messages(later, max_images=1, reasoning=True), default=repr)
    assert "press OK" in turns and "OK button is at the bottom" not in turns  # the reply is re-added, not the thought


def test_a_reasoning_block_of_a_reply_that_does_not_parse_is_still_recorded() -> None:
    policy = ScriptedPolicy(["<think>no idea</think> I cannot see the screen."], protocol="agent-loop-v1")
    with pytest.raises(PolicyOutputError) as info:
        policy.propose(OBS)
    assert info.value.extra["reasoning_text"] == "no idea"
    assert info.value.raw_text == "<think>no idea</think> I cannot see the screen."


def test_the_scripted_local_and_remote_policies_share_one_reading_of_the_block() -> None:
    """One home: the scripted policy's record is what :func:`split_reasoning` reads, the local policy's reading
    (its prompt opened the block) agrees on a reply that opens it itself, and a ``</think>`` quoted inside the
    reply's object is not a block end."""
    from holodesk.policy.contract import reasoning_text
    from holodesk.policy.reply import split_reasoning

    thought, reply = split_reasoning(REASONED)
    assert thought == reasoning_text(REASONED) == "The dialog is open; its OK button is at the bottom."
    assert reply.strip().startswith("{")
    quoted = json.dumps({"note": None, "thought": "the text says </think>", "tool_call": None})
    assert split_reasoning(quoted) == (None, quoted)
    assert split_reasoning("I will press {Enter}.</think>{}", opened=True) == ("I will press {Enter}.", "{}")
    assert split_reasoning("<think>open") == (None, "<think>open")  # the parser refuses it with its reason
