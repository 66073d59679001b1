"""Is there a system tray? Safe to call from ``holodesk doctor`` (field case F20).

:func:`tray_status` answers in this process when a QApplication already exists; otherwise it asks a
short-lived child process (``python -m holodesk.ui.probe``), so that doctor never binds this process
to a display, never leaves a Qt application behind, and survives a Qt platform plugin that aborts the
process (e.g. the xcb plugin with a missing ``libxcb-cursor0``). With no ``DISPLAY`` on Linux the child
uses Qt's offscreen platform, where no tray exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

_XCB_HINT = ("Qt's X11 platform plugin could not start. On Debian/Ubuntu install its libraries: sudo apt "
             "install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxkbcommon-x11-0 libegl1 libgl1 "
             "libfontconfig1 libdbus-1-3.")


def platform_tray_hint() -> str:
    """How to get a tray on this platform (for doctor and the fallback window)."""
    if sys.platform.startswith("linux"):
        return ("GNOME: enable the AppIndicator and KStatusNotifierItem Support extension "
                "(gnome-shell-extension-appindicator); other desktops: add a system tray / notification "
                "area to a panel.")
    return "Enable notification-area icons in the system settings."


def _needs_offscreen(env: dict[str, str]) -> bool:
    return sys.platform.startswith("linux") and not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY")


def session_bus_configured(env: dict[str, str]) -> bool:
    """True when a D-Bus session bus is configured: ``DBUS_SESSION_BUS_ADDRESS`` is set, or the socket
    ``$XDG_RUNTIME_DIR/bus`` that libdbus uses by default exists."""
    if env.get("DBUS_SESSION_BUS_ADDRESS"):
        return True
    runtime = env.get("XDG_RUNTIME_DIR", "")
    return bool(runtime) and os.path.exists(os.path.join(runtime, "bus"))


def _probe_current() -> dict[str, Any]:
    """Check with the QApplication of this process."""
    # lazy (here and below): doctor imports this module without loading Qt; Qt loads only in the child
    # process or where a QApplication already runs
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QSystemTrayIcon

    app = QGuiApplication.instance()
    platform = QGuiApplication.platformName() if app is not None else ""
    available = bool(QSystemTrayIcon.isSystemTrayAvailable())
    if available:
        reason = "a system tray host is running"
    elif platform in ("offscreen", "minimal"):
        reason = f"no display: Qt runs on the {platform!r} platform, which has no tray"
    else:
        reason = "no system tray host is running on this desktop (nothing owns the tray selection)"
    return {"available": available, "platform": platform, "display": os.environ.get("DISPLAY", ""),
            "messages": bool(QSystemTrayIcon.supportsMessages()) if available else False,
            "reason": reason, "hint": "" if available else platform_tray_hint() + " Without a tray Holodesk "
            "opens a small window instead."}


def tray_status(timeout_s: float = 20.0) -> dict[str, Any]:
    """Whether a system tray is available, and why.

    Returns:
        ``{"available": bool, "platform": str (Qt platform plugin), "display": str, "messages": bool
        (balloon messages supported), "reason": str, "hint": str, "checked_in": "this process" |
        "child process"}``, and for the child process ``"session_bus"`` (whether a D-Bus session bus
        is configured; with none, the child runs with D-Bus off rather than autolaunch a bus daemon
        that would outlive it). Never raises: a failing check yields ``available: False`` with the reason.
    """
    try:
        from PySide6.QtWidgets import QApplication  # lazy: doctor imports this module without loading Qt

        if QApplication.instance() is not None:
            return {**_probe_current(), "checked_in": "this process"}
    except ImportError as exc:
        return {"available": False, "platform": "", "display": os.environ.get("DISPLAY", ""), "messages": False,
                "reason": f"PySide6 cannot be imported: {exc}", "hint": "Reinstall Holodesk's environment.",
                "checked_in": "this process"}
    env = dict(os.environ)
    if _needs_offscreen(env):
        env["QT_QPA_PLATFORM"] = "offscreen"
    session_bus = "configured"
    if sys.platform.startswith("linux") and not session_bus_configured(env):
        # Without a session bus, Qt's D-Bus (used for StatusNotifierItem trays) autolaunches one for the X
        # display: a dbus-daemon that outlives this check. A fresh bus holds no tray watcher, so the
        # answer is the same without it, and doctor leaves no process behind.
        env["DBUS_SESSION_BUS_ADDRESS"] = "disabled:"
        session_bus = "none (a StatusNotifierItem tray needs one; the X11 tray selection does not)"
    try:
        proc = subprocess.run([sys.executable, "-m", "holodesk.ui.probe"], env=env, capture_output=True,
                              text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"available": False, "platform": "", "display": env.get("DISPLAY", ""), "messages": False,
                "reason": f"the tray check did not finish: {exc}", "hint": "", "checked_in": "child process"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode == 0 and lines:
        try:
            return {**json.loads(lines[-1]), "session_bus": session_bus, "checked_in": "child process"}
        except json.JSONDecodeError:
            pass
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    xcb = any("xcb" in line for line in tail)
    return {"available": False, "platform": "", "display": env.get("DISPLAY", ""), "messages": False,
            "reason": f"Qt could not start (exit {proc.returncode}): " + " | ".join(tail),
            "hint": _XCB_HINT if xcb else "Run `holodesk tray --debug` to see the full error.",
            "checked_in": "child process"}


def main() -> int:
    """Child-process entry point: create a QApplication, print the status as one JSON line."""
    from PySide6.QtWidgets import QApplication  # lazy: Qt loads in the child process only

    app = QApplication.instance() or QApplication([sys.argv[0]])
    print(json.dumps(_probe_current()))
    del app
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
