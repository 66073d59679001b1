"""The first-run wizard: each of its three paths ends in settings that run here, or does not finish.

The server path talks to a real OpenAI-compatible server on loopback (tests/policy/scripted_openai_server.py)
and stores the key in a real GNOME Keyring; the local path drives the download dialog with a FAKE download
manager (the real one is tested on its own; this machine has no GPU and no network).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QWizard

from holodesk import secrets
from holodesk.core.fit import GIB
from holodesk.machine import GpuInfo
from holodesk.settings import Settings, load_settings
from holodesk.ui import wizard as wizard_module
from holodesk.ui.download import DownloadDialog, DownloadProgress
from holodesk.ui.wizard import MachineFacts, SetupWizard, check_server
from tests.policy.remote_helpers import ScriptedServer

pytestmark = pytest.mark.gui

KEY = "sk-wizard-test-4c3b2a"
MODEL = "Hcompany/Holotron-12B"


def facts(free_gib: float | None, tmp_path: Path, *, keychain: bool = True) -> MachineFacts:
    gpu = None if free_gib is None else GpuInfo(0, "NVIDIA GeForce RTX 4090", 24 * GIB, int(free_gib * GIB))
    return MachineFacts(gpu=gpu, gpu_detail="" if gpu else "no NVIDIA driver found (nvidia-smi is not installed)",
                        cache_dir=tmp_path / "models", disk_free_bytes=60 * 10**9, display="x11 on :99",
                        display_usable=True, keychain_usable=keychain,
                        keychain_detail="" if keychain else "no keychain backend is available", tray=True)


@pytest.fixture
def make_wizard(qtbot: Any, tmp_path: Path) -> Iterator[Callable[..., SetupWizard]]:
    made: list[SetupWizard] = []

    def make(machine: MachineFacts, download: Any = None, settings: Settings | None = None) -> SetupWizard:
        w = SetupWizard(settings or Settings(data_dir=tmp_path / "data"), machine,
                        path=tmp_path / "config" / "settings.toml", download=download)
        qtbot.addWidget(w)
        w.show()
        made.append(w)
        return w

    yield make
    for w in made:
        w.server_page.wait(15)


def finish_enabled(w: SetupWizard) -> bool:
    return w.button(QWizard.WizardButton.FinishButton).isEnabled()


def fake_download(repo_id: str, *, revision: str, cache_dir: Path, progress: Any,
                  cancel: threading.Event) -> Path:
    """A FAKE download manager: three progress reports, then a checkpoint folder with a config.json."""
    files = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    for i, name in enumerate(files):
        progress(DownloadProgress((i + 1) * 10**9, 3 * 10**9, 85e6, (2 - i) * 12.0, name))
    folder = cache_dir / "models--Hcompany--Holotron-12B" / "snapshots" / "0123abcd"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "NemotronH_Nano_VL_V2", "repo": repo_id}))
    return folder


def test_without_a_fitting_gpu_the_local_model_is_not_offered(make_wizard: Any, tmp_path: Path) -> None:
    for free in (None, 3.0):  # no NVIDIA GPU; a GPU too small even for the smallest model in 4-bit
        w = make_wizard(facts(free, tmp_path))
        page = w.choice_page
        assert not page.local.isEnabled() and page.server.isChecked()
        assert "Use a server" in page.local_note.text()
        if free is None:  # the note is about every model, not only the smallest it names
            assert page.local_note.text().startswith("No NVIDIA GPU was found, so none of the listed models")
        w.next()
        assert w.currentId() == w.PAGE_SERVER
        assert not finish_enabled(w)  # nothing tested yet: cannot finish


def test_local_path_picks_the_precision_that_fits_and_downloads(qtbot: Any, make_wizard: Any, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # a FAKE disk reading: the download needs ~27 GB free and CI disks differ
    monkeypatch.setattr(wizard_module, "disk_free_bytes", lambda path: 60 * 10**9)
    w = make_wizard(facts(23.0, tmp_path), download=fake_download)  # a 24 GB card with a desktop on it
    assert w.choice_page.local.isEnabled() and w.choice_page.local.isChecked()
    w.next()
    page = w.local_page
    assert w.currentId() == w.PAGE_LOCAL
    assert page.precision.currentData() == "4bit"  # 8-bit fits too, but is several times slower per step
    assert "23.0 GiB free" in page.explanation.text() and "bf16" in page.explanation.text()
    model = page.precision.model()
    enabled = {page.precision.itemData(i): model.item(i).isEnabled() for i in range(page.precision.count())}
    assert enabled == {"bf16": False, "8bit": True, "4bit": True}
    assert "does not fit" in page.precision.itemText(0)
    assert not finish_enabled(w)  # no checkpoint yet
    assert page.download_button.isEnabled()
    dialog = page.start_download()
    assert isinstance(dialog, DownloadDialog)
    qtbot.waitUntil(lambda: dialog.state == "done", timeout=10000)
    assert dialog.result_path is not None and (dialog.result_path / "config.json").exists()
    qtbot.waitUntil(lambda: finish_enabled(w), timeout=5000)
    assert page.checkpoint == dialog.result_path
    w.button(QWizard.WizardButton.FinishButton).click()
    saved = load_settings()
    assert (saved.policy, saved.precision, saved.model) == ("local", "4bit", str(dialog.result_path))


def test_local_page_offers_only_the_models_that_fit_and_downloads_the_chosen_one(
        qtbot: Any, make_wizard: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a 24 GB card the model list is the registry's models that fit (Holotron-3-Nano does not); choosing
    Holo2-8B re-picks the precision (bf16 fits) and the download fetches Holo2-8B's hub repo."""
    from holodesk.policy.models import models_that_fit

    monkeypatch.setattr(wizard_module, "disk_free_bytes", lambda path: 60 * 10**9)  # FAKE disk reading
    asked: list[str] = []

    def recording_download(repo_id: str, **kw: Any) -> Path:
        asked.append(repo_id)
        return fake_download(repo_id, **kw)

    w = make_wizard(facts(23.0, tmp_path), download=recording_download)
    assert "Holo2-8B (bf16)" in w.choice_page.local_note.text()
    w.next()
    page = w.local_page
    listed = [page.model.itemData(i) for i in range(page.model.count())]
    assert listed == [f.model.key for f in models_that_fit(int(23.0 * GIB))]
    assert "holotron-3-nano" not in listed and "holo2-8b" in listed
    assert page.model.currentData() == "holotron-12b"  # the settings' model fits: it is kept
    page.model.setCurrentIndex(page.model.findData("holo2-8b"))
    assert page.precision.currentData() == "bf16"
    assert "Holo2-8B runs in bf16" in page.explanation.text()
    assert page.download_button.text() == "Download Holo2-8B"
    dialog = page.start_download()
    assert isinstance(dialog, DownloadDialog)
    qtbot.waitUntil(lambda: dialog.state == "done", timeout=10000)
    assert asked == ["Hcompany/Holo2-8B"]
    # the FAKE download writes a Holotron-12B cache folder: the page says it holds another model
    assert page.checkpoint is None and "holds Holotron-12B, not Holo2-8B" in page.folder_state.text()
    page.model.setCurrentIndex(page.model.findData("holotron-12b"))
    qtbot.waitUntil(lambda: finish_enabled(w), timeout=5000)


