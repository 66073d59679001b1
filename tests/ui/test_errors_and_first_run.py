"""Errors say what to do where the user looks, with buttons that do it, in one dialog (not a stack); the
first task failing on a machine without a fitting GPU leads to the wizard; the tray replays a file; the
download dialog shows progress, cancels and shows the download's advice."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import shiboken6
from PySide6.QtWidgets import QMessageBox, QPushButton

from holodesk.core.actions import Click, Done, Point
from holodesk.core.fit import GIB
from holodesk.errors import ModelLoadError, PolicyError, SettingsError
from holodesk.machine import GpuInfo
from holodesk.session.state import State
from holodesk.ui.app import _default_policy
from holodesk.ui.download import DownloadDialog, DownloadProgress, format_eta, progress_text
from holodesk.ui.notify import Notifier
from holodesk.ui.wizard import MachineFacts
from tests.ui.conftest import reply, wait_finished, wait_overlay

pytestmark = pytest.mark.gui


def buttons(box: QMessageBox) -> list[str]:
    """The remedy buttons (action role), in the order they were added."""
    return [b.text() for b in box.findChildren(QPushButton)
            if box.buttonRole(b) == QMessageBox.ButtonRole.ActionRole]


def test_one_dialog_per_failure_with_the_hint_in_the_main_text(qtbot: Any) -> None:
    notifier = Notifier()
    opened: list[str] = []
    notifier.set_remedy("settings", lambda: opened.append("settings"))
    notifier.set_remedy("retry", lambda: opened.append("retry"))
    error = PolicyError("The server at http://gpu-box:8000/v1 rejected the API key (HTTP 401).",
                        hint="Store the right key for this server in Settings.")
    for _ in range(3):
        notifier.error("The task could not run", error)
    qtbot.waitUntil(lambda: len(notifier.history) == 3, timeout=10000)
    assert len(notifier.open_dialogs) == 1  # the same failure three times: one dialog, counted
    box = notifier.open_dialogs[0]
    assert box.isVisible()
    assert "rejected the API key" in box.text() and "Store the right key" in box.text()  # no "Show Details"
    assert "This happened 3 times." in box.text()
    assert box.detailedText() == ""
    assert buttons(box) == ["Open Settings", "Retry"]
    notifier.error("Cannot open the logs folder", SettingsError("data folder is read-only"))
    qtbot.waitUntil(lambda: len(notifier.history) == 4, timeout=10000)
    assert len(notifier.open_dialogs) == 1 and notifier.open_dialogs[0] is not box  # replaced, not stacked
    old = box
    qtbot.waitUntil(lambda: not shiboken6.isValid(old) or not old.isVisible(), timeout=10000)
    box = notifier.open_dialogs[0]
    assert "data folder is read-only" in box.text() and "Retry" not in buttons(box)
    settings_button = next(b for b in box.findChildren(QPushButton) if b.text() == "Open Settings")
    settings_button.click()  # the button performs the remedy and closes the dialog
    assert opened == ["settings"]
    qtbot.waitUntil(lambda: notifier.open_dialogs == [], timeout=10000)
    notifier.error("Unexpected error", ValueError("boom"))  # a bug: the traceback is behind Show Details
    qtbot.waitUntil(lambda: len(notifier.open_dialogs) == 1, timeout=10000)
    assert "ValueError: boom" in notifier.open_dialogs[0].text()
    assert "ValueError: boom" in notifier.open_dialogs[0].detailedText()
    notifier.close_dialog()


def test_the_first_task_failing_without_a_fitting_gpu_opens_the_wizard(qtbot: Any, make_app: Any, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-nvidia-smi"))  # this machine has no NVIDIA driver (also in CI)
    kit = make_app([])
    app = kit.app
    app.notifier.use_dialogs = True

    def local_model_fails(settings: Any, progress: Any) -> Any:
        raise ModelLoadError("checkpoint Hcompany/Holotron-12B is not on this machine",
                             hint="Give a local checkpoint folder to run on the CPU anyway.")

    app.policy_factory = local_model_fails
    app.facts = lambda: MachineFacts(None, "no NVIDIA driver found", tmp_path / "models", 60 * 10**9, "x11 on :1",
                                     True, True, "", True)
    assert app.settings.policy == "local"  # the default
    app.start_task("open the calculator")
    qtbot.waitUntil(lambda: len(app.notifier.open_dialogs) == 1, timeout=10000)
    box = app.notifier.open_dialogs[0]
    assert "No NVIDIA GPU was found" in box.text() and "setup wizard" in box.text()
    assert "CPU anyway" not in box.text()
    assert buttons(box) == ["Open setup wizard", "Open Settings"]
    next(b for b in box.findChildren(QPushButton) if b.text() == "Open setup wizard").click()
    qtbot.waitUntil(lambda: app._wizard is not None and app._wizard.isVisible(), timeout=5000)
    wizard = app._wizard
    assert wizard is not None and not wizard.choice_page.local.isEnabled()  # the wizard offers what runs here
    wizard.close()


def test_a_gpu_that_fits_keeps_the_loaders_own_advice(qtbot: Any, make_app: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "nvidia-smi"  # a FAKE nvidia-smi reporting an 80 GB card (no NVIDIA driver here)
    fake.write_text('#!/bin/sh\necho "0, NVIDIA H100, 81559, 80000"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    kit = make_app([])
    kit.app.policy_factory = lambda s, p: (_ for _ in ()).throw(
        ModelLoadError("weights file is truncated", hint="Download the checkpoint again."))
    kit.app.start_task("anything")
    qtbot.waitUntil(lambda: any(n.level == "error" for n in kit.app.notifier.history), timeout=10000)
    notice = [n for n in kit.app.notifier.history if n.level == "error"][-1]
    assert notice.hint == "Download the checkpoint again."


def test_the_tray_replays_a_file(qtbot: Any, make_app: Any, tmp_path: Path) -> None:
    kit = make_app([])
    app = kit.app
    app.policy_factory = _default_policy  # the real factory: reads the replay file
    script = tmp_path / "demo.jsonl"
    script.write_text("\n".join(json.dumps(reply(a)) for a in (Click(Point(500, 500)), Done("replayed"))) + "\n")
    app.replay_file(script)
    wait_overlay(qtbot, app)
    app.approval.approve()
    result = wait_finished(qtbot, app)
    assert result.status is State.FINISHED and len(kit.executor.calls) == 1
    assert app.settings.policy == "local"  # replaying does not change the settings
    app.retry()  # Retry replays the file again, from its first reply
    qtbot.waitUntil(lambda: app.runner.running, timeout=5000)
    wait_overlay(qtbot, app)
    app.approval.approve()
    qtbot.waitUntil(lambda: not app.runner.running and len(kit.executor.calls) == 2, timeout=15000)


# ------------------------------------------------------------------------------------ download dialog
class FakeDownload:
    """A FAKE download manager (the real one is h15a's, tested on its own): reports progress, waits for the
    test's go, honours cancel, or fails with ``advice``."""

    def __init__(self, fail: BaseException | None = None, result_object: bool = False) -> None:
        self.fail = fail
        self.result_object = result_object
        self.go = threading.Event()
        self.calls = 0

    def __call__(self, repo_id: str, *, revision: str, cache_dir: Path, progress: Any,
                 cancel: threading.Event) -> Any:
        self.calls += 1
        progress(DownloadProgress(2_500_000_000, 26_400_000_000, 85_000_000.0, 281.0,
                                  "model-00001-of-00006.safetensors"))
        while not self.go.wait(0.02):
            if cancel.is_set():
                raise RuntimeError("download cancelled")
        if self.fail is not None:
            raise self.fail
        folder = cache_dir / "snapshot"
        folder.mkdir(parents=True, exist_ok=True)
        # the download manager returns a result whose ``folder`` is the snapshot; a plain path works too
        return SimpleNamespace(folder=folder) if self.result_object else folder


class GatedRepoError(Exception):
    """Shaped like the download manager's errors: a message and ``advice``."""

    def __init__(self, message: str, advice: str) -> None:
        super().__init__(message)
        self.advice = advice


def test_download_dialog_shows_progress_and_completes(qtbot: Any, tmp_path: Path) -> None:
    fake = FakeDownload(result_object=True)
    dialog = DownloadDialog(fake, "Hcompany/Holotron-12B", tmp_path / "cache")
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.start()
    qtbot.waitUntil(lambda: "of 26.4 GB" in dialog.numbers.text(), timeout=5000)
    assert dialog.numbers.text() == "2.5 GB of 26.4 GB · 85.0 MB/s · 4 min 41 s left"
    assert dialog.file.text() == "Fetching model-00001-of-00006.safetensors"
    assert dialog.bar.value() == 95
    fake.go.set()
    qtbot.waitUntil(lambda: dialog.state == "done", timeout=5000)
    assert dialog.result_path == tmp_path / "cache" / "snapshot" and not dialog.isVisible()


def test_download_dialog_names_the_model_it_fetches(qtbot: Any, tmp_path: Path) -> None:
    """The dialog fetches whichever model was chosen (every family downloads): its title names that model."""
    for repo_id, title in (("Hcompany/Holo2-8B", "Downloading Holo2-8B"),
                           ("Hcompany/Holotron-12B", "Downloading Holotron-12B"),
                           ("someone/own-model", "Downloading someone/own-model")):
        dialog = DownloadDialog(FakeDownload(), repo_id, tmp_path / "cache")
        qtbot.addWidget(dialog)
        assert dialog.windowTitle() == title


def test_download_dialog_cancel_stops_the_download(qtbot: Any, tmp_path: Path) -> None:
    fake = FakeDownload()
    dialog = DownloadDialog(fake, "Hcompany/Holotron-12B", tmp_path / "cache")
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.start()
    qtbot.waitUntil(lambda: dialog.file.text() != "", timeout=5000)
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: dialog.state == "cancelled", timeout=5000)
    assert dialog.wait(5) and dialog.result_path is None
    assert dialog.numbers.text() == "Cancelled." and dialog.message.isHidden()


