"""End to end without a tray (issue 30): the real app (``python -m holodesk tray``) in its own process on
Xvfb under openbox with no tray host, so it shows its window; a caller's tasks reach it over its channel
(``run_task``, as ``holodesk mcp`` hands them over) with a scripted policy under the autopilot, against
mousepad.

* The window is an ordinary window (not kept above others) and is minimised while a task runs, so a click
  aimed at mousepad where Holodesk's window sat reaches mousepad, and the typed text arrives there (read
  from the file mousepad saves).
* When the user brings the window back over the target during a task, the click that would land on it is
  refused: the step fails saying so, nothing reaches Holodesk's window and mousepad stays as it was.
* At first start the setup wizard opens above the window, not under it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from holodesk.control.window import window_at
from holodesk.instance import request
from holodesk.session.episode import list_episodes, load_episode
from tests.e2e.test_desktop_e2e import grab, reply, tool_at
from tests.helpers.app_instance import app_env, start_app, wait_for_channel, windows_named
from tests.helpers.desktop import App, Desktop, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.gui, pytest.mark.slow]


def write_settings(path: Path, script: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'policy = "script"\nscript_file = {json.dumps(str(script))}\napproval = "auto"\n'
                    'autopilot_countdown_s = 0.5\nmcp_allowed_modes = "step,auto"\n', encoding="utf-8")


def write_script(path: Path, replies: list[str]) -> None:
    path.write_text("# protocol: holo-v1\n" + "\n".join(replies) + "\n", encoding="utf-8")


def run_task(env: dict[str, str], task: str) -> dict[str, Any]:
    reply_ = request("run_task", env=env, timeout_s=180.0, task=task, mode="auto", by="the test")
    assert reply_.get("ok"), reply_
    return dict(reply_["outcome"])


def steps_of(data_dir: Path, task_index: int) -> list[dict[str, Any]]:
    """The recorded steps of the app's task ``task_index`` (0: the first); [] before it has a record."""
    paths = sorted(list_episodes(data_dir / "episodes"))
    return list(load_episode(paths[task_index]).steps) if len(paths) > task_index else []


def wm_state(desktop: Desktop, window: int) -> str:
    return desktop.run("xprop", "-id", str(window), "_NET_WM_STATE", "WM_STATE")


def save(desktop: Desktop, editor: App) -> None:
    """The user saves in mousepad (Ctrl+S) and waits until its title has no unsaved-changes mark."""
    editor.activate()
    desktop.xdotool("key", "--clearmodifiers", "ctrl+s")
    wait_until(lambda: not desktop.xdotool("getwindowname", str(editor.window)).startswith("*"), 30,
               "mousepad to save the document")


