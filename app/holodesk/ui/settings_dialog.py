"""The settings dialog, built from the :class:`~holodesk.settings.Settings` schema, for people.

Two tabs, Basic and Advanced (:data:`GROUPS`). Each field gets a human label (:data:`LABELS`) and an editor
chosen by its type — ``Literal`` -> combo box showing words (:data:`CHOICE_LABELS`; the raw value is in
each item's tooltip), ``bool`` -> check box, ``int`` / ``float`` -> spin box (bounds from the schema),
hotkeys -> a key-capture field (press the combination), files and folders -> a path with a picker, other
``str`` -> line edit — with the field's description and its settings-file name as tooltip and a message
line under it that shows the field's own validation error (:func:`~holodesk.settings.validate_field`).

Fields that do not apply to the values shown are disabled (:data:`APPLIES`); the precision picker says
what fits this GPU (:mod:`holodesk.core.fit`); the mouse wheel never changes a field that has no focus
(:class:`WheelGuard`, field case F29). Saving writes the file atomically
(:func:`~holodesk.settings.save_settings`). The API key is not a setting: it goes to the OS keychain
(:func:`holodesk.secrets.store_api_key`); when no keychain is usable the dialog shows why, under the key,
and offers to keep the key for this session only.
"""

from __future__ import annotations

import enum
import logging
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from PySide6.QtCore import QCoreApplication, QEvent, QKeyCombination, QObject, Qt, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QKeySequenceEdit,
    QLabel,
    QLineEdit,
    QScrollArea,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from holodesk.core.approval import ApprovalMode
from holodesk.core.fit import GIB
from holodesk.errors import HolodeskError, SecretStoreError, SettingsError
from holodesk.machine import GpuInfo
from holodesk.policy.models import DEFAULT_MODEL, MODELS, ModelSpec, find_model, get_model
from holodesk.policy.thinking_cost import thinking_note
from holodesk.secrets import set_session_api_key, store_api_key
from holodesk.settings import Settings, save_settings, validate_field
from holodesk.ui.palette import parse_hotkey
from holodesk.ui.theme import THEME, notice_style, text_style
from holodesk.ui.widgets import SESSION_KEY_TEXT, name_window, plain_label, push_button

log = logging.getLogger(__name__)

GROUPS: list[tuple[str, str, list[str]]] = [
    ("Basic", "Model", ["policy", "model", "precision", "endpoint", "script_file"]),
    ("Basic", "Approvals", ["approval", "autopilot_countdown_s"]),
    ("Basic", "Desktop", ["monitor", "hotkey_palette", "hotkey_stop", "data_dir"]),
    ("Advanced", "Model", ["decoder", "reasoning", "greedy", "temperature", "top_p", "seed", "constrained_decoding",
                           "max_images", "max_reply_tokens", "max_string_chars", "protocol", "request_timeout_s"]),
    ("Advanced", "Limits of one task", ["max_steps", "max_wall_s", "max_parse_failures", "max_repeats"]),
    ("Advanced", "Input", ["desktop_backend", "typing"]),
]
"""(tab, group, fields): where known fields go. Any other field of the schema is shown on the Advanced tab
under "Other" (see :func:`field_groups`); ``schema_version`` is not user-editable."""

HIDDEN = frozenset({"schema_version"})


def field_groups() -> list[tuple[str, str, list[str]]]:
    """Every user-editable field of the schema as (tab, group, fields): the known groups, then the
    Advanced tab's "Other" group in schema order."""
    placed = {n for _, _, names in GROUPS for n in names}
    groups = [(tab, title, [n for n in names if n in Settings.model_fields]) for tab, title, names in GROUPS]
    other = [n for n in Settings.model_fields if n not in placed and n not in HIDDEN]
    if other:
        groups.append(("Advanced", "Other", other))
    return [(tab, title, names) for tab, title, names in groups if names]


