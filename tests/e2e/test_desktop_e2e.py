"""End to end on a real desktop: `holodesk run --script FILE --approve auto|step` (the real CLI in its own
process, real mss capture, real pyautogui executor) under a window manager (openbox; xfwm4 with its
compositor), driving other people's programs: a Tk form and a GTK form (tests/apps), mousepad, zenity
and xterm.

Scripts are written in protocol holo-v1 (pinned with HOLODESK_PROTOCOL) with points computed from a
frame captured from the screen, in [0, 1000] as a model would see them. Every assertion about what
happened comes from the program itself: the form's JSON output, the file mousepad saved, zenity's
stdout, the files the shell in xterm wrote. Approvals asked for in the terminal are answered on stdin.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.core.geometry import Frame, frame_pixel_to_point
from holodesk.session.episode import list_episodes, load_episode
from tests.helpers.desktop import Desktop, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.gui, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
GREETING = "Grüße 日本語"


def grab(desktop: Desktop) -> Frame:
    with MssCapture(display=desktop.display) as cap:
        return cap.grab(1)


def tool_at(frame: Frame, name: str, xy: tuple[int, int]) -> dict[str, Any]:
    """A pointer tool call at screen pixel ``xy`` of monitor 1, in the protocol's [0, 1000] space."""
    p = frame_pixel_to_point(frame, xy[0] - frame.monitor.left, xy[1] - frame.monitor.top)
    return {"tool_name": name, "x": p.x, "y": p.y}


def reply(tool_call: dict[str, Any] | None, thought: str = "") -> str:
    return json.dumps({"note": None, "thought": thought, "tool_call": tool_call}, ensure_ascii=False)


def run_holodesk(desktop: Desktop, tmp_path: Path, replies: list[str], *, approve: str, stdin: str = "",
                 task: str = "do the task") -> subprocess.CompletedProcess[str]:
    """``holodesk run TASK --script FILE --approve MODE --json`` on the desktop's display."""
    script = tmp_path / "steps.jsonl"
    script.write_text("\n".join(replies) + "\n", encoding="utf-8")
    env = desktop.env()
    env.update(HOLODESK_PROTOCOL="holo-v1", HOLODESK_CONFIG=str(tmp_path / "no-settings.toml"))
    return subprocess.run(
        [sys.executable, "-m", "holodesk", "run", task, "--script", str(script), "--approve", approve,
         "--episodes-dir", str(tmp_path / "episodes"), "--json"],
        env=env, input=stdin, capture_output=True, text=True, timeout=240, cwd=ROOT)