def test_local_path_with_too_little_disk_says_so(make_wizard: Any, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wizard_module, "disk_free_bytes", lambda path: 5 * 10**9)  # FAKE: a nearly full disk
    w = make_wizard(facts(80.0, tmp_path), download=fake_download)
    w.next()
    page = w.local_page
    assert page.precision.currentData() == "bf16"
    assert not page.download_button.isEnabled()
    assert "only 5.0 GB free" in page.folder_state.text() and "Choose another folder" in page.folder_state.text()
    existing = tmp_path / "my-checkpoint"  # a checkpoint already on disk is accepted as it is
    existing.mkdir()
    (existing / "config.json").write_text("{}")
    page.folder.setText(str(existing))
    assert finish_enabled(w)
    w.button(QWizard.WizardButton.FinishButton).click()
    assert (load_settings().policy, load_settings().model) == ("local", str(existing))


def test_server_path_tests_for_real_and_stores_the_key_in_the_keychain(qtbot: Any, make_wizard: Any,
                                                                       tmp_path: Path, gnome_keyring: Path) -> None:
    server = ScriptedServer("--api-key", KEY, "--models", MODEL)
    try:
        w = make_wizard(facts(None, tmp_path))
        w.next()
        page = w.server_page
        page.url.setText(server.url)
        page.key.setText("sk-wrong")
        page.test_button.click()
        qtbot.waitUntil(lambda: page.test_button.isEnabled() and page.result.text().startswith("✖"), timeout=15000)
        assert "rejected the API key (HTTP 401)" in page.result.text()
        assert "sk-wrong" not in page.result.text()
        assert not finish_enabled(w)
        page.key.setText(KEY)
        page.test_button.click()
        qtbot.waitUntil(lambda: page.result.text().startswith("✔"), timeout=15000)
        assert f"serves {MODEL}" in page.result.text()
        # the server saw two real GET /v1/models requests: the wrong key, then the right one
        assert [r["auth_ok"] for r in server.requests("/v1/models")] == [False, True]
        assert finish_enabled(w)
        page.model.setText("other-model")  # an edit after the test: not tested, so no Finish
        assert not finish_enabled(w)
        page.test_button.click()
        qtbot.waitUntil(lambda: page.test_button.isEnabled() and page.result.text().startswith("✖"), timeout=15000)
        assert "does not serve 'other-model'" in page.result.text() and not finish_enabled(w)
        page.model.setText(MODEL)
        page.test_button.click()
        qtbot.waitUntil(lambda: finish_enabled(w), timeout=15000)
        w.button(QWizard.WizardButton.FinishButton).click()
        saved = load_settings()
        assert (saved.policy, saved.endpoint, saved.model) == ("remote", server.url, MODEL)
        assert secrets.load_api_key(server.url) == KEY  # read back from GNOME Keyring
        assert KEY not in (tmp_path / "config" / "settings.toml").read_text()
    finally:
        server.stop()


