"""The settings dialog, built from the :class:`~holodesk.settings.Settings` schema.

Each field gets an editor chosen by its type — ``Literal`` -> combo box, ``bool`` -> check box,
``int`` / ``float`` -> spin box (bounds from the schema), ``str`` / ``Path`` -> line edit — with the
field's description as tooltip and a message line under it that shows the field's own validation
error (:func:`~holodesk.settings.validate_field`). Saving writes the file atomically
(:func:`~holodesk.settings.save_settings`). The API key is not a setting: it goes to the OS keychain
(:func:`holodesk.secrets.store_api_key`); when no keychain is usable the dialog shows why and offers
to keep the key for this session only.
"""

from __future__ import annotations

import logging
import typing
from pathlib import Path
from typing import Any, Literal

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from holodesk.errors import HolodeskError, SecretStoreError, SettingsError
from holodesk.settings import Settings, save_settings, validate_field

log = logging.getLogger(__name__)

GROUPS: list[tuple[str, list[str]]] = [
    ("Model", ["policy", "model", "precision", "endpoint", "reasoning", "constrained_decoding", "max_images",
               "max_reply_tokens", "max_string_chars", "protocol"]),
    ("Session", ["approval", "autopilot_countdown_s", "monitor", "max_steps", "max_wall_s", "max_parse_failures",
                 "max_repeats", "typing"]),
    ("Desktop app", ["desktop_backend", "hotkey_palette", "hotkey_stop"]),
    ("Storage", ["data_dir"]),
]
"""Where known fields go. Any other field of the schema is shown under "Other" (see :func:`field_groups`);
``schema_version`` is not user-editable."""

HIDDEN = frozenset({"schema_version"})


def field_groups() -> list[tuple[str, list[str]]]:
    """Every user-editable field of the schema, grouped: the known groups, then "Other" in schema order."""
    placed = {n for _, names in GROUPS for n in names}
    groups = [(title, [n for n in names if n in Settings.model_fields]) for title, names in GROUPS]
    other = [n for n in Settings.model_fields if n not in placed and n not in HIDDEN]
    if other:
        groups.append(("Other", other))
    return [(title, names) for title, names in groups if names]

LABELS = {
    "policy": "Policy", "model": "Model", "precision": "Precision", "endpoint": "Endpoint",
    "reasoning": "Reasoning", "constrained_decoding": "Constrained decoding", "max_images": "Screenshots kept",
    "protocol": "Protocol", "approval": "Approval mode", "autopilot_countdown_s": "Autopilot countdown (s)",
    "monitor": "Monitor", "max_steps": "Step cap", "max_wall_s": "Time cap (s)",
    "max_parse_failures": "Bad replies before stopping", "max_repeats": "Repeats before stopping",
    "typing": "Typing method", "hotkey_palette": "Command box hotkey", "hotkey_stop": "Stop hotkey",
    "desktop_backend": "Desktop backend",
    "data_dir": "Data folder", "max_reply_tokens": "Reply token cap", "max_string_chars": "Text field cap",
}


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


def editor_kind(name: str) -> str:
    """Which editor a field gets: "combo", "check", "int", "float" or "text" (``X | None`` as X, with
    an empty / "not set" state)."""
    ann, _optional = _base_annotation(name)
    if typing.get_origin(ann) is Literal:
        return "combo"
    if ann is bool:
        return "check"
    if ann is int:
        return "int"
    if ann is float:
        return "float"
    return "text"