def test_download_dialog_shows_the_errors_advice_and_retries(qtbot: Any, tmp_path: Path) -> None:
    fake = FakeDownload(GatedRepoError("401 Unauthorized for Hcompany/Holotron-12B",
                                       "Accept the model's licence on huggingface.co, then log in with "
                                       "`hf auth login`."))
    dialog = DownloadDialog(fake, "Hcompany/Holotron-12B", tmp_path / "cache")
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.start()
    fake.go.set()
    qtbot.waitUntil(lambda: dialog.state == "failed", timeout=5000)
    assert "401 Unauthorized" in dialog.message.text() and "hf auth login" in dialog.message.text()
    assert not dialog.retry_button.isHidden()
    fake.fail = None
    dialog.retry_button.click()
    qtbot.waitUntil(lambda: dialog.state == "done", timeout=5000)
    assert fake.calls == 2


def test_progress_words() -> None:
    assert format_eta(None) == "unknown" and format_eta(42) == "42 s" and format_eta(3725) == "1 h 2 min"
    assert progress_text(DownloadProgress(0, 0, 0.0, None, "")) == "0 B · unknown left"
    assert progress_text(DownloadProgress(10**9, 10**9, 0.0, 0.0, "")) == "1.0 GB of 1.0 GB"  # done: no "left"
    assert progress_text(DownloadProgress(10**9, 2 * 10**9, 0.0, None, "a", "checking")).startswith("Checking 1.0 GB")


