"""One theme: no UI module but holodesk.ui.theme writes a colour, a font size or a gap of its own."""

from __future__ import annotations

import re
from pathlib import Path

UI = Path(__file__).resolve().parents[2] / "app" / "holodesk" / "ui"
LOOKS = re.compile(r"#[0-9a-fA-F]{3,8}\b|font-size|QColor\(\s*['\"]|(?<!_)color:\s*[a-z]+\s*[;}'\"]"
                   r"|setSpacing\(\s*[1-9]|setContentsMargins\(\s*[1-9]")
"""A colour literal, a font size, a named colour in a style sheet, a gap or margin written as a number."""


def test_only_the_theme_module_states_the_look() -> None:
    found = [f"{path.name}:{n}: {line.strip()}"
             for path in sorted(UI.glob("*.py")) if path.name != "theme.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if LOOKS.search(line)]
    assert not found, "the look belongs in holodesk/ui/theme.py:\n" + "\n".join(found)
