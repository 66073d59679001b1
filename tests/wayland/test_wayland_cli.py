"""End to end on GNOME Wayland: the `holodesk` command, as its own process, inside a private headless mutter
session (no X server at all: mutter runs with ``--no-x11`` and DISPLAY is unset), driving a native GTK4
Wayland app. The desktop backend is chosen automatically from the session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.core.geometry import Frame, Monitor, frame_pixel_to_point
from holodesk.session.episode import list_episodes, load_episode
from tests.helpers.mutter import MutterSession, TargetApp

pytestmark = [pytest.mark.wayland, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
TEXT = "Grüße 日本語 naïve"


def session_env(mutter: MutterSession) -> dict[str, str]:
    env = dict(mutter.env)
    env.pop("DISPLAY", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "app"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["HOLODESK_TESTING"] = "1"
    return env


def run_holodesk(mutter: MutterSession, args: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "holodesk", *args], env=session_env(mutter), input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


def point(mutter: MutterSession, app: TargetApp, widget: str) -> dict[str, int]:
    """The [0, 1000] point of a widget's centre on the session's one monitor (what a model would answer)."""
    frame = Frame(np.zeros((mutter.height, mutter.width, 3), np.uint8), Monitor(1, 0, 0, mutter.width, mutter.height))
    p = frame_pixel_to_point(frame, *app.center(widget))
    return {"x": p.x, "y": p.y}


def reply(tool_call: dict[str, Any] | None, thought: str = "") -> str:
    return json.dumps({"note": None, "thought": thought, "tool_call": tool_call}, ensure_ascii=False)


def test_run_clicks_and_types_into_a_native_wayland_app(mutter: MutterSession, gtk_app: TargetApp,
                                                         tmp_path: Path) -> None:
    script = tmp_path / "steps.jsonl"
    script.write_text("\n".join([
        reply({"tool_name": "click", **point(mutter, gtk_app, "entry")}, "focus the field"),
        reply({"tool_name": "type", "text": TEXT}, "type the greeting"),
        reply({"tool_name": "click", **point(mutter, gtk_app, "button")}, "press the button"),
        reply({"tool_name": "answer", "text": "typed and pressed"}, "done"),
    ]) + "\n", encoding="utf-8")
    episodes = tmp_path / "episodes"
    # On GNOME Wayland Holodesk cannot tell what is under the pointer, so the autopilot asks for both clicks (approved
    # at the prompt); the typed line goes into the GTK entry that the accessibility bus names as focused in the
    # active window, so the autopilot approves it (core.risk, control.accessibility).
    res = run_holodesk(mutter, ["run", "type the greeting and press", "--script", str(script), "--approve", "auto",
                                "--episodes-dir", str(episodes), "--json"], stdin="a\na\n")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("[a]pprove / [e]dit / [s]kip / [q]uit") == 2, res.stdout
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("[step 2] approved by the autopilot")), "")
    assert "(low risk: types one line of text)" in line and "Has the keyboard focus: text box" in line, res.stdout
    state = gtk_app.wait_state(lambda s: s["clicks"] == 1 and s["text"] == TEXT)
    assert state["text"] == TEXT and state["clicks"] == 1
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["status"] == "finished" and summary["answer"] == "typed and pressed"
    ep = load_episode(list_episodes(episodes)[0])
    assert [s["result"]["status"] for s in ep.steps[:3]] == ["performed"] * 3
    assert [s["decided_by"] for s in ep.steps[:3]] == ["user", "autopilot", "user"]
    focused = ep.steps[1]["elements"]["focused"]
    assert focused["role"] == "text box" and "editable" in focused["states"], ep.steps[1]["elements"]
    assert ep.steps[0]["result"]["details"]["backend"] == "mutter"
    # The recorded frame is the Wayland screen: the app's stripes are in it.
    shot = np.asarray(__import__("PIL.Image").Image.open(ep.path / ep.steps[0]["frame"]).convert("RGB"))
    assert shot.shape == (mutter.height, mutter.width, 3)
    ax, ay, aw, ah = state["area"]
    assert tuple(shot[int(ay + ah / 2), int(ax + aw / 16)]) == (0xE0, 0x20, 0x20)


def test_doctor_names_the_wayland_backend_and_why(mutter: MutterSession) -> None:
    res = run_holodesk(mutter, ["doctor"])
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "Desktop backend" in out
    assert "backend: mutter" in out
    assert "ScreenCast and RemoteDesktop APIs are on the session bus" in out
    assert "Mutter RemoteDesktop:" in out and "portal ScreenCast: absent" in out
    assert "holodesk palette" in out and "holodesk stop" in out
    assert f"monitor 1: {mutter.width}x{mutter.height} at +0+0" in out
    assert "session_type: wayland" in out
    # What the Mutter executor cannot do is declared, not silently missing.
    assert "geometry check: yes: the monitor the capture reports must be a monitor of the remote-desktop" in out
    assert "fail-safe corners: no: GNOME on Wayland tells no client where the pointer is" in out
    assert "end of episode: yes: keys held by key_down are released" in out


def test_mss_backend_chosen_in_settings_fails_clearly_on_wayland(mutter: MutterSession, tmp_path: Path) -> None:
    script = tmp_path / "steps.jsonl"
    script.write_text(reply({"tool_name": "answer", "text": "x"}) + "\n", encoding="utf-8")
    env_backend = {"HOLODESK_DESKTOP_BACKEND": "mss"}
    res = subprocess.run([sys.executable, "-m", "holodesk", "run", "t", "--script", str(script)],
                         env={**session_env(mutter), **env_backend}, capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert "DISPLAY is unset" in res.stdout + res.stderr
