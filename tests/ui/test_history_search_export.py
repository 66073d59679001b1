"""History people can use: search by task text and date, export an episode as a zip of its JSONL and
PNGs, delete one (after a confirmation)."""

from __future__ import annotations

import datetime as dt
import json
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QDate
from PySide6.QtWidgets import QPushButton

from holodesk.core.actions import Click, Point
from holodesk.core.wording import describe
from holodesk.errors import HolodeskError
from holodesk.session.episode import EPISODE_FILE, delete_episode, export_episode
from holodesk.ui.history import HistoryWindow
from tests.ui.conftest import wait_finished, wait_overlay

pytestmark = pytest.mark.gui


def record(qtbot: Any, make_app: Any, task: str) -> Path:
    """Run one real one-click task through the app; returns its episode folder."""
    kit = make_app([Click(Point(300, 300))])
    kit.app.start_task(task)
    wait_overlay(qtbot, kit.app)
    kit.app.approval.approve()
    result = wait_finished(qtbot, kit.app)
    assert result.episode_path is not None
    return Path(result.episode_path)


def backdate(folder: Path, day: dt.datetime) -> None:
    """Rewrite an episode's start time (as if it had been recorded on ``day``)."""
    file = folder / EPISODE_FILE
    lines = file.read_text(encoding="utf-8").splitlines()
    start = json.loads(lines[0])
    start["started_at"] = day.timestamp()
    file.write_text("\n".join([json.dumps(start), *lines[1:]]) + "\n", encoding="utf-8")


def test_search_by_task_text_and_date(qtbot: Any, make_app: Any, tmp_path: Path) -> None:
    invoice = record(qtbot, make_app, "Send the March invoice to Alice")
    time.sleep(1.1)  # episode folders are named by the second they started
    record(qtbot, make_app, "Rename the holiday photos")
    backdate(invoice, dt.datetime(2026, 3, 2, 9, 30))
    window = HistoryWindow(tmp_path / "data" / "episodes")
    qtbot.addWidget(window)
    assert window.episode_list.count() == 2
    window.search.setText("INVOICE")  # any case
    assert window.episode_list.count() == 1
    assert window.episode_list.item(0).text().startswith("Send the March invoice to Alice\n2026-03-02 09:30")
    window.search.setText("nothing like this")
    assert window.episode_list.count() == 0 and window.header.text() == "No episode matches the search."
    assert not window.export_button.isEnabled() and not window.delete_button.isEnabled()
    window.search.clear()
    window.date_from.setDate(QDate(2026, 3, 1))
    window.date_to.setDate(QDate(2026, 3, 31))
    assert window.episode_list.count() == 1 and "invoice" in window.episode_list.item(0).text()
    window.date_from.setDate(QDate.currentDate())
    window.date_to.setDate(QDate.currentDate())
    assert window.episode_list.count() == 1 and "holiday" in window.episode_list.item(0).text()
    assert window.step_list.item(0).text().startswith(f"1. {describe(Click(Point(300, 300)))}")


def test_export_is_a_zip_of_the_jsonl_and_pngs(qtbot: Any, make_app: Any, tmp_path: Path) -> None:
    folder = record(qtbot, make_app, "export me")
    window = HistoryWindow(tmp_path / "data" / "episodes")
    qtbot.addWidget(window)
    target = window.export_selected(tmp_path / "out" / "export-me.zip")
    assert target is None and "cannot write" in window.header.text()  # no such folder: says so
    (tmp_path / "out").mkdir()
    target = window.export_selected(tmp_path / "out" / "export-me.zip")
    assert target is not None and window.header.text() == f"Exported to {target}"
    with zipfile.ZipFile(target) as zf:
        names = sorted(zf.namelist())
        pngs = sorted(p.name for p in folder.glob("*.png"))
        assert names == sorted([f"{folder.name}/{EPISODE_FILE}", *(f"{folder.name}/{p}" for p in pngs)])
        assert len(pngs) == 2  # the click step and the done step
        assert zf.read(f"{folder.name}/{EPISODE_FILE}") == (folder / EPISODE_FILE).read_bytes()
        assert zf.read(f"{folder.name}/{pngs[0]}") == (folder / pngs[0]).read_bytes()


def test_delete_asks_then_deletes_only_that_episode(qtbot: Any, make_app: Any, tmp_path: Path) -> None:
    keep = record(qtbot, make_app, "keep this one")
    time.sleep(1.1)
    gone = record(qtbot, make_app, "delete this one")
    window = HistoryWindow(tmp_path / "data" / "episodes")
    qtbot.addWidget(window)
    window.search.setText("delete this")
    box = window.ask_delete()
    assert box is not None and "delete this one" in box.text() and gone.exists()
    next(b for b in box.findChildren(QPushButton) if b.text() == "Delete").click()
    assert not gone.exists() and keep.exists()
    window.search.clear()
    assert window.episode_list.count() == 1 and "keep this one" in window.episode_list.item(0).text()


def test_delete_refuses_anything_but_an_episode_folder(tmp_path: Path) -> None:
    root = tmp_path / "episodes"
    root.mkdir()
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / EPISODE_FILE).write_text("{}\n")
    with pytest.raises(HolodeskError, match="nothing was deleted"):
        delete_episode(outside, root)
    with pytest.raises(HolodeskError, match="nothing was deleted"):
        delete_episode(root / "..", root)
    assert outside.exists()
    with pytest.raises(HolodeskError, match="not an episode folder"):
        export_episode(outside.parent, tmp_path / "x.zip")
