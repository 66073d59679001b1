"""Start the multi-line text window (apps/text_window.py) with the same reader as the target window."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers.target import TargetWindow

TEXT_APP = Path(__file__).resolve().parent / "apps" / "text_window.py"


def start_text_window(directory: Path, x: int = 300, y: int = 200, timeout: float = 20.0) -> TargetWindow:
    """Start the text window at (x, y) on ``$DISPLAY``; ``rects["notes"]`` is its QPlainTextEdit.

    Raises:
        RuntimeError / TimeoutError: the window did not come up.
    """
    directory.mkdir(parents=True, exist_ok=True)
    state_path = directory / f"text-{time.monotonic_ns()}.json"
    log_path = state_path.with_suffix(".log")
    env = dict(os.environ)
    env.pop("QT_QPA_PLATFORM", None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, str(TEXT_APP), "--out", str(state_path), "--x", str(x),
                                 "--y", str(y)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    win = TargetWindow(proc, state_path, log_path)
    try:
        state = win.wait_for(lambda s: bool(s.get("ready")), timeout=timeout)
    except Exception:
        win.close()
        raise
    win.rects = {name: (r[0], r[1], r[2], r[3]) for name, r in state["rects"].items()}
    win.rects["window"] = (state["window"][0], state["window"][1], state["window"][2], state["window"][3])
    time.sleep(0.1)
    return win
