"""End to end: under ``--approve auto`` the terminal says which steps the autopilot approved and why, and
a click the allowlist does not know to be harmless asks even in a known window: one whose target the
model names as a submitting button (``element`` "OK button"), one on the window manager's title bar of a
Tk window (the test target window has no frame).

`holodesk run --script` runs as its own process against a real Qt window and a real Tk window under
openbox on Xvfb (the ``make_desktop`` fixture of tests/helpers/desktop.py), with the real capture,
executor and window probe. The outcome is read from the target window's own state file and from the
processes being alive. The autopilot's line and the prompt name the element the accessibility tree found, as the
card does (a GTK 3 form that publishes its tree).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from holodesk.control.window import window_at
from holodesk.core.geometry import frame_pixel_to_point
from holodesk.session.episode import list_episodes, load_episode
from tests.e2e.test_run_e2e import grab, point_on, reply
from tests.helpers.desktop import ACCESSIBLE, APPS, SYSTEM_PYTHON, FormApp, wait_until
from tests.helpers.processes import stop_process
from tests.helpers.target import TargetWindow

pytestmark = [pytest.mark.e2e, pytest.mark.gui, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_autopilot_reports_its_approvals_and_asks_for_risky_targets(make_desktop: Any, tmp_path: Path) -> None:
    desktop = make_desktop("openbox")
    env = desktop.env()
    tk = subprocess.Popen(["/usr/bin/python3", "-c", TK_WINDOW], env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _run_against(env, desktop, tk, tmp_path)
    finally:
        stop_process(tk)


TK_WINDOW = ("import tkinter as t; r = t.Tk(); r.title('Tk target'); r.geometry('300x200+100+100'); "
             "t.Label(r, text='Tk target').pack(); r.mainloop()")


def _run_against(env: dict[str, str], desktop: Any, tk: subprocess.Popen[bytes], tmp_path: Path) -> None:
    def framed() -> Any:  # make_desktop points DISPLAY at this server
        info = window_at(250, 250)
        return info if info is not None and info.title == "Tk target" and info.rect != info.client_rect else None

    info = wait_until(framed, 20, "openbox to frame the Tk window")
    with TargetWindow.start(tmp_path, x=600, y=400, env=env) as win:
        frame = grab(desktop.server.display)
        left, top, width, _ = info.rect
        c_top = info.client_rect[1]
        assert c_top > top, f"no title bar above the client area: {info}"
        title_bar = frame_pixel_to_point(frame, left + width - 12 - frame.monitor.left,
                                         (top + c_top) // 2 - frame.monitor.top)
        script = tmp_path / "steps.jsonl"
        script.write_text("# protocol: agent-loop-v1\n" + "\n".join([
            reply({"tool_name": "click_desktop", "element": "Title field", **point_on(frame, win, "field")}, "focus"),
            reply({"tool_name": "click_desktop", "element": "title bar", "x": title_bar.x, "y": title_bar.y}, "bar"),
            reply({"tool_name": "click_desktop", "element": "OK button", **point_on(frame, win, "OK")}, "submit"),
            reply({"tool_name": "answer", "content": "never reached"}, "end"),
        ]) + "\n", encoding="utf-8")
        episodes = tmp_path / "episodes"
        # step 2 (title bar) asks: skip it; step 3 (OK button) asks: quit.
        res = subprocess.run([sys.executable, "-m", "holodesk", "run", "fill the form", "--script", str(script),
                              "--approve", "auto", "--episodes-dir", str(episodes)], env=env, input="s\nq\n",
                             capture_output=True, text=True, timeout=180, cwd=ROOT)
        out = res.stdout
        assert res.returncode == 3, out + res.stderr  # stopped at the prompt
        assert ("[step 1] approved by the autopilot (low risk: a click in a known window that is not a "
                "terminal): Click \u2018Title field\u2019 in") in out, out
        assert "[step 2] approved by the autopilot" not in out and "[step 3] approved by the autopilot" not in out
        assert "title bar or frame" in out, out
        # the accessibility tree names the real button, and the rule reads its name
        assert "the push button \u2018OK\u2019 there may submit or send something (it says \u2018OK\u2019)" in out, out
        assert win.process.poll() is None and tk.poll() is None, "a window was closed"
        assert window_at(250, 250) is not None
        assert win.state()["clicks"] == []  # OK was never pressed
    ep = load_episode(list_episodes(episodes)[0])
    assert [s["decided_by"] for s in ep.steps] == ["autopilot", "user", "user"]
    assert [s["decision"] for s in ep.steps] == ["approve", "skip", "stop"]



def test_the_terminal_names_the_element_of_an_approved_and_an_asked_step(make_desktop: Any, tmp_path: Path) -> None:
    """`holodesk run --approve auto` against the GTK 3 form under openbox: the click on its Count button is approved
    by the autopilot, and that line names the button the accessibility tree found there in the card's words; the
    click on Submit asks, and the prompt names that button too (quit there). The outcome is read from the form's
    own report: one click counted, nothing submitted."""
    desktop = make_desktop("openbox")
    form: FormApp = desktop.launch([SYSTEM_PYTHON, str(APPS / "gtk_form.py"), "--layout", str(tmp_path / "form.json"),
                                    "--x", "500", "--y", "300"], wm_class="HolodeskGtkForm", env=ACCESSIBLE,
                                   cls=FormApp, layout_path=tmp_path / "form.json")
    form.wait_current()
    frame = grab(desktop.server.display)

    def click(widget: str, element: str) -> dict[str, Any]:
        x, y = form.center(widget)
        point = frame_pixel_to_point(frame, x - frame.monitor.left, y - frame.monitor.top)
        return {"tool_name": "click_desktop", "element": element, "x": point.x, "y": point.y}

    script = tmp_path / "steps.jsonl"
    script.write_text("# protocol: agent-loop-v1\n" + "\n".join([
        reply(click("Count", "Count button"), "count"),
        reply(click("Submit", "Submit button"), "submit"),
        reply({"tool_name": "answer", "content": "never reached"}, "end"),
    ]) + "\n", encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "holodesk", "run", "count once", "--script", str(script),
                          "--approve", "auto", "--episodes-dir", str(tmp_path / "episodes")], env=desktop.env(),
                         input="q\n", capture_output=True, text=True, timeout=180, cwd=ROOT)
    out = res.stdout
    assert res.returncode == 3, out + res.stderr  # stopped at the prompt of step 2
    assert ("[step 1] approved by the autopilot (low risk: a click in a known window that is not a terminal): "
            "Click \u2018Count button\u2019 in Holodesk GTK form \u2014 Really there: push button \u2018Count\u2019\n"
            ) in out, out
    asked = out[out.index("\nStep 2: "):]
    assert asked.startswith("\nStep 2: Click \u2018Submit button\u2019 in Holodesk GTK form\n"), out
    assert "\n  Really there: push button \u2018Submit\u2019\n" in asked, out
    assert form.wait_layout(lambda layout: layout["count"] == 1)["count"] == 1
    assert form.process.poll() is None, "the form was submitted"
