"""Hosting callers' tasks when no desktop app runs (``holodesk mcp``): a headless
:class:`~holodesk.ui.app.HolodeskApp` driven through :class:`~holodesk.ui.remote.AppRemote`."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from holodesk.instance import ChannelError
from holodesk.settings import Settings
from holodesk.ui.app import HolodeskApp
from holodesk.ui.remote import AppRemote

log = logging.getLogger(__name__)


def host_tasks(settings: Settings, serve: Callable[[AppRemote], None]) -> int:
    """Host callers' tasks in this process when no desktop app runs (``holodesk mcp``): a Qt application
    with a headless :class:`~holodesk.ui.app.HolodeskApp` (no tray icon, no window; the approval
    overlay and the autopilot countdown show as usual) on this (the main) thread, and ``serve(remote)``
    on a thread of its own. When ``serve`` returns, or on SIGTERM/SIGINT, any running task is stopped
    (the record names the MCP client) and the app quits.

    Args:
        settings: effective settings (policy and all).
        serve: runs the caller-facing server until it ends (e.g. the MCP stdio server).
    Returns:
        0 when ``serve`` returned normally, 1 when it raised (logged).
    """
    qapp = QApplication.instance()
    if not isinstance(qapp, QApplication):
        qapp = QApplication(sys.argv[:1])
    qapp.setApplicationName("Holodesk")
    qapp.setQuitOnLastWindowClosed(False)
    holo = HolodeskApp(settings, hotkeys=False, dialogs=False, headless=True)
    remote = AppRemote(holo)
    status = {"code": 0}

    def run() -> None:
        try:
            serve(remote)
        except BaseException:
            log.exception("the server hosting tasks failed")
            status["code"] = 1
        finally:
            with contextlib.suppress(ChannelError, RuntimeError):
                remote.on_gui(lambda: holo.stop(by="the MCP client (the server ended)"))
            remote._call.emit(holo.quit)

    def terminate(signum: int, _frame: Any) -> None:  # the host ends this server with SIGTERM / SIGINT
        log.info("signal %d: stopping any task and quitting", signum)
        status["signalled"] = 1
        holo.stop(by="the MCP client (its host ended the server)")
        holo.quit()

    thread = threading.Thread(target=run, name="holodesk-serve", daemon=True)
    holo.start()
    previous = {sig: signal.signal(sig, terminate) for sig in (signal.SIGTERM, signal.SIGINT)}
    wake = QTimer()  # Python runs signal handlers only between bytecodes: let it run while Qt waits
    wake.timeout.connect(lambda: None)
    wake.start(200)
    thread.start()
    try:
        qapp.exec()
    finally:
        wake.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    thread.join(1 if status.get("signalled") else 10)
    return status["code"]