def test_no_tray_window_stays_out_of_the_way_and_is_never_a_target(make_desktop: Any, tmp_path: Path) -> None:
    desktop = make_desktop("openbox", 1280, 800)
    env = {**desktop.env(), **{k: v for k, v in app_env(desktop.server, tmp_path).items()
                               if k in ("XDG_RUNTIME_DIR", "HOLODESK_CONFIG", "HOLODESK_DATA_DIR", "PYTHONPATH")}}
    env.pop("QT_QPA_PLATFORM", None)
    document = tmp_path / "note.txt"
    document.write_text("", encoding="utf-8")
    editor = desktop.launch(["mousepad", "--disable-server", str(document)], wm_class="mousepad")
    desktop.place(editor, 60, 60, 1000, 650)
    script = tmp_path / "steps.jsonl"
    write_settings(Path(env["HOLODESK_CONFIG"]), script)
    data_dir = Path(env["HOLODESK_DATA_DIR"])
    log = tmp_path / "app.log"
    with start_app(env, log, "tray") as proc:
        wait_for_channel(env, proc, log)
        (found,) = wait_until(lambda: windows_named(env, "^Holodesk$"), 30, "the Holodesk window")
        holo = App(["holodesk"], proc, env, log, log, int(found))
        assert "_NET_WM_STATE_ABOVE" not in wm_state(desktop, holo.window)  # an ordinary window
        # The user puts Holodesk's window over mousepad's text area.
        hx, hy, hw, hh = desktop.place(holo, 400, 300)
        over = (hx + hw // 2, hy + hh // 2)
        on_top = window_at(*over)
        assert on_top is not None and on_top.app == "Holodesk", on_top
        frame = grab(desktop)  # what the model sees there: mousepad (Holodesk hides itself for every grab)

        # Task 1: click into the document where Holodesk's window is, type. The window is out of the way.
        text = "Hello from the task"
        write_script(script, [reply(tool_at(frame, "click", over), "click into the document"),
                              reply({"tool_name": "type", "text": text}, "type"),
                              reply({"tool_name": "answer", "text": "typed it"}, "done")])
        outcome = run_task(env, "write hello")
        steps = steps_of(data_dir, 0)
        assert [s["result"]["status"] for s in steps[:2]] == ["performed", "performed"], steps
        assert outcome["status"] == "answered" and outcome["answer"] == "typed it", outcome
        wait_until(lambda: windows_named(env, "^Holodesk$"), 30, "the Holodesk window shown again")
        save(desktop, editor)
        wait_until(lambda: document.read_text(encoding="utf-8") == text, 30,
                   f"mousepad to save the typed text (file has {document.read_text(encoding='utf-8')!r})")

        # Task 2: while it waits, the user brings Holodesk's window back over the document; the click
        # aimed there (then on Holodesk's window) is refused, and the keys meant for it are not sent: the
        # focus is on Holodesk's window, whose focused element is no text field, so the autopilot asks, and the
        # user stops the task there (`holodesk stop`).
        write_script(script, [reply({"tool_name": "wait", "seconds": 5}, "wait for the user"),
                              reply(tool_at(frame, "click", over), "click into the document"),
                              reply({"tool_name": "type", "text": "oops"}, "type"),
                              reply({"tool_name": "answer", "text": "never reached"}, "done")])
        box: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: box.update(outcome=run_task(env, "write oops")))
        worker.start()
        try:
            wait_until(lambda: "Iconic" in wm_state(desktop, holo.window), 30, "the window minimised for the task")
            desktop.xdotool("windowactivate", str(holo.window))
            wait_until(lambda: "Normal" in wm_state(desktop, holo.window), 30, "the window restored by the user")
            assert len(steps_of(data_dir, 1)) <= 1, "the click ran before the user restored the window"
            wait_until(lambda: len(steps_of(data_dir, 1)) >= 2, 60, "the click's record")
            wait_until(lambda: request("status", env=env, timeout_s=5.0).get("status") == "awaiting", 60,
                       "the autopilot to ask for the typing")
            request("stop", env=env, timeout_s=10.0, by="the test")
        finally:
            worker.join(200)
        outcome = box["outcome"]
        steps = steps_of(data_dir, 1)
        click, typing = steps[1]["result"], steps[2]
        assert click["status"] == "failed" and click["message"].startswith(
            f"refused: the point ({over[0]}, {over[1]}) is on Holodesk's own window \u2018Holodesk\u2019"), click
        assert typing["decision"] == "stop" and "result" not in typing, typing  # never performed
        assert outcome["status"] == "stopped", outcome
        # mousepad has what task 1 typed, nothing more (saved by the user, read from its file)
        save(desktop, editor)
        assert document.read_text(encoding="utf-8") == text


def stacking(desktop: Desktop) -> list[int]:
    """The window manager's client windows, bottom to top (``_NET_CLIENT_LIST_STACKING``)."""
    out = desktop.run("xprop", "-root", "_NET_CLIENT_LIST_STACKING")
    return [int(w, 16) for w in out.split("#", 1)[1].replace(",", " ").split()] if "#" in out else []


def test_at_first_start_the_setup_wizard_is_not_covered_by_the_window(make_desktop: Any, tmp_path: Path) -> None:
    """Issue 30: at first start (no settings file) the window, kept on top, covered the setup wizard."""
    desktop = make_desktop("openbox", 1280, 800)
    env = {**desktop.env(), **{k: v for k, v in app_env(desktop.server, tmp_path).items()
                               if k in ("XDG_RUNTIME_DIR", "HOLODESK_CONFIG", "HOLODESK_DATA_DIR", "PYTHONPATH")}}
    env.pop("QT_QPA_PLATFORM", None)
    assert not Path(env["HOLODESK_CONFIG"]).exists()
    log = tmp_path / "app.log"
    with start_app(env, log, "tray") as proc:
        wait_for_channel(env, proc, log)
        (window,) = wait_until(lambda: windows_named(env, "^Holodesk$"), 30, "the Holodesk window")
        (wizard,) = wait_until(lambda: windows_named(env, "^Set up Holodesk$"), 30, "the setup wizard")

        def wizard_above() -> bool:
            order = stacking(desktop)
            return int(wizard) in order and int(window) in order and order.index(int(wizard)) > order.index(
                int(window))

        wait_until(wizard_above, 15, f"the wizard above the window (stacking {stacking(desktop)})")
        assert "_NET_WM_STATE_ABOVE" not in wm_state(desktop, int(window))
