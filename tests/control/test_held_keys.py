"""Keys held across steps (agent-loop-v1's ``key_down_desktop`` / ``key_up_desktop``) on a real X server.

Every key Holodesk holds is released whatever ends the run: the end of the step sequence, a stop, the
fail-safe, an exception that escapes the session thread, and (the state file in the runtime folder) a run
killed with the key held, at the next start. Each test reads the X server's own key state (``query_keymap``)
while the key is held, then after the end, and the target window's field for what held keys did.

pyautogui binds to $DISPLAY at import, so every test here uses the session server (``xvfb``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.held_keys import held_keys_file
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.core.actions import Click, Key, KeyDown, KeyUp, Type
from holodesk.core.geometry import frame_pixel_to_point, place
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.loop import Session
from holodesk.session.state import STOPPED_BY_FAILSAFE, State
from tests.conftest import XvfbServer
from tests.helpers.target import TargetWindow

ROOT = Path(__file__).resolve().parents[2]


def shift_down() -> bool:
    """Whether the X server has a Shift key down (its own key state, ``QueryKeymap``)."""
    from Xlib import XK, display

    d = display.Display()
    try:
        keymap = d.query_keymap()
        codes = {d.keysym_to_keycode(XK.string_to_keysym(name)) for name in ("Shift_L", "Shift_R")} - {0}
        return any(keymap[code // 8] & (1 << (code % 8)) for code in codes)
    finally:
        d.close()


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s: {what}")
        time.sleep(0.05)


def call(tool_call: dict[str, Any]) -> dict[str, Any]:
    return {"note": None, "thought": "t", "tool_call": tool_call}


HOLD_SHIFT = call({"tool_name": "key_down_desktop", "keys": ["shift"]})
WAIT = call({"tool_name": "wait_desktop", "seconds": 30})
ANSWER = call({"tool_name": "answer", "content": "done"})


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private runtime folder of this test (the held-keys state file goes there)."""
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    return folder


@pytest.fixture
def no_shift_left(xvfb: XvfbServer) -> Iterator[None]:
    """The shared X server has no Shift down before the test, and none after it even when the test fails."""
    assert not shift_down()
    yield
    if shift_down():
        xvfb.run("xdotool", "keyup", "shift")


@pytest.fixture
def executor(xvfb: XvfbServer, runtime: Path, no_shift_left: None) -> Iterator[PyAutoGUIExecutor]:
    ex = PyAutoGUIExecutor()
    ex.move_pointer_out_of_corner()
    yield ex
    ex.end_episode()


class _Crash(BaseException):
    """Escapes the session loop's ``except Exception`` (as a thread's fatal error does)."""


@pytest.mark.parametrize("end", ["end of the steps", "stop", "fail-safe", "crash of the session thread"])
def test_a_held_key_is_released_whatever_ends_the_run(end: str, executor: PyAutoGUIExecutor, xvfb: XvfbServer,
                                                       tmp_path: Path) -> None:
    """Step 1 holds Shift (asked: holding a key is not harmless); step 2's card names it and the X server has
    it down; then the run ends in one of four ways, and the X server has no Shift down and no state file is
    left."""
    seen: list[tuple[str, tuple[str, ...], bool]] = []

    def approver(request: ApprovalRequest) -> ApprovalResponse:
        seen.append((request.risk.level.value, request.details, shift_down()))
        if len(seen) == 1:
            return ApprovalResponse(Decision.APPROVE)
        if end == "stop":
            return ApprovalResponse(Decision.STOP)
        if end == "fail-safe":
            xvfb.run("xdotool", "mousemove", "0", "0")
        if end == "crash of the session thread":
            raise _Crash()
        return ApprovalResponse(Decision.APPROVE)

    replies = [HOLD_SHIFT, call({"tool_name": "wait_desktop", "seconds": 0.1}) if end == "end of the steps" else WAIT,
               ANSWER]
    results: list[Any] = []
    crashed: list[BaseException] = []

    def session_thread() -> None:
        try:
            results.append(session.run("hold shift"))
        except _Crash as exc:  # it escaped Session.run: the thread would die of it
            crashed.append(exc)

    with MssCapture() as capture:
        session = Session(ScriptedPolicy(replies, protocol="agent-loop-v1"), capture, executor,
                          ApprovalPolicy("step", approver), episodes_dir=tmp_path / "episodes")
        thread = threading.Thread(target=session_thread, daemon=True)
        thread.start()
        thread.join(60)
    assert not thread.is_alive()
    assert len(seen) == 2
    (risk1, _details1, down_before), (_risk2, details2, down_during) = seen
    assert risk1 == "high" and not down_before
    assert down_during and any(d.startswith("Held down: Shift") for d in details2), details2
    assert not shift_down()
    assert not held_keys_file().exists()
    if end == "crash of the session thread":
        assert results == [] and len(crashed) == 1
        return
    (result,) = results
    expected = {"end of the steps": State.FINISHED, "stop": State.STOPPED, "fail-safe": State.STOPPED}[end]
    assert result.status is expected, result.reason
    if end == "fail-safe":
        assert result.stopped_by == STOPPED_BY_FAILSAFE


