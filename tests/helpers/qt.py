"""The tests' QApplication on a real X server, and helpers that wait for its windows to be exposed and focused."""

from __future__ import annotations

import os
import subprocess
from typing import Any


def qapplication_on(server: Any, name: str) -> Any:
    """The process's QApplication, created on ``server`` (an XvfbServer) with the xcb platform.

    DISPLAY / XAUTHORITY / QT_QPA_PLATFORM are set only while Qt reads them, then restored. Asserts that
    Qt really runs on xcb (not offscreen). Windows do not quit the application when the last one closes.
    """
    from PySide6.QtWidgets import QApplication

    saved = {k: os.environ.get(k) for k in ("DISPLAY", "XAUTHORITY", "QT_QPA_PLATFORM")}
    os.environ.update(DISPLAY=server.display, XAUTHORITY=str(server.xauthority))
    os.environ.pop("QT_QPA_PLATFORM", None)
    try:
        app = QApplication.instance() or QApplication([name])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert app.platformName() == "xcb", f"these tests need a real X display, Qt runs on {app.platformName()!r}"
    app.setQuitOnLastWindowClosed(False)
    return app


def wait_exposed(qtbot: Any, widget: Any, timeout_ms: int = 5000) -> None:
    """Wait until ``widget``'s top-level window is exposed (mapped and drawable on the X server).

    ``qtbot.waitExposed`` is a context manager: called as a statement it waits for nothing.

    Raises:
        pytestqt.exceptions.TimeoutError: not exposed after ``timeout_ms``.
    """
    window = widget.window()

    def exposed() -> bool:
        handle = window.windowHandle()
        return handle is not None and handle.isExposed()

    qtbot.waitUntil(exposed, timeout=timeout_ms)


def focus_window(qtbot: Any, widget: Any, timeout_ms: int = 10000) -> None:
    """Give ``widget``'s top-level window the X keyboard focus and wait until Qt reports it active.

    For tests whose subject is not activation itself (the product's own ``activateWindow`` calls are
    tested where they are the subject). On a bare X server Qt's ``activateWindow()`` sends SetInputFocus
    stamped with the time of the last event Qt received, and the server ignores a request older than the
    last focus change by any client: measured here, a Qt window stays inactive when another client moved
    the focus between Qt's last event and the request. ``xdotool windowfocus`` stamps CurrentTime, which the
    server always honours. ``$DISPLAY`` must name the X server Qt runs on.

    Raises:
        pytestqt.exceptions.TimeoutError: the window is not exposed after 5 s.
        AssertionError: not active after ``timeout_ms``; the message names the window that holds the X
            focus, Qt's active window and any modal widget.
    """
    from PySide6.QtWidgets import QApplication
    from pytestqt.exceptions import TimeoutError as QtTimeoutError

    window = widget.window()
    wait_exposed(qtbot, window)
    subprocess.run(["xdotool", "windowfocus", str(int(window.winId()))], check=True, capture_output=True,
                   timeout=10)
    try:
        qtbot.waitUntil(window.isActiveWindow, timeout=timeout_ms)
    except QtTimeoutError:
        holder = subprocess.run(["xdotool", "getwindowfocus", "getwindowname", "getwindowpid"],
                                capture_output=True, text=True, timeout=10)
        raise AssertionError(
            f"window {int(window.winId()):#x} not active after {timeout_ms} ms; X focus is on "
            f"{holder.stdout.strip()!r} {holder.stderr.strip()!r} (this process is {os.getpid()}); Qt's active "
            f"window {QApplication.activeWindow()!r}, modal widget {QApplication.activeModalWidget()!r}"
        ) from None


def rgb(color: str) -> tuple[int, int, int]:
    """``"#rrggbb"`` (a :mod:`holodesk.ui.theme` palette role) as the (red, green, blue) bytes a screenshot shows."""
    text = color.removeprefix("#")
    assert len(text) == 6, f"not a #rrggbb colour: {color!r}"
    return int(text[0:2], 16), int(text[2:4], 16), int(text[4:6], 16)
