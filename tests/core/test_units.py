"""The one byte formatter (decimal SI units) and the one duration formatter, the same in the UI, the CLI, doctor and
downloads."""

from __future__ import annotations

import pytest

from holodesk.core.units import format_bytes, format_duration


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


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0 s"), (42.4, "42 s"), (59.6, "1 min 0 s"), (75, "1 min 15 s"), (3599, "59 min 59 s"),
    (4000, "1 h 6 min"), (-5, "0 s"),
])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
