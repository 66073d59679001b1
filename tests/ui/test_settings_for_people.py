"""Settings for people: Basic and Advanced, words instead of raw ids, fields that do not apply disabled, a
hotkey-capture field, a precision picker that knows this GPU, a replay-file picker, and a mouse wheel that
never changes a field the user did not focus (F29)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QComboBox, QLineEdit, QSpinBox

from holodesk.core.fit import GIB
from holodesk.machine import GpuInfo
from holodesk.settings import Settings, load_settings
from holodesk.ui.settings_dialog import (
    CHOICE_LABELS,
    HotkeyEdit,
    SettingsDialog,
    hotkey_from_sequence,
    sequence_from_hotkey,
)
from holodesk.ui.theme import THEME
from tests.helpers.qt import focus_window, wait_exposed

pytestmark = pytest.mark.gui

RTX_4090 = GpuInfo(0, "NVIDIA GeForce RTX 4090", 24 * GIB, int(23.0 * GIB))


@pytest.fixture
def make_dialog(qtbot: Any, tmp_path: Path) -> Any:
    def make(gpu: GpuInfo | None = None, **settings: Any) -> SettingsDialog:
        d = SettingsDialog(Settings(data_dir=tmp_path / "data", **settings),
                           path=tmp_path / "config" / "settings.toml", gpu=gpu)
        qtbot.addWidget(d)
        return d

    return make


def combo(d: SettingsDialog, name: str) -> QComboBox:
    editor = d.fields[name].editor
    assert isinstance(editor, QComboBox)
    return editor


def test_basic_and_advanced_with_words_and_the_raw_value_in_a_tooltip(make_dialog: Any) -> None:
    d = make_dialog()
    assert [d.tabs.tabText(i) for i in range(d.tabs.count())] == ["Basic", "Advanced"]
    basic = d.scroll_areas["Basic"].widget()
    for name in ("policy", "precision", "endpoint", "script_file", "approval", "hotkey_palette", "data_dir"):
        assert basic.isAncestorOf(d.fields[name]), name
    for name in ("decoder", "protocol", "max_reply_tokens", "typing", "max_steps"):
        assert not basic.isAncestorOf(d.fields[name]), name
    for name, words in CHOICE_LABELS.items():
        box = combo(d, name)
        for i in range(box.count()):
            raw = box.itemData(i)
            assert box.itemText(i).startswith(words[raw]) and box.itemText(i) != raw
            assert box.itemData(i, Qt.ItemDataRole.ToolTipRole) == f"In settings.toml: {name} = {raw!r}"
    # the local choice names no model: the Model field under it says which (Holo2-8B, Holotron-12B, ...)
    assert combo(d, "policy").currentText() == "The model below, on this computer"
    assert combo(d, "approval").currentText() == "Ask me before every action"


def test_fields_that_do_not_apply_are_disabled(make_dialog: Any) -> None:
    d = make_dialog()
    enabled = {name: f.isEnabled() for name, f in d.fields.items()}
    assert enabled["precision"] and enabled["decoder"] and enabled["model"]
    assert not enabled["endpoint"] and not d.key_row.isEnabled() and not enabled["script_file"]
    assert not enabled["autopilot_countdown_s"]  # step mode has no countdown
    policy = combo(d, "policy")
    policy.setCurrentIndex(policy.findData("remote"))
    assert d.fields["endpoint"].isEnabled() and d.key_row.isEnabled()
    assert not d.fields["precision"].isEnabled() and not d.fields["decoder"].isEnabled()
    assert "local model only" in d.fields["precision"].editor.toolTip()
    policy.setCurrentIndex(policy.findData("script"))
    assert d.fields["script_file"].isEnabled() and not d.fields["model"].isEnabled()
    assert not d.fields["endpoint"].isEnabled() and not d.labels["endpoint"].isEnabled()
    approval = combo(d, "approval")
    approval.setCurrentIndex(approval.findData("auto"))
    assert d.fields["autopilot_countdown_s"].isEnabled()


def test_replay_file_is_picked_and_saved(make_dialog: Any, tmp_path: Path) -> None:
    d = make_dialog()
    policy = combo(d, "policy")
    policy.setCurrentIndex(policy.findData("script"))
    script = tmp_path / "demo.jsonl"
    script.write_text('"a reply"\n')
    line = d.fields["script_file"].line
    assert isinstance(line, QLineEdit)
    line.setText(str(script))
    assert d.save() is True
    loaded = load_settings()
    assert (loaded.policy, loaded.script_file) == ("script", script)


def test_hotkeys_are_captured_not_typed(qtbot: Any, make_dialog: Any) -> None:
    d = make_dialog()
    d.show()
    focus_window(qtbot, d)
    edit = d.fields["hotkey_palette"].editor
    assert isinstance(edit, HotkeyEdit)
    assert edit.keySequence().toString(QKeySequence.SequenceFormat.PortableText) == "Ctrl+Alt+H"
    edit.setFocus()
    qtbot.waitUntil(edit.hasFocus, timeout=10000)
    edit.clear()
    qtbot.keyClick(edit, Qt.Key.Key_J, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: edit.hotkey() == "<ctrl>+<shift>+j", timeout=10000)
    assert d.save() is True
    assert load_settings().hotkey_palette == "<ctrl>+<shift>+j"


def test_hotkey_syntax_round_trips() -> None:
    for hotkey in ("<ctrl>+<alt>+h", "<ctrl>+<alt>+x", "<ctrl>+<shift>+<f5>", "<alt>+<space>", "<cmd>+<enter>"):
        assert hotkey_from_sequence(sequence_from_hotkey(hotkey)) == hotkey
    assert hotkey_from_sequence(QKeySequence()) == ""


def test_the_precision_picker_shows_what_fits_this_gpu(make_dialog: Any) -> None:
    d = make_dialog(gpu=RTX_4090, precision="8bit")
    box = combo(d, "precision")
    texts = {box.itemData(i): box.itemText(i) for i in range(box.count())}
    assert texts["bf16"].endswith("needs 28 GiB: does not fit this GPU")
    assert texts["8bit"].endswith("fits this GPU") and texts["4bit"].endswith("fits this GPU")
    note = d.fields["precision"].note
    assert not note.isHidden() and "RTX 4090 has 23.0 GiB free" in note.text()
    box.setCurrentIndex(box.findData("bf16"))
    assert note.text().startswith("Full precision (bf16) does not fit")
    unknown = make_dialog(gpu=None)  # no GPU measured: no verdict per item, and the advice says so
    assert "fit" not in combo(unknown, "precision").itemText(0)
    assert "No NVIDIA GPU" in unknown.fields["precision"].note.text()


def test_the_model_picker_lists_the_registry_and_what_fits_this_gpu(make_dialog: Any) -> None:
    """The model list is the registry's (in its order, hub ids as values); each item says which precisions
    fit this GPU; choosing a model re-judges the precision picker; a typed folder is kept as typed."""
    from holodesk.policy.models import MODELS, get_model

    d = make_dialog(gpu=RTX_4090, precision="bf16")
    box = combo(d, "model")
    assert [box.itemData(i) for i in range(box.count())] == [m.hub_id for m in MODELS]
    texts = {box.itemData(i): box.itemText(i) for i in range(box.count())}
    for m in MODELS:
        fitting = [f.precision for f in m.precision_fits(RTX_4090.free_bytes) if f.fits]
        expected = f"fits this GPU in {', '.join(fitting)}" if fitting else "does not fit this GPU"
        assert texts[m.hub_id].startswith(m.display_name) and texts[m.hub_id].endswith(expected)
    assert texts["Hcompany/Holo2-8B"].endswith("fits this GPU in bf16, 8bit, 4bit")
    assert texts["Hcompany/Holotron-3-Nano"].endswith("does not fit this GPU")
    assert d.fields["model"].value() == "Hcompany/Holotron-12B"
    note = d.fields["precision"].note
    assert note.text().startswith("Full precision (bf16) does not fit")  # Holotron-12B: 8bit on 23 GiB
    box.setCurrentIndex(box.findData("Hcompany/Holo2-8B"))
    assert d.fields["model"].value() == "Hcompany/Holo2-8B"
    precision = combo(d, "precision")
    assert precision.itemText(precision.findData("bf16")).endswith(
        f"needs {get_model('holo2-8b').needs_free_bytes('bf16') // GIB} GiB: fits this GPU")
    assert "Holo2-8B runs in bf16" in note.text()
    assert "Holo2-8B (bf16)" in d.fields["model"].note.text() and "Holotron-3-Nano" not in d.fields["model"].note.text()
    box.setEditText("/data/models/my-checkpoint")
    assert d.fields["model"].value() == "/data/models/my-checkpoint"
    assert "not in Holodesk's model list" in note.text()
    assert d.save() and load_settings().model == "/data/models/my-checkpoint"
    box.setCurrentIndex(box.findData("Hcompany/Holo-3.1-9B"))
    assert d.save() and load_settings().model == "Hcompany/Holo-3.1-9B"


def _xdotool(*args: str) -> None:
    subprocess.run(["xdotool", *args], check=True, capture_output=True, timeout=10)


def test_F29_the_wheel_never_changes_a_field_that_is_not_focused(qtbot: Any, make_dialog: Any) -> None:
    """Real wheel clicks (X buttons 4/5 through xdotool) over Approval mode while the page has room to
    scroll: the page scrolls, no value changes; a focused field still takes the wheel."""
    if shutil.which("xdotool") is None:
        pytest.fail("xdotool is not installed (apt-get install xdotool)")
    d = make_dialog()
    d.resize(560, 360)  # the Basic page now scrolls
    d.move(40, 40)
    d.show()
    focus_window(qtbot, d)
    scroll = d.scroll_areas["Basic"]
    bar = scroll.verticalScrollBar()
    assert bar.maximum() > 0
    approval = combo(d, "approval")
    scroll.ensureWidgetVisible(approval)
    d.buttons.setFocus()
    qtbot.waitUntil(lambda: not approval.hasFocus(), timeout=10000)
    before = d.values()

    def wheel_over(widget: Any, button: str, times: int = 3) -> None:
        centre = widget.mapToGlobal(widget.rect().center())
        _xdotool("mousemove", "--sync", str(centre.x()), str(centre.y()))
        _xdotool("click", "--repeat", str(times), "--delay", "30", button)

    start = bar.value()
    wheel_over(approval, "5")  # wheel down over the unfocused combo box
    qtbot.waitUntil(lambda: bar.value() != start, timeout=5000)  # the wheel reached the page: it scrolled
    qtbot.wait(200)
    assert d.values() == before  # ... and changed nothing (Approval mode is still "step")
    assert approval.currentData() == "step"
    spin = d.fields["monitor"].editor
    assert isinstance(spin, QSpinBox)
    scroll.ensureWidgetVisible(spin)
    start = bar.value()
    assert start > 0
    wheel_over(spin, "4")  # wheel up over an unfocused spin box
    qtbot.waitUntil(lambda: bar.value() < start, timeout=5000)  # the page scrolled up ...
    qtbot.wait(200)
    assert d.values() == before  # ... and the monitor number did not change

    scroll.ensureWidgetVisible(approval)
    focus_window(qtbot, d)  # keyboard focus needs the dialog active: make sure it still is, then focus the field
    approval.setFocus()
    qtbot.waitUntil(approval.hasFocus, timeout=10000)
    wheel_over(approval, "5", times=1)  # the focused field takes the wheel, as everywhere else
    qtbot.waitUntil(lambda: approval.currentData() == "auto", timeout=5000)


def test_the_keychain_message_is_whole_and_under_the_key(qtbot: Any, make_dialog: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import keyring
    from keyring.backends import fail

    from holodesk import secrets

    monkeypatch.setattr(keyring, "get_keyring", lambda: fail.Keyring())  # no keychain backend at all
    d = make_dialog(policy="remote")
    d.show()
    wait_exposed(qtbot, d)
    endpoint = d.fields["endpoint"].editor
    assert isinstance(endpoint, QLineEdit)
    endpoint.setText("http://gpu-box:8000/v1")
    d.api_key.setText("sk-secret-1")
    assert d.save() is True  # the settings are saved; the key is not
    message = d.key_error
    qtbot.waitUntil(lambda: message.isVisible() and message.height() >= message.heightForWidth(message.width()),
                    timeout=10000)  # the whole wrapped text fits: nothing clipped
    assert "GNOME Keyring or KWallet" in message.text() and "sk-secret-1" not in message.text()
    assert THEME.palette.danger not in message.styleSheet() and THEME.palette.error_text not in message.styleSheet()
    assert "red" not in message.styleSheet()
    assert "keychain" not in d.status.text().lower() or "see the note under it" in d.status.text()
    assert d.status.text().startswith("Settings saved to ")
    assert d.key_row.isAncestorOf(message) and d.key_row.isAncestorOf(d.session_key_button)
    d.session_key_button.click()
    assert secrets.resolve_api_key("http://gpu-box:8000/v1") == ("sk-secret-1", "session")
    secrets.set_session_api_key("http://gpu-box:8000/v1", None)


def test_think_before_acting_says_what_it_costs_on_this_gpu(qtbot: Any, tmp_path: Path) -> None:
    """The note under "Think before acting" gives the expected seconds a step for the model, precision and GPU
    shown (fake device facts: an RTX 4090 at 1,008 GB/s), follows the precision picker, and says a server's cost
    depends on the server."""
    d = SettingsDialog(Settings(data_dir=tmp_path / "data", model="Hcompany/Holotron-12B", precision="bf16"),
                       path=tmp_path / "config" / "settings.toml", gpu=RTX_4090, bandwidth=10501e6 * 384 / 8 * 2)
    qtbot.addWidget(d)
    note = d.fields["reasoning"].note
    assert not note.isHidden()
    assert note.text() == ("Thinking adds about 8.2 s a step on this NVIDIA GeForce RTX 4090 with Holotron-12B bf16 "
                           "(about 300 tokens at ~27 ms each).")
    precision = combo(d, "precision")
    precision.setCurrentIndex(precision.findData("4bit"))
    assert note.text().startswith("Thinking adds about 4.3 s a step") and "Holotron-12B NF4" in note.text()
    policy = combo(d, "policy")
    policy.setCurrentIndex(policy.findData("remote"))
    assert note.text() == "What thinking adds a step depends on the server (its GPU and the model it serves)."