def test_server_test_messages_for_a_missing_model_and_an_unreachable_server(make_wizard: Any) -> None:
    server = ScriptedServer("--models", "some-other-model")
    try:
        message = check_server(server.url, MODEL, "sk-unused")
        assert message is not None and "does not serve 'Hcompany/Holotron-12B'" in message
        assert "some-other-model" in message
    finally:
        server.stop()
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    message = check_server(f"http://127.0.0.1:{port}/v1", MODEL, "sk-unused")
    assert message is not None and f"127.0.0.1:{port}" in message
    assert "reach" in message.lower() or "connect" in message.lower()


def test_server_path_without_a_keychain_offers_this_session_only(qtbot: Any, make_wizard: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import keyring
    from keyring.backends import fail

    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())  # no keychain backend at all (a headless machine)
    monkeypatch.setattr(secrets, "_session_keys", {})
    server = ScriptedServer("--api-key", KEY, "--models", MODEL)
    try:
        w = make_wizard(facts(None, tmp_path, keychain=False))
        w.next()
        page = w.server_page
        page.url.setText(server.url)
        page.key.setText(KEY)
        page.test_button.click()
        qtbot.waitUntil(lambda: finish_enabled(w), timeout=15000)
        w.button(QWizard.WizardButton.FinishButton).click()
        assert w.isVisible() and not (tmp_path / "config" / "settings.toml").exists()
        assert "this session only" in page.result.text() and KEY not in page.result.text()
        assert not page.session_button.isHidden()
        page.session_button.click()
        w.button(QWizard.WizardButton.FinishButton).click()
        assert not w.isVisible()
        assert secrets.resolve_api_key(server.url) == (KEY, "session")
        assert load_settings().policy == "remote"
    finally:
        keyring.set_keyring(before)
        server.stop()


def test_replay_path_checks_the_file(make_wizard: Any, tmp_path: Path) -> None:
    w = make_wizard(facts(None, tmp_path))
    w.choice_page.replay.setChecked(True)
    w.next()
    page = w.replay_page
    page.file.setText("")  # the shipped example is offered first
    assert w.currentId() == w.PAGE_REPLAY and not finish_enabled(w)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    page.file.setText(str(bad))
    assert "not valid JSON" in page.state.text() and not finish_enabled(w)
    good = tmp_path / "demo.jsonl"
    good.write_text(json.dumps({"tool_call": {"name": "answer", "arguments": {"text": "hi"}}}) + "\n"
                    + json.dumps("a second reply") + "\n")
    page.file.setText(str(good))
    assert page.state.text() == "✔ 2 replies." and finish_enabled(w)
    w.button(QWizard.WizardButton.FinishButton).click()
    saved = load_settings()
    assert (saved.policy, saved.script_file) == ("script", good)


def test_cancel_leaves_the_settings_untouched(make_wizard: Any, tmp_path: Path) -> None:
    w = make_wizard(facts(80.0, tmp_path))
    w.next()
    w.button(QWizard.WizardButton.CancelButton).click()
    assert not (tmp_path / "config" / "settings.toml").exists()


def test_closing_the_wizard_cancels_a_running_download(qtbot: Any, make_wizard: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wizard_module, "disk_free_bytes", lambda path: 60 * 10**9)  # FAKE disk reading
    seen_cancel = threading.Event()

    def fake_slow_download(repo_id: str, *, revision: str, cache_dir: Path, progress: Any,
                           cancel: threading.Event) -> Path:
        """A FAKE download that runs until it is cancelled."""
        progress(DownloadProgress(10**9, 26 * 10**9, 5e7, 500.0, "model-00001-of-00006.safetensors"))
        if cancel.wait(30):
            seen_cancel.set()
            raise RuntimeError("cancelled")
        raise AssertionError("never cancelled")

    w = make_wizard(facts(40.0, tmp_path), download=fake_slow_download)
    w.next()
    dialog = w.local_page.start_download()
    assert dialog is not None
    qtbot.waitUntil(lambda: dialog.file.text() != "", timeout=5000)
    w.reject()  # Cancel on the wizard (or Quit, which closes it)
    assert not dialog.isVisible()  # the download's window goes with the wizard, not left behind alone
    assert seen_cancel.wait(5) and dialog.wait(5)
    qtbot.waitUntil(lambda: dialog.state == "cancelled", timeout=5000)
    assert not (tmp_path / "config" / "settings.toml").exists()


def test_a_bad_server_url_is_answered_without_a_request(make_wizard: Any, tmp_path: Path) -> None:
    w = make_wizard(facts(None, tmp_path))
    w.next()
    page = w.server_page
    page.url.setText("gpu-box:8000")
    page.test_button.click()
    assert page.result.text().startswith("✖ endpoint must start with http:// or https://")
    assert page.test_button.isEnabled() and not finish_enabled(w)


def test_the_replay_page_offers_the_example_that_ships_and_it_plays_to_an_answer(make_wizard: Any,
                                                                                  tmp_path: Path) -> None:
    from holodesk.core.actions import Answer
    from holodesk.policy.scripted import ScriptedPolicy
    from holodesk.ui.wizard import EXAMPLE_REPLAY

    w = make_wizard(facts(None, tmp_path))
    w.choice_page.replay.setChecked(True)
    w.next()
    page = w.replay_page
    assert Path(page.file.text()) == EXAMPLE_REPLAY and EXAMPLE_REPLAY.is_file()
    assert page.state.text() == "✔ 3 replies." and finish_enabled(w)
    policy = ScriptedPolicy(EXAMPLE_REPLAY)
    import numpy as np

    from holodesk.core.geometry import Frame, Monitor
    from holodesk.policy.base import Observation

    seen = Observation(task="t", frame=Frame(np.zeros((4, 4, 3), np.uint8), Monitor(1, 0, 0, 4, 4)))
    actions = [policy.propose(seen).action for _ in range(3)]
    assert isinstance(actions[-1], Answer) and "replay" in actions[-1].text
