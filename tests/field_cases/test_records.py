"""Field case F24: every performed action is recorded, whatever its text.

The session, parser, approval policy and episode writer are the real ones. The executor is the
RecordingExecutor fake (or a fake that breaks after acting), and the broken disk is a fake file object
installed while the action runs, named as such. The last tests run the real ``holodesk`` command on Xvfb
against the real target window, with the real pyautogui executor.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

from holodesk.control.base import ActionResult
from holodesk.control.recording import RecordingExecutor
from holodesk.core.actions import Type
from holodesk.core.geometry import PlacedAction, frame_pixel_to_point
from holodesk.core.text import display_safe
from holodesk.session.episode import EPISODE_FILE, list_episodes, load_episode
from holodesk.session.state import State
from tests.conftest import XvfbServer
from tests.field_cases.fakes import FakeFocusProbe, FakePanel, make_run, reply, single_frame_capture
from tests.helpers.target import TargetWindow

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ["lone \ud83d surrogate", "nul \x00 byte", "bidi \u202egnp.exe\u202c", "esc \x1b[2J\x1b]52;c;eA==\x07",
           "zero\u200bwidth", "low \udc80 surrogate", "line\u2028sep", "del \x7f c1 \x9b"]
"""Strings a reply may hold that break naive encoders or fool a reader."""


def _raw_lines(folder: Path) -> list[dict[str, Any]]:
    raw = (folder / EPISODE_FILE).read_bytes()
    raw.decode("ascii")  # the record file is plain ASCII: every other character is a JSON escape
    return [json.loads(line) for line in raw.decode("ascii").splitlines()]


def _unsafe_for_display(text: str) -> list[str]:
    return [ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")]


def test_F24_hostile_text_is_recorded_losslessly_and_the_run_finishes(tmp_path: Path) -> None:
    frame = FakePanel((1280, 800), 1.0).frame()
    replies = [reply({"tool_name": "type", "text": text}, thought=text, note=text) for text in HOSTILE]
    task = "type \ud83d and \u202e"
    run = make_run([*replies, reply(None, HOSTILE[0])], single_frame_capture(frame), episodes_dir=tmp_path)
    result = run.session.run(task)
    assert result.status is State.FINISHED, result
    assert result.answer == HOSTILE[0]
    assert run.executor.actions == [Type(t) for t in HOSTILE]  # every action ran
    folder = list_episodes(tmp_path)[0]
    lines = _raw_lines(folder)
    assert lines[0]["task"] == task.strip()
    ep = load_episode(folder)
    assert ep.status == "finished" and ep.end is not None and ep.end["answer"] == HOSTILE[0]
    assert len(ep.steps) == len(HOSTILE) + 1
    for text, raw, step in zip(HOSTILE, replies, ep.steps, strict=False):
        assert step["thought"] == text and step["note"] == text  # the very same str, read back
        assert step["action"] == {"kind": "type", "text": text}
        assert step["result"]["status"] == "performed"
        assert step["raw_text"] == raw  # the model's reply, character for character


def test_F24_hostile_text_is_shown_as_escapes(tmp_path: Path) -> None:
    """The one display helper (and the terminal prompt, which uses it) shows escapes, never the raw
    control, bidi or surrogate characters; printable Unicode is kept."""
    for text in HOSTILE:
        shown = display_safe(text)
        assert _unsafe_for_display(shown) == [], shown
        shown.encode("utf-8")  # no lone surrogate left: it can be printed and put in a label
    assert display_safe("bidi \u202egnp.exe") == "bidi \\u202egnp.exe"
    assert display_safe("lone \ud83d") == "lone \\ud83d"
    assert display_safe("Grüße 日本語 🙂") == "Grüße 日本語 🙂"
    assert display_safe("a\nb", keep_newlines=True) == "a\nb" and display_safe("a\nb") == "a\\nb"

    from holodesk.cli import TerminalApprover
    from holodesk.policy.registry import get_protocol

    frame = FakePanel((1280, 800), 1.0).frame()
    out = io.StringIO()
    run = make_run([reply({"tool_name": "type", "text": t}, thought=t) for t in HOSTILE],
                   single_frame_capture(frame), approver=TerminalApprover(io.StringIO("s\n" * 20), out,
                                                                      protocol=get_protocol("holo-v1")),  # type: ignore[arg-type]
                   focus_probe=FakeFocusProbe("evil\u202e\x1b[2J Terminal"))
    run.session.run("show it")
    printed = out.getvalue()
    assert printed.count("Step ") == len(HOSTILE)
    assert _unsafe_for_display(printed.replace("\n", "")) == []
    printed.encode("utf-8")


class FakeBrokenAfterActing(RecordingExecutor):
    """A fake executor that performs (records) the action, then raises: a bug in an input backend."""

    def execute(self, placed: PlacedAction) -> ActionResult:
        super().execute(placed)
        raise RuntimeError("backend exploded after sending the keys")


def test_F24_executor_failing_after_the_action_leaves_the_step_on_disk(tmp_path: Path) -> None:
    frame = FakePanel((1280, 800), 1.0).frame()
    executor = FakeBrokenAfterActing()
    run = make_run([reply({"tool_name": "type", "text": "hi \ud83d"}, "type \ud83d"), reply(None, "done")],
                   single_frame_capture(frame), executor, episodes_dir=tmp_path)
    result = run.session.run("type")
    assert executor.actions == [Type("hi \ud83d")]
    assert result.status is State.FAILED and result.reason.startswith("internal error: the executor failed")
    lines = _raw_lines(list_episodes(tmp_path)[0])
    assert [ln["type"] for ln in lines] == ["start", "step", "step", "end"]
    intent, outcome = lines[1], lines[2]
    assert intent["result"]["status"] == "unknown" and "result unknown" in intent["result"]["message"]
    assert intent["action"] == {"kind": "type", "text": "hi \ud83d"} and intent["decision"] == "approve"
    assert outcome["result"]["status"] == "unknown" and "RuntimeError" in outcome["result"]["message"]
    assert lines[3]["status"] == "failed"


class FakeFullDisk(io.StringIO):
    """A fake episode file on a disk that filled up: every write raises ENOSPC."""

    def write(self, s: str) -> int:
        raise OSError(28, "No space left on device")


def test_F24_writer_failing_after_the_action_leaves_a_performed_result_unknown_line(tmp_path: Path) -> None:
    frame = FakePanel((1280, 800), 1.0).frame()

    class DiskFillsWhileActing(RecordingExecutor):
        def execute(self, placed: PlacedAction) -> ActionResult:
            result = super().execute(placed)
            recorder = run.session.recorder
            assert recorder is not None and recorder._fh is not None
            recorder._fh.close()
            recorder._fh = FakeFullDisk()
            return result

    run = make_run([reply({"tool_name": "type", "text": "x\x00\u202e"}, "\ud83d"), reply(None, "done")],
                   single_frame_capture(frame), DiskFillsWhileActing(), episodes_dir=tmp_path)
    result = run.session.run("type")
    assert run.executor.actions == [Type("x\x00\u202e")]  # performed
    assert result.status is State.FAILED
    assert "cannot write the episode record" in result.reason and "No space left" in result.reason
    assert "the episode record is incomplete" in result.reason
    lines = _raw_lines(list_episodes(tmp_path)[0])
    assert [ln["type"] for ln in lines] == ["start", "step"]
    (step,) = load_episode(list_episodes(tmp_path)[0]).steps
    assert step["action"] == {"kind": "type", "text": "x\x00\u202e"} and step["thought"] == "\ud83d"
    assert step["result"]["status"] == "unknown"
    assert step["result"]["message"].startswith("performed, result unknown")


def _script(path: Path, replies: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in replies), encoding="utf-8")
    return path


def test_F24_cli_run_with_a_lone_surrogate_records_the_action_and_exits_right(xvfb: XvfbServer, tmp_path: Path
                                                                             ) -> None:
    """The real `holodesk run --script` on Xvfb: a reply whose thought and note hold a lone surrogate and
    bidi/control characters types into the real target window; the record has the exact strings, the
    terminal output is clean, and the exit status is 0 (finished)."""
    from holodesk.capture.mss_backend import MssCapture

    env = xvfb.env()
    env.pop("QT_QPA_PLATFORM", None)
    with TargetWindow.start(tmp_path, x=300, y=200, env=env) as win:
        with MssCapture() as cap:
            field = frame_pixel_to_point(cap.grab(1), *win.center("field"))
        thought = "focus \ud83d then \u202e\x1b[2J"
        script = _script(tmp_path / "steps.jsonl", [
            {"thought": thought, "note": "\x00\udc80", "tool_call": {"tool_name": "click", "x": field.x,
                                                                   "y": field.y}},
            {"thought": thought, "note": None, "tool_call": {"tool_name": "type", "text": "ok"}},
            {"thought": thought, "note": None, "tool_call": {"tool_name": "answer", "text": "done \ud83d"}},
        ])
        res = subprocess.run([sys.executable, "-m", "holodesk", "run", "type ok", "--script", str(script),
                              "--episodes-dir", str(tmp_path / "episodes"), "--json"],
                             env=env, input=b"a\na\n", capture_output=True, timeout=180, cwd=ROOT)
        win.wait_for(lambda s: s["text"] == "ok", timeout=10)
    out = res.stdout.decode("utf-8")  # valid UTF-8: the surrogates were printed as escapes
    assert res.returncode == 0, out + res.stderr.decode("utf-8", "replace")
    assert "Traceback" not in res.stderr.decode("utf-8", "replace")
    assert "focus \\ud83d then \\u202e\\x1b[2J" in out
    assert _unsafe_for_display(out.replace("\n", "")) == []
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "finished" and summary["answer"] == "done \ud83d"
    ep = load_episode(list_episodes(tmp_path / "episodes")[0])
    assert [s["thought"] for s in ep.steps] == [thought] * 3
    assert ep.steps[0]["note"] == "\x00\udc80"
    assert [s["result"]["status"] for s in ep.steps[:2]] == ["performed", "performed"]
    assert ep.end is not None and ep.end["answer"] == "done \ud83d"
