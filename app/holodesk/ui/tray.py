"""The tray icon and, where no tray exists, the small window that takes its place (field case F20).

Both show the same :class:`AppActions` (one set of QActions): New task..., Replay a file...,
Pause / Resume autopilot, Stop, Mode (step by step / autopilot), Setup wizard..., Settings...,
History..., Open logs, Quit. The icon (and the
window's status line) follow the session state: idle, thinking, awaiting approval, acting, error.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QIcon
from PySide6.QtWidgets import (
    QGridLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QSystemTrayIcon,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from holodesk.core.approval import ApprovalMode
from holodesk.ui.icons import STATUS_TEXT, Status, status_icon, status_pixmap
from holodesk.ui.notify import Notice
from holodesk.ui.theme import THEME, strong_style, text_style
from holodesk.ui.widgets import name_window

TRAY_HELP = (
    "No system tray was found on this desktop, so Holodesk runs in this window instead. "
    "To get the tray icon: on GNOME install and enable the \"AppIndicator and KStatusNotifierItem "
    "Support\" extension (Debian/Ubuntu: sudo apt install gnome-shell-extension-appindicator, then log "
    "out and in); on other desktops add a \"System Tray\" / \"Notification Area\" widget to a panel. "
    "Closing this window quits Holodesk."
)


class AppActions(QObject):
    """Every user command as a QAction, shared by the tray menu and the fallback window.

    Signals:
        mode_selected(str): the :class:`ApprovalMode` chosen in the Mode menu.
        changed(): :meth:`update_state` ran (running, mode or pause may have changed).
    """

    mode_selected = Signal(str)
    changed = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.new_task = QAction("New task...", self)
        self.replay = QAction("Replay a file...", self)
        self.wizard = QAction("Setup wizard...", self)
        self.pause = QAction("Pause autopilot", self)
        self.stop = QAction("Stop", self)
        self.mode_step = QAction("Step by step", self)
        self.mode_auto = QAction("Autopilot", self)
        self.settings = QAction("Settings...", self)
        self.history = QAction("History...", self)
        self.open_logs = QAction("Open logs", self)
        self.quit = QAction("Quit", self)
        self.mode_group = QActionGroup(self)
        self.mode_group.setExclusive(True)
        for act, mode in ((self.mode_step, ApprovalMode.STEP), (self.mode_auto, ApprovalMode.AUTO)):
            act.setCheckable(True)
            act.setData(mode)
            self.mode_group.addAction(act)
            act.triggered.connect(lambda _checked=False, m=mode: self.mode_selected.emit(m))
        self.mode_menu = QMenu("Mode")
        self.mode_menu.addAction(self.mode_step)
        self.mode_menu.addAction(self.mode_auto)
        self.running = False
        self.mode = ApprovalMode.STEP
        self.paused = False
        self.update_state(running=False, mode=ApprovalMode.STEP, paused=False)

    def update_state(self, *, running: bool | None = None, mode: ApprovalMode | None = None,
                     paused: bool | None = None) -> None:
        """Enable/label actions for the current state."""
        if running is not None:
            self.running = running
        if mode is not None:
            self.mode = mode
        if paused is not None:
            self.paused = paused
        self.stop.setEnabled(self.running)
        self.new_task.setEnabled(not self.running)
        self.replay.setEnabled(not self.running)
        self.mode_step.setChecked(self.mode is ApprovalMode.STEP)
        self.mode_auto.setChecked(self.mode is ApprovalMode.AUTO)
        self.pause.setEnabled(self.mode is ApprovalMode.AUTO)
        self.pause.setText("Resume autopilot" if self.paused else "Pause autopilot")
        self.changed.emit()

    def mode_text(self) -> str:
        """The approval mode in words: "Mode: Step by step", "Mode: Autopilot" or "Mode: Autopilot (paused)"."""
        if self.mode is not ApprovalMode.AUTO:
            return "Mode: Step by step"
        return "Mode: Autopilot" + (" (paused)" if self.paused else "")

    def build_menu(self) -> QMenu:
        """A menu holding every action (the tray's context menu)."""
        menu = QMenu()
        menu.addAction(self.new_task)
        menu.addAction(self.replay)
        menu.addAction(self.pause)
        menu.addAction(self.stop)
        menu.addMenu(self.mode_menu)
        menu.addSeparator()
        menu.addAction(self.wizard)
        menu.addAction(self.settings)
        menu.addAction(self.history)
        menu.addAction(self.open_logs)
        menu.addSeparator()
        menu.addAction(self.quit)
        return menu


class TrayIcon(QObject):
    """The system tray icon with the app menu; left click opens the palette.

    Signals:
        activated_primary(): the icon was clicked (opens the command palette).
    """

    activated_primary = Signal()

    def __init__(self, actions: AppActions, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.app_actions = actions
        self.menu = actions.build_menu()
        self.icon = QSystemTrayIcon()
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(self._activated)
        self.status = Status.IDLE
        self.set_status(Status.IDLE)

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason in (QSystemTrayIcon.ActivationReason.Trigger, QSystemTrayIcon.ActivationReason.DoubleClick):
            self.activated_primary.emit()

    def set_status(self, status: Status, detail: str = "") -> None:
        """Show ``status`` as the icon and tooltip."""
        self.status = status
        self.icon.setIcon(status_icon(status))
        self.icon.setToolTip(f"Holodesk — {STATUS_TEXT[status]}" + (f"\n{detail}" if detail else ""))

    def show(self) -> None:
        self.icon.show()

    def hide(self) -> None:
        self.icon.hide()


class FallbackWindow(QWidget):
    """The window shown instead of the tray icon (no tray, or ``--no-tray``).

    Shows the status (icon and words), the approval mode, the last notice (a task's result and answer,
    errors, warnings: what the tray would show as a balloon), every app action as a button, and how to
    enable the tray. Closing it quits Holodesk (it is the only way back to the app).

    It is an ordinary window: not kept above others, placed by the window manager like any other. The
    app minimises it while a task runs (:class:`~holodesk.ui.app.HolodeskApp`), and an action aimed at it
    is refused (:func:`holodesk.control.window.refuse_holodesk_target`).

    Signals:
        close_requested(): the window's close button was used.
    """

    close_requested = Signal()

    def __init__(self, actions: AppActions, *, tray_missing: bool = True, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.app_actions = actions
        name_window(self, "Holodesk", "holodeskFallback")
        layout = QVBoxLayout(self)
        top = QGridLayout()
        self.status_icon = QLabel()
        self.status_icon.setFixedSize(32, 32)
        self.status_label = QLabel()
        self.status_label.setTextFormat(Qt.TextFormat.PlainText)
        self.status_label.setStyleSheet(strong_style(THEME.fonts.heading))
        self.detail_label = QLabel()
        self.detail_label.setTextFormat(Qt.TextFormat.PlainText)
        self.detail_label.setWordWrap(True)
        self.mode_label = QLabel()
        self.mode_label.setObjectName("mode")
        self.mode_label.setTextFormat(Qt.TextFormat.PlainText)
        top.addWidget(self.status_icon, 0, 0, 3, 1)
        top.addWidget(self.status_label, 0, 1)
        top.addWidget(self.detail_label, 1, 1)
        top.addWidget(self.mode_label, 2, 1)
        top.setColumnStretch(1, 1)
        layout.addLayout(top)
        self.message_view = QPlainTextEdit()  # the last notice; read-only, selectable (an answer can be copied)
        self.message_view.setObjectName("last_message")
        self.message_view.setReadOnly(True)
        self.message_view.setPlaceholderText("Results, answers and errors of tasks appear here.")
        self.message_view.setMaximumHeight(120)
        layout.addWidget(self.message_view)

        grid = QGridLayout()
        self.buttons: dict[str, QToolButton] = {}
        entries = [("new_task", actions.new_task), ("stop", actions.stop), ("pause", actions.pause),
                   ("mode", None), ("replay", actions.replay), ("wizard", actions.wizard),
                   ("settings", actions.settings), ("history", actions.history),
                   ("open_logs", actions.open_logs), ("quit", actions.quit)]
        for i, (name, action) in enumerate(entries):
            button = QToolButton()
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
            button.setMinimumWidth(150)
            if action is None:
                button.setText("Mode")
                button.setMenu(actions.mode_menu)
                button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
            else:
                button.setDefaultAction(action)
            button.setObjectName(f"button_{name}")
            self.buttons[name] = button
            grid.addWidget(button, i // 2, i % 2)
        layout.addLayout(grid)

        self.help_label = QLabel(TRAY_HELP if tray_missing else "Started with --no-tray: this window "
                                 "replaces the tray icon. Closing it quits Holodesk.")
        self.help_label.setObjectName("tray_help")
        self.help_label.setTextFormat(Qt.TextFormat.PlainText)
        self.help_label.setWordWrap(True)
        self.help_label.setStyleSheet(text_style(THEME.palette.muted, THEME.fonts.small))
        layout.addWidget(self.help_label)
        self.setFixedWidth(380)
        # A word-wrapped label under a fixed width gets its one-line height from the layout; give it the
        # height of its wrapped text so the last line is not cut off.
        margins = layout.contentsMargins()
        self.help_label.setMinimumHeight(self.help_label.heightForWidth(380 - margins.left() - margins.right()))
        self.status = Status.IDLE
        self.set_status(Status.IDLE)
        actions.changed.connect(self._show_mode)
        self._show_mode()

    def set_status(self, status: Status, detail: str = "") -> None:
        """Show ``status`` (icon and words) and ``detail`` (what it is doing, or why)."""
        self.status = status
        self.status_icon.setPixmap(status_pixmap(status, 32, self.devicePixelRatioF()))
        self.setWindowIcon(status_icon(status))
        self.status_label.setText(STATUS_TEXT[status])
        self.detail_label.setText(detail)

    def _show_mode(self) -> None:
        self.mode_label.setText(self.app_actions.mode_text())

    def show_notice(self, notice: Notice) -> None:
        """Show ``notice`` (its title, text and what to do) as the window's last message, replacing the one
        before (:attr:`holodesk.ui.notify.Notifier.posted` is connected here when there is no tray)."""
        level = {"error": "Error: ", "warning": "Warning: "}.get(notice.level, "")
        text = f"{level}{notice.title}\n{notice.text}" + (f"\n\n{notice.hint}" if notice.hint else "")
        self.message_view.setPlainText(text)

    def closeEvent(self, event: QCloseEvent) -> None:
        event.ignore()
        self.close_requested.emit()


def app_icon() -> QIcon:
    """The application's window icon (the idle status icon)."""
    return status_icon(Status.IDLE)

