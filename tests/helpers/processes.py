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
