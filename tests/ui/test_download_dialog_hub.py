"""F30 in the app: the download dialog driving the real download manager (``hub_download``, which
``run_app`` hands to the setup wizard) against a real HTTP server on loopback playing the hub
(``HF_ENDPOINT``): the figures come from the manager, Cancel ends the download within a second and
leaves a resumable partial file, Start again resumes it, and a failure shows the manager's advice."""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from holodesk.ui.app import hub_download
from holodesk.ui.download import DownloadDialog
from tests.helpers.hub import LoopbackHub, loopback_hub, partial_sizes

pytestmark = pytest.mark.gui

REPO = "owner/model"
SHARD = "model.safetensors"
MiB = 1024 * 1024
SHARD_BYTES = random.Random(15).randbytes(24 * MiB)
CONFIG = b'{"model_type": "qwen3_vl"}\n'  # a family Holodesk runs: the manager checks it before the weights


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LoopbackHub]:
    with loopback_hub() as server:
        server.add_repo(REPO, {"config.json": CONFIG, SHARD: SHARD_BYTES})
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


def _partials(cache: Path) -> list[Path]:
    return list(partial_sizes(cache, REPO))


def test_cancel_in_the_dialog_stops_within_a_second_and_start_again_resumes(qtbot: Any, qapp: Any, hub: LoopbackHub,
                                                                           tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    hub.faults.bytes_per_s = 6 * MiB
    dialog = DownloadDialog(hub_download, REPO, cache)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.start()
    qtbot.waitUntil(lambda: any(n >= 10 * MiB for n in partial_sizes(cache, REPO).values()), timeout=30000)
    qtbot.waitUntil(lambda: dialog.bar.maximum() == 1000 and dialog.bar.value() >= 300, timeout=5000)
    assert " of 25.2 MB" in dialog.numbers.text() and "/s" in dialog.numbers.text()
    assert SHARD in dialog.file.text()
    pressed = time.monotonic()
    qtbot.mouseClick(dialog.cancel_button, qtbot_button())
    assert dialog.wait(1.0), "the download was still running a second after Cancel"
    assert time.monotonic() - pressed < 1.0
    qtbot.waitUntil(lambda: dialog.state == "cancelled", timeout=5000)
    [partial] = _partials(cache)
    kept = partial.stat().st_size
    assert partial.read_bytes() == SHARD_BYTES[:kept]
    hub.faults.bytes_per_s = None
    hub.requests.clear()
    qtbot.mouseClick(dialog.retry_button, qtbot_button())  # "Start again"
    qtbot.waitUntil(lambda: dialog.state == "done", timeout=30000)
    assert hub.gets(SHARD) == [f"bytes={kept}-"]
    assert dialog.result_path is not None
    assert hashlib.sha256((dialog.result_path / SHARD).read_bytes()).digest() == hashlib.sha256(SHARD_BYTES).digest()
    assert _partials(cache) == []


def test_a_failed_download_shows_the_managers_advice(qtbot: Any, qapp: Any, hub: LoopbackHub, tmp_path: Path) -> None:
    hub.faults.gated = True
    dialog = DownloadDialog(hub_download, REPO, tmp_path / "cache")
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.start()
    qtbot.waitUntil(lambda: dialog.state == "failed", timeout=30000)
    text = dialog.message.text()
    assert "gated model" in text and f"holodesk download {REPO} --login" in text and "keychain" in text


def test_the_dialogs_bar_and_figures_follow_the_bytes_on_disk(qtbot: Any, qapp: Any, hub: LoopbackHub,
                                                              tmp_path: Path) -> None:
    """The bar moves in small steps (not 10 MiB ones) and each value it shows, and the "X MB of Y MB" line,
    is what the cache holds on disk when it is shown (the shard's partial file plus config.json)."""
    cache = tmp_path / "cache"
    config = len(CONFIG)
    total = config + len(SHARD_BYTES)
    hub.faults.bytes_per_s = 6 * MiB  # the 24 MiB shard takes about four seconds
    dialog = DownloadDialog(hub_download, REPO, cache)
    qtbot.addWidget(dialog)
    shown: list[tuple[int, str, int]] = []  # (bar value of 1000, figures line, bytes on disk then)

    def record(value: int) -> None:
        partial = list(partial_sizes(cache, REPO).values())
        if dialog.bar.maximum() == 1000 and partial:
            shown.append((value, dialog.numbers.text(), config + partial[0]))

    dialog.bar.valueChanged.connect(record)
    dialog.show()
    dialog.start()
    qtbot.waitUntil(lambda: dialog.state in ("done", "failed"), timeout=60000)
    assert dialog.state == "done", dialog.message.text()
    values = [v for v, _text, _disk in shown]
    assert len(set(values)) >= 10, f"the bar moved only through {sorted(set(values))}"
    for value, _text, disk in shown:  # the worker keeps writing while Qt delivers the report: disk may be ahead
        assert value * total / 1000 - total / 2000 <= disk <= value * total / 1000 + 3 * MiB, (value, disk)
    # the figures line is set together with the bar: "12.3 MB of 25.2 MB", decimal MB as the line says
    for _value, text, disk in shown:
        figure = float(text.split(" MB of ", 1)[0]) * 1e6 if " MB of " in text else 0.0
        assert figure - 0.05e6 <= disk <= figure + 0.05e6 + 3 * MiB, (text, disk)


def qtbot_button() -> Any:
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton
