"""Start and read the test target window (tests/apps/target_window.py) from tests.

    with TargetWindow.start(tmp_path, x=200, y=150) as win:
        cx, cy = win.center("OK")          # screen pixels
        ...
        state = win.wait_for(lambda s: s["clicks"] == ["OK"])
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers.processes import stop_process

APP = Path(__file__).resolve().parent.parent / "apps" / "target_window.py"

Rect = tuple[int, int, int, int]


class TargetWindow:
    """A running target window process and its state file.

    Attributes:
        rects: "OK" / "Cancel" / "Apply" / "field" / "window" (and "notes" when started with notes=True)
            -> (x, y, w, h) in screen pixels.
    """

    def __init__(self, process: subprocess.Popen[bytes], state_path: Path, log_path: Path) -> None:
        self.process = process
        self.state_path = state_path
        self.log_path = log_path
        self.rects: dict[str, Rect] = {}

    @classmethod
    def start(cls, directory: Path, x: int = 200, y: int = 150, color: str = "#3366cc",
              env: dict[str, str] | None = None, timeout: float = 20.0, notes: bool = False) -> TargetWindow:
        """Start the window at screen position (x, y) on ``$DISPLAY`` and wait until it is exposed.
        ``notes=True`` adds the multi-line text field (``rects["notes"]``, state ``"notes"``).

        Raises:
            RuntimeError: the process died or did not become ready within ``timeout`` seconds.
        """
        directory.mkdir(parents=True, exist_ok=True)
        state_path = directory / f"target-{time.monotonic_ns()}.json"
        log_path = state_path.with_suffix(".log")
        run_env = dict(os.environ if env is None else env)
        run_env.pop("QT_QPA_PLATFORM", None)  # a real X window, not offscreen
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, str(APP), "--out", str(state_path), "--x", str(x), "--y", str(y),
                 "--color", color, *(["--notes"] if notes else [])],
                env=run_env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        win = cls(proc, state_path, log_path)
        try:
            state = win.wait_for(lambda s: bool(s.get("ready")), timeout=timeout)
        except Exception:
            win.close()
            raise
        win.rects = {name: tuple(r) for name, r in state["rects"].items()}
        win.rects["window"] = tuple(state["window"])
        # Give the X server/compositor-free Xvfb a moment to process the map before input arrives.
        time.sleep(0.1)
        return win

    def state(self) -> dict[str, Any]:
        """The current state (see target_window.py); {} before the first write."""
        try:
            return dict(json.loads(self.state_path.read_text(encoding="utf-8")))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0) -> dict[str, Any]:
        """Poll the state until ``predicate(state)`` holds; return that state.

        Raises:
            RuntimeError: the window process exited. TimeoutError: not reached in ``timeout`` s
                (the message shows the last state).
        """
        deadline = time.monotonic() + timeout
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            state = self.state()
            if state and predicate(state):
                return state
            if self.process.poll() is not None:
                raise RuntimeError(f"target window exited with {self.process.returncode}: {self.log()}")
            time.sleep(0.02)
        raise TimeoutError(f"target window state not reached in {timeout} s; last state: {state}; "
                           f"log: {self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def center(self, name: str) -> tuple[int, int]:
        """Centre of a widget ("OK", "Cancel", "Apply", "field", "window") in screen pixels."""
        x, y, w, h = self.rects[name]
        return x + w // 2, y + h // 2

    def close(self) -> None:
        """Terminate the window process (kill if it does not exit)."""
        stop_process(self.process)

    def __enter__(self) -> TargetWindow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
