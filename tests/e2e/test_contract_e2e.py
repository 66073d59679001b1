"""End to end in agent-loop-v1: a scripted episode in H Company's contract fills a third-party form.

The script names its protocol (``# protocol: agent-loop-v1``) and speaks the contract's tools
(``update_plan``, ``click_desktop`` with ``element``, ``write_desktop``, ``hold_and_tap_key_desktop``,
``answer``). `holodesk run` runs as its own
process with the real mss capture and pyautogui executor, on an Xvfb screen with a real window manager
(openbox) and the Tk form of tests/apps/tk_form.py (its own process). The form's printed state is the
verdict; the coordinates are the widgets' centres in a frame captured from that screen, in [0, 1000].
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.core.geometry import frame_pixel_to_point
from holodesk.session.episode import list_episodes, load_episode
from tests.helpers.desktop import Desktop, FormApp

pytestmark = [pytest.mark.e2e, pytest.mark.gui, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _reply(thought: str, call: dict[str, Any], note: str | None = None) -> str:
    return json.dumps({"note": note, "thought": thought, "tool_call": call}, ensure_ascii=False)


def _tk_form_on_screen(make_desktop: Any) -> tuple[Desktop, FormApp, Callable[[str], dict[str, int]]]:
    """An openbox desktop (1280x800) with the Tk form active, and ``at(widget)``: the widget's centre as
    the model's ``{"x", "y"}`` in [0, 1000] of a frame captured from that screen."""
    desktop: Desktop = make_desktop("openbox", 1280, 800)
    form = desktop.tk_form(x=400, y=250)
    form.activate()
    cap = MssCapture(display=desktop.display)
    try:
        frame = cap.grab(1)
    finally:
        cap.close()

    def at(widget: str) -> dict[str, int]:
        cx, cy = form.center(widget)
        p = frame_pixel_to_point(frame, cx - frame.monitor.left, cy - frame.monitor.top)
        return {"x": p.x, "y": p.y}

    return desktop, form, at


def _run_script(desktop: Desktop, task: str, script: Path, approve: str, episodes: Path,
                answers: str) -> subprocess.CompletedProcess[str]:
    """`holodesk run TASK --script SCRIPT --approve APPROVE --json` as its own process on ``desktop``, with
    ``answers`` on its stdin."""
    return subprocess.run(
        [sys.executable, "-m", "holodesk", "run", task, "--script", str(script), "--approve", approve,
         "--episodes-dir", str(episodes), "--json"],
        env=desktop.env(), input=answers, capture_output=True, text=True, timeout=240, cwd=ROOT)


def test_a_scripted_contract_episode_fills_the_tk_form(make_desktop: Any, tmp_path: Path) -> None:
    desktop, form, at = _tk_form_on_screen(make_desktop)
    script = tmp_path / "form.jsonl"
    script.write_text("\n".join([
        "# protocol: agent-loop-v1",
        _reply("Plan the task", {"tool_name": "update_plan", "goals": [
            {"title": "Type the name", "status": "running"}, {"title": "Tick agree and submit"}]}),
        _reply("Focus the name field", {"tool_name": "click_desktop", "element": "Name entry of the Tk form",
                                         **at("name")}),
        _reply("Type the name", {"tool_name": "write_desktop", "content": "Ada Lovelace"}),
        _reply("Select the name", {"tool_name": "hold_and_tap_key_desktop", "hold_keys": ["ctrl"],
                                   "tap_keys": ["a"]}),
        _reply("Tick the box", {"tool_name": "click_desktop", "element": "'agree' check box", **at("agree")},
               note="name typed"),
        _reply("Submit the form", {"tool_name": "click_desktop", "element": "Submit button", **at("Submit")}),
        _reply("Done", {"tool_name": "answer", "content": "The form was submitted for Ada Lovelace."}),
    ]) + "\n", encoding="utf-8")
    episodes = tmp_path / "episodes"
    # 'agree' and Submit may consent or submit: the autopilot asks, the user approves
    res = _run_script(desktop, "fill the form for Ada Lovelace", script, "auto", episodes, answers="a\na\n")
    assert res.returncode == 0, res.stdout + res.stderr
    assert form.result() == {"name": "Ada Lovelace", "agree": True, "count": 0, "submitted": True}
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["status"] == "finished" and summary["answer"] == "The form was submitted for Ada Lovelace."
    ep = load_episode(list_episodes(episodes)[0])
    assert ep.steps[0]["action"] == {"kind": "plan", "goals": [["Type the name", "running"],
                                                                ["Tick agree and submit", "todo"]]}
    assert ep.steps[1]["action"]["element"] == "Name entry of the Tk form"  # the model's words are recorded
    assert ep.steps[3]["action"] == {"kind": "key", "keys": ["ctrl", "a"]}
    assert [s["result"]["status"] for s in ep.steps[:6]] == ["performed"] * 6
    assert [s["decided_by"] for s in ep.steps[:6]] == ["autopilot"] * 4 + ["user", "user"]


def test_step_mode_edit_reads_the_tool_call_in_the_policys_protocol(make_desktop: Any, tmp_path: Path) -> None:
    """`holodesk run --approve step` with an agent-loop-v1 script: at the typing step the user answers
    [e]dit; a holo-v1 tool call is refused (and asked again), the contract's write_desktop is performed.
    The form's own printed state after Submit is the verdict."""
    desktop, form, at = _tk_form_on_screen(make_desktop)
    script = tmp_path / "edit.jsonl"
    script.write_text("\n".join([
        "# protocol: agent-loop-v1",
        _reply("Focus the name field", {"tool_name": "click_desktop", "element": "Name entry", **at("name")}),
        _reply("Type the name", {"tool_name": "write_desktop", "content": "Ada Lovelock"}),
        _reply("Submit", {"tool_name": "click_desktop", "element": "Submit button", **at("Submit")}),
        _reply("Done", {"tool_name": "answer", "content": "typed"}),
    ]) + "\n", encoding="utf-8")
    answers = "\n".join([
        "a",  # the click
        "e", json.dumps({"tool_name": "type", "text": "Ada Lovelace"}),  # holo-v1: refused, asked again
        "e", json.dumps({"tool_name": "write_desktop", "content": "Ada Lovelace"}),
        "a",  # the click on Submit
    ]) + "\n"
    episodes = tmp_path / "episodes"
    res = _run_script(desktop, "type the name", script, "step", episodes, answers=answers)
    assert res.returncode == 0, res.stdout + res.stderr
    assert form.result()["name"] == "Ada Lovelace"  # the edited text, read back from the Tk form
    assert "new tool call as agent-loop-v1 JSON" in res.stdout
    assert "not a valid action" in res.stdout and "does not follow agent-loop-v1" in res.stdout
    ep = load_episode(list_episodes(episodes)[0])
    assert ep.steps[1]["edited_action"] == {"kind": "type", "text": "Ada Lovelace"}
    assert ep.steps[1]["result"]["status"] == "performed"
