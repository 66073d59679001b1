"""The one byte formatter: decimal SI units, spelled the same in the UI, the CLI, doctor and downloads."""

from __future__ import annotations

import pytest

from holodesk.core.units import format_bytes


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"),
    (999, "999 B"),
    (1536, "1.5 kB"),
    (1_536_000, "1.5 MB"),
    (26.4e9, "26.4 GB"),
    (2.5e12, "2.5 TB"),
    (3e15, "3000.0 TB"),
    (-1536, "-1.5 kB"),
])
def test_format_bytes(n: float, text: str) -> None:
    assert format_bytes(n) == text
