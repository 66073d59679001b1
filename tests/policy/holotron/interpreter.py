"""Real Triton kernels under Triton's interpreter on CPU tensors, in a child process: the interpreter is
chosen when a kernel is defined, so the test process's already-defined kernels cannot use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def run_interpreted(code: str, timeout: float) -> Any:
    """Run ``code`` with ``python -c`` and ``TRITON_INTERPRET=1`` (the app and the repo root on the path) and
    return the JSON its last line of standard output prints; fails the test when the child fails."""
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "app"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
