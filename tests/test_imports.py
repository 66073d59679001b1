"""Every module imports with no display at all (field case F16), and the CLI explains instead of crashing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

IMPORT_ALL = """
import importlib, pkgutil, sys
import holodesk
failed = []
names = [m.name for m in pkgutil.walk_packages(holodesk.__path__, "holodesk.")]
for name in names:
    if name == "holodesk.__main__":
        continue
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print(len(names), "modules")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def _no_display_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY")}
    env["QT_QPA_PLATFORM"] = ""
    return env


def test_every_module_imports_without_a_display() -> None:
    res = subprocess.run([sys.executable, "-c", IMPORT_ALL], env=_no_display_env(), capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    count = int(res.stdout.split()[0])
    assert count >= 20, res.stdout  # the walk really covered the package


def test_run_without_display_explains_instead_of_a_traceback(tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text('{"note": null, "thought": "", "tool_call": {"tool_name": "done"}}\n')
    res = subprocess.run([sys.executable, "-m", "holodesk", "run", "x", "--script", str(script)],
                         env=_no_display_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert "display" in res.stderr.lower() and "DISPLAY" in res.stderr, res.stderr
