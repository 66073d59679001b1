"""installers/_setup.sh: what a newcomer's first command does on a machine it cannot use (run in a
temporary folder; the installers themselves are never run by the tests, they would re-point the venv)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_venv_refuses_a_python_older_than_3_11_and_says_what_to_do(tmp_path: Path) -> None:
    old = tmp_path / "python3"  # a stand-in for Ubuntu 22.04's python3 (3.10): -V answers, everything else fails
    old.write_text('#!/bin/sh\n[ "$1" = "-V" ] && { echo "Python 3.10.12"; exit 0; }\nexit 1\n')
    old.chmod(0o755)
    venv = tmp_path / "venv"
    res = subprocess.run(["bash", "-c", f'source "{ROOT}/installers/_setup.sh"; make_venv'],
                         env={"PATH": "/usr/bin:/bin", "PYTHON": str(old), "HOLODESK_VENV": str(venv)},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res
    assert "Holodesk needs Python 3.11 or newer" in res.stderr and "Python 3.10.12" in res.stderr, res.stderr
    assert "PYTHON=python3.11" in res.stderr
    assert not venv.exists()
