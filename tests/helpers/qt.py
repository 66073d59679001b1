"""The tests' QApplication on a real X server."""

from __future__ import annotations

import os
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
