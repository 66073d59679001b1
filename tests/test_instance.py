"""One task per desktop, however the desktop is named: the drive lock of a real process on one X server
or Wayland socket refuses another real process that reaches the same desktop under another spelling
(``DISPLAY=:N`` vs ``:N.0``; a Wayland socket by name in ``XDG_RUNTIME_DIR`` vs by its path, from a
process started without ``XDG_RUNTIME_DIR``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from holodesk import instance
from tests.helpers.app_instance import private_runtime_dir

ROOT = Path(__file__).resolve().parents[1]

HOLDER = """
import sys
from holodesk.instance import DriveLock
lock = DriveLock.acquire()
print("held", flush=True)
sys.stdin.read()
"""


def base_env() -> dict[str, str]:
    """This process's environment without any desktop or runtime folder, with this worktree's code."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "XAUTHORITY")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "app"), str(ROOT)])
    return env


@pytest.fixture
def holder() -> Iterator[Any]:
    """``hold(env)``: a child process that takes the drive lock in ``env`` and keeps it until the test ends."""
    children: list[subprocess.Popen[str]] = []

    def hold(env: dict[str, str]) -> subprocess.Popen[str]:
        child = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        children.append(child)
        assert child.stdout is not None
        line = child.stdout.readline()  # blocks until the lock is held (or the child failed)
        assert line == "held\n", (line, child.stderr.read() if child.stderr else "")
        return child

    yield hold
    for child in children:
        child.kill()
        child.wait(10)


@pytest.mark.parametrize("theirs, ours", [(":{n}.0", ":{n}"), (":{n}", "unix:{n}.0"), ("localhost:{n}", ":{n}")])
def test_one_x_server_is_one_desktop_however_display_is_spelled(xvfb: Any, holder: Any, theirs: str,
                                                                 ours: str) -> None:
    number = xvfb.display.lstrip(":").split(".")[0]
    runtime = private_runtime_dir()
    child = holder({**base_env(), "DISPLAY": theirs.format(n=number), "XDG_RUNTIME_DIR": str(runtime)})
    env = {"DISPLAY": ours.format(n=number), "XDG_RUNTIME_DIR": str(runtime)}
    with pytest.raises(instance.DesktopBusy, match=f"process {child.pid}"):
        instance.DriveLock.acquire(env)
    # Another X server is another desktop.
    instance.DriveLock.acquire({"DISPLAY": f":{int(number) + 1000}", "XDG_RUNTIME_DIR": str(runtime)}).release()


def test_one_wayland_socket_is_one_desktop_with_or_without_xdg_runtime_dir(holder: Any) -> None:
    """The compositor's socket (a listening ``AF_UNIX`` socket, as Mutter's) is reached by name from the
    session's runtime folder, and by its path from a process started without ``XDG_RUNTIME_DIR``
    (through a symlink, as sandboxes expose it)."""
    runtime = private_runtime_dir()
    compositor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    compositor.bind(str(runtime / "wayland-7"))
    compositor.listen(1)
    link = private_runtime_dir() / "wl"
    link.symlink_to(runtime / "wayland-7")
    try:
        child = holder({**base_env(), "WAYLAND_DISPLAY": "wayland-7", "XDG_RUNTIME_DIR": str(runtime)})
        with pytest.raises(instance.DesktopBusy, match=f"process {child.pid}"):
            instance.DriveLock.acquire({"WAYLAND_DISPLAY": str(link)})
        with pytest.raises(instance.DesktopBusy):
            instance.DriveLock.acquire({"WAYLAND_DISPLAY": str(runtime / "wayland-7"), "XDG_RUNTIME_DIR": "/nowhere"})
        assert instance.desktop_key({"WAYLAND_DISPLAY": str(link)}) == "wayland-wayland-7"
    finally:
        compositor.close()
