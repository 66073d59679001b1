"""Field cases F16-F18 (platform and environment) and the environment facts ``holodesk doctor`` reports.

No display and Wayland run for real: ``holodesk`` in a child process with DISPLAY unset or the Wayland
variables set. F18 grabs a real Xvfb screen from three threads at once. Windows DPI awareness cannot
run here; its logic is driven through FakeUser32/FakeShcore.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.dpi import dpi_awareness, ensure_per_monitor_dpi_awareness
from holodesk.session.state import State
from tests.conftest import XvfbServer
from tests.field_cases.fakes import FakeShcore, FakeUser32, make_run, reply
from tests.helpers.target import TargetWindow

ROOT = Path(__file__).resolve().parents[2]
NO_DISPLAY_PROBLEM = "No display is available: DISPLAY is unset"
WAYLAND_PROBLEM = "This is a Wayland session without an X display (DISPLAY is unset)"


def _env(**changes: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY",
                                                            "XDG_SESSION_TYPE", "QT_QPA_PLATFORM")}
    for key, value in changes.items():
        if value is not None:
            env[key] = value
    return env


def holodesk(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "holodesk", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, stdin=subprocess.DEVNULL)


def doctor_json(env: dict[str, str]) -> dict[str, Any]:
    res = holodesk(env, "doctor", "--json")
    assert res.returncode == 0 and "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    return dict(json.loads(res.stdout))  # stdout is the one JSON object, nothing else


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "s.jsonl"
    path.write_text(reply({"tool_name": "click", "x": 500, "y": 500}) + "\n", encoding="utf-8")
    return path


# -- F16 ------------------------------------------------------------------------------------------------
IMPORT_EVERYTHING = """
import importlib, pkgutil, sys, holodesk
names = [m.name for m in pkgutil.walk_packages(holodesk.__path__, "holodesk.") if m.name != "holodesk.__main__"]
for name in names:
    importlib.import_module(name)
print(len(names), "pyautogui" in sys.modules, "mss.linux" in sys.modules)
"""


@pytest.mark.slow
def test_F16_no_display_every_module_imports_and_the_app_explains(script: Path) -> None:
    env = _env()
    res = subprocess.run([sys.executable, "-c", IMPORT_EVERYTHING], env=env, capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    count, pyautogui_loaded, _ = res.stdout.split()
    assert int(count) >= 25 and pyautogui_loaded == "False"  # pyautogui stays unimported (it raises)
    for args in (["run", "click", "--script", str(script)], ["tray"], []):
        res = holodesk(env, *args)
        assert res.returncode == 2, (args, res.stdout + res.stderr)
        assert "Traceback" not in res.stderr and "KeyError" not in res.stderr, res.stderr
        assert res.stderr.startswith(f"holodesk: {NO_DISPLAY_PROBLEM}"), res.stderr
        assert "Xvfb" in res.stderr  # and what to do about it
    report = doctor_json(env)
    assert report["Display server"]["kind"] == "none" and report["Display server"]["usable"] is False
    assert report["Monitors"]["error"].startswith(f"DisplayError: {NO_DISPLAY_PROBLEM}")


def test_F16_no_display_in_process_session_fails_with_the_explanation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real Session with the real mss capture and pyautogui executor, DISPLAY unset: the run ends
    FAILED with the explanation, not an exception."""
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("XDG_SESSION_TYPE", raising=False)
    run = make_run([reply({"tool_name": "click", "x": 1, "y": 1})], MssCapture(), PyAutoGUIExecutor())
    result = run.session.run("click")
    assert result.status is State.FAILED and result.reason.startswith(NO_DISPLAY_PROBLEM), result


# -- F17 ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_F17_wayland_session_is_detected_and_explained(script: Path) -> None:
    for env in (_env(WAYLAND_DISPLAY="wayland-0", XDG_SESSION_TYPE="wayland"), _env(XDG_SESSION_TYPE="wayland")):
        for args in (["run", "click", "--script", str(script)], ["tray"]):
            res = holodesk(env, *args)
            assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
            assert res.stderr.startswith(f"holodesk: {WAYLAND_PROBLEM}"), res.stderr
            assert "X11-only" in res.stderr and "XWayland" in res.stderr
            # GNOME 49+ has no X11 session to log into: the way out is the 'mutter' backend, not Xorg.
            assert "'mutter' desktop backend" in res.stderr and "Xorg" not in res.stderr
            assert "Mutter's remote-desktop API is not available either" in res.stderr
        report = doctor_json(env)
        assert report["Display server"]["kind"] == "wayland" and report["Display server"]["usable"] is False


