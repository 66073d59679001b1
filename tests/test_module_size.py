"""No module of app/holodesk is over 800 lines (issue 35: a module a newcomer can read; a larger one is split by
what it does, as the session's judging left ``session/loop.py`` for ``session/judge.py``).

Lines are counted as ``wc -l`` counts them (newline characters), blank lines and docstrings included.
"""

from __future__ import annotations

from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app" / "holodesk"

MAX_LINES = 800


def _line_count(path: Path) -> int:
    """The number of newline characters in ``path`` (its lines, as ``wc -l`` counts them)."""
    return path.read_bytes().count(b"\n")


def test_no_module_is_over_800_lines() -> None:
    modules = sorted(APP.rglob("*.py"))
    assert len(modules) > 100, f"found only {len(modules)} modules under {APP}: is the path right?"
    over = [f"{path.relative_to(APP.parents[1])}: {lines} lines"
            for path in modules if (lines := _line_count(path)) > MAX_LINES]
    assert not over, (f"{len(over)} module(s) over {MAX_LINES} lines (issue 35): " + "; ".join(over)
                      + ". Split each by what it does (one home per behaviour), e.g. a class or a group of "
                      "helpers into a module of its own.")