LABELS = {
    "policy": "Where actions come from", "model": "Model", "precision": "Precision", "endpoint": "Server URL",
    "script_file": "Replay file", "reasoning": "Think before acting", "constrained_decoding":
    "Constrain replies to the action format", "max_images": "Screenshots kept", "protocol": "Action protocol",
    "approval": "Approval mode", "autopilot_countdown_s": "Autopilot countdown (s)", "monitor": "Monitor",
    "max_steps": "Step cap", "max_wall_s": "Time cap (s)", "max_parse_failures": "Bad replies before stopping",
    "max_repeats": "Repeats before stopping", "typing": "Typing method", "hotkey_palette": "Command box hotkey",
    "hotkey_stop": "Stop hotkey", "data_dir": "Data folder", "max_reply_tokens": "Reply token cap",
    "max_string_chars": "Text field cap", "decoder": "Decoder", "desktop_backend": "Desktop backend",
    "greedy": "Greedy decoding", "temperature": "Temperature", "top_p": "Top p", "seed": "Sampling seed",
    "request_timeout_s": "Server reply timeout",
}

CHOICE_LABELS: dict[str, dict[str, str]] = {
    "policy": {"local": "The model below, on this computer", "remote": "A server (OpenAI-compatible)",
               "script": "A replay file"},
    "precision": {"bf16": "Full precision (bf16)", "8bit": "8-bit (int8)", "4bit": "4-bit (NF4)"},
    "reasoning": {"auto": "As the model's makers run it", "on": "On (more accurate where recommended)",
                  "off": "Off (faster)"},
    "decoder": {"static": "Fast (memory reserved at load, CUDA graphs)", "stock": "Standard (transformers, slower)"},
    "approval": {ApprovalMode.STEP: "Ask me before every action",
                 ApprovalMode.AUTO: "Autopilot: low-risk actions run after a countdown"},
    "typing": {"auto": "Automatic", "xtest": "Type each character (X11)", "clipboard": "Paste through the clipboard"},
    "desktop_backend": {"auto": "Automatic (GNOME on Wayland: GNOME's own interfaces)",
                        "mss": "X11, Windows, macOS (mss and pyautogui)", "mutter": "GNOME on Wayland (Mutter)",
                        "portal": "Wayland through the desktop portal (asks permission)"},
}
"""Words shown for the values of choice fields; the value written to the file is in each item's tooltip."""

APPLIES: dict[str, Callable[[dict[str, Any]], bool]] = {
    "model": lambda v: v["policy"] in ("local", "remote"),
    "precision": lambda v: v["policy"] == "local",
    "decoder": lambda v: v["policy"] == "local",
    "max_reply_tokens": lambda v: v["policy"] in ("local", "remote"),
    "max_string_chars": lambda v: v["policy"] == "local" and bool(v["constrained_decoding"]),
    "endpoint": lambda v: v["policy"] == "remote",
    "request_timeout_s": lambda v: v["policy"] == "remote",
    "script_file": lambda v: v["policy"] == "script",
    "reasoning": lambda v: v["policy"] in ("local", "remote"),
    "greedy": lambda v: v["policy"] in ("local", "remote"),
    "temperature": lambda v: v["policy"] in ("local", "remote") and not v["greedy"],
    "top_p": lambda v: v["policy"] in ("local", "remote") and not v["greedy"],
    "seed": lambda v: v["policy"] in ("local", "remote") and not v["greedy"],
    "constrained_decoding": lambda v: v["policy"] in ("local", "remote"),
    "max_images": lambda v: v["policy"] in ("local", "remote"),
    "autopilot_countdown_s": lambda v: v["approval"] == ApprovalMode.AUTO,
}
"""When a field matters, from the values shown; a field that does not apply is shown disabled."""

NOT_APPLYING = {
    "model": "Used by the local model and by a server only.", "precision": "Used by the local model only.",
    "decoder": "Used by the local model only.", "max_reply_tokens": "Not used by a replay file.",
    "max_string_chars": "Used by the local model with constrained replies only.",
    "endpoint": "Used with a server only.", "request_timeout_s": "Used with a server only.",
    "script_file": "Used with a replay file only.",
    "reasoning": "Not used by a replay file.", "greedy": "Not used by a replay file.",
    "temperature": "Used when sampling (greedy off) with a model.",
    "top_p": "Used when sampling (greedy off) with a model.",
    "seed": "Used when sampling (greedy off) with a model.", "constrained_decoding": "Not used by a replay file.",
    "max_images": "Not used by a replay file.", "autopilot_countdown_s": "Used in autopilot mode only.",
}