def test_F17_xwayland_works_with_a_caveat(xvfb: XvfbServer, script: Path, tmp_path: Path) -> None:
    """DISPLAY reachable and WAYLAND_DISPLAY set (XWayland): usable, and the user is told that native
    Wayland windows cannot be seen or controlled."""
    env = _env(DISPLAY=xvfb.display, XAUTHORITY=str(xvfb.xauthority), WAYLAND_DISPLAY="wayland-0",
               XDG_SESSION_TYPE="wayland")
    report = doctor_json(env)
    assert report["Display server"]["kind"] == "xwayland" and report["Display server"]["usable"] is True
    assert "only X11 windows" in report["Display server"]["problem"]
    res = holodesk(env, "run", "click", "--script", str(script), "--episodes-dir", str(tmp_path / "ep"))
    assert "Running under XWayland: only X11 windows can be captured and controlled" in res.stderr
    assert "Traceback" not in res.stderr


# -- F18 ------------------------------------------------------------------------------------------------
def test_F18_capture_created_on_one_thread_grabs_from_three_threads_at_once(xvfb: XvfbServer,
                                                                            tmp_path: Path) -> None:
    with TargetWindow.start(tmp_path, x=640, y=360, color="#cc3366") as win:
        cap = MssCapture()  # created here, on the "GUI" thread, and used here first
        try:
            reference = cap.grab(1)
            wx, wy, _w, _h = win.rects["window"]
            assert tuple(reference.pixels[wy + 5, wx + 5]) == (0xCC, 0x33, 0x66)
            barrier = threading.Barrier(3)
            frames: dict[str, Any] = {}
            errors: list[BaseException] = []

            def worker() -> None:
                try:
                    barrier.wait(timeout=10)
                    for _ in range(5):
                        frames[threading.current_thread().name] = cap.grab(1)
                except BaseException as exc:  # reported below, with the thread's name
                    errors.append(exc)

            threads = [threading.Thread(target=worker, name=f"grabber-{i}") for i in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            assert errors == []
            assert sorted(frames) == ["grabber-0", "grabber-1", "grabber-2"]
            for frame in frames.values():
                assert frame.pixels.shape == reference.pixels.shape
                window = (slice(wy, wy + 100), slice(wx, wx + 400))
                assert np.array_equal(frame.pixels[window], reference.pixels[window])
            assert cap.open_handles == 4  # one mss handle per thread that grabbed
        finally:
            cap.close()


# -- doctor: DPI awareness (Windows logic through fakes) -------------------------------------------------
def test_doctor_reports_dpi_awareness_na_on_linux_and_the_windows_states_through_fakes() -> None:
    assert dpi_awareness("linux")["status"] == "n/a on this OS"
    assert dpi_awareness("darwin")["status"] == "n/a on this OS"
    assert ensure_per_monitor_dpi_awareness("linux") is True
    fresh = FakeUser32(initial=0)
    assert ensure_per_monitor_dpi_awareness("win32", user32=fresh, shcore=FakeShcore(fresh)) is True
    assert dpi_awareness("win32", user32=fresh)["awareness"] == "per-monitor aware"
    assert dpi_awareness("win32", user32=fresh)["status"] == "ok"
    late = FakeUser32(initial=1, locked=True)  # pyautogui declared system awareness first
    assert ensure_per_monitor_dpi_awareness("win32", user32=late, shcore=FakeShcore(late)) is False
    report = dpi_awareness("win32", user32=late)
    assert (report["status"], report["awareness"]) == ("problem", "system aware")


@pytest.mark.slow
def test_doctor_reports_the_environment_facts_the_field_cases_depend_on(make_xvfb: Callable[..., XvfbServer]) -> None:
    """Display server, monitors with origins and measured scales, DPI awareness, keychain, tray."""
    server = make_xvfb(3200, 1080)
    server.run("xrandr", "--setmonitor", "L", "1280/338x800/211+0+280", "screen")
    server.run("xrandr", "--setmonitor", "R", "1920/508x1080/286+1280+0", "none")
    report = doctor_json(_env(DISPLAY=server.display, XAUTHORITY=str(server.xauthority), XDG_SESSION_TYPE="x11"))
    assert report["Display server"]["kind"] == "x11" and report["Display server"]["connected"] is True
    assert report["Monitors"]["count"] == 2
    assert report["Monitors"]["monitor 1"] == ("1280x800 at +0+280 (input space), frame 1280x800 px, "
                                               "measured scale 1x1")
    assert report["Monitors"]["monitor 2"].startswith("1920x1080 at +1280+0")
    assert report["DPI awareness"]["status"] == "n/a on this OS"
    assert set(report["Keychain"]) >= {"backend", "usable", "detail"}
    assert report["System tray"]["available"] is False  # bare Xvfb: no tray host
    assert "without a tray holodesk opens a small window" in report["System tray"]["hint"].lower()
