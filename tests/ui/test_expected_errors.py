"""The desktop app meets expected errors with a message box, never a traceback.

The policy is the real local one (the real loader, given a checkpoint folder that does not exist); the
screen is a FakeCapture and the input a RecordingExecutor (fakes: nothing may be performed here).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from holodesk.capture.fake import FakeCapture
from holodesk.control.recording import RecordingExecutor
from tests.ui.conftest import blank_frame

pytestmark = pytest.mark.gui


def test_a_model_that_cannot_load_shows_an_error_dialog_and_no_traceback(
        qtbot: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    from holodesk.settings import Settings
    from holodesk.ui.app import HolodeskApp

    missing = tmp_path / "no-such-checkpoint"
    settings = Settings(data_dir=tmp_path / "data", policy="local", model=str(missing))
    executor = RecordingExecutor()
    app = HolodeskApp(settings, force_window=True, hotkeys=False,
                      capture_factory=lambda _s: FakeCapture([blank_frame()]),
                      executor_factory=lambda _s, _stop: executor, settings_path=tmp_path / "settings.toml",
                      dialogs=True, focus_probe=lambda: "mousepad Mousepad")
    app.start()
    try:
        with caplog.at_level(logging.INFO):
            app.start_task("open the Downloads folder")
            qtbot.waitUntil(lambda: not app.runner.running and bool(app.notifier.open_dialogs), timeout=60000)
        (box,) = app.notifier.open_dialogs
        assert str(missing) in box.text()
        assert "Traceback" not in box.text() and "Traceback" not in box.detailedText()
        assert [n.level for n in app.notifier.history if n.level == "error"] == ["error"]
        assert not [r for r in caplog.records if r.exc_info], "an expected error was logged with a traceback"
        assert "Traceback" not in capfd.readouterr().err
        assert executor.calls == []
        for b in app.notifier.open_dialogs:
            b.close()
    finally:
        app.shutdown(wait_s=10.0)
        if app.window is not None:
            app.window.deleteLater()
        app.palette.deleteLater()