def choice_label(name: str, value: Any) -> str:
    """The words shown for ``value`` of choice field ``name`` (the value itself when it has none)."""
    return CHOICE_LABELS.get(name, {}).get(str(value), str(value))


class WheelGuard(QObject):
    """Keeps the mouse wheel from changing a field the user did not focus (field case F29).

    Installed on spin boxes and combo boxes: a wheel event over one that has no keyboard focus is passed
    to the scroll area's scroll bar (so the page scrolls) instead of changing the value. A focused field
    still takes the wheel.
    """

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.Wheel or not isinstance(watched, QWidget) or watched.hasFocus():
            return False
        parent = watched.parentWidget()
        while parent is not None and not isinstance(parent, QAbstractScrollArea):
            parent = parent.parentWidget()
        if parent is not None:
            QCoreApplication.sendEvent(parent.verticalScrollBar(), event)
        return True

    def guard(self, widget: QWidget) -> None:
        """Guard ``widget``: it gets focus by click or Tab only, never by the wheel."""
        widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        widget.installEventFilter(self)


_QT_MODIFIERS = ((Qt.KeyboardModifier.ControlModifier, "<ctrl>"), (Qt.KeyboardModifier.AltModifier, "<alt>"),
                 (Qt.KeyboardModifier.ShiftModifier, "<shift>"), (Qt.KeyboardModifier.MetaModifier, "<cmd>"))
_SPECIAL_KEYS = {Qt.Key.Key_Space: "space", Qt.Key.Key_Tab: "tab", Qt.Key.Key_Return: "enter",
                 Qt.Key.Key_Enter: "enter", Qt.Key.Key_Escape: "esc", Qt.Key.Key_Backspace: "backspace",
                 Qt.Key.Key_Delete: "delete", Qt.Key.Key_Insert: "insert", Qt.Key.Key_Home: "home",
                 Qt.Key.Key_End: "end", Qt.Key.Key_PageUp: "page_up", Qt.Key.Key_PageDown: "page_down",
                 Qt.Key.Key_Left: "left", Qt.Key.Key_Right: "right", Qt.Key.Key_Up: "up", Qt.Key.Key_Down: "down",
                 Qt.Key.Key_Pause: "pause", Qt.Key.Key_Print: "print_screen"}


def hotkey_from_sequence(sequence: QKeySequence) -> str:
    """A captured key combination in the settings' (pynput) syntax: Ctrl+Alt+H -> ``"<ctrl>+<alt>+h"``;
    "" for an empty sequence. Only the first combination of a sequence counts."""
    if sequence.isEmpty():
        return ""
    combo: QKeyCombination = sequence[0]  # type: ignore[index]  # PySide6's stubs lack __getitem__
    parts = [name for flag, name in _QT_MODIFIERS if combo.keyboardModifiers() & flag]
    key = combo.key()
    if Qt.Key.Key_F1.value <= key.value <= Qt.Key.Key_F24.value:
        parts.append(f"<f{key.value - Qt.Key.Key_F1.value + 1}>")
    elif key in _SPECIAL_KEYS:
        parts.append(f"<{_SPECIAL_KEYS[key]}>")
    else:
        text = QKeySequence(key.value).toString(QKeySequence.SequenceFormat.PortableText)
        parts.append(text.lower())
    return "+".join(parts)


def sequence_from_hotkey(hotkey: str) -> QKeySequence:
    """The settings' hotkey syntax as a QKeySequence for display: ``"<ctrl>+<alt>+h"`` -> Ctrl+Alt+H."""
    names = {"ctrl": "Ctrl", "alt": "Alt", "shift": "Shift", "cmd": "Meta", "space": "Space", "tab": "Tab",
             "enter": "Return", "esc": "Esc", "backspace": "Backspace", "delete": "Del", "insert": "Ins",
             "home": "Home", "end": "End", "page_up": "PgUp", "page_down": "PgDown", "left": "Left",
             "right": "Right", "up": "Up", "down": "Down", "pause": "Pause", "print_screen": "Print"}
    parts = []
    for part in hotkey.split("+"):
        bare = part.strip().strip("<>")
        parts.append(names.get(bare, bare.upper()))
    return QKeySequence("+".join(parts), QKeySequence.SequenceFormat.PortableText)


