"""The single-instance channel: ``holodesk stop`` / ``holodesk palette`` reach the running app over a
private local socket; no app, a stale socket and unsafe permissions give clean messages.

``holodesk`` runs as a real child process each time (the command line side never starts Qt). The app is
either this process's HolodeskApp (with the channel server the real app starts) or the real tray app in a
child process.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from holodesk import instance
from holodesk.core.actions import Click, Point
from holodesk.session.state import State
from holodesk.ui.remote import AppRemote
from tests.helpers.app_instance import (
    app_env,
    holodesk,
    private_runtime_dir,
    start_app,
    wait_for_channel,
    wait_until,
    windows_named,
)
from tests.ui.conftest import wait_finished, wait_overlay

pytestmark = pytest.mark.gui


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = private_runtime_dir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    yield folder


@pytest.fixture
def channel_app(make_app: Any, runtime: Path) -> Iterator[Any]:
    """Factory: a HolodeskApp in this process answering on the channel, as ``run_app`` wires it."""
    servers: list[instance.ChannelServer] = []

    def make(*args: Any, **kwargs: Any) -> Any:
        kit = make_app(*args, **kwargs)
        lock = instance.InstanceLock.acquire()
        assert lock is not None
        server = instance.ChannelServer(lock, AppRemote(kit.app).handle)
        server.start()
        servers.append(server)
        return kit

    yield make
    for server in servers:
        server.close()
        server.lock.release()


def cli_env() -> dict[str, str]:
    """This process's environment (display, runtime folder) with this worktree's code on the path."""
    root = Path(__file__).resolve().parents[2]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "app"), str(root)])}


def cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "holodesk", *args], env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def finish(qtbot: Any, proc: subprocess.Popen[str], timeout_ms: int = 60000) -> tuple[int, str, str]:
    """Let this process's Qt loop run (the app answers on it) until the child ``holodesk`` exits."""
    qtbot.waitUntil(lambda: proc.poll() is not None, timeout=timeout_ms)
    out, err = proc.communicate()
    return proc.returncode, out, err


def test_holodesk_stop_stops_the_running_task_before_its_action(qtbot: Any, channel_app: Any, runtime: Path) -> None:
    kit = channel_app([Click(Point(500, 500))])
    kit.app.start_task("click and wait for approval")
    wait_overlay(qtbot, kit.app)
    code, out, err = finish(qtbot, cli("stop"))
    assert (code, out.strip()) == (0, "Stopped the running task."), err
    result = wait_finished(qtbot, kit.app)
    assert result.status is State.STOPPED and result.reason == "stopped by user"
    assert kit.executor.calls == []
    end = [line for line in (result.episode_path / "episode.jsonl").read_text().splitlines() if '"end"' in line]
    assert '"stopped_by": "user"' in end[-1]


def test_holodesk_stop_with_nothing_running_says_so(qtbot: Any, channel_app: Any) -> None:
    channel_app([])
    code, out, err = finish(qtbot, cli("stop"))
    assert (code, out.strip(), err) == (1, "No task was running.", "")


def test_holodesk_palette_opens_the_command_box_of_this_app(qtbot: Any, channel_app: Any) -> None:
    kit = channel_app([])
    assert not kit.app.palette.isVisible()
    code, out, err = finish(qtbot, cli("palette"))
    assert code == 0 and out.strip() == "opened the command box.", err
    qtbot.waitUntil(kit.app.palette.isVisible, timeout=5000)
    kit.app.palette.hide()


def test_no_app_running_gives_a_clean_message(runtime: Path, ui_env: Any) -> None:
    for command in ("stop", "palette"):
        res = subprocess.run([sys.executable, "-m", "holodesk", command], capture_output=True, text=True,
                             timeout=60, env=cli_env())
        assert res.returncode == 1
        assert res.stderr.strip() == "holodesk: Holodesk is not running on this desktop. Start it with `holodesk`."
        assert "Traceback" not in res.stderr and res.stdout == ""


