"""Fixtures for the desktop-app tests: one real X display with a real tray host, and app builders.

Qt binds a process's QApplication to one X display for its whole life, so the in-process UI tests share
one display: the session's Xvfb (tests/conftest.py picks a free number for it; pyautogui, which also
binds at import, uses the same one). ``trayer`` runs on it while these tests run, so
``QSystemTrayIcon.isSystemTrayAvailable()`` is true there. Tests that need a display of their own (no
tray host at all) start one with ``make_xvfb`` and run the app in a child process on it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.capture.fake import FakeCapture
from holodesk.control.recording import RecordingExecutor
from holodesk.core.actions import Action, Done
from holodesk.policy.registry import get_protocol
from holodesk.policy.scripted import ScriptedPolicy
from tests.helpers.processes import stop_process
from tests.helpers.qt import qapplication_on

pytestmark = pytest.mark.gui

TRAYER_ARGS = ["--edge", "top", "--align", "right", "--widthtype", "pixel", "--width", "48",
               "--heighttype", "pixel", "--height", "24", "--SetDockType", "true", "--transparent", "false"]


def tray_owner(env: dict[str, str]) -> bool:
    """True when some client owns the system tray selection on env's DISPLAY."""
    from Xlib import display

    d = display.Display(env["DISPLAY"])
    try:
        owner = d.get_selection_owner(d.intern_atom("_NET_SYSTEM_TRAY_S0"))
        return bool(owner) and getattr(owner, "id", 0) != 0
    finally:
        d.close()


def start_trayer(env: dict[str, str], timeout_s: float = 10.0) -> subprocess.Popen[bytes]:
    """Start the trayer tray host on env's DISPLAY and wait until it owns the tray selection."""
    exe = shutil.which("trayer")
    if exe is None:
        message = "trayer is not installed (apt-get install trayer); tray tests need a real tray host"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    proc = subprocess.Popen([exe, *TRAYER_ARGS], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"trayer exited with {proc.returncode}")
        if tray_owner(env):
            return proc
        time.sleep(0.05)
    stop_process(proc)
    raise RuntimeError("trayer did not take the tray selection in time")


@pytest.fixture(scope="session")
def ui_display(xvfb_session: Any) -> Iterator[Any]:
    """The session Xvfb with trayer running on it (for the whole UI test session)."""
    env = xvfb_session.env()
    proc = start_trayer(env)
    try:
        yield xvfb_session
    finally:
        stop_process(proc)


@pytest.fixture(scope="session")
def qapp(ui_display: Any) -> Iterator[Any]:
    """pytest-qt's application, created on the UI display (overrides pytest-qt's ``qapp``)."""
    yield qapplication_on(ui_display, "holodesk-tests")


