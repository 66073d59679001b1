"""Field cases F13 (own windows never in the model's frame), F19 (no keychain), F20 (no tray), and F09's
wall-time cap in the desktop app.

F13 runs in this process on the session Xvfb: the real HolodeskApp builds its real Session
(``_build_session``, the same call the worker thread makes) with the real mss capture, and the real
approval overlay is on screen while the Session grabs. F19 and F20 run ``holodesk`` code in child
processes: with no D-Bus session (so keyring selects its fail backend), and on fresh Xvfb servers with
and without a real tray host (trayer).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.recording import RecordingExecutor
from holodesk.core.actions import Click, Done, Point
from holodesk.core.geometry import place
from holodesk.core.risk import Risk, RiskAssessment
from holodesk.policy.base import Observation, Proposal
from holodesk.session.approval import ApprovalResponse, Decision, make_request
from holodesk.session.state import State
from holodesk.ui.theme import THEME
from tests.conftest import XvfbServer
from tests.helpers.qt import qapplication_on, rgb, wait_exposed

ROOT = Path(__file__).resolve().parents[2]
MARK_RGB = rgb(THEME.palette.marker)


# -- F13 ------------------------------------------------------------------------------------------------
class SpyFramePolicy:
    """A fake policy that keeps every frame it is shown and ends the task."""

    name = "spy-frames"

    def __init__(self) -> None:
        self.frames: list[Any] = []

    def propose(self, observation: Observation) -> Proposal:
        self.frames.append(observation.frame)
        return Proposal(Done("seen"), thought="looked")

    def close(self) -> None:
        """Nothing to release."""


def on_worker(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a worker thread (as TaskRunner does) while this (GUI) thread serves Qt events."""
    from PySide6.QtCore import QCoreApplication

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised on the caller's thread
            box["error"] = exc

    t = threading.Thread(target=work)
    t.start()
    while t.is_alive():
        QCoreApplication.processEvents()
        t.join(0.005)
    if "error" in box:
        raise box["error"]
    return box["value"]


def marker_count(pixels: np.ndarray[Any, Any]) -> int:
    return int(np.all(pixels == np.array(MARK_RGB, np.uint8), axis=-1).sum())


@pytest.fixture(scope="session")
def qapp(xvfb_session: XvfbServer) -> Any:
    """pytest-qt's application, created on the session Xvfb (a session fixture is set up before the
    function-scoped ``xvfb`` has pointed DISPLAY at it, so the default ``qapp`` would find no display)."""
    return qapplication_on(xvfb_session, "holodesk-field-cases")


