"""The command palette (a small input box) and the global hotkeys that open it and stop a task.

Global hotkeys come from pynput's :class:`~pynput.keyboard.GlobalHotKeys` (X11 RECORD extension on
Linux, hooks on Windows/macOS). Its callbacks run on pynput's listener thread; they only emit Qt
signals, which Qt delivers on the GUI thread (queued connection). Hotkey syntax is pynput's:
``<ctrl>+<alt>+h``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QCursor, QGuiApplication, QKeyEvent
from PySide6.QtWidgets import QFrame, QLabel, QLineEdit, QVBoxLayout, QWidget

from holodesk.core.approval import ApprovalMode
from holodesk.errors import SettingsError
from holodesk.ui.theme import THEME, command_palette_style
from holodesk.ui.widgets import bring_to_front, name_window

log = logging.getLogger(__name__)


def parse_hotkey(combo: str) -> list[Any]:
    """Validate a hotkey in pynput syntax (``<ctrl>+<alt>+h``).

    Returns:
        pynput's parsed key list.
    Raises:
        SettingsError: the combination cannot be parsed (message names it and shows the syntax).
        ImportError: pynput cannot be imported on this system (e.g. no display on Linux).
    """
    from pynput import keyboard  # lazy: pynput needs a display on Linux; its ImportError is documented above

    try:
        return list(keyboard.HotKey.parse(combo))
    except (ValueError, KeyError) as exc:
        raise SettingsError(f"hotkey {combo!r} is not valid: {exc}",
                            hint="Write it like <ctrl>+<alt>+h: modifiers in angle brackets, joined by +.") from exc


def hotkey_label(hotkey: str) -> str:
    """A hotkey setting (pynput's form, ``"<ctrl>+<alt>+h"``) as people write it: ``"Ctrl+Alt+H"``."""
    keys = [key.strip().strip("<>") for key in hotkey.split("+") if key.strip()]
    return "+".join(key.upper() if len(key) == 1 else key.replace("_", " ").title() for key in keys)


class GlobalHotkeys(QObject):
    """Listens for the palette and stop hotkeys anywhere on the desktop.

    Signals (GUI thread):
        palette_requested(): the palette hotkey was pressed.
        stop_requested(): the stop hotkey was pressed.
        failed(BaseException): the listener could not start or died (shown to the user).
    """

    palette_requested = Signal()
    stop_requested = Signal()
    failed = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._listener: Any = None
        self._watch = QTimer(self)
        self._watch.setInterval(1000)
        self._watch.timeout.connect(self._check_alive)
        self.combos: dict[str, str] = {}

    @property
    def active(self) -> bool:
        return self._listener is not None and bool(self._listener.is_alive())

    def start(self, palette: str, stop: str) -> None:
        """(Re)start listening for ``palette`` and ``stop`` (pynput syntax).

        Raises:
            SettingsError: a hotkey is invalid, or both are the same.
            ImportError / OSError: pynput cannot run here (no X display, no RECORD extension).
        """
        self.stop()
        for combo in (palette, stop):
            parse_hotkey(combo)
        if palette.lower() == stop.lower():
            raise SettingsError(f"the palette and stop hotkeys are both {palette!r}",
                                hint="Pick two different combinations in Settings.")
        from pynput import keyboard  # lazy: as in parse_hotkey (needs a display)

        self.combos = {"palette": palette, "stop": stop}
        listener = _listener_class(keyboard)({palette: self.palette_requested.emit, stop: self.stop_requested.emit})
        listener.name = "holodesk-hotkeys"
        listener.daemon = True
        listener.start()
        ready = threading.Event()

        def wait_ready() -> None:
            listener.wait()
            ready.set()

        threading.Thread(target=wait_ready, daemon=True, name="holodesk-hotkeys-ready").start()
        if not ready.wait(3.0) and not listener.is_alive():
            self._raise_listener_error(listener)
        self._listener = listener
        self._watch.start()
        log.info("global hotkeys: palette %s, stop %s", palette, stop)

    @staticmethod
    def _raise_listener_error(listener: Any) -> None:
        try:
            listener.join(0.1)
        except Exception as exc:
            raise OSError(f"the global hotkey listener failed: {type(exc).__name__}: {exc}") from exc
        raise OSError("the global hotkey listener stopped at once (no keyboard hook available)")

    def _check_alive(self) -> None:
        listener = self._listener
        if listener is not None and not listener.is_alive():
            self._listener = None
            self._watch.stop()
            try:
                self._raise_listener_error(listener)
            except OSError as exc:
                self.failed.emit(exc)

    def stop(self) -> None:
        """Stop listening (idempotent)."""
        self._watch.stop()
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stopping = True
            listener.stop()


def _listener_class(keyboard: Any) -> Any:
    """pynput's GlobalHotKeys, except that an X error raised while *we* stop it is logged, not raised.

    On X11 pynput tears its RECORD connections down from the listener thread after ``stop()``; that
    teardown can fail with a broken pipe once the context is gone. It is no failure the user can act
    on, so it is logged at debug level; any error before ``stop()`` still propagates (and reaches the
    user through :attr:`GlobalHotkeys.failed`).
    """

    class _HotkeyListener(keyboard.GlobalHotKeys):
        stopping = False

        def run(self) -> None:
            try:
                super().run()
            except Exception as exc:
                if not self.stopping:
                    raise
                log.debug("hotkey listener teardown after stop: %s: %s", type(exc).__name__, exc)

    return _HotkeyListener


class _Input(QLineEdit):
    escape = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.escape.emit()
            return
        super().keyPressEvent(event)


class CommandPalette(QWidget):
    """A small frameless box: type a task, Enter starts it, Esc closes.

    Signals:
        submitted(str): the task text (stripped, non-empty).
    """

    submitted = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowFlags(Qt.WindowType.FramelessWindowHint | Qt.WindowType.WindowStaysOnTopHint
                            | Qt.WindowType.Tool)
        name_window(self, "Holodesk command", "holodeskPalette")
        self.setFixedWidth(560)
        frame = QFrame(self)
        frame.setObjectName("paletteFrame")
        frame.setStyleSheet(command_palette_style())
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(frame)
        layout = QVBoxLayout(frame)
        layout.setContentsMargins(*THEME.spacing.panel_margins)
        self.input = _Input()
        self.input.setPlaceholderText("What should Holodesk do?")
        self.input.returnPressed.connect(self._submit)
        self.input.escape.connect(self.hide)
        layout.addWidget(self.input)
        self.hint = QLabel()
        self.hint.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(self.hint)
        self.mode = ApprovalMode.STEP
        self.set_mode_hint(ApprovalMode.STEP)

    def set_mode_hint(self, mode: ApprovalMode | None = None, message: str = "") -> None:
        """Show the approval mode (None keeps the last one) and an optional message."""
        if mode is not None:
            self.mode = mode
        base = ("Autopilot: low-risk steps run after a countdown; risky ones ask you."
                if self.mode is ApprovalMode.AUTO else "Step by step: you approve every action.")
        self.hint.setText((message + "  ·  " if message else "") + base + "  Enter starts · Esc closes")

    def open(self) -> None:
        """Show centred on the screen under the pointer, focused and ready to type."""
        screen = QGuiApplication.screenAt(QCursor.pos()) or QGuiApplication.primaryScreen()
        self.adjustSize()
        if screen is not None:
            area = screen.availableGeometry()
            self.move(area.x() + (area.width() - self.width()) // 2, area.y() + area.height() // 4)
        self.input.selectAll()
        bring_to_front(self)
        self.input.setFocus(Qt.FocusReason.ActiveWindowFocusReason)

    def _submit(self) -> None:
        text = self.input.text().strip()
        if not text:
            self.set_mode_hint(None, "Type a task first")
            return
        self.input.clear()
        self.hide()
        self.submitted.emit(text)