class FieldEditor(QWidget):
    """One field: its editor and its error line."""

    def __init__(self, name: str, value: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.kind = editor_kind(name)
        self.optional = _base_annotation(name)[1]
        description = Settings.model_fields[name].description or ""
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.editor: QWidget
        if self.kind == "combo":
            combo = QComboBox()
            for choice in typing.get_args(Settings.model_fields[name].annotation):
                combo.addItem(str(choice), choice)
            combo.setCurrentIndex(max(0, combo.findData(value)))
            self.editor = combo
        elif self.kind == "check":
            check = QCheckBox()
            check.setChecked(bool(value))
            self.editor = check
        elif self.kind == "int":
            spin = QSpinBox()
            lo, hi, excl = _bounds(name)
            low = int(lo + (1 if excl else 0)) if lo is not None else -1_000_000
            if self.optional:  # one step below the minimum means "not set"
                low -= 1
                spin.setSpecialValueText("not set")
            spin.setRange(low, int(hi) if hi is not None else 1_000_000)
            spin.setValue(low if value is None else int(value))
            self.editor = spin
        elif self.kind == "float":
            dspin = QDoubleSpinBox()
            lo, hi, excl = _bounds(name)
            dspin.setDecimals(1)
            flow = lo + (0.1 if excl else 0.0) if lo is not None else -1e9
            if self.optional:
                flow -= 0.1
                dspin.setSpecialValueText("not set")
            dspin.setRange(flow, hi if hi is not None else 1e9)
            dspin.setValue(flow if value is None else float(value))
            self.editor = dspin
        else:
            line = QLineEdit("" if value is None else str(value))
            if self.optional:
                line.setPlaceholderText("not set")
            self.editor = line
        self.editor.setObjectName(f"field_{name}")
        self.editor.setToolTip(description)
        layout.addWidget(self.editor)
        self.error = QLabel()
        self.error.setObjectName(f"error_{name}")
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d93025;")
        self.error.hide()
        layout.addWidget(self.error)

    def value(self) -> Any:
        e = self.editor
        if isinstance(e, QComboBox):
            return e.currentData()
        if isinstance(e, QCheckBox):
            return e.isChecked()
        if isinstance(e, (QSpinBox, QDoubleSpinBox)):
            if self.optional and e.value() == e.minimum():
                return None
            return e.value()
        assert isinstance(e, QLineEdit)
        text = e.text().strip()
        if self.optional and not text:
            return None
        return Path(text).expanduser() if self.name == "data_dir" and text else text

    def set_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(bool(message))


class SettingsDialog(QDialog):
    """Edit and save the settings.

    Signals:
        saved(Settings): the settings were written (the app applies them).
    Args:
        settings: the current settings (shown).
        path: the file to write (default: the user settings file).
        monitors: names of the monitors, shown next to the monitor field.
    """

    saved = Signal(object)

    def __init__(self, settings: Settings, *, path: Path | None = None, monitors: list[str] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Holodesk settings")
        self.setObjectName("holodeskSettings")
        self.settings = settings
        self.path = path
        self.fields: dict[str, FieldEditor] = {}
        outer = QVBoxLayout(self)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        body = QWidget()
        body_layout = QVBoxLayout(body)
        for title, names in field_groups():
            box = QGroupBox(title)
            form = QFormLayout(box)
            for name in names:
                editor = FieldEditor(name, getattr(settings, name))
                self.fields[name] = editor
                label = QLabel(LABELS.get(name, name.replace("_", " ").capitalize()))
                label.setToolTip(Settings.model_fields[name].description or "")
                form.addRow(label, editor)
                if name == "endpoint":
                    form.addRow(QLabel("API key"), self._key_row())
                if name == "monitor" and monitors:
                    hint = QLabel("\n".join(f"{i}: {m}" for i, m in enumerate(monitors, start=1)))
                    hint.setTextFormat(Qt.TextFormat.PlainText)
                    hint.setStyleSheet("color: #5b6b7f; font-size: 11px;")
                    form.addRow(QLabel(""), hint)
            body_layout.addWidget(box)
        scroll.setWidget(body)
        outer.addWidget(scroll)
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
        self.resize(620, 720)

    def _key_row(self) -> QWidget:
        row = QWidget()
        layout = QVBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        line = QHBoxLayout()
        self.api_key = QLineEdit()
        self.api_key.setObjectName("field_api_key")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("leave empty to keep the stored key")
        self.api_key.setToolTip("Stored in the OS keychain for this endpoint, never in the settings file.")
        line.addWidget(self.api_key)
        self.session_key_button = QPushButton("Keep for this session only")
        self.session_key_button.setObjectName("session_key")
        self.session_key_button.clicked.connect(self._keep_key_for_session)
        self.session_key_button.hide()
        line.addWidget(self.session_key_button)
        layout.addLayout(line)
        self.key_error = QLabel()
        self.key_error.setObjectName("error_api_key")
        self.key_error.setTextFormat(Qt.TextFormat.PlainText)
        self.key_error.setWordWrap(True)
        self.key_error.setStyleSheet("color: #d93025;")
        self.key_error.hide()
        layout.addWidget(self.key_error)
        return row

    def _connect_live_validation(self, editor: FieldEditor) -> None:
        e = editor.editor
        if isinstance(e, QLineEdit):
            e.editingFinished.connect(lambda ed=editor: self.validate(ed.name))

    def validate(self, name: str) -> bool:
        """Validate one field and show its message; True when valid."""
        editor = self.fields[name]
        try:
            validate_field(name, editor.value())
            if name in ("hotkey_palette", "hotkey_stop"):
                self._check_hotkey(str(editor.value()))
        except SettingsError as exc:
            editor.set_error(_field_message(name, exc.message))
            return False
        editor.set_error("")
        return True

    @staticmethod
    def _check_hotkey(combo: str) -> None:
        try:
            from holodesk.ui.palette import parse_hotkey

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
        self.status.setText(f"Saved to {written}")
        self.saved.emit(new)
        if not self._store_key(new.endpoint):
            return True  # settings saved; the dialog stays open to show the keychain choice
        self.accept()
        return True

    def _store_key(self, endpoint: str) -> bool:
        key = self.api_key.text()
        self.key_error.hide()
        self.session_key_button.hide()
        if not key:
            return True
        if not endpoint:
            self.key_error.setText("Set the endpoint first: the key is stored for that server.")
            self.key_error.show()
            return False
        try:
            from holodesk.secrets import store_api_key

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
        from holodesk.secrets import set_session_api_key

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
