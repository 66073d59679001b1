"""Display detection (F16, F17) and importing everything with no display at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from holodesk.display import check_display, require_display
from holodesk.errors import DisplayError

APP_DIR = Path(__file__).resolve().parents[2] / "app"


def test_display_unset_on_linux_is_none_and_require_raises_with_hint() -> None:
    info = check_display({}, "linux")
    assert info.kind == "none" and not info.usable
    with pytest.raises(DisplayError) as err:
        require_display({}, "linux")
    assert "DISPLAY is unset" in err.value.message
    assert "Xvfb" in err.value.hint and "export DISPLAY" in err.value.hint


def test_wayland_without_x_display_explains_x11_only() -> None:
    env = {"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland"}
    info = check_display(env, "linux")
    assert info.kind == "wayland" and not info.usable
    with pytest.raises(DisplayError) as err:
        require_display(env, "linux")
    assert "X11-only" in err.value.message
    assert "'mutter' desktop backend" in err.value.hint and "XWayland" in err.value.hint
    assert "Xorg" not in err.value.hint  # GNOME 49+ has no X11 session to log into


def test_session_type_wayland_alone_counts_as_wayland() -> None:
    assert check_display({"XDG_SESSION_TYPE": "wayland"}, "linux").kind == "wayland"


def test_xwayland_is_usable_with_a_caveat() -> None:
    env = {"WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland", "DISPLAY": ":0"}
    info = require_display(env, "linux")
    assert info.kind == "xwayland" and info.usable
    assert "only X11 windows" in info.problem
    assert info.connected is None  # a fake environment is never probed


def test_x11_windows_macos() -> None:
    assert check_display({"DISPLAY": ":0", "XDG_SESSION_TYPE": "x11"}, "linux").kind == "x11"
    assert check_display({}, "win32").kind == "windows"
    mac = check_display({}, "darwin")
    assert mac.kind == "macos" and mac.usable
    assert mac.to_dict()["kind"] == "macos"


def test_unreachable_x_server_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISPLAY", ":473")  # nothing listens there (the Xvfb fixtures use :100..:499)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("XDG_SESSION_TYPE", "x11")
    if os.path.exists("/tmp/.X11-unix/X473"):
        pytest.skip("display :473 happens to exist here")
    info = check_display()
    assert info.kind == "x11" and not info.usable and info.connected is False
    with pytest.raises(DisplayError, match="Cannot connect"):
        require_display()


_NO_DISPLAY_SCRIPT = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys
    import numpy as np
    import holodesk.capture, holodesk.control
    imported = []
    for pkg in (holodesk.capture, holodesk.control):
        for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            importlib.import_module(mod.name)
            imported.append(mod.name)
    importlib.import_module("holodesk.display")
    imported.append("holodesk.display")
    out = {"imported": imported, "pyautogui_loaded": "pyautogui" in sys.modules}
    from holodesk.errors import DisplayError
    from holodesk.display import require_display
    try:
        require_display()
        out["require"] = None
    except DisplayError as exc:
        out["require"] = {"message": exc.message, "hint": exc.hint}
    from holodesk.capture.mss_backend import MssCapture
    try:
        MssCapture().grab(1)
        out["grab"] = None
    except DisplayError as exc:
        out["grab"] = type(exc).__name__ + ": " + str(exc)
    from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
    from holodesk.core.actions import Click, Point
    from holodesk.core.geometry import Frame, Monitor, place
    frame = Frame(np.zeros((10, 10, 3), np.uint8), Monitor(1, 0, 0, 10, 10))
    r = PyAutoGUIExecutor().execute(place(Click(Point(500, 500)), frame))
    out["click"] = {"ok": r.ok, "status": r.status, "message": r.message, "error": r.details.get("error")}
    out["pyautogui_loaded_after"] = "pyautogui" in sys.modules
    print("RESULT " + json.dumps(out))
    """
)


def test_no_display_everything_imports_and_explains() -> None:
    """F16: DISPLAY removed -> every capture/control module imports; errors say what to do."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_SESSION_TYPE")}
    env["PYTHONPATH"] = os.pathsep.join([str(APP_DIR), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _NO_DISPLAY_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    expected = {
        "holodesk.capture.base", "holodesk.capture.mss_backend", "holodesk.capture.fake",
        "holodesk.control.base", "holodesk.display", "holodesk.control.pyautogui_executor",
        "holodesk.control.typing", "holodesk.control.paste", "holodesk.control.recording",
    }
    assert expected <= set(out["imported"])
    assert out["pyautogui_loaded"] is False
    assert "DISPLAY is unset" in out["require"]["message"]
    assert "export DISPLAY" in out["require"]["hint"]
    assert out["grab"].startswith("DisplayError: No display is available")
    assert out["click"] == {"ok": False, "status": "failed", "message": out["click"]["message"],
                            "error": "DisplayError"}
    assert "DISPLAY is unset" in out["click"]["message"]
    assert out["pyautogui_loaded_after"] is False
    assert "Traceback" not in proc.stderr