def test_gpu_facts_sample_is_a_24gb_card() -> None:
    gpu = GpuInfo(0, "NVIDIA GeForce RTX 4090", 24 * GIB, int(23.0 * GIB))
    fitting = {f.model.key: f.best for f in MachineFacts(gpu, "", Path("/tmp"), 0, "x11", True, True, "", True).fitting}
    assert fitting["holotron-12b"] == "4bit" and fitting["holo2-8b"] == "bf16" and "holotron-3-nano" not in fitting


def test_first_run_opens_the_wizard(qtbot: Any, tmp_path: Path) -> None:
    from holodesk.settings import Settings
    from holodesk.ui.app import HolodeskApp

    app = HolodeskApp(Settings(data_dir=tmp_path / "data"), hotkeys=False, dialogs=False,
                      settings_path=tmp_path / "config" / "settings.toml",
                      facts=lambda: MachineFacts(None, "no NVIDIA driver found", tmp_path / "models", 60 * 10**9,
                                                 "x11 on :1", True, True, "", True))
    try:
        app.start(first_run=True)
        assert app._wizard is not None and app._wizard.isVisible()
        first = app._wizard
        app.actions.wizard.trigger()  # tray: Setup wizard... while it is open: the same wizard, not a second
        assert app._wizard is first
        first.reject()
        app.actions.wizard.trigger()  # and re-opened after it was closed
        assert app._wizard is not None and app._wizard.isVisible()
    finally:
        app.shutdown()
        app.palette.deleteLater()


def test_the_local_model_without_its_runtime_offers_the_wizard(qtbot: Any, make_app: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's first task on a machine set up without a GPU: the real policy factory finds no torch
    (``sys.modules['torch'] = None`` stands in for the missing package) and the error has the *Open setup
    wizard* button, not a bare ModuleNotFoundError line."""
    import sys

    from holodesk.ui import app as app_module

    monkeypatch.setenv("PATH", str(tmp_path / "no-nvidia-smi"))
    monkeypatch.setitem(sys.modules, "torch", None)
    kit = make_app([])
    app = kit.app
    app.notifier.use_dialogs = True
    app.policy_factory = lambda settings, progress: app_module._default_policy(settings, progress)
    app.start_task("click OK")
    qtbot.waitUntil(lambda: len(app.notifier.open_dialogs) == 1, timeout=10000)
    box = app.notifier.open_dialogs[0]
    assert "ModuleNotFoundError" not in box.text() and "setup wizard" in box.text(), box.text()
    assert buttons(box) == ["Open setup wizard", "Open Settings"]
    app.notifier.close_dialog()
