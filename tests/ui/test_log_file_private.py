"""The log file is private (issue 31): ``DATA_DIR/logs`` is 0700 and ``holodesk.log`` with its rotated files
0600, whatever the umask, also where an older version left them readable by others."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any

from holodesk.ui.app import private_log_handler
from tests.helpers.app_instance import app_env, start_app, wait_for_channel


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_real_app_makes_its_log_folder_0700_and_its_log_files_0600(make_xvfb: Any, tmp_path: Path) -> None:
    """The tray app in a child process, started where an older version left the logs open to others."""
    server = make_xvfb(1024, 768)
    env = app_env(server, tmp_path)
    logs = Path(env["HOLODESK_DATA_DIR"]) / "logs"
    logs.mkdir(parents=True)
    os.chmod(logs, 0o755)
    for name in ("holodesk.log", "holodesk.log.1"):
        (logs / name).write_text("2026-01-01 INFO holodesk: an older line\n", encoding="utf-8")
        os.chmod(logs / name, 0o644)
    with start_app(env, tmp_path / "app.log") as app:
        wait_for_channel(env, app, tmp_path / "app.log")
        assert mode(logs) == 0o700
        assert {p.name: mode(p) for p in logs.iterdir()} == {"holodesk.log": 0o600, "holodesk.log.1": 0o600}


def test_a_new_log_file_and_every_rotated_one_are_0600_under_a_permissive_umask(tmp_path: Path) -> None:
    path = tmp_path / "data" / "logs" / "holodesk.log"
    before = os.umask(0o002)
    try:
        handler = private_log_handler(path, max_bytes=300, backups=2)
        logger = logging.getLogger("holodesk.test-log-file-private")
        logger.addHandler(handler)
        logger.propagate = False
        try:
            for n in range(40):
                logger.warning("line %d of a task's log with a window title in it", n)
        finally:
            logger.removeHandler(handler)
            handler.close()
    finally:
        os.umask(before)
    assert mode(path.parent) == 0o700
    files = {p.name: mode(p) for p in path.parent.iterdir()}
    assert files == {"holodesk.log": 0o600, "holodesk.log.1": 0o600, "holodesk.log.2": 0o600}
    assert "line 39 " in path.read_text(encoding="utf-8")  # the newest line is in the current file
