"""The real ``holodesk`` app in a child process on a test X display, and what the X server says about it
(tray icons embedded in trayer, windows by title).

    env = app_env(server, tmp_path)            # DISPLAY, private XDG_RUNTIME_DIR, isolated settings/data
    with start_app(env, tmp_path / "app.log") as app:
        wait_for_channel(env)
        assert tray_icons(env) == 1
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers.processes import stop_process


def private_runtime_dir() -> Path:
    """A fresh ``0700`` folder with a short path (``AF_UNIX`` paths are limited to 107 bytes)."""
    return Path(tempfile.mkdtemp(prefix="hd-rt-"))


def app_env(server: Any, tmp_path: Path, runtime: Path | None = None) -> dict[str, str]:
    """Environment for ``holodesk`` child processes on ``server`` (an XvfbServer): its DISPLAY, a private
    runtime folder, settings and data under ``tmp_path``, this worktree's code first on the path."""
    env = server.env()
    env.pop("QT_QPA_PLATFORM", None)
    for name in list(env):
        if name.startswith("HOLODESK_") and name != "HOLODESK_TESTING":
            env.pop(name)
    env["XDG_RUNTIME_DIR"] = str(runtime or private_runtime_dir())
    env["HOLODESK_CONFIG"] = str(tmp_path / "config" / "settings.toml")
    env["HOLODESK_DATA_DIR"] = str(tmp_path / "data")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([str(Path(root) / "app"), root, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def holodesk(env: dict[str, str], *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``python -m holodesk ARGS`` to completion."""
    return subprocess.run([sys.executable, "-m", "holodesk", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@contextmanager
def start_app(env: dict[str, str], log_path: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m holodesk ARGS`` (the tray app) running until the block ends."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "holodesk", *args], env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        stop_process(proc)


def wait_for_channel(env: dict[str, str], proc: subprocess.Popen[bytes], log_path: Path,
                     timeout: float = 60.0) -> dict[str, Any]:
    """Wait until the app answers ``ping`` on its channel; returns the reply."""
    from holodesk.instance import ChannelError, request

    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"the app exited with {proc.returncode}: {log_path.read_text(errors='replace')}"
        try:
            return request("ping", env=env, timeout_s=5.0)
        except ChannelError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def tray_icons(env: dict[str, str]) -> int:
    """Icons embedded in trayer's panel on env's DISPLAY (client windows with a WM_CLASS below the panel)."""
    from Xlib import display

    d = display.Display(env["DISPLAY"])
    try:
        panels = [w for w in d.screen().root.query_tree().children if w.get_wm_class() == ("panel", "trayer")]
        assert len(panels) == 1, f"expected one trayer panel, found {len(panels)}"
        embedded = 0
        todo = list(panels[0].query_tree().children)
        while todo:  # trayer wraps each icon in a socket window of its own: count the embedded clients
            win = todo.pop()
            if win.get_wm_class() is not None:
                embedded += 1
            else:
                todo.extend(win.query_tree().children)
        return embedded
    finally:
        d.close()


def windows_named(env: dict[str, str], name: str, visible: bool = True) -> list[str]:
    """X window ids whose title matches the regular expression ``name`` (xdotool search)."""
    args = ["xdotool", "search", *(["--onlyvisible"] if visible else []), "--name", name]
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=10)
    return res.stdout.split()


def wait_until(predicate: Any, timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll ``predicate()`` every 50 ms until it is truthy; return its value or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout} s")