class HotkeyEdit(QKeySequenceEdit):
    """Captures one key combination (press it); shows it in words, gives it in the settings' syntax."""

    def __init__(self, hotkey: str, parent: QWidget | None = None) -> None:
        super().__init__(sequence_from_hotkey(hotkey) if hotkey else QKeySequence(), parent)
        self.setMaximumSequenceLength(1)
        self.setClearButtonEnabled(True)

    def hotkey(self) -> str:
        return hotkey_from_sequence(self.keySequence())


def _bounds(name: str) -> tuple[float | None, float | None, bool]:
    """(lower, upper, lower_exclusive) from the field's ge/gt/le constraints."""
    lo: float | None = None
    hi: float | None = None
    exclusive = False
    for m in Settings.model_fields[name].metadata:
        if getattr(m, "ge", None) is not None:
            lo = float(m.ge)
        if getattr(m, "gt", None) is not None:
            lo, exclusive = float(m.gt), True
        if getattr(m, "le", None) is not None:
            hi = float(m.le)
    return lo, hi, exclusive


def _base_annotation(name: str) -> tuple[Any, bool]:
    """(annotation without ``None``, whether ``None`` is allowed) of a field."""
    ann = Settings.model_fields[name].annotation
    args = typing.get_args(ann)
    if args and type(None) in args and typing.get_origin(ann) is not Literal:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return ann, False


def field_choices(name: str) -> tuple[str, ...]:
    """The values a choice field takes, as written in settings.toml (a ``Literal``'s values or a ``StrEnum``'s);
    ``()`` for a field that is not a choice."""
    ann, _optional = _base_annotation(name)
    if typing.get_origin(ann) is Literal:
        return tuple(str(v) for v in typing.get_args(ann))
    if isinstance(ann, type) and issubclass(ann, enum.StrEnum):
        return tuple(m.value for m in ann)
    return ()


HOTKEY_FIELDS = frozenset({"hotkey_palette", "hotkey_stop"})
FILE_FIELDS = {"script_file": "file", "data_dir": "folder"}
"""Path fields with a picker button: a file to open, or a folder."""


def editor_kind(name: str) -> str:
    """Which editor a field gets: "combo", "check", "int", "float", "hotkey", "file", "folder" or "text"
    (``X | None`` as X, with an empty / "not set" state)."""
    if name in HOTKEY_FIELDS:
        return "hotkey"
    if name in FILE_FIELDS:
        return FILE_FIELDS[name]
    if field_choices(name):
        return "combo"
    ann, _optional = _base_annotation(name)
    if ann is bool:
        return "check"
    if ann is int:
        return "int"
    if ann is float:
        return "float"
    return "text"


def field_tooltip(name: str) -> str:
    """The field's description, then its name in the settings file (the raw id)."""
    description = Settings.model_fields[name].description or ""
    return f"{description}\n\nIn settings.toml: {name}"


def precision_item_text(precision: str, gpu: GpuInfo | None, model: ModelSpec | None) -> str:
    """A precision choice with what ``model`` needs in it and whether it fits ``gpu`` (no GPU: no verdict);
    ``model`` None: the chosen model is not in the registry, so its need is unknown."""
    label = choice_label("precision", precision)
    if model is None:
        return f"{label} — need unknown (the model is not in Holodesk's model list)"
    fit = next(f for f in model.precision_fits(gpu.free_bytes if gpu else None) if f.precision == precision)
    text = f"{label} — needs {fit.needs_bytes / GIB:.0f} GiB"
    if fit.fits is True:
        text += ": fits this GPU"
    elif fit.fits is False:
        text += ": does not fit this GPU"
    return text


def model_item_text(model: ModelSpec, gpu: GpuInfo | None) -> str:
    """A model choice: its name, size and which precisions fit ``gpu`` (no GPU measured: no verdict), e.g.
    ``"Holo2-8B — 9B parameters: fits this GPU in bf16, 8bit, 4bit"``."""
    text = f"{model.display_name} — {model.size_text()}"
    if gpu is None:
        return text
    fitting = [f.precision for f in model.precision_fits(gpu.free_bytes) if f.fits]
    return text + (f": fits this GPU in {', '.join(fitting)}" if fitting else ": does not fit this GPU")


