"""The lived-in suite (``pytest -m soak``): one Holodesk process doing task after task with the user active in
between, on real desktops. Bounded: each test runs a fixed number of tasks (``SOAK_TASKS``) with a scripted policy."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

SOAK_TASKS = 25
"""Tasks each lived-in test runs in one process."""


@dataclass(frozen=True)
class Usage:
    """What one process holds: open file descriptors, threads and resident memory (MiB), from /proc."""

    fds: int
    threads: int
    rss_mib: float
    fd_targets: tuple[str, ...] = ()
    """What each open descriptor points to (sorted), to name a leak."""

    def new_fds(self, earlier: Usage) -> list[str]:
        """Descriptor targets open now that were not open in ``earlier`` (a multiset difference)."""
        left = list(earlier.fd_targets)
        extra = []
        for target in self.fd_targets:
            if target in left:
                left.remove(target)
            else:
                extra.append(target)
        return extra


def usage(pid: int) -> Usage:
    """The process's :class:`Usage` now (Linux /proc)."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed between the listing and the read
            continue
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines()
    fields = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in status if ":" in line}
    kinds = tuple(sorted(t.split(":[", 1)[0] if ":[" in t else t for t in targets))
    return Usage(len(targets), int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024.0, kinds)


def child_pid(argv_part: str) -> int:
    """The pid of this process's child whose command line contains ``argv_part`` (exactly one)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text(encoding="ascii", errors="replace")
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and argv_part in cmdline:
            found.append(int(entry))
    assert len(found) == 1, f"expected one child running {argv_part!r}, found {found}"
    return found[0]


class _XkbState(ctypes.Structure):
    _fields_: ClassVar[list[tuple[str, Any]]] = [
        ("group", ctypes.c_ubyte), ("locked_group", ctypes.c_ubyte), ("base_group", ctypes.c_ushort),
        ("latched_group", ctypes.c_ushort), ("mods", ctypes.c_ubyte), ("base_mods", ctypes.c_ubyte),
        ("latched_mods", ctypes.c_ubyte), ("locked_mods", ctypes.c_ubyte), ("compat_state", ctypes.c_ubyte),
        ("grab_mods", ctypes.c_ubyte), ("compat_grab_mods", ctypes.c_ubyte), ("lookup_mods", ctypes.c_ubyte),
        ("compat_lookup_mods", ctypes.c_ubyte), ("ptr_buttons", ctypes.c_ushort)]


def lock_keyboard_group(display: str, group: int) -> int:
    """Lock the core keyboard's XKB group on ``display`` to ``group`` (0 = first layout), as a layout switcher
    does (libX11's XkbLockGroup); returns the group the server then reports."""
    xlib = ctypes.CDLL(ctypes.util.find_library("X11"))
    xlib.XOpenDisplay.restype = ctypes.c_void_p
    handle = xlib.XOpenDisplay(display.encode())
    assert handle, f"cannot open display {display}"
    dpy = ctypes.c_void_p(handle)
    try:
        use_core_kbd = 0x100
        xlib.XkbLockGroup(dpy, use_core_kbd, group)
        xlib.XSync(dpy, 0)
        state = _XkbState()
        xlib.XkbGetState(dpy, use_core_kbd, ctypes.byref(state))
        return int(state.group)
    finally:
        xlib.XCloseDisplay(dpy)