def test_shift_held_across_steps_selects_and_key_up_releases_it(executor: PyAutoGUIExecutor, xvfb: XvfbServer,
                                                                tmp_path: Path) -> None:
    """key_down shift, then End, then key_up shift: End went with the held Shift (it selected the field's text,
    so the typed Z replaces it: the window's own field reads "Z", where an unshifted End gives "abcdefZ");
    typing while a key is held is refused with the reason; key_up of a key not held is refused."""
    with TargetWindow.start(tmp_path, x=200, y=150) as target, MssCapture() as capture:
        frame = capture.grab(1)
        fx, fy = target.center("field")
        assert executor.execute(place(Click(frame_pixel_to_point(frame, fx, fy)), frame)).ok
        assert executor.execute(place(Type("abcdef"), frame)).ok
        target.wait_for(lambda s: s["text"] == "abcdef")
        assert executor.execute(place(Key(("home",)), frame)).ok
        held = executor.execute(place(KeyDown(("shift",)), frame))
        assert held.ok and held.message == "held shift down" and executor.held_keys == ("shift",)
        assert shift_down()
        refused = executor.execute(place(Type("x"), frame))
        assert not refused.ok and "held down" in refused.message
        assert executor.execute(place(Key(("end",)), frame)).ok  # Shift+End: the held Shift stays down
        assert shift_down()
        stray = executor.execute(place(KeyUp(("ctrl",)), frame))
        assert not stray.ok and "not held down" in stray.message
        released = executor.execute(place(KeyUp(("shift",)), frame))
        assert released.ok and executor.held_keys == ()
        assert not shift_down()
        assert executor.execute(place(Type("Z"), frame)).ok  # replaces the selection, unshifted
        target.wait_for(lambda s: s["text"] == "Z")


def test_a_run_killed_with_a_key_held_leaves_nothing_held_at_the_next_start(xvfb: XvfbServer, runtime: Path,
                                                                            tmp_path: Path, no_shift_left: None
                                                                            ) -> None:
    """`holodesk run --script` holds Shift and waits; it is killed (SIGKILL: no cleanup runs). The X server
    still has Shift down (what the state file is for); the next `holodesk run` releases it before its first
    step and says so."""
    env = {**xvfb.env(), "XDG_RUNTIME_DIR": str(runtime), "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           "HOLODESK_TESTING": "1"}
    script = tmp_path / "hold.jsonl"
    script.write_text("# protocol: agent-loop-v1\n" + "\n".join(json.dumps(r) for r in (HOLD_SHIFT, WAIT, ANSWER))
                      + "\n", encoding="utf-8")
    child = subprocess.Popen(
        [sys.executable, "-m", "holodesk", "run", "hold shift", "--script", str(script), "--approve", "step",
         "--episodes-dir", str(tmp_path / "episodes")],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        assert child.stdin is not None
        child.stdin.write(b"a\n" * 4)
        child.stdin.flush()
        wait_until(shift_down, 60, "the child holds Shift")
        state = json.loads(held_keys_file(env).read_text(encoding="utf-8"))
        assert state["keys"] == ["shift"] and state["pid"] == child.pid
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    time.sleep(0.5)  # not a synchronisation: time for the X server to act on the dead client, which it must not
    assert shift_down(), "the X server released the killed client's key by itself"
    answer = tmp_path / "answer.jsonl"
    answer.write_text("# protocol: agent-loop-v1\n" + json.dumps(ANSWER) + "\n", encoding="utf-8")
    res = subprocess.run(
        [sys.executable, "-m", "holodesk", "run", "say done", "--script", str(answer), "--approve", "step",
         "--episodes-dir", str(tmp_path / "episodes")],
        env=env, input="a\n", capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not shift_down()
    assert not held_keys_file(env).exists()
    assert "without releasing shift" in res.stdout + res.stderr