def test_the_folder_is_0700_the_socket_0600_and_a_stale_socket_is_replaced(runtime: Path) -> None:
    path = instance.socket_path()
    # A crashed app left its socket behind: nobody holds the lock, nobody answers.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    os.chmod(path, 0o600)
    with pytest.raises(instance.NotRunning, match="stale socket"):
        instance.request("ping")
    lock = instance.InstanceLock.acquire()
    assert lock is not None
    assert instance.InstanceLock.acquire() is None  # one owner per desktop
    server = instance.ChannelServer(lock, lambda req, conn: conn.send({"ok": True, "pid": os.getpid()}))
    server.start()
    try:
        assert stat.S_IMODE(os.stat(runtime / "holodesk").st_mode) == 0o700
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(instance.lock_path()).st_mode) == 0o600
        assert instance.request("ping") == {"ok": True, "pid": os.getpid()}
        assert instance.request("nonsense")["ok"] is False
    finally:
        server.close()
        lock.release()
    assert not path.exists()


@pytest.mark.skipif(os.getuid() != 0, reason="handing a folder to another user needs root")
def test_a_folder_another_user_owns_is_refused(runtime: Path) -> None:
    folder = runtime / "holodesk"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    try:
        with pytest.raises(instance.ChannelError, match="belongs to user id 65534, not to you"):
            instance.request("ping")
        with pytest.raises(instance.ChannelError, match="belongs to user id 65534"):
            instance.InstanceLock.acquire()
    finally:
        os.chown(folder, 0, 0)


@pytest.mark.parametrize("target", ["folder", "socket"])
def test_a_folder_or_socket_others_may_use_is_refused(runtime: Path, target: str) -> None:
    lock = instance.InstanceLock.acquire()
    assert lock is not None
    server = instance.ChannelServer(lock, lambda req, conn: conn.send({"ok": True}))
    server.start()
    try:
        loose = runtime / "holodesk" if target == "folder" else server.path
        os.chmod(loose, 0o777 if target == "folder" else 0o666)
        with pytest.raises(instance.ChannelError, match=f"{target} .* has permissions 0?(777|666); other users"):
            instance.request("ping")
        res = subprocess.run([sys.executable, "-m", "holodesk", "stop"], capture_output=True, text=True, timeout=60,
                             env=cli_env())
        assert res.returncode == 2 and "other users could use it" in res.stderr and "Traceback" not in res.stderr
    finally:
        os.chmod(runtime / "holodesk", 0o700)
        server.close()
        lock.release()


def test_palette_command_reaches_the_real_tray_app(make_xvfb: Any, tmp_path: Path) -> None:
    """``holodesk palette`` against the real app in a child process: its command box appears on the X server."""
    from tests.helpers.processes import stop_process
    from tests.ui.conftest import start_trayer

    server = make_xvfb(1280, 800)
    env = app_env(server, tmp_path)
    trayer = start_trayer(env)
    try:
        with start_app(env, tmp_path / "app.log") as app:
            wait_for_channel(env, app, tmp_path / "app.log")
            assert windows_named(env, "^Holodesk command$") == []
            res = holodesk(env, "palette")
            assert res.returncode == 0 and res.stdout.strip() == "opened the command box.", res.stderr
            wait_until(lambda: windows_named(env, "^Holodesk command$"), what="the command box")
            res = holodesk(env, "stop")
            assert (res.returncode, res.stdout.strip()) == (1, "No task was running.")
    finally:
        stop_process(trayer)


