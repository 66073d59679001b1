"""Ending the child processes tests start (X servers, windows, model servers, tray hosts)."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], timeout: float = 5.0) -> None:
    """Terminate ``proc`` and wait up to ``timeout`` seconds; kill it if it is still running then."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


def pids_running(*fragments: str, parent: int | None = None) -> list[int]:
    """Process ids whose command line contains every one of ``fragments`` (and, with ``parent``, whose
    parent is that process), read from /proc so no procps is needed; this test process is left out."""
    import os
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if all(f in cmdline for f in fragments) and (parent is None or ppid == parent):
            found.append(int(entry.name))
    return found