@pytest.fixture
def desktop_app(xvfb: XvfbServer, qtbot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    monkeypatch.setenv("HOLODESK_CONFIG", str(tmp_path / "settings.toml"))
    monkeypatch.setenv("HOLODESK_DATA_DIR", str(tmp_path / "data"))
    from holodesk.settings import load_settings
    from holodesk.ui.app import HolodeskApp

    made: list[Any] = []

    def make(policy: Any, executor_factory: Callable[[Any, Any], Any] | None = None,
             settings: dict[str, Any] | None = None, **kw: Any) -> Any:
        app = HolodeskApp(load_settings(**{"approval": "step", **(settings or {})}), hotkeys=False,
                          dialogs=False, policy_factory=lambda _s, _p: policy, capture_factory=lambda _s: MssCapture(),
                          executor_factory=executor_factory or (lambda _s, _stop: RecordingExecutor()),
                          marker_color=THEME.palette.marker, **kw)
        made.append(app)
        return app

    yield make
    for app in made:
        app.shutdown()


def test_F13_overlay_marker_is_on_screen_but_never_in_the_frame_sent_to_the_model(desktop_app: Any,
                                                                                   qtbot: Any) -> None:
    from holodesk.ui.workers import PendingDecision

    policy = SpyFramePolicy()
    app = desktop_app(policy)
    session = on_worker(lambda: app._build_session(lambda *_a: None))  # the Session the app would run
    with MssCapture() as cap:
        frame = cap.grab(1)
        assert marker_count(frame.pixels) == 0
        mark = Click(Point(400, 600))
        request = make_request(0, Proposal(mark, thought="mark"), place(mark, frame),
                               RiskAssessment(Risk.LOW, "pointer action"), "step")
        pending = PendingDecision(request, "user")
        app.approval.present(pending)
        overlay = app.approval.overlay
        wait_exposed(qtbot, overlay)
        qtbot.wait(200)
        assert marker_count(on_worker(lambda: cap.grab(1)).pixels) > 50  # really on screen: the test can fail
        result = on_worker(lambda: session.run("look"))
        assert result.status is State.FINISHED
        (seen,) = policy.frames
        assert marker_count(seen.pixels) == 0  # hidden during the grab
        qtbot.waitUntil(lambda: overlay.isVisible(), timeout=10000)  # and back for the user afterwards
        pending.resolve(ApprovalResponse(Decision.STOP))


def test_F13_the_no_tray_window_is_not_in_the_frame_sent_to_the_model(desktop_app: Any, qtbot: Any) -> None:
    policy = SpyFramePolicy()
    app = desktop_app(policy, force_window=True)
    window = app.window
    window.show()
    wait_exposed(qtbot, window)
    qtbot.wait(200)
    top_left = window.mapToGlobal(window.rect().topLeft())
    x, y, w, h = top_left.x(), top_left.y(), window.width(), window.height()
    with MssCapture() as cap:
        shown = on_worker(lambda: cap.grab(1)).pixels[y:y + h, x:x + w]
        window.hide()
        qtbot.wait(200)
        behind = on_worker(lambda: cap.grab(1)).pixels[y:y + h, x:x + w]
        window.show()
        wait_exposed(qtbot, window)
        qtbot.wait(200)
    assert not np.array_equal(shown, behind)  # the window really covers that area
    session = on_worker(lambda: app._build_session(lambda *_a: None))
    assert on_worker(lambda: session.run("look")).status is State.FINISHED
    (seen,) = policy.frames
    assert np.array_equal(seen.pixels[y:y + h, x:x + w], behind)


def test_F09_desktop_app_wall_time_cap_ends_a_running_wait(desktop_app: Any) -> None:
    import time

    from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
    from holodesk.core.actions import Wait

    class WaitPolicy(SpyFramePolicy):
        def propose(self, observation: Observation) -> Proposal:
            self.frames.append(observation.frame)
            return Proposal(Wait(8), thought="wait")

    app = desktop_app(WaitPolicy(), executor_factory=lambda _s, stop: PyAutoGUIExecutor(stop_event=stop),
                      settings={"approval": "auto", "max_wall_s": 0.5, "autopilot_countdown_s": 0})
    session = on_worker(lambda: app._build_session(lambda *_a: None))
    t0 = time.monotonic()
    result = on_worker(lambda: session.run("wait"))
    assert result.status is State.FAILED and "wall-time cap" in result.reason
    assert time.monotonic() - t0 < 4.0


# -- F19 ------------------------------------------------------------------------------------------------
KEY = "sk-F19-do-not-write-me-0123456789"


def _headless_env(home: Path) -> dict[str, str]:
    """No D-Bus session, no display: keyring finds no keychain (its fail backend)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DBUS_", "DISPLAY", "WAYLAND", "XDG_",
                                                                    "PYTHON_KEYRING", "HOLODESK_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
               PYTHONPATH=str(ROOT / "app") + os.pathsep + str(ROOT))
    return env


def test_F19_no_keychain_gives_the_choice_never_a_plaintext_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    script = textwrap.dedent(f"""
        import json
        from holodesk import secrets
        from holodesk.errors import SecretStoreError
        out = {{"status": secrets.keyring_status()}}
        try:
            secrets.store_api_key("http://gpu-box:8000/v1", "{KEY}")
        except SecretStoreError as exc:
            out["error"] = str(exc)
        out["before"] = secrets.resolve_api_key("http://gpu-box:8000/v1")[1]
        secrets.set_session_api_key("http://gpu-box:8000/v1", "{KEY}")  # 'this session only'
        key, source = secrets.resolve_api_key("http://GPU-BOX:8000/v1/")
        out["session"] = [key == "{KEY}", source]
        print(json.dumps(out))
    """)
    res = subprocess.run([sys.executable, "-c", script], env=_headless_env(home), capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["status"]["usable"] is False and out["status"]["backend"] == "keyring.backends.fail.Keyring"
    error = out["error"]
    assert error.startswith("Cannot use the OS keychain: no keychain backend is available")
    assert "unlock or install a system keychain" in error and "this session only" in error
    assert "never writes the key to a plaintext file" in error and KEY not in error
    assert out["before"] == "none (keychain unusable)"  # a keyless server still works
    assert out["session"] == [True, "session"]
    for path in [*home.rglob("*"), *tmp_path.glob("*")]:
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    assert KEY not in res.stdout and KEY not in res.stderr


@pytest.mark.slow
def test_F19_local_model_needs_no_secret_at_all(tmp_path: Path) -> None:
    """The local policy is built (tiny random Holotron-shaped checkpoint) with no keychain at all, and
    neither Holodesk's secrets module nor keyring is even imported."""
    home = tmp_path / "home"
    home.mkdir()
    script = textwrap.dedent(f"""
        import sys
        from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint
        from holodesk.session.factory import build_policy
        from holodesk.settings import load_settings
        path = write_tiny_checkpoint({str(tmp_path / "tiny")!r}, seed=0)
        policy = build_policy(load_settings(policy="local", model=str(path)))
        print("BUILT", type(policy).__name__, "holodesk.secrets" in sys.modules, "keyring" in sys.modules)
    """)
    res = subprocess.run([sys.executable, "-c", script], env=_headless_env(home), capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "BUILT HolotronPolicy False False" in res.stdout


# -- F20 ------------------------------------------------------------------------------------------------
APP_REPORT = textwrap.dedent("""
    import json, sys
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication
    app = QApplication(sys.argv[:1])
    from holodesk.settings import load_settings
    from holodesk.ui.app import HolodeskApp
    holo = HolodeskApp(load_settings(), hotkeys=False, dialogs=False)
    holo.start()
    def report():
        tray = holo.tray
        menu = tray.icon.contextMenu() if tray is not None else None
        print("REPORT " + json.dumps({
            "tray_visible": tray is not None and tray.icon.isVisible(),
            "menu": [a.text() for a in menu.actions() if a.text()] if menu is not None else [],
            "window_visible": holo.window is not None and holo.window.isVisible(),
            "help": holo.window.help_label.text() if holo.window is not None else "",
        }), flush=True)
        app.quit()
    QTimer.singleShot(1500, report)
    app.exec()
""")


def app_report(server: XvfbServer, tmp_path: Path) -> dict[str, Any]:
    env = server.env()
    env.pop("QT_QPA_PLATFORM", None)
    env.update(HOLODESK_CONFIG=str(tmp_path / "settings.toml"), HOLODESK_DATA_DIR=str(tmp_path / "data"))
    res = subprocess.run([sys.executable, "-c", APP_REPORT], env=env, capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("REPORT ")]
    assert res.returncode == 0 and lines, res.stdout + res.stderr
    return dict(json.loads(lines[-1][len("REPORT "):]))


@pytest.mark.slow
def test_F20_no_tray_opens_a_window_that_says_how_to_get_the_tray(make_xvfb: Callable[..., XvfbServer],
                                                                   tmp_path: Path) -> None:
    report = app_report(make_xvfb(1280, 800), tmp_path)  # bare X: nothing owns the tray selection
    assert report["tray_visible"] is False
    assert report["window_visible"] is True  # never hidden with no way back
    assert "No system tray was found" in report["help"] and "AppIndicator" in report["help"]
    assert "System Tray" in report["help"]


@pytest.mark.slow
def test_F20_with_a_tray_host_the_icon_has_a_menu(make_xvfb: Callable[..., XvfbServer], tmp_path: Path) -> None:
    from tests.helpers.processes import stop_process
    from tests.ui.conftest import start_trayer

    server = make_xvfb(1280, 800)
    trayer = start_trayer(server.env())
    try:
        report = app_report(server, tmp_path)
    finally:
        stop_process(trayer)
    assert report["tray_visible"] is True and report["window_visible"] is False
    menu = " | ".join(report["menu"])
    for item in ("Stop", "Settings", "Quit"):
        assert item in menu, menu
