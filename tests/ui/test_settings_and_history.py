"""The settings dialog (built from the schema, per-field errors, atomic save, keychain choice) and the
history window (episodes from disk, frame with the action drawn on it, plain-text model output)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QLabel, QLineEdit, QSpinBox

from holodesk.core.actions import Click, Point, Type
from holodesk.core.geometry import point_to_frame_pixel
from holodesk.core.wording import describe
from holodesk.session.state import State
from holodesk.settings import Settings, load_settings
from holodesk.ui.settings_dialog import HotkeyEdit, SettingsDialog, field_groups
from holodesk.ui.theme import THEME
from tests.ui.conftest import reply, wait_finished, wait_overlay

pytestmark = pytest.mark.gui


@pytest.fixture
def dialog(qtbot: Any, tmp_path: Path) -> SettingsDialog:
    d = SettingsDialog(Settings(data_dir=tmp_path / "data"), path=tmp_path / "config" / "settings.toml")
    qtbot.addWidget(d)
    return d


def test_editors_come_from_the_schema(dialog: SettingsDialog) -> None:
    kinds = {"precision": QComboBox, "policy": QComboBox, "approval": QComboBox, "reasoning": QComboBox,
             "max_steps": QSpinBox, "max_images": QSpinBox, "monitor": QSpinBox,
             "autopilot_countdown_s": QDoubleSpinBox, "endpoint": QLineEdit, "model": QComboBox,
             "hotkey_palette": HotkeyEdit, "hotkey_stop": HotkeyEdit}
    for name, cls in kinds.items():
        assert isinstance(dialog.fields[name].editor, cls), name
    assert dialog.fields["data_dir"].kind == "folder" and dialog.fields["script_file"].kind == "file"
    shown = [n for _, _, names in field_groups() for n in names]
    assert sorted(shown) == sorted(set(Settings.model_fields) - {"schema_version"})  # every field, once
    assert set(dialog.fields) == set(shown)
    for name in shown:  # the description, then the raw name, as tooltip
        assert dialog.labels[name].toolTip().startswith(Settings.model_fields[name].description or "")
        assert dialog.labels[name].toolTip().endswith(f"In settings.toml: {name}")
    model = dialog.fields["model"].editor  # the model registry's list, editable for a folder or a served name
    assert isinstance(model, QComboBox) and model.isEditable()
    precision = dialog.fields["precision"].editor
    assert isinstance(precision, QComboBox)
    assert [precision.itemData(i) for i in range(precision.count())] == ["bf16", "8bit", "4bit"]
    steps = dialog.fields["max_steps"].editor
    assert isinstance(steps, QSpinBox) and (steps.minimum(), steps.maximum()) == (1, 1000)
    optional = [n for n in shown if dialog.fields[n].optional]
    for name in optional:  # "X | None" fields start unset when their default is None, and stay valid
        if Settings.model_fields[name].default is None:
            assert dialog.fields[name].value() is None, name


def test_bad_value_gets_a_message_next_to_its_field(dialog: SettingsDialog, tmp_path: Path) -> None:
    endpoint = dialog.fields["endpoint"].editor
    assert isinstance(endpoint, QLineEdit)
    endpoint.setText("ftp://gpu-box:8000")
    hotkey = dialog.fields["hotkey_stop"].editor
    assert isinstance(hotkey, HotkeyEdit)
    hotkey.clear()  # no combination captured
    assert dialog.save() is False
    error = dialog.fields["endpoint"].error
    assert not error.isHidden() and "http://" in error.text()
    assert not dialog.fields["hotkey_stop"].error.isHidden()
    assert dialog.fields["model"].error.isHidden()
    assert not (tmp_path / "config" / "settings.toml").exists()


def test_save_writes_the_file_and_loads_back(dialog: SettingsDialog, tmp_path: Path) -> None:
    steps = dialog.fields["max_steps"].editor
    assert isinstance(steps, QSpinBox)
    steps.setValue(12)
    reasoning = dialog.fields["reasoning"].editor
    assert isinstance(reasoning, QComboBox)
    reasoning.setCurrentIndex(reasoning.findData("on"))
    model = dialog.fields["model"].editor  # the model registry's list, editable for a folder or a served name
    assert isinstance(model, QComboBox) and model.isEditable()
    precision = dialog.fields["precision"].editor
    assert isinstance(precision, QComboBox)
    precision.setCurrentIndex(precision.findData("4bit"))
    saved: list[Settings] = []
    dialog.saved.connect(saved.append)
    assert dialog.save() is True
    path = tmp_path / "config" / "settings.toml"
    assert path.exists() and not list(path.parent.glob(".settings-*"))  # no temp file left behind
    loaded = load_settings()  # HOLODESK_CONFIG points at this file (ui_env)
    assert (loaded.max_steps, loaded.reasoning, loaded.precision) == (12, "on", "4bit")
    assert saved and saved[0].max_steps == 12


def test_api_key_without_a_keychain_offers_the_choice(dialog: SettingsDialog, monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    import keyring

    from holodesk import secrets

    monkeypatch.setattr(keyring, "get_keyring", lambda: __import__("keyring.backends.fail",
                                                                    fromlist=["Keyring"]).Keyring())
    policy = dialog.fields["policy"].editor
    assert isinstance(policy, QComboBox)
    policy.setCurrentIndex(policy.findData("remote"))
    endpoint = dialog.fields["endpoint"].editor
    assert isinstance(endpoint, QLineEdit)
    endpoint.setText("http://gpu-box:8000/v1")
    dialog.api_key.setText("sk-test-123")
    dialog.save()
    assert not dialog.key_error.isHidden()
    assert "session only" in dialog.key_error.text()
    assert "sk-test-123" not in dialog.key_error.text()
    assert not dialog.session_key_button.isHidden()
    dialog.session_key_button.click()
    assert secrets.resolve_api_key("http://gpu-box:8000/v1") == ("sk-test-123", "session")
    secrets.set_session_api_key("http://gpu-box:8000/v1", None)


def test_history_shows_steps_frames_and_plain_model_text(qtbot: Any, make_app: Any) -> None:
    html_thought = "<b>bold?</b> click it"
    kit = make_app([reply(Click(Point(250, 600)), thought=html_thought), Type("abc")])
    kit.app.start_task("history task")
    qtbot.keyClick(wait_overlay(qtbot, kit.app), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: kit.app.approval.pending is not None and kit.app.approval.pending.request.step == 1,
                    timeout=10000)
    qtbot.keyClick(kit.app.approval.overlay, Qt.Key.Key_S)
    result = wait_finished(qtbot, kit.app)
    assert result.status is State.FINISHED

    window = kit.app.open_history()
    qtbot.addWidget(window)
    assert window.episode_list.count() == 1
    assert "history task" in window.episode_list.item(0).text()
    assert window.step_list.count() == 3  # click, type (skipped), done
    # the plain-words headline is core's describe() (the approval card's words)
    assert window.step_list.item(0).text() == f"1. {describe(Click(Point(250, 600)))}\napproved by you · done"
    assert window.step_list.item(1).text() == f"2. {describe(Type('abc'))}\nskipped by you"
    assert not window.step_list.item(0).icon().isNull()  # a thumbnail of the screen the model saw
    window.step_list.setCurrentRow(0)
    details = window.details.toPlainText()
    assert f"Thought: {html_thought}" in details
    assert f"Proposed: {describe(Click(Point(250, 600)))}" in details and '"kind"' not in details  # not JSON
    assert "Decision: approve (by you)" in details and "Result: performed" in details
    assert "Timings (ms): capture" in details
    assert window.raw.toPlainText() == reply(Click(Point(250, 600)), thought=html_thought)
    for label in window.findChildren(QLabel):
        assert label.textFormat() in (Qt.TextFormat.PlainText, Qt.TextFormat.AutoText)
    assert window.header.textFormat() == Qt.TextFormat.PlainText
    image = window.current_image
    assert image is not None and (image.width(), image.height()) == (1920, 1080)
    px, py = point_to_frame_pixel(kit.executor.calls[0].frame, Point(250, 600))
    # the mark is centred on the action's frame pixel: the pixel itself stays clear, the pointers aim at
    # its column from 28 px above and below (marks drawn 1.5x larger on a 1920-wide frame)
    mark = THEME.palette.marker  # the app's default marker colour
    assert image.pixelColor(px, py).name() != mark
    assert image.pixelColor(px, py - 42).name() == mark == image.pixelColor(px, py + 42).name()
    assert image.pixelColor(20, 20).name() == "#282c34"  # the frame itself elsewhere
