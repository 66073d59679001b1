"""F27: a second start hands its request to the running app; one tray icon, one command box.

The real ``holodesk`` app runs in a child process on a fresh Xvfb with a real tray host (trayer); the
second ``holodesk`` is another child process. What is asserted comes from the X server (icons embedded in
the tray, windows by title) and from the processes themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import XvfbServer
from tests.helpers.app_instance import (
    app_env,
    holodesk,
    start_app,
    tray_icons,
    wait_for_channel,
    wait_until,
    windows_named,
)
from tests.helpers.processes import stop_process
from tests.ui.conftest import start_trayer

PALETTE = "^Holodesk command$"


def test_F27_second_start_opens_the_running_apps_command_box_and_exits(make_xvfb: Callable[..., XvfbServer],
                                                                        tmp_path: Path) -> None:
    server = make_xvfb(1280, 800)
    env = app_env(server, tmp_path)
    trayer = start_trayer(env)
    try:
        with start_app(env, tmp_path / "first.log") as first:
            pid = wait_for_channel(env, first, tmp_path / "first.log")["pid"]
            assert pid == first.pid
            wait_until(lambda: tray_icons(env) == 1, what="the first app's tray icon")
            assert windows_named(env, PALETTE) == []

            started = time.monotonic()
            second = holodesk(env, timeout=60)
            took = time.monotonic() - started
            assert second.returncode == 0, second.stderr
            assert "already running" in second.stdout and "opened the command box" in second.stdout
            assert took < 15, f"the second start took {took:.1f} s"  # no Qt start-up, no model load
            # The first app opened its command box; there is one, and one tray icon.
            wait_until(lambda: len(windows_named(env, PALETTE)) == 1, what="the command box on screen")
            time.sleep(0.5)
            assert len(windows_named(env, PALETTE, visible=False)) == 1
            assert tray_icons(env) == 1
            assert first.poll() is None

            # A third start while the box is open: still one box, one icon, and the third process is gone.
            third = holodesk(env, timeout=60)
            assert third.returncode == 0, third.stderr
            assert len(windows_named(env, PALETTE, visible=False)) == 1
            assert tray_icons(env) == 1
    finally:
        stop_process(trayer)
