"""Sizes and durations as people read them: the one byte formatter and the one duration formatter of Holodesk
(UI, CLI, doctor, downloads)."""

from __future__ import annotations

BYTE_UNITS = ("B", "kB", "MB", "GB", "TB")
"""Decimal (SI) units, 1000 apart, as disks and the Hugging Face hub count sizes."""


def format_bytes(n: float) -> str:
    """A byte count for people: ``512`` -> ``"512 B"``, ``1536`` -> ``"1.5 kB"``, ``1536000`` -> ``"1.5 MB"``.

    Args:
        n: bytes (may be fractional, e.g. bytes per second, or negative).

    Returns:
        Whole bytes below 1 kB, else one decimal in the largest unit of :data:`BYTE_UNITS` that keeps the
        number under 1000 (TB for anything larger).
    """
    for unit in BYTE_UNITS:
        if abs(n) < 1000 or unit == BYTE_UNITS[-1]:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable: the last unit returns")


def format_duration(seconds: float) -> str:
    """A duration for people, rounded to the second: ``42`` -> ``"42 s"``, ``75`` -> ``"1 min 15 s"``,
    ``4000`` -> ``"1 h 6 min"``; negative durations read as ``"0 s"``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {(s % 3600) // 60} min"
