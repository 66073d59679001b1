"""agent-loop-v1 (H Company's agent-loop contract): golden prompts, tools declared once, parser rules.

The golden fixtures below are written by hand from the contract's rules (docs/actions.md, "agent-loop-v1"),
not produced by the code under test: a 3-step episode whose oldest screenshot falls outside the image
budget, a failed step reported as ``<error>``, performed steps as ``<tool_output>``, only the parsed JSON
re-added as assistant turns, a reasoning block in a raw reply never spliced back.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np
import pytest
from PIL import Image

from holodesk.core.actions import (
    MAX_TYPE_CHARS,
    Answer,
    Click,
    Done,
    Drag,
    Key,
    KeyDown,
    KeyUp,
    Move,
    Plan,
    Point,
    Scroll,
    Type,
    Wait,
)
from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import ActionError, PolicyOutputError
from holodesk.policy.base import HistoryStep, Observation, pointer_after
from holodesk.policy.contract import TOOLS, Reply, Tool, tool_list, tool_names
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.registry import get_protocol
from holodesk.policy.remote import RemotePolicy
from tests.policy.remote_helpers import ScriptedServer

P = get_protocol("agent-loop-v1")
KEY = "sk-contract-test"
MODEL = "Holotron-12B"


def _frame(shade: int, w: int = 64, h: int = 40) -> Frame:
    return Frame(np.full((h, w, 3), shade, np.uint8), Monitor(1, 0, 0, w, h))


F1, F2, F3, F4 = _frame(10), _frame(20), _frame(30), _frame(40)

EPISODE = Observation(
    task="Fill the form: name Ada",
    frame=F4,
    history=(
        HistoryStep(0, F1, Click(Point(300, 200), element="Name field"), "Click the name field", None,
                    raw_text='<think>the field is at the top</think>{"note": null, "thought": "x"}',
                    outcome="performed"),
        HistoryStep(1, F2, Type("Ada"), "Type the name", "name field focused", outcome="performed"),
        HistoryStep(2, F3, Click(Point(500, 900), element="Submit button"), "Submit", None,
                    outcome="failed: the pointer could not be moved"),
    ),
)

A1 = ('{"note":null,"thought":"Click the name field","tool_call":{"tool_name":"click_desktop",'
      '"element":"Name field","x":300,"y":200,"button":"left"}}')
A2 = ('{"note":"name field focused","thought":"Type the name","tool_call":{"tool_name":"write_desktop",'
      '"content":"Ada","overwrite":false,"press_enter":false}}')
A3 = ('{"note":null,"thought":"Submit","tool_call":{"tool_name":"click_desktop","element":"Submit button",'
      '"x":500,"y":900,"button":"left"}}')
R1 = '<tool_output tool="click_desktop">\nperformed\n</tool_output>'
R2 = '<tool_output tool="write_desktop">\nperformed\n</tool_output>'
R3 = '<error tool="click_desktop">\nfailed: the pointer could not be moved\n</error>'
OMITTED = "<observation>\n[Image omitted by context cleaning]\n</observation>"

# The turns of step 4, in order: (role, text with "<image>" where a screenshot goes).
GOLDEN_TURNS: list[tuple[str, str]] = [
    ("system", "<SYSTEM>"),
    ("user", "Task: Fill the form: name Ada"),
    ("user", OMITTED),  # 4 screenshots, budget 3: the oldest is a placeholder inside its wrapper
    ("assistant", A1),  # the parsed JSON only: the raw reply's <think> block is not spliced back
    ("user", R1),
    ("user", "<observation>\n<image>\n</observation>"),
    ("assistant", A2),
    ("user", R2),
    ("user", "<observation>\n<image>\n</observation>"),
    ("assistant", A3),
    ("user", R3),
    ("user", "<observation>\n<image>\n</observation>"),
]


def _turn_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    out = []
    for part in content:
        out.append("<image>" if part["type"] in ("image", "image_url") else part["text"])
    return "".join(out)


def test_golden_messages_of_a_three_step_episode() -> None:
    messages = P.build_messages(EPISODE, max_images=3)
    turns = [(m["role"], _turn_text(m["content"])) for m in messages]
    expected = [(r, P.system_prompt() if t == "<SYSTEM>" else t) for r, t in GOLDEN_TURNS]
    assert turns == expected
    frames = [p["frame"] for m in messages if isinstance(m["content"], list) for p in m["content"]
              if p["type"] == "image"]
    assert frames == [F2, F3, F4]  # the last 3 screenshots, oldest first, the current one last


def test_golden_remote_request_of_a_three_step_episode() -> None:
    """What vLLM receives: the same turns, screenshots as PNG data URLs (the last 3, in order), the
    reply schema as response_format."""
    server = ScriptedServer("--api-key", KEY, "--models", MODEL)
    try:
        reply = P.to_reply(Answer("Submitted"), thought="done")
        server.script({"content": reply})
        with RemotePolicy(server.url, MODEL, api_key=KEY, options=GenerationOptions(max_images=3)) as policy:
            assert policy.protocol.name == "agent-loop-v1"  # the default
            proposal = policy.propose(EPISODE)
        body = server.chat_requests()[0]["body"]
    finally:
        server.stop()
    assert proposal.action == Answer("Submitted")
    turns = [(m["role"], _turn_text(m["content"])) for m in body["messages"]]
    assert turns == [(r, P.system_prompt() if t == "<SYSTEM>" else t) for r, t in GOLDEN_TURNS]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == Reply.model_json_schema()
    urls = [p["image_url"]["url"] for m in body["messages"] if isinstance(m["content"], list)
            for p in m["content"] if p["type"] == "image_url"]
    shades = []
    for url in urls:
        head, data = url.split(",", 1)
        assert head == "data:image/png;base64"
        shades.append(int(np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))[0, 0, 0]))
    assert shades == [20, 30, 40]


def test_golden_local_prompt_of_a_three_step_episode(tiny_loaded_module: Any) -> None:
    """The local runtime's rendered text (tiny checkpoint, template written as NVIDIA's: BOS, list-form
    parts, <SPECIAL_11> turns, <think></think> with thinking off) with one sentinel per screenshot."""
    from holodesk.policy.holotron import HolotronPolicy
    from holodesk.policy.holotron.prompt import IMAGE_SENTINEL

    policy = HolotronPolicy(tiny_loaded_module, GenerationOptions(max_images=3), decoder="stock")
    prepared = policy.prepare(EPISODE, max_images=3)
    system = P.system_prompt().replace("/no_think", "").strip()
    expected = "<s><SPECIAL_10>System\n" + system + "\n"
    for role, text in GOLDEN_TURNS[1:]:
        text = text.replace("<image>", IMAGE_SENTINEL)
        expected += ("<SPECIAL_11>User\n" + text + "\n") if role == "user" else (
            "<SPECIAL_11>Assistant\n" + text + "\n<SPECIAL_12>\n")
    expected += "<SPECIAL_11>Assistant\n<think></think>"
    assert prepared["template"] == "chat_template"
    assert prepared["prompt_text"] == expected
    assert prepared["frames"] == [F2, F3, F4]
    ids = prepared["input_ids"]
    assert ids.count(tiny_loaded_module.img_start_id) == 3 and ids.count(tiny_loaded_module.img_end_id) == 3


@pytest.fixture(scope="module")
def tiny_loaded_module(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("torch")
    from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint
    from holodesk.policy.holotron.loader import load_holotron

    folder = write_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "t", seed=0, shards=1)
    return load_holotron(folder, dtype="float32", device="cpu")


# ------------------------------------------------------------------------------ the contract's rules
def test_system_prompt_embeds_the_schema_the_decoder_enforces() -> None:
    prompt = P.system_prompt()
    block = prompt.split("<output_format>\n```json\n", 1)[1].split("\n```\n</output_format>", 1)[0]
    assert json.loads(block) == P.json_schema() == Reply.model_json_schema()
    assert prompt.endswith("\n/no_think") and P.system_prompt(reasoning=True).endswith("\n/think")
    assert tool_list() in prompt


def test_tools_are_declared_once_and_everything_derives_from_them() -> None:
    schema = P.json_schema()
    union = schema["properties"]["tool_call"]["oneOf"]
    consts = [schema["$defs"][ref["$ref"].rsplit("/", 1)[1]]["properties"]["tool_name"]["const"] for ref in union]
    assert tuple(consts) == tool_names() == (
        "click_desktop", "double_click_desktop", "move_to_desktop", "drag_to_desktop", "scroll_desktop",
        "write_desktop", "hotkey_desktop", "hold_and_tap_key_desktop", "key_down_desktop", "key_up_desktop",
        "wait_desktop", "update_plan", "answer",
    )
    for name in tool_names():
        assert f"- `{name}(" in P.system_prompt()
    pointer_tools = [t for t in TOOLS if "x" in t.model_fields]
    assert pointer_tools and all("element" in t.model_fields for t in pointer_tools)
    assert all(issubclass(t, Tool) for t in TOOLS)


@pytest.mark.parametrize("action", [
    Click(Point(1, 2), element="OK"), Click(Point(3, 4), element="file", button="right"),
    Move(Point(5, 6), element="m"),
    Scroll("down", 4, Point(7, 8), element="list"), Type("Ada\n"), Key(("ctrl", "s")), Wait(2.5),
    Type("Grace", replace=True), Key(("ctrl", "z"), repeat=3), Scroll("up", 100, Point(1, 1), element="page"),
    Answer("42"), Drag(Point(100, 100), Point(9, 9), element="bin"), KeyDown(("shift", "ctrl")), KeyUp(("shift",)),
    Key(("shift",), taps=("tab", "tab", "tab")),
    Plan((("Open the form", "done"), ("Fill in the name", "running"), ("Submit", "todo"))),
])
def test_round_trip_through_the_serializer_and_the_validator(action: Any) -> None:
    text = P.to_reply(action, thought="t", note="n")
    pointer = action.start if isinstance(action, Drag) else None
    parsed = P.parse(text, pointer=pointer)
    assert (parsed.action, parsed.thought, parsed.note, parsed.warnings) == (action, "t", "n", ())


def _call(**tool_call: Any) -> str:
    return json.dumps({"note": None, "thought": "t", "tool_call": tool_call})


def test_update_plan_is_recorded_and_its_output_is_the_plan() -> None:
    reply = _call(tool_name="update_plan", goals=[{"title": "Open the form", "status": "done"},
                                                  {"title": "Fill in the name", "status": "running"},
                                                  {"title": "Submit"}])
    plan = P.parse(reply).action
    assert plan == Plan((("Open the form", "done"), ("Fill in the name", "running"), ("Submit", "todo")))
    assert not plan.ends_episode
    turn = P.tool_result(HistoryStep(0, F1, plan, "t", outcome="performed"))
    assert _turn_text(turn["content"]) == ('<tool_output tool="update_plan">\n1. [done] Open the form\n'
                                           '2. [running] Fill in the name\n3. [todo] Submit\n</tool_output>')
    skipped = P.tool_result(HistoryStep(0, F1, plan, "t", outcome="skipped by the user"))
    assert _turn_text(skipped["content"]) == '<error tool="update_plan">\nskipped by the user\n</error>'
    for bad, message in (([], "at least 1 item"), ([{"title": "x", "status": "later"}], "status"),
                         ([{"title": "x", "extra": 1}], "extra")):
        with pytest.raises(PolicyOutputError, match=message):
            P.parse(_call(tool_name="update_plan", goals=bad))


@pytest.mark.parametrize(("hold", "tap", "keys"), [
    (["shift"], ["tab"], ("shift", "tab")),
    (["Control", "Shift"], ["T"], ("ctrl", "shift", "t")),
    (["alt"], ["F4"], ("alt", "f4")),
])
def test_hold_and_tap_is_the_chord_of_the_held_keys_then_the_tapped_one(hold: list[str], tap: list[str],
                                                                        keys: tuple[str, ...]) -> None:
    # Key presses its keys in order and releases them in reverse: the held keys go down first, the tapped
    # key is pressed and released, then the held keys come up, which is the cookbook's hold-and-tap.
    assert P.parse(_call(tool_name="hold_and_tap_key_desktop", hold_keys=hold, tap_keys=tap)).action == Key(keys)


def test_hold_and_tap_taps_up_to_five_keys_in_turn_as_published() -> None:
    spec = P.json_schema()["$defs"]["HoldAndTapKeyDesktop"]["properties"]
    assert (spec["tap_keys"]["minItems"], spec["tap_keys"]["maxItems"]) == (1, 5)  # published: up to 5 tapped
    assert (spec["hold_keys"]["minItems"], spec["hold_keys"]["maxItems"]) == (1, 3)  # published: up to 3 held
    taps = P.parse(_call(tool_name="hold_and_tap_key_desktop", hold_keys=["alt"], tap_keys=["tab", "tab"])).action
    assert taps == Key(("alt",), taps=("tab", "tab"))
    assert json.loads(P.to_reply(taps))["tool_call"] == {"tool_name": "hold_and_tap_key_desktop", "hold_keys": ["alt"],
                                                         "tap_keys": ["tab", "tab"]}
    with pytest.raises(PolicyOutputError, match="tap_keys"):
        P.parse(_call(tool_name="hold_and_tap_key_desktop", hold_keys=["alt"], tap_keys=["tab"] * 6))
    with pytest.raises(PolicyOutputError, match="hold_keys"):
        P.parse(_call(tool_name="hold_and_tap_key_desktop", hold_keys=[], tap_keys=["tab"]))


def test_key_down_and_up_are_offered_with_up_to_three_keys() -> None:
    for name in ("key_down_desktop", "key_up_desktop"):
        assert f"- `{name}(" in P.system_prompt()
        spec = P.json_schema()["$defs"][name.title().replace("_", "")]["properties"]["keys"]
        assert (spec["minItems"], spec["maxItems"]) == (1, 3)
    assert P.parse(_call(tool_name="key_down_desktop", keys=["Shift"])).action == KeyDown(("shift",))
    assert P.parse(_call(tool_name="key_up_desktop", keys=["shift"])).action == KeyUp(("shift",))
    with pytest.raises(PolicyOutputError, match="keys"):
        P.parse(_call(tool_name="key_down_desktop", keys=["shift", "ctrl", "alt", "super"]))
    with pytest.raises(PolicyOutputError, match="keys"):
        P.parse(_call(tool_name="key_up_desktop", keys=[]))


def test_write_leaves_room_for_press_enter() -> None:
    longest = "a" * (MAX_TYPE_CHARS - 1)
    assert P.parse(_call(tool_name="write_desktop", content=longest, press_enter=True)).action == Type(longest + "\n")
    with pytest.raises(PolicyOutputError, match="content"):
        P.parse(_call(tool_name="write_desktop", content=longest + "a"))


def test_element_is_carried_to_the_action() -> None:
    reply = json.dumps({"note": None, "thought": "t", "tool_call": {
        "tool_name": "click_desktop", "element": "Blue 'Save' button, top left", "x": 40, "y": 30}})
    assert P.parse(reply).action == Click(Point(40, 30), element="Blue 'Save' button, top left")


def test_drag_starts_where_the_pointer_is() -> None:
    history = (HistoryStep(0, F1, Move(Point(100, 200), element="file icon"), outcome="performed"),
               HistoryStep(1, F2, Click(Point(9, 9)), outcome="skipped by the user"))
    assert pointer_after(history) == Point(100, 200)  # a skipped step did not move it
    reply = json.dumps({"note": None, "thought": "t", "tool_call": {
        "tool_name": "drag_to_desktop", "element": "trash", "x": 900, "y": 950}})
    assert P.parse(reply, pointer=pointer_after(history)).action == Drag(Point(100, 200), Point(900, 950),
                                                                         element="trash")
    with pytest.raises(PolicyOutputError, match="call move_to_desktop first"):
        P.parse(reply)


@pytest.mark.parametrize(("call", "message"), [
    ({"tool_name": "click", "element": "e", "x": 1, "y": 2}, "does not follow agent-loop-v1"),
    ({"tool_name": "click_desktop", "x": 1, "y": 2}, "element"),
    ({"tool_name": "click_desktop", "element": "e", "x": 1001, "y": 2}, "look like pixel coordinates"),
    ({"tool_name": "click_desktop", "element": "e", "x": -1, "y": 2}, "not clamped"),
    ({"tool_name": "click_desktop", "element": "e", "x": 0.5, "y": 0.25}, "0..1 normalised"),
    ({"tool_name": "write_desktop", "content": "a", "overwrite": "maybe"}, "overwrite"),
    ({"tool_name": "hotkey_desktop", "keys": ["ctrl", "z"], "repeat_count": 0}, "repeat_count"),
    ({"tool_name": "scroll_desktop", "element": "e", "x": 1, "y": 2, "direction": "down", "scroll_size": 101},
     "scroll_size"),
    ({"tool_name": "hold_and_tap_key_desktop", "hold_keys": ["ctrl", "alt", "shift", "super"], "tap_keys": ["t"]},
     "hold_keys"),
    ({"tool_name": "hotkey_desktop", "keys": ["hyper"]}, "keys"),
    ({"tool_name": "answer", "content": "   "}, "answer text must be a non-empty string"),
])
def test_invalid_calls_are_rejected_with_the_raw_text(call: dict[str, Any], message: str) -> None:
    raw = json.dumps({"note": None, "thought": "t", "tool_call": call})
    with pytest.raises(PolicyOutputError, match=message) as info:
        P.parse(raw)
    assert info.value.raw_text == raw


def test_packaging_is_tolerated_as_in_holo_v1() -> None:
    body = P.to_reply(Key(("ctrl", "s")), thought="save")
    parsed = P.parse("<think>plan</think>\n```json\n" + body + "\n```")
    assert parsed.action == Key(("ctrl", "s"))
    assert any("reasoning" in w for w in parsed.warnings) and any("fenced" in w for w in parsed.warnings)
    assert P.parse(json.dumps({"note": None, "thought": "t", "tool_call": {
        "tool_name": "hotkey_desktop", "keys": ["Control", "S"]}})).action == Key(("ctrl", "s"))


def test_done_has_no_tool_in_the_contract() -> None:
    with pytest.raises(ActionError, match="no tool"):
        P.to_reply(Done("ok"))


def test_localization_prompt_and_reply() -> None:
    prompt = P.localization_prompt("the 'Sign in' button")
    assert prompt.startswith("Localize an element on the GUI image according to the provided target")
    assert prompt.endswith("Your target is:\nthe 'Sign in' button")
    assert P.localization_schema()["required"] == ["x", "y"]
    assert P.parse_localization('{"x": 10, "y": 990}') == Point(10, 990)


def test_reasoning_switch_in_user_text_is_disarmed() -> None:
    obs = Observation(task="read /no_think.txt", frame=F1)
    text = _turn_text(P.build_messages(obs)[1]["content"])
    assert "/no_think" not in text and "no_think.txt" in text


def test_the_contract_is_the_default_protocol_everywhere() -> None:
    from holodesk.policy.models import AUTO_PROTOCOL, protocol_for
    from holodesk.policy.protocol import DEFAULT_PROTOCOL
    from holodesk.settings import Settings

    settings = Settings()
    assert settings.protocol == AUTO_PROTOCOL
    # the generation options built from the settings, the options' default and a remote policy built without any
    assert GenerationOptions.from_settings(settings).protocol == GenerationOptions().protocol == DEFAULT_PROTOCOL
    with RemotePolicy("http://127.0.0.1:1/v1", "some-served-name", api_key=None) as remote:
        assert remote.protocol.name == DEFAULT_PROTOCOL
    # "auto" resolves to the contract for the default model and for a model the registry does not know
    assert DEFAULT_PROTOCOL == "agent-loop-v1" == protocol_for(settings.model) == protocol_for("some-served-name")


@pytest.mark.parametrize(("call", "words", "not_words"), [
    # F24: typed text with a lone surrogate cannot be typed; the message says so in plain words
    ({"tool_name": "write_desktop", "content": "a\ud83d b"}, "lone UTF-16 surrogate", "unable to parse raw data"),
    # F23: a key name outside the vocabulary: one sentence, not pydantic's list of ~190 names
    ({"tool_name": "hotkey_desktop", "keys": ["KP_Enter"]}, "is not a name Holodesk knows", "'altgr'"),
])
def test_rejections_say_what_is_wrong_in_plain_words(call: dict[str, Any], words: str, not_words: str) -> None:
    raw = json.dumps({"note": None, "thought": "t", "tool_call": call})
    with pytest.raises(PolicyOutputError) as info:
        get_protocol("agent-loop-v1").parse(raw)
    assert words in info.value.message and not_words not in info.value.message
    assert info.value.raw_text == raw  # the reply is kept as it came


def test_published_tool_fields_and_bounds() -> None:
    """H Company's published tool set (NVIDIA's holo-nano loop): write_desktop has overwrite, hotkey_desktop has
    repeat_count, scroll up to 100 clicks, plans up to 20 goals, up to 3 held keys."""
    defs = P.json_schema()["$defs"]
    assert defs["WriteDesktop"]["properties"]["overwrite"]["default"] is False
    assert defs["HotkeyDesktop"]["properties"]["repeat_count"]["default"] == 1
    assert defs["ScrollDesktop"]["properties"]["scroll_size"]["maximum"] == 100
    assert defs["UpdatePlan"]["properties"]["goals"]["maxItems"] == 20
    assert P.parse(_call(tool_name="write_desktop", content="Ada", overwrite=True, press_enter=True)).action == Type(
        "Ada\n", replace=True)
    assert P.parse(_call(tool_name="hotkey_desktop", keys=["ctrl", "z"], repeat_count=4)).action == Key(
        ("ctrl", "z"), repeat=4)
    goals = [{"title": f"goal {i}", "status": "todo"} for i in range(20)]
    assert len(P.parse(_call(tool_name="update_plan", goals=goals)).action.goals) == 20  # type: ignore[attr-defined]
    with pytest.raises(PolicyOutputError, match="goals"):
        P.parse(_call(tool_name="update_plan", goals=[*goals, {"title": "one more"}]))
    assert "`write_desktop(content, overwrite=false, press_enter=false)`" in P.system_prompt()


def test_reasoning_text_is_read_for_the_record_only() -> None:
    from holodesk.policy.contract import reasoning_text

    reply = '{"note":null,"thought":"t","tool_call":{"tool_name":"answer","content":"42"}}'
    assert reasoning_text("The field is empty, so type.\n</think>" + reply) == "The field is empty, so type."
    assert reasoning_text("<think>\nlook</think>\n" + reply) == "look"
    assert reasoning_text(reply) is None and reasoning_text("<think></think>" + reply) is None