class FieldEditor(QWidget):
    """One field: its editor and its message line (errors and notes, plain text, word-wrapped)."""

    changed = Signal()

    def __init__(self, name: str, value: Any, wheel_guard: WheelGuard, gpu: GpuInfo | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.kind = editor_kind(name)
        self.optional = _base_annotation(name)[1]
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(THEME.spacing.field_gap)
        self.line: QLineEdit | None = None  # the path or text line of "file" / "folder" editors
        self.editor = self._make_editor(value, wheel_guard, gpu)
        self.editor.setObjectName(f"field_{name}")
        self.editor.setToolTip(field_tooltip(name))
        layout.addWidget(self.editor)
        self.error = plain_label(name=f"error_{name}", style=text_style(THEME.palette.error_text), hidden=True)
        layout.addWidget(self.error)
        self.note = plain_label(name=f"note_{name}", style=text_style(THEME.palette.muted), hidden=True)
        layout.addWidget(self.note)

    def _make_editor(self, value: Any, wheel_guard: WheelGuard, gpu: GpuInfo | None) -> QWidget:
        """The editor of this field's kind (:func:`editor_kind`), showing ``value``; ``model`` is an
        editable list of the registry's models (:meth:`_model_combo`)."""
        if self.name == "model":
            return self._model_combo(value, wheel_guard, gpu)
        if self.kind == "combo":
            return self._combo(value, wheel_guard, gpu)
        if self.kind == "check":
            check = QCheckBox()
            check.setChecked(bool(value))
            check.toggled.connect(self.changed)
            return check
        if self.kind == "int":
            return self._int_spin(value, wheel_guard)
        if self.kind == "float":
            return self._float_spin(value, wheel_guard)
        if self.kind == "hotkey":
            hotkey = HotkeyEdit(str(value or ""))
            hotkey.keySequenceChanged.connect(self.changed)
            return hotkey
        if self.kind in ("file", "folder"):
            return self._path_row(value)
        line = QLineEdit("" if value is None else str(value))
        if self.optional:
            line.setPlaceholderText("not set")
        line.textChanged.connect(self.changed)
        return line

    def _model_combo(self, value: Any, wheel_guard: WheelGuard, gpu: GpuInfo | None) -> QComboBox:
        """Every registry model (text: :func:`model_item_text`, data: its hub id), editable so a checkpoint
        folder or a server's own model name can be typed; a value outside the registry is shown as typed."""
        combo = QComboBox()
        combo.setEditable(True)
        combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        for model in MODELS:
            combo.addItem(model_item_text(model, gpu), model.hub_id)
            combo.setItemData(combo.count() - 1, f"In settings.toml: model = {model.hub_id!r}",
                              Qt.ItemDataRole.ToolTipRole)
        index = combo.findData(str(value))
        if index >= 0:
            combo.setCurrentIndex(index)
        else:
            combo.setEditText(str(value))
        combo.currentTextChanged.connect(self.changed)
        wheel_guard.guard(combo)
        return combo

    def _combo(self, value: Any, wheel_guard: WheelGuard, gpu: GpuInfo | None) -> QComboBox:
        name = self.name
        combo = QComboBox()
        for choice in field_choices(name):
            text = (precision_item_text(choice, gpu, get_model(DEFAULT_MODEL)) if name == "precision"
                    else choice_label(name, choice))
            combo.addItem(text, choice)
            combo.setItemData(combo.count() - 1, f"In settings.toml: {name} = {choice!r}",
                              Qt.ItemDataRole.ToolTipRole)
        combo.setCurrentIndex(max(0, combo.findData(str(value))))
        combo.currentIndexChanged.connect(self.changed)
        wheel_guard.guard(combo)
        return combo

    def _int_spin(self, value: Any, wheel_guard: WheelGuard) -> QSpinBox:
        spin = QSpinBox()
        lo, hi, excl = _bounds(self.name)
        low = int(lo + (1 if excl else 0)) if lo is not None else -1_000_000
        if self.optional:  # one step below the minimum means "not set"
            low -= 1
            spin.setSpecialValueText("not set")
        spin.setRange(low, int(hi) if hi is not None else 1_000_000)
        spin.setValue(low if value is None else int(value))
        wheel_guard.guard(spin)
        return spin

    def _float_spin(self, value: Any, wheel_guard: WheelGuard) -> QDoubleSpinBox:
        dspin = QDoubleSpinBox()
        lo, hi, excl = _bounds(self.name)
        dspin.setDecimals(1)
        flow = lo + (0.1 if excl else 0.0) if lo is not None else -1e9
        if self.optional:
            flow -= 0.1
            dspin.setSpecialValueText("not set")
        dspin.setRange(flow, hi if hi is not None else 1e9)
        dspin.setValue(flow if value is None else float(value))
        wheel_guard.guard(dspin)
        return dspin

    def _path_row(self, value: Any) -> QWidget:
        """A path line with a Choose... button (:meth:`_browse`); the line is :attr:`line`."""
        box = QWidget()
        row = QHBoxLayout(box)
        row.setContentsMargins(0, 0, 0, 0)
        self.line = QLineEdit("" if value is None else str(value))
        self.line.setObjectName(f"path_{self.name}")
        if self.optional:
            self.line.setPlaceholderText("not set")
        self.line.textChanged.connect(self.changed)
        browse = push_button("Choose...", f"browse_{self.name}", self._browse)
        row.addWidget(self.line, 1)
        row.addWidget(browse)
        return box

    def _browse(self) -> None:
        assert self.line is not None
        start = self.line.text() or str(Path.home())
        if self.kind == "folder":
            path = QFileDialog.getExistingDirectory(self, LABELS.get(self.name, self.name), start)
        else:
            path, _ = QFileDialog.getOpenFileName(self, LABELS.get(self.name, self.name), start,
                                                  "Replay files (*.jsonl *.txt);;All files (*)")
        if path:
            self.line.setText(path)

    def value(self) -> Any:
        e = self.editor
        if isinstance(e, QComboBox) and e.isEditable():  # the model: a listed model's hub id, else the text
            index = e.findText(e.currentText())
            return e.itemData(index) if index >= 0 else e.currentText().strip()
        if isinstance(e, QComboBox):
            return e.currentData()
        if isinstance(e, QCheckBox):
            return e.isChecked()
        if isinstance(e, (QSpinBox, QDoubleSpinBox)):
            if self.optional and e.value() == e.minimum():
                return None
            return e.value()
        if isinstance(e, HotkeyEdit):
            return e.hotkey()
        line = self.line if self.line is not None else e
        assert isinstance(line, QLineEdit)
        text = line.text().strip()
        if self.optional and not text:
            return None
        return Path(text).expanduser() if self.kind in ("file", "folder") and text else text

    def set_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(bool(message))

    def set_note(self, message: str) -> None:
        self.note.setText(message)
        self.note.setVisible(bool(message))


class SettingsDialog(QDialog):
    """Edit and save the settings: a Basic and an Advanced tab.

    Signals:
        saved(Settings): the settings were written (the app applies them).
    Args:
        settings: the current settings (shown).
        path: the file to write (default: the user settings file).
        monitors: names of the monitors, shown next to the monitor field.
        gpu: the GPU the local model would use (:func:`holodesk.machine.probe_gpus`), for the precision
            picker; None when there is none (or it was not measured).
        bandwidth: that GPU's memory bandwidth, bytes a second (:func:`holodesk.machine.memory_bandwidth`), for
            the cost of thinking under "Think before acting"; None: unknown.
    """

    saved = Signal(object)

    def __init__(self, settings: Settings, *, path: Path | None = None, monitors: list[str] | None = None,
                 gpu: GpuInfo | None = None, bandwidth: float | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        name_window(self, "Holodesk settings", "holodeskSettings")
        self.settings = settings
        self.path = path
        self.gpu = gpu
        self.bandwidth = bandwidth
        self.fields: dict[str, FieldEditor] = {}
        self.labels: dict[str, QLabel] = {}
        self.wheel_guard = WheelGuard(self)
        outer = QVBoxLayout(self)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("tabs")
        self.scroll_areas: dict[str, QScrollArea] = {}
        bodies: dict[str, QVBoxLayout] = {}
        for tab, title, names in field_groups():
            if tab not in bodies:
                scroll = QScrollArea()
                scroll.setObjectName(f"scroll_{tab.lower()}")
                scroll.setWidgetResizable(True)
                body = QWidget()
                bodies[tab] = QVBoxLayout(body)
                scroll.setWidget(body)
                self.scroll_areas[tab] = scroll
                self.tabs.addTab(scroll, tab)
            box = QGroupBox(title)
            form = QFormLayout(box)
            form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
            for name in names:
                editor = FieldEditor(name, getattr(settings, name), self.wheel_guard, gpu)
                self.fields[name] = editor
                label = QLabel(LABELS.get(name, name.replace("_", " ").capitalize()))
                label.setToolTip(field_tooltip(name))
                self.labels[name] = label
                form.addRow(label, editor)
                if name == "endpoint":
                    self.api_key_label = QLabel("API key")
                    form.addRow(self.api_key_label, self._key_row())
                if name == "monitor" and monitors:
                    hint = QLabel("\n".join(f"{i}: {m}" for i, m in enumerate(monitors, start=1)))
                    hint.setTextFormat(Qt.TextFormat.PlainText)
                    hint.setStyleSheet(text_style(THEME.palette.muted, THEME.fonts.small))
                    form.addRow(QLabel(""), hint)
            bodies[tab].addWidget(box)
        for layout in bodies.values():
            layout.addStretch(1)
        outer.addWidget(self.tabs)
        self.status = QLabel()
        self.status.setObjectName("status")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        outer.addWidget(self.status)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.save)
        buttons.rejected.connect(self.reject)
        self.buttons = buttons
        outer.addWidget(buttons)
        for editor in self.fields.values():
            self._connect_live_validation(editor)
            editor.changed.connect(self.update_applicability)
        self.update_applicability()
        self.resize(640, 640)

    def _key_row(self) -> QWidget:
        row = QWidget()
        layout = QVBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        self.api_key = QLineEdit()
        self.api_key.setObjectName("field_api_key")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("leave empty to keep the stored key")
        self.api_key.setToolTip("Stored in the OS keychain for this server, never in the settings file.")
        layout.addWidget(self.api_key)
        # The keychain's answer: its own word-wrapped block under the key (not red, not next to "Saved").
        self.key_error = plain_label(name="error_api_key", style=notice_style(), hidden=True)
        layout.addWidget(self.key_error)
        self.session_key_button = push_button(SESSION_KEY_TEXT, "session_key", self._keep_key_for_session,
                                              hidden=True)
        layout.addWidget(self.session_key_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.key_row = row
        return row

    def _connect_live_validation(self, editor: FieldEditor) -> None:
        e = editor.line if editor.line is not None else editor.editor
        if isinstance(e, QLineEdit):
            e.editingFinished.connect(lambda ed=editor: self.validate(ed.name))
        if isinstance(e, HotkeyEdit):
            e.editingFinished.connect(lambda ed=editor: self.validate(ed.name))

    def update_applicability(self) -> None:
        """Disable the fields that do not apply to the values shown (e.g. precision with a server), and
        say under the precision picker what fits this GPU."""
        values = self.values()
        for name, applies in APPLIES.items():
            if name not in self.fields:
                continue
            on = applies(values)
            self.fields[name].setEnabled(on)
            self.labels[name].setEnabled(on)
            self.fields[name].editor.setToolTip(field_tooltip(name) if on else
                                                f"{NOT_APPLYING.get(name, '')}\n\n{field_tooltip(name)}")
        if "endpoint" in self.fields:
            remote = values["policy"] == "remote"
            self.key_row.setEnabled(remote)
            self.api_key_label.setEnabled(remote)
        model = find_model(str(values["model"])) if "model" in values else get_model(DEFAULT_MODEL)
        if "precision" in self.fields:
            combo = self.fields["precision"].editor
            assert isinstance(combo, QComboBox)
            for i in range(combo.count()):
                combo.setItemText(i, precision_item_text(combo.itemData(i), self.gpu, model))
            self.fields["precision"].set_note(self._precision_note(values["precision"], model)
                                              if values["policy"] == "local" else "")
        if "model" in self.fields:
            self.fields["model"].set_note(self._model_note(model, str(values["model"]))
                                          if values["policy"] == "local" else "")
        if "reasoning" in self.fields:  # what thinking costs a step with the model, precision and GPU shown
            self.fields["reasoning"].set_note(thinking_note(
                policy=str(values["policy"]), model=str(values.get("model", "")),
                precision=str(values.get("precision", "bf16")), gpu=self.gpu, bandwidth=self.bandwidth))

    def _precision_note(self, precision: str, model: ModelSpec | None) -> str:
        """What fits this GPU for ``model`` (None: not in the registry, so unknown)."""
        gpu = self.gpu
        if model is None:
            return "This model is not in Holodesk's model list, so its memory need is unknown."
        free = gpu.free_bytes if gpu else None
        advice = model.explain_fit(free, gpu.name if gpu else "this GPU")
        if gpu is not None and model.best_precision(free) is not None and [
                f.fits for f in model.precision_fits(free) if f.precision == precision] == [False]:
            return f"{choice_label('precision', precision)} does not fit: {advice}"
        return advice

    def _model_note(self, model: ModelSpec | None, value: str) -> str:
        """The models that fit this GPU (and in which precision), or why none is known to."""
        gpu = self.gpu
        if gpu is None:
            return "No GPU was measured, so which models fit is unknown."
        fitting = [f"{m.display_name} ({m.best_precision(gpu.free_bytes)})" for m in MODELS
                   if m.best_precision(gpu.free_bytes) is not None]
        listed = "Fit this GPU: " + ", ".join(fitting) + "." if fitting else "No listed model fits this GPU."
        if model is None and value:
            return f"{value} is not in Holodesk's model list: its memory need is unknown. {listed}"
        return listed

    def validate(self, name: str) -> bool:
        """Validate one field and show its message; True when valid."""
        editor = self.fields[name]
        try:
            validate_field(name, editor.value())
            if name in HOTKEY_FIELDS:
                self._check_hotkey(str(editor.value()))
        except SettingsError as exc:
            editor.set_error(_field_message(name, exc.message))
            return False
        editor.set_error("")
        return True

    @staticmethod
    def _check_hotkey(combo: str) -> None:
        if not combo:
            raise SettingsError("press the key combination to use (at least one modifier and a key)")
        try:
            parse_hotkey(combo)
        except ImportError as exc:  # pynput cannot load here: the schema check alone decides
            log.info("hotkey not checked (pynput unavailable: %s)", exc)

    def values(self) -> dict[str, Any]:
        return {name: editor.value() for name, editor in self.fields.items()}

    def save(self) -> bool:
        """Validate every field, write the file atomically, store the API key. True when saved."""
        ok = all([self.validate(name) for name in self.fields])
        if not ok:
            self.status.setText("Some values are not valid; see the messages under the fields.")
            return False
        try:
            new = Settings(**self.values())
            written = save_settings(new, self.path)
        except (SettingsError, ValueError) as exc:
            self.status.setText(str(exc))
            return False
        self.settings = new
        self.saved.emit(new)
        if not self._store_key(new.endpoint):
            self.status.setText(f"Settings saved to {written}. The API key was not stored; see the note under it.")
            self.tabs.setCurrentIndex(0)
            return True  # settings saved; the dialog stays open to show the keychain choice
        self.status.setText(f"Saved to {written}")
        self.accept()
        return True

    def _store_key(self, endpoint: str) -> bool:
        key = self.api_key.text()
        self.key_error.hide()
        self.session_key_button.hide()
        if not key:
            return True
        if not endpoint:
            self.key_error.setText("Set the server URL first: the key is stored for that server.")
            self.key_error.show()
            return False
        try:
            store_api_key(endpoint, key)
        except SecretStoreError as exc:
            self.key_error.setText(str(exc))
            self.key_error.show()
            self.session_key_button.show()
            return False
        except (HolodeskError, ValueError) as exc:
            self.key_error.setText(str(exc))
            self.key_error.show()
            return False
        self.api_key.clear()
        return True

    def _keep_key_for_session(self) -> None:
        endpoint = str(self.fields["endpoint"].value())
        try:
            set_session_api_key(endpoint, self.api_key.text())
        except HolodeskError as exc:
            self.key_error.setText(str(exc))
            return
        self.api_key.clear()
        self.key_error.setText("The key is kept in memory for this session only; it is gone when Holodesk exits.")
        self.session_key_button.hide()


def _field_message(name: str, message: str) -> str:
    """Strip the "invalid settings: name: " prefix of a one-field validation message."""
    prefix = "invalid settings: "
    if message.startswith(prefix):
        message = message[len(prefix):]
    if message.startswith(f"{name}: "):
        message = message[len(name) + 2:]
    return message
