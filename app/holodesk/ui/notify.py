"""The one place where errors and notices reach the user.

Every exception raised on a worker thread (the session runner, model loading, the hotkey listener)
and every uncaught exception on the GUI thread ends up in :meth:`Notifier.error`, which shows it as a
tray balloon when a tray icon is visible and as a (non-modal) message box otherwise. Nothing is only
logged. :meth:`Notifier.error` may be called from any thread: it emits a queued signal.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import QMessageBox, QSystemTrayIcon, QWidget

from holodesk.errors import HolodeskError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notice:
    """One message for the user.

    Attributes:
        level: "info", "warning" or "error".
        title: short heading.
        text: plain-words message (shown as plain text, never rich text).
        details: extra text (hint, traceback) shown on demand.
    """

    level: str
    title: str
    text: str
    details: str = ""


def describe_exception(exc: BaseException) -> tuple[str, str]:
    """Message and details for an exception: a HolodeskError's message and hint; for anything else the
    type and message, with the traceback as details."""
    if isinstance(exc, HolodeskError):
        return exc.message, exc.hint
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return f"{type(exc).__name__}: {exc}", tb


class Notifier(QObject):
    """Shows notices: tray balloon when a tray is visible, a message box otherwise.

    Signals:
        posted(Notice): every notice, on the GUI thread (the tray/fallback window and tests listen).
    """

    posted = Signal(object)
    _deliver = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.tray: QSystemTrayIcon | None = None
        self.dialog_parent: QWidget | None = None
        self.history: list[Notice] = []
        self.use_dialogs = True
        self._boxes: list[QMessageBox] = []
        self._deliver.connect(self._show, Qt.ConnectionType.QueuedConnection)

    # -- thread-safe entry points ------------------------------------------------------------------
    def notify(self, notice: Notice) -> None:
        """Queue ``notice`` for display (any thread)."""
        log.log(logging.ERROR if notice.level == "error" else logging.INFO, "%s: %s", notice.title, notice.text)
        self._deliver.emit(notice)

    def info(self, title: str, text: str) -> None:
        self.notify(Notice("info", title, text))

    def warning(self, title: str, text: str, details: str = "") -> None:
        self.notify(Notice("warning", title, text, details))

    def error(self, title: str, exc: BaseException | str, details: str = "") -> None:
        """Show an error (any thread). ``exc`` may be an exception or a message."""
        if isinstance(exc, BaseException):
            text, more = describe_exception(exc)
            details = details or more
        else:
            text = exc
        self.notify(Notice("error", title, text, details))

    # -- GUI thread ------------------------------------------------------------------------------
    @Slot(object)
    def _show(self, notice: Notice) -> None:
        self.history.append(notice)
        self.posted.emit(notice)
        body = notice.text + (f"\n\n{notice.details}" if notice.details and notice.level != "error" else "")
        if self.tray is not None and self.tray.isVisible() and QSystemTrayIcon.supportsMessages():
            icon = {"error": QSystemTrayIcon.MessageIcon.Critical,
                    "warning": QSystemTrayIcon.MessageIcon.Warning}.get(notice.level,
                                                                        QSystemTrayIcon.MessageIcon.Information)
            self.tray.showMessage(notice.title, body, icon, 8000)
            if notice.level != "error":
                return
        if not self.use_dialogs or notice.level == "info":
            return
        box = QMessageBox(self.dialog_parent)
        box.setIcon(QMessageBox.Icon.Critical if notice.level == "error" else QMessageBox.Icon.Warning)
        box.setWindowTitle(f"Holodesk — {notice.title}")
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setText(notice.text)
        if notice.details:
            box.setDetailedText(notice.details)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setModal(False)
        box.finished.connect(lambda _=0, b=box: self._boxes.remove(b) if b in self._boxes else None)
        self._boxes.append(box)
        box.show()

    @property
    def open_dialogs(self) -> list[QMessageBox]:
        """Message boxes currently shown (tests close them)."""
        return list(self._boxes)


def install_exception_hooks(notifier: Notifier) -> Callable[[], None]:
    """Route uncaught exceptions of every thread to ``notifier`` (besides the log).

    Returns:
        A function that restores the previous hooks.
    """
    old_sys, old_thread = sys.excepthook, threading.excepthook

    def sys_hook(etype: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        log.error("uncaught exception", exc_info=(etype, value, tb))
        notifier.error("Unexpected error", value)

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None or isinstance(args.exc_value, SystemExit):
            return
        log.error("uncaught exception in thread %s", args.thread.name if args.thread else "?",
                  exc_info=(args.exc_type, args.exc_value, args.exc_traceback))
        notifier.error("Unexpected error in a background task", args.exc_value)

    sys.excepthook = sys_hook
    threading.excepthook = thread_hook

    def restore() -> None:
        sys.excepthook = old_sys
        threading.excepthook = old_thread

    return restore