def test_checks_for_a_running_app_never_disturb_each_other(runtime: Path) -> None:
    """Many threads asking at once whether an app runs get the same true answer (a check that took the
    app's own lock made a concurrent check see a phantom app, and a task handed to it failed)."""
    import threading

    def ask_many() -> set[bool]:
        answers: list[bool] = []
        threads = [threading.Thread(target=lambda: answers.extend(instance.app_running() for _ in range(200)))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return set(answers)

    assert ask_many() == {False}
    lock = instance.InstanceLock.acquire()
    assert lock is not None
    try:
        assert ask_many() == {True}
    finally:
        lock.release()


def test_holodesk_stop_stops_the_real_apps_task_at_its_approval(make_xvfb: Any, tmp_path: Path) -> None:
    """The real tray app (child process, replaying a script) runs a task handed over the channel; its
    overlay is on the X server; ``holodesk stop`` ends the task before the action and the overlay goes."""
    import threading

    from holodesk.core.actions import Done
    from holodesk.policy.scripted import write_script
    from tests.helpers.processes import stop_process
    from tests.ui.conftest import start_trayer

    server = make_xvfb(1280, 800)
    steps = write_script(tmp_path / "steps.jsonl", [Click(Point(500, 500)), Done("never reached")])
    env = app_env(server, tmp_path)
    env.update(HOLODESK_POLICY="script", HOLODESK_SCRIPT_FILE=str(steps))
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings.toml").write_text("schema_version = 1\n")  # not a first run: no wizard
    trayer = start_trayer(env)
    try:
        with start_app(env, tmp_path / "app.log") as app:
            wait_for_channel(env, app, tmp_path / "app.log")
            replies: list[dict[str, Any]] = []
            caller = threading.Thread(target=lambda: replies.extend(
                instance.stream("run_task", timeout_s=120, env=env, task="click the middle", mode="step",
                                by="a test caller")), daemon=True)
            caller.start()
            wait_until(lambda: windows_named(env, "^Holodesk approval$"), 60, "the approval overlay")
            res = holodesk(env, "stop")
            assert (res.returncode, res.stdout.strip()) == (0, "Stopped the running task."), res.stderr
            caller.join(60)
            outcome = replies[-1]["outcome"]
            assert outcome["status"] == "stopped" and outcome["reason"] == "stopped by user", outcome
            assert outcome["step_reports"][0]["performed"] is False
            wait_until(lambda: not windows_named(env, "^Holodesk approval$"), 30, "the overlay to go")
            res = holodesk(env, "stop")
            assert (res.returncode, res.stdout.strip()) == (1, "No task was running.")
    finally:
        stop_process(trayer)


def test_a_signal_to_the_real_app_ends_its_task_with_the_record_saying_so(make_xvfb: Any, tmp_path: Path) -> None:
    """The session ends (SIGTERM) while the real tray app's task waits at its approval: nothing is
    performed, the episode record gets its end naming the signal, and the app exits."""
    import json
    import signal
    import threading

    from holodesk.core.actions import Done
    from holodesk.policy.scripted import write_script
    from tests.helpers.processes import stop_process
    from tests.ui.conftest import start_trayer

    server = make_xvfb(1280, 800)
    steps = write_script(tmp_path / "steps.jsonl", [Click(Point(500, 500)), Done("never reached")])
    env = app_env(server, tmp_path)
    env.update(HOLODESK_POLICY="script", HOLODESK_SCRIPT_FILE=str(steps))
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings.toml").write_text("schema_version = 1\n")  # not a first run: no wizard
    trayer = start_trayer(env)
    try:
        with start_app(env, tmp_path / "app.log") as app:
            wait_for_channel(env, app, tmp_path / "app.log")
            threading.Thread(target=lambda: list(instance.stream("run_task", timeout_s=120, env=env,
                                                                 task="click the middle", mode="step")),
                             daemon=True).start()
            wait_until(lambda: windows_named(env, "^Holodesk approval$"), 60, "the approval overlay")
            app.send_signal(signal.SIGTERM)
            assert app.wait(30) == 0, (tmp_path / "app.log").read_text(errors="replace")
        [record] = (tmp_path / "data" / "episodes").glob("*/episode.jsonl")
        lines = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
        end = lines[-1]
        assert end["type"] == "end" and end["status"] == "stopped", end
        assert end["stopped_by"] == "a SIGTERM signal to Holodesk", end
        assert not any(line.get("result") for line in lines if line["type"] == "step")  # nothing performed
    finally:
        stop_process(trayer)
