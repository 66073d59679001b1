"""Settings: layering, validation with field-level messages, atomic save, no secrets, documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from holodesk.core.approval import ApprovalMode
from holodesk.errors import SettingsError
from holodesk.settings import (
    Settings,
    documented_fields,
    load_settings,
    save_settings,
    settings_markdown,
    validate_field,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = tmp_path / "settings.toml"
    monkeypatch.setenv("HOLODESK_CONFIG", str(cfg))
    for var in list(__import__("os").environ):
        if var.startswith("HOLODESK_") and var != "HOLODESK_CONFIG":
            monkeypatch.delenv(var)
    return cfg


def test_layers_defaults_file_env_cli(_isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().max_steps == 30
    _isolated.write_text("max_steps = 12\nmonitor = 2\n")
    assert load_settings().max_steps == 12
    monkeypatch.setenv("HOLODESK_MAX_STEPS", "7")
    s = load_settings()
    assert (s.max_steps, s.monitor) == (7, 2)
    assert load_settings(max_steps=3, monitor=None).max_steps == 3


def test_bad_values_name_the_field(_isolated: Path) -> None:
    _isolated.write_text("max_steps = 0\n")
    with pytest.raises(SettingsError, match="max_steps"):
        load_settings()
    with pytest.raises(SettingsError, match="endpoint"):
        validate_field("endpoint", "gpu-box:8000")
    assert validate_field("max_images", "4") == 4


def test_syntax_error_and_unknown_key(_isolated: Path) -> None:
    _isolated.write_text("max_steps = \n")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings()
    _isolated.write_text("frobnicate = 1\n")
    with pytest.raises(SettingsError, match="frobnicate: unknown setting"):
        load_settings()


def test_secrets_are_refused_in_the_file(_isolated: Path) -> None:
    _isolated.write_text('api_key = "sk-123"\n')
    with pytest.raises(SettingsError, match="keychain"):
        load_settings()


def test_save_is_atomic_and_round_trips(_isolated: Path) -> None:
    s = load_settings(max_steps=9, approval="auto")
    path = save_settings(s)
    assert path == _isolated
    assert load_settings().max_steps == 9 and load_settings().approval == "auto"
    assert [p.name for p in path.parent.iterdir()] == ["settings.toml"]  # no temp files left


def test_approval_mode_is_written_as_its_word(_isolated: Path) -> None:
    """The approval mode is an enum in the code and the same word as before in settings.toml."""
    s = load_settings(approval="auto")
    assert s.approval is ApprovalMode.AUTO
    save_settings(s)
    assert 'approval = "auto"' in _isolated.read_text(encoding="utf-8")
    assert load_settings().approval is ApprovalMode.AUTO
    with pytest.raises(SettingsError, match="approval"):
        load_settings(approval="autopilot")


def test_every_setting_is_documented() -> None:
    docs = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    for name, help_text in documented_fields().items():
        assert help_text, f"setting {name} has no description"
        assert f"`{name}`" in docs, f"setting {name} is missing from docs/settings.md"
    assert set(documented_fields()) == set(Settings.model_fields)
    assert docs == settings_markdown(), "docs/settings.md is stale: run python -m holodesk.settings"


@pytest.mark.parametrize("url", ["http://user:s3cret-pw@example.org:8000/v1", "https://s3cret-pw@example.org/v1"])
def test_credentials_in_the_endpoint_are_refused_without_printing_them(url: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """From the command line, a variable or the file: the message says what to do and never shows them."""
    import os
    import subprocess
    import sys

    with pytest.raises(SettingsError) as caught:
        load_settings(endpoint=url)
    assert "no credentials" in str(caught.value) and "s3cret" not in str(caught.value)
    assert "***@example.org" in str(caught.value)
    monkeypatch.setenv("HOLODESK_ENDPOINT", url)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "s3cret" not in str(caught.value)
    monkeypatch.delenv("HOLODESK_ENDPOINT")
    (tmp_path / "file.toml").write_text(f'endpoint = "{url}"\n', encoding="utf-8")
    monkeypatch.setenv("HOLODESK_CONFIG", str(tmp_path / "file.toml"))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "no credentials" in str(caught.value) and "s3cret" not in str(caught.value)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLODESK_")}
    env.update(HOLODESK_CONFIG=str(tmp_path / "settings.toml"), HOLODESK_DATA_DIR=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT / "app"))
    res = subprocess.run([sys.executable, "-m", "holodesk", "run", "a task", "--endpoint", url], env=env,
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 2 and "no credentials" in res.stderr, res.stdout + res.stderr
    assert "s3cret" not in res.stdout + res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("source", ["cli", "env", "file"])
def test_monitor_0_all_monitors_is_refused_saying_to_pick_one(source: str, _isolated: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """mss calls the whole virtual desktop monitor 0; Holodesk acts on one monitor, and says so."""
    if source == "env":
        monkeypatch.setenv("HOLODESK_MONITOR", "0")
    elif source == "file":
        _isolated.write_text("monitor = 0\n")
    with pytest.raises(SettingsError) as info:
        load_settings(monitor=0 if source == "cli" else None)
    message = str(info.value)
    assert "not all monitors together; pick one (1 = first), `holodesk doctor` lists them" in message
    assert "Value error" not in message
    with pytest.raises(SettingsError, match="pick one"):
        validate_field("monitor", 0)
    assert validate_field("monitor", 2) == 2
