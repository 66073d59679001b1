"""Every "Settings > Tab > Field" path that Holodesk's messages, docs and installer tell people to follow
exists in the Settings dialog (a message once sent people to "Settings > Endpoint", which is no tab)."""

from __future__ import annotations

import re
from pathlib import Path

from holodesk.ui.settings_dialog import GROUPS, LABELS

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(r"(?<!System )Settings(?:\.\.\.)?\s*>\s*([A-Za-z]+)(?:\s*>\s*([A-Za-z][A-Za-z ]*[A-Za-z]))?")
GNOME_SETTINGS = {"Keyboard"}
"""First steps of GNOME's own Settings app (custom shortcuts on Wayland), not Holodesk's dialog."""
EXTRA_ROWS = {("Basic", "API key")}
"""Rows of the dialog that are not schema fields (the key lives in the keychain)."""


def _texts() -> dict[Path, str]:
    files = [*sorted((ROOT / "app" / "holodesk").rglob("*.py")), *sorted((ROOT / "docs").glob("*.md")),
             ROOT / "README.md", ROOT / "installers" / "holodesk.sh"]
    # adjacent Python string literals on separate lines read as one text
    return {f: re.sub(r"\"\s*\n\s*f?\"", "", f.read_text(encoding="utf-8")) for f in files}


def test_settings_paths_in_messages_and_docs_exist() -> None:
    rows = {(tab, LABELS.get(name, name)) for tab, _group, names in GROUPS for name in names} | EXTRA_ROWS
    tabs = {tab for tab, _row in rows}
    seen, wrong = 0, []
    for path, text in _texts().items():
        for match in PATH.finditer(text):
            tab, row = match.group(1), match.group(2)
            if tab in GNOME_SETTINGS:
                continue
            seen += 1
            if tab not in tabs or (row is not None and (tab, row) not in rows):
                wrong.append(f"{path.relative_to(ROOT)}: {match.group(0)!r}")
    assert seen >= 5  # the scan finds the paths (the no-GPU advice, the Wayland hint, the docs, ...)
    assert wrong == [], "no such place in the Settings dialog:\n" + "\n".join(wrong)
