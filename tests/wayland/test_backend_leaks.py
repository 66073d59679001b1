"""A long-lived process does not grow: screen-cast captures opened and closed, and remote-desktop sessions
started, replaced and closed, on a real headless GNOME Wayland session, leave no descriptors, threads or
frames behind (measured from ``/proc/self``)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from holodesk.capture.pipewire_backend import MutterCapture
from holodesk.display.mutter import MutterRemoteDesktop
from tests.helpers.mutter import MutterSession

pytestmark = [pytest.mark.wayland]


def figures() -> tuple[int, int, int]:
    """(open descriptors, native threads, resident KiB) of this process."""
    gc.collect()
    status = Path("/proc/self/status").read_text(encoding="utf-8")
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task")), rss


def remote_for(mutter: MutterSession) -> MutterRemoteDesktop:
    return MutterRemoteDesktop(mutter.bus_address, os.path.join(mutter.env["XDG_RUNTIME_DIR"], "pipewire-0"))


def test_capture_open_and_close_leaves_nothing(mutter: MutterSession) -> None:
    remote = remote_for(mutter)
    try:
        after: list[tuple[int, int, int]] = []
        for _ in range(5):
            capture = MutterCapture(remote)
            capture.grab(1)
            capture.close()
            del capture
            after.append(figures())
    finally:
        remote.close()
    (fds1, threads1, rss1), (fds5, threads5, rss5) = after[0], after[-1]
    assert fds5 - fds1 <= 1, after  # each closed pipeline kept 4 sockets
    assert threads5 - threads1 <= 1, after
    assert rss5 - rss1 < 8_000, after  # and its last frame (4 MB at 1280x800)


def test_sessions_started_replaced_and_closed_leave_nothing(mutter: MutterSession) -> None:
    after: list[tuple[int, int, int]] = []
    for _ in range(4):
        remote = remote_for(mutter)
        try:
            remote.read_selection()  # starts the session and its clipboard thread
            for _ in range(2):
                remote._layout_changed.set()  # as Mutter's MonitorsChanged does: the next use replaces the session
                remote.monitors()
                remote.read_selection()
        finally:
            remote.close()
        after.append(figures())
    (fds1, threads1, _), (fds4, threads4, _) = after[0], after[-1]
    assert fds4 - fds1 <= 1, after  # jeepney's close left its 2-descriptor stop pipe per connection
    assert threads4 - threads1 <= 0, after  # each replaced session left its clipboard thread running