@pytest.fixture(autouse=True)
def ui_env(qapp: Any, ui_display: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """Every UI test: DISPLAY points at the UI display (for mss, xdotool, pynput), settings are isolated."""
    monkeypatch.setenv("DISPLAY", ui_display.display)
    monkeypatch.setenv("XAUTHORITY", str(ui_display.xauthority))
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("XDG_SESSION_TYPE", "x11")
    monkeypatch.setenv("HOLODESK_CONFIG", str(tmp_path / "config" / "settings.toml"))
    for name in list(os.environ):
        if name.startswith("HOLODESK_") and name not in ("HOLODESK_CONFIG", "HOLODESK_TESTING"):
            monkeypatch.delenv(name)
    return ui_display


def reply(action: Action, thought: str = "") -> str:
    """One protocol reply text for ``action``."""
    return get_protocol().to_reply(action, thought=thought)


def blank_frame(width: int = 1920, height: int = 1080, color: tuple[int, int, int] = (40, 44, 52)) -> np.ndarray:
    img = np.zeros((height, width, 3), dtype=np.uint8)
    img[:, :] = color
    return img


class AppKit:
    """A HolodeskApp wired to fakes: ScriptedPolicy, FakeCapture (one 1920x1080 monitor at 0,0, the
    UI display's size) and RecordingExecutor (a fake that records instead of touching the OS)."""

    def __init__(self, app: Any, executor: RecordingExecutor, policy: ScriptedPolicy) -> None:
        self.app = app
        self.executor = executor
        self.policy = policy


class FakeDesktopProbe:
    """Window probe for the app tests: the real window at a point when the display shows one there, else
    (the empty test display) a fake window of application ``app`` (the class part of a WM_CLASS such as
    ``"mousepad Mousepad"``), or None when ``app`` is None. Without a point: the real focused window."""

    def __init__(self, wm_class: str | None) -> None:
        self.app = wm_class.split()[-1] if wm_class else None

    def __call__(self, x: int | None = None, y: int | None = None) -> Any:
        from holodesk.control.window import window_at
        from holodesk.core.wording import WindowInfo

        real = window_at(x, y)
        if real is not None or x is None or self.app is None:
            return real
        return WindowInfo(title="", app=self.app)


@pytest.fixture
def make_app(qtbot: Any, tmp_path: Path) -> Iterator[Callable[..., AppKit]]:
    """Factory ``make_app(actions, approval="step", countdown=2.0, **kw) -> AppKit``; a Done is appended.
    ``focused_window`` is what a fake focus probe reports as the focused window's class (the actions go
    to a RecordingExecutor, not to a real window); the window under a point is the real one there
    (:func:`holodesk.control.window.window_at`), and where the real display shows none, a fake window of
    ``focused_window``'s application. None means unknown for both."""
    from holodesk.settings import Settings
    from holodesk.ui.app import HolodeskApp

    made: list[Any] = []

    def make(actions: list[Action | str], *, approval: str = "step", countdown: float = 2.0,
             force_window: bool = False, capture: Any = None, executor: Any = None, hotkeys: bool = False,
             end: bool = True, focused_window: str | None = "mousepad Mousepad", **settings_kw: Any) -> AppKit:
        replies = [a if isinstance(a, str) else reply(a, thought=f"step {i + 1}") for i, a in enumerate(actions)]
        if end:
            replies.append(reply(Done("finished")))
        policy = ScriptedPolicy(replies)
        rec = executor or RecordingExecutor()
        settings = Settings(data_dir=tmp_path / "data", approval=approval, autopilot_countdown_s=countdown,
                            **settings_kw)
        cap = capture or FakeCapture([blank_frame()])
        app = HolodeskApp(settings, force_window=force_window, hotkeys=hotkeys,
                          policy_factory=lambda s, progress: policy, capture_factory=lambda _s: cap,
                          executor_factory=lambda _s, _stop: rec, settings_path=tmp_path / "config" / "settings.toml",
                          dialogs=False, focus_probe=lambda: focused_window,
                          window_probe=FakeDesktopProbe(focused_window))
        app.guard.settle_s = 0.05
        made.append(app)
        app.start()
        return AppKit(app, rec, policy)

    yield make
    for app in made:
        app.shutdown(wait_s=10.0)
        if app.window is not None:
            app.window.deleteLater()
        app.palette.deleteLater()


def wait_overlay(qtbot: Any, app: Any, timeout_ms: int = 10000) -> Any:
    """Wait until the approval overlay is visible and waiting; return it."""
    qtbot.waitUntil(lambda: app.approval.overlay is not None and app.approval.overlay.isVisible()
                    and app.approval.pending is not None, timeout=timeout_ms)
    return app.approval.overlay


def wait_finished(qtbot: Any, app: Any, timeout_ms: int = 15000) -> Any:
    qtbot.waitUntil(lambda: not app.runner.running and app.last_result is not None, timeout=timeout_ms)
    return app.last_result


@pytest.fixture
def gnome_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real GNOME Keyring (unlocked, Secret Service) on a private D-Bus session bus, used by this process's
    ``keyring`` for this test. Yields the keyring's HOME (its files are under it)."""
    import keyring
    from keyring.backends import SecretService

    if not (shutil.which("gnome-keyring-daemon") and shutil.which("dbus-run-session")):
        message = "gnome-keyring-daemon / dbus-run-session not installed (apt-get install gnome-keyring dbus-daemon)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    home = tmp_path / "keyring-home"
    home.mkdir()
    run_dir = tmp_path / "keyring-run"
    run_dir.mkdir(mode=0o700)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "XDG_DATA_HOME": str(home / ".local" / "share"), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_RUNTIME_DIR": str(run_dir)}
    script = ('echo "BUS $DBUS_SESSION_BUS_ADDRESS"; echo -n pw | gnome-keyring-daemon --unlock '
              '--components=secrets >/dev/null; echo READY; exec sleep 600')
    proc = subprocess.Popen(["dbus-run-session", "--", "sh", "-c", script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    assert proc.stdout is not None
    address = ""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline().strip()
        if line.startswith("BUS "):
            address = line[4:]
        if line == "READY" or proc.poll() is not None:
            break
    if not address or proc.poll() is not None:
        stop_process(proc)
        raise RuntimeError("the private D-Bus session with GNOME Keyring did not start")
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
    before = keyring.get_keyring()
    keyring.set_keyring(SecretService.Keyring())
    try:
        yield home
    finally:
        keyring.set_keyring(before)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        stop_process(proc)
        proc.stdout.close()
