"""The one place where errors and notices reach the user.

Every exception raised on a worker thread (the session runner, model loading, the hotkey listener)
and every uncaught exception on the GUI thread ends up in :meth:`Notifier.error`, which shows it as a
tray balloon when a tray icon is visible and in one (non-modal) message box. The box says what to do in
its main text and offers buttons that do it (Open Settings, Open setup wizard, Retry); a later error
replaces it instead of stacking a second box. Nothing is only logged. :meth:`Notifier.error` may be
called from any thread: it emits a queued signal.
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

from holodesk.errors import HolodeskError, ModelLoadError, PolicyError, SecretStoreError, SettingsError

log = logging.getLogger(__name__)


REMEDY_LABELS: dict[str, str] = {"settings": "Open Settings", "wizard": "Open setup wizard", "retry": "Retry"}
"""Remedy key -> button text. The app registers what each does (:meth:`Notifier.set_remedy`)."""


@dataclass(frozen=True)
class Notice:
    """One message for the user.

    Attributes:
        level: "info", "warning" or "error".
        title: short heading.
        text: plain-words message (shown as plain text, never rich text).
        details: extra text (a traceback) shown on demand behind "Show Details...".
        hint: what to do next, shown in the main text under ``text``.
        remedies: keys of :data:`REMEDY_LABELS` offered as buttons that perform the remedy, in order.
    """

    level: str
    title: str
    text: str
    details: str = ""
    hint: str = ""
    remedies: tuple[str, ...] = ()


def describe_exception(exc: BaseException) -> tuple[str, str]:
    """Message and what to do for an exception: a HolodeskError's message and hint; for anything else the
    type and message, with the traceback (as details, see :func:`exception_details`)."""
    if isinstance(exc, HolodeskError):
        return exc.message, exc.hint
    return f"{type(exc).__name__}: {exc}", ""


def exception_details(exc: BaseException) -> str:
    """The traceback of an unexpected exception; "" for a HolodeskError (its message says it all)."""
    if isinstance(exc, HolodeskError):
        return ""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def remedies_for(exc: BaseException | str) -> tuple[str, ...]:
    """The remedy buttons an error gets by its kind: settings and keychain problems open Settings; a model
    that cannot load opens the setup wizard (pick what fits, a server or a replay file); a server that
    fails can be fixed in Settings and retried."""
    if isinstance(exc, ModelLoadError):
        return ("wizard", "settings")
    if isinstance(exc, SettingsError | SecretStoreError):
        return ("settings",)
    if isinstance(exc, PolicyError):
        return ("settings", "retry")
    return ()


class Notifier(QObject):
    """Shows notices: a tray balloon when a tray is visible; errors (and warnings without a tray) also in
    ONE message box, which a later error replaces (the same error again is counted, not stacked).

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
        self._box: QMessageBox | None = None
        self._box_notice: Notice | None = None
        self._repeats = 0
        self._remedies: dict[str, Callable[[], object]] = {}
        self._deliver.connect(self._show, Qt.ConnectionType.QueuedConnection)

    def set_remedy(self, key: str, action: Callable[[], object]) -> None:
        """Register what the ``key`` remedy button does (e.g. "settings" -> open the Settings dialog)."""
        if key not in REMEDY_LABELS:
            raise ValueError(f"unknown remedy {key!r}; known: {', '.join(REMEDY_LABELS)}")
        self._remedies[key] = action

    # -- thread-safe entry points ------------------------------------------------------------------
    def notify(self, notice: Notice) -> None:
        """Queue ``notice`` for display (any thread)."""
        log.log(logging.ERROR if notice.level == "error" else logging.INFO, "%s: %s", notice.title, notice.text)
        self._deliver.emit(notice)

    def info(self, title: str, text: str) -> None:
        self.notify(Notice("info", title, text))

    def warning(self, title: str, text: str, details: str = "") -> None:
        self.notify(Notice("warning", title, text, details))

    def error(self, title: str, exc: BaseException | str, hint: str = "", *,
              remedies: tuple[str, ...] | None = None) -> None:
        """Show an error (any thread). ``exc`` may be an exception or a message; ``hint`` (what to do) is
        the exception's own hint when not given; ``remedies`` default to :func:`remedies_for`."""
        details = ""
        if isinstance(exc, BaseException):
            text, own_hint = describe_exception(exc)
            hint = hint or own_hint
            details = exception_details(exc)
        else:
            text = exc
        self.notify(Notice("error", title, text, details, hint,
                           remedies_for(exc) if remedies is None else remedies))

    # -- GUI thread ------------------------------------------------------------------------------
    @Slot(object)
    def _show(self, notice: Notice) -> None:
        self.history.append(notice)
        self.posted.emit(notice)
        main = notice.text + (f"\n\n{notice.hint}" if notice.hint else "")
        if self.tray is not None and self.tray.isVisible() and QSystemTrayIcon.supportsMessages():
            icon = {"error": QSystemTrayIcon.MessageIcon.Critical,
                    "warning": QSystemTrayIcon.MessageIcon.Warning}.get(notice.level,
                                                                        QSystemTrayIcon.MessageIcon.Information)
            self.tray.showMessage(notice.title, main + (f"\n\n{notice.details}" if notice.details
                                                        and notice.level != "error" else ""), icon, 8000)
            if notice.level != "error":
                return
        if not self.use_dialogs or notice.level == "info":
            return
        self._present(notice, main)

    def _present(self, notice: Notice, main: str) -> None:
        """Show ``notice`` in the one message box: the same error again counts up, another replaces it."""
        box = self._box
        same = (box is not None and self._box_notice is not None
                and (self._box_notice.title, self._box_notice.text) == (notice.title, notice.text))
        if box is not None and same:
            self._repeats += 1
            box.setText(f"{main}\n\n(This happened {self._repeats} times.)")
            box.raise_()
            return
        if box is not None:
            box.done(0)  # replaced: one dialog per failure, never a stack
        box = QMessageBox(self.dialog_parent)
        box.setObjectName("holodeskError")
        box.setIcon(QMessageBox.Icon.Critical if notice.level == "error" else QMessageBox.Icon.Warning)
        box.setWindowTitle(f"Holodesk — {notice.title}")
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setText(main)
        if notice.details:
            box.setDetailedText(notice.details)
        for key in notice.remedies:
            action = self._remedies.get(key)
            if action is None:
                continue
            button = box.addButton(REMEDY_LABELS[key], QMessageBox.ButtonRole.ActionRole)
            button.setObjectName(f"remedy_{key}")
            button.clicked.connect(lambda _=False, a=action: self._run_remedy(a))
        box.addButton(QMessageBox.StandardButton.Close)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.setModal(False)
        box.finished.connect(lambda _=0, b=box: self._forget(b))
        self._box, self._box_notice, self._repeats = box, notice, 1
        box.show()

    def _run_remedy(self, action: Callable[[], object]) -> None:
        self.close_dialog()
        action()

    def _forget(self, box: QMessageBox) -> None:
        if self._box is box:
            self._box, self._box_notice, self._repeats = None, None, 0

    def close_dialog(self) -> None:
        """Close the message box, if one is shown."""
        if self._box is not None:
            self._box.done(0)

    @property
    def open_dialogs(self) -> list[QMessageBox]:
        """Message boxes currently shown: at most one."""
        return [self._box] if self._box is not None else []


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