def summary(res: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def episode(tmp_path: Path) -> Any:
    (path,) = list_episodes(tmp_path / "episodes")
    return load_episode(path)


# -- forms in other toolkits ------------------------------------------------------------------------------
def test_autopilot_fills_a_tk_form(desktop: Desktop, tmp_path: Path) -> None:
    """The issue's case: type "Grüße 日本語", tick the box, press Submit, all approved by the autopilot."""
    form = desktop.tk_form(500, 300)
    frame = grab(desktop)
    replies = [
        reply(tool_at(frame, "click", form.center("name")), "focus the name field"),
        reply({"tool_name": "type", "text": GREETING}, "type the greeting"),
        reply(tool_at(frame, "click", form.center("agree")), "tick the box"),
        reply(tool_at(frame, "click", form.center("Submit")), "submit"),
        reply({"tool_name": "answer", "text": "submitted"}, "done"),
    ]
    # Tk publishes no accessibility tree: non-ASCII text into an unknown focused element asks (a terminal there
    # would read it as Meta chords), and the user approves it; the clicks are the autopilot's.
    res = run_holodesk(desktop, tmp_path, replies, approve="auto", task="fill in the form", stdin="a\n")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Autopilot is on (--approve auto)" in res.stdout  # the run says which approval is in force
    assert res.stdout.count("[a]pprove / [e]dit / [s]kip / [q]uit") == 1  # the typing alone asked
    assert form.result() == {"name": GREETING, "agree": True, "count": 0, "submitted": True}
    assert summary(res)["status"] == "finished"
    ep = episode(tmp_path)
    assert [s["result"]["status"] for s in ep.steps[:4]] == ["performed"] * 4
    assert [s["decided_by"] for s in ep.steps[:4]] == ["autopilot", "user", "autopilot", "autopilot"]


def test_autopilot_fills_a_gtk_form(desktop: Desktop, tmp_path: Path) -> None:
    """The issue's case on the GTK form: type "Grüße 日本語", tick the box right after the typing (the
    typer's keyboard-map changes must not make GTK drop the click), press Submit, all approved by the
    autopilot."""
    form = desktop.gtk_form(500, 300)
    frame = grab(desktop)
    replies = [
        reply(tool_at(frame, "click", form.center("name")), "focus the name field"),
        reply({"tool_name": "type", "text": GREETING}, "type the greeting"),
        reply(tool_at(frame, "click", form.center("agree")), "tick the box"),
        reply(tool_at(frame, "click", form.center("Submit")), "submit"),
        reply({"tool_name": "answer", "text": "submitted"}, "done"),
    ]
    # The test desktop runs GTK without its accessibility bridge (NO_AT_BRIDGE): the non-ASCII text asks, as on Tk.
    res = run_holodesk(desktop, tmp_path, replies, approve="auto", task="fill in the form", stdin="a\n")
    assert res.returncode == 0, res.stdout + res.stderr
    r = form.result()

    assert r == {"name": GREETING, "agree": True, "count": 0, "submitted": True}
    ep = episode(tmp_path)
    assert [s["decided_by"] for s in ep.steps[:4]] == ["autopilot", "user", "autopilot", "autopilot"]
    assert [s["result"]["status"] for s in ep.steps[:4]] == ["performed"] * 4


def test_step_mode_skip_leaves_the_gtk_form_unsubmitted(desktop: Desktop, tmp_path: Path) -> None:
    form = desktop.gtk_form(400, 250)
    frame = grab(desktop)
    replies = [
        reply(tool_at(frame, "click", form.center("name")), "focus the name field"),
        reply({"tool_name": "type", "text": "Ada"}, "type"),
        reply(tool_at(frame, "click", form.center("Submit")), "submit"),
        reply({"tool_name": "answer", "text": "left it"}, "done"),
    ]
    res = run_holodesk(desktop, tmp_path, replies, approve="step", stdin="a\na\ns\n")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Autopilot is on" not in res.stdout
    assert res.stdout.count("[a]pprove / [e]dit / [s]kip / [q]uit") == 3
    form.wait_layout(lambda lay: lay.get("name") == "Ada")
    assert form.process.poll() is None  # the skipped Submit never reached the form
    desktop.click(*form.center("Submit"))
    assert form.result() == {"name": "Ada", "agree": False, "count": 0, "submitted": True}
    assert [s["decision"] for s in episode(tmp_path).steps[:3]] == ["approve", "approve", "skip"]


# -- mousepad ---------------------------------------------------------------------------------------------
def mousepad(desktop: Desktop, path: Path) -> tuple[Any, tuple[int, int]]:
    """mousepad editing ``path``, placed at a known spot; returns it and a point in its text area."""
    editor = desktop.launch(["mousepad", "--disable-server", str(path)], wm_class="mousepad")
    x, y, w, h = desktop.place(editor, 300, 150, 900, 600)
    return editor, (x + w // 2, y + (2 * h) // 3)


def test_mousepad_types_and_saves_a_file(desktop: Desktop, tmp_path: Path) -> None:
    path = tmp_path / "letter.txt"
    path.write_text("", encoding="utf-8")
    _editor, text_point = mousepad(desktop, path)
    frame = grab(desktop)
    text = "Dear Ada,\n" + GREETING + " — żółw, Ελληνικά\n\tindented line"
    replies = [
        reply(tool_at(frame, "click", text_point), "click into the document"),
        reply({"tool_name": "type", "text": text}, "write the letter"),
        reply({"tool_name": "key", "keys": ["ctrl", "s"]}, "save"),
        reply({"tool_name": "done", "message": "saved"}, "done"),
    ]
    # the line breaks and Ctrl+S are high risk: the autopilot asks for both
    res = run_holodesk(desktop, tmp_path, replies, approve="auto", stdin="a\na\n")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("[a]pprove / [e]dit / [s]kip / [q]uit") == 2
    wait_until(lambda: path.read_text(encoding="utf-8") == text, 30,
               f"mousepad to save the text (file has {path.read_text(encoding='utf-8')!r})")


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_F26_mousepad_gets_exact_text_with_caps_lock_and_num_lock_on(desktop: Desktop, tmp_path: Path) -> None:
    path = tmp_path / "locks.txt"
    path.write_text("", encoding="utf-8")
    _editor, text_point = mousepad(desktop, path)
    frame = grab(desktop)
    text = "ABCabc Grüße 123 4567890 +-*/.,"
    desktop.xdotool("key", "Caps_Lock")
    try:
        desktop.run("numlockx", "on")
        replies = [
            reply(tool_at(frame, "click", text_point), "click into the document"),
            reply({"tool_name": "type", "text": text}, "type"),
            reply({"tool_name": "key", "keys": ["ctrl", "s"]}, "save"),
            reply({"tool_name": "done"}, "done"),
        ]
        res = run_holodesk(desktop, tmp_path, replies, approve="auto", stdin="a\na\n")
        assert res.returncode == 0, res.stdout + res.stderr
        wait_until(lambda: path.read_text(encoding="utf-8") == text, 30,
                   f"the exact text in the file (has {path.read_text(encoding='utf-8')!r})")
        assert desktop.run("numlockx", "status").strip() == "Numlock is on"
        assert "00: Caps Lock:   on" in desktop.run("xset", "q")
    finally:
        desktop.run("numlockx", "off")
        if "00: Caps Lock:   on" in desktop.run("xset", "q"):
            desktop.xdotool("key", "Caps_Lock")


# -- zenity -----------------------------------------------------------------------------------------------
def test_zenity_entry_dialog_returns_what_holodesk_typed(desktop: Desktop, tmp_path: Path) -> None:
    dialog = desktop.launch(["zenity", "--entry", "--title", "Holodesk zenity", "--text", "Your name:"],
                            name="^Holodesk zenity$")
    dialog.activate()
    frame = grab(desktop)
    x, y, w, h = dialog.geometry()
    replies = [
        reply({"tool_name": "type", "text": "Ada Lovelace ÅØ"}, "type the name"),
        reply({"tool_name": "key", "keys": ["enter"]}, "confirm"),
        reply({"tool_name": "answer", "text": "entered"}, "done"),
    ]
    assert frame.width == 1920 and w > 0 and h > 0 and x >= 0 and y >= 0
    res = run_holodesk(desktop, tmp_path, replies, approve="auto", stdin="a\na\n")
    assert res.returncode == 0, res.stdout + res.stderr
    assert dialog.wait_exit() == 0
    assert dialog.stdout() == "Ada Lovelace ÅØ\n"


# -- xterm: the risk rules --------------------------------------------------------------------------------
def test_xterm_every_keystroke_needs_approval_and_a_skipped_enter_runs_nothing(
        desktop: Desktop, tmp_path: Path) -> None:
    """In autopilot, the click, typing and keys into a terminal are asked for. The first command is typed but its
    Enter is skipped (then the line is cleared); the second is run. The shell's own files show which
    commands ran: the second, never the first (the shell runs lines in order)."""
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    term = desktop.launch(["xterm", "-T", "holodesk-e2e-xterm", "-e", "/bin/sh"], name="^holodesk-e2e-xterm$",
                          cwd=tmp_path)
    term.activate()
    x, y, w, h = term.geometry()
    frame = grab(desktop)
    replies = [
        reply(tool_at(frame, "click", (x + w // 2, y + h // 2)), "focus the terminal"),
        reply({"tool_name": "type", "text": f"echo one > {first}"}, "first command"),
        reply({"tool_name": "key", "keys": ["enter"]}, "run it"),
        reply({"tool_name": "key", "keys": ["ctrl", "u"]}, "clear the line"),
        reply({"tool_name": "type", "text": f"echo two > {second}"}, "second command"),
        reply({"tool_name": "key", "keys": ["enter"]}, "run it"),
        reply({"tool_name": "answer", "text": "ran"}, "done"),
    ]
    res = run_holodesk(desktop, tmp_path, replies, approve="auto", stdin="a\na\ns\na\na\na\n")
    assert res.returncode == 0, res.stdout + res.stderr
    wait_until(second.exists, 30, "the shell to run the second command")
    assert second.read_text() == "two\n"
    assert not first.exists()
    steps = episode(tmp_path).steps
    assert [s["decided_by"] for s in steps[:6]] == ["user"] * 6
    assert all(s["risk"]["level"] == "high" and "terminal" in s["risk"]["reason"] for s in steps[:6]
               if s["action"]["kind"] in ("click", "type"))
    assert [s["decision"] for s in steps[:6]] == ["approve", "approve", "skip", "approve", "approve", "approve"]


# -- a failed step is not "finished" ----------------------------------------------------------------------
def test_a_run_with_a_failed_step_does_not_end_finished(desktop: Desktop, tmp_path: Path) -> None:
    """A click on a fail-safe corner is refused by the executor ("not moved there"); the model then says
    it is done. The run must end failed (exit 1) naming the failed step, and the form saw no click."""
    form = desktop.tk_form(700, 400)
    replies = [
        reply({"tool_name": "click", "x": 0, "y": 0}, "press the corner"),
        reply({"tool_name": "answer", "text": "all done"}, "done"),
    ]
    # no window is under the corner, so even the autopilot asks; the user approves the click
    res = run_holodesk(desktop, tmp_path, replies, approve="auto", stdin="a\n")
    assert res.returncode == 1, res.stdout + res.stderr
    result = summary(res)
    assert result["status"] == "failed" and result["answer"] == "all done"
    assert "could not be performed (step 1: target (0, 0) is a screen corner" in result["reason"]
    desktop.click(*form.center("Submit"))
    assert form.result()["count"] == 0
