"""The one rule that picks Holotron-12B's precision from free GPU memory (wizard, Settings, doctor)."""

from __future__ import annotations

from holodesk.core.fit import (
    CHECKPOINT_BYTES,
    GIB,
    NEEDS_FREE_BYTES,
    best_precision,
    disk_fits,
    explain_precision,
    precision_fits,
)


def test_bf16_from_about_30_gb_free_nf4_below() -> None:
    """Full precision when it fits, else 4-bit, which is several times faster per step than 8-bit."""
    assert best_precision(80 * GIB) == "bf16"  # H100 / H200
    assert best_precision(31 * GIB) == "bf16"  # a 32 GB card, idle
    assert best_precision(int(27.5 * GIB)) == "4bit"  # just under the bf16 need: 8-bit fits but is slower
    assert best_precision(int(23.2 * GIB)) == "4bit"  # a 24 GB card with a desktop on it: bf16 does not fit
    assert best_precision(15 * GIB) == "4bit"  # a 16 GB card
    assert best_precision(int(11.5 * GIB)) is None  # a 12 GB card: NF4's 10.7 GiB peak leaves no headroom
    assert best_precision(None) is None  # no GPU measured


def test_boundaries_are_inclusive_and_ordered() -> None:
    for precision in ("bf16", "4bit"):  # the recommended ones; 8-bit is never recommended
        need = NEEDS_FREE_BYTES[precision]
        assert best_precision(need) == precision
        assert best_precision(need - 1) != precision
    assert best_precision(NEEDS_FREE_BYTES["8bit"]) == "4bit"
    needs = [NEEDS_FREE_BYTES[p] for p in ("bf16", "8bit", "4bit")]
    assert needs == sorted(needs, reverse=True)
    # bf16 must cover the measured 24.56 GiB of weights plus the 1.65 GiB an episode adds over them
    assert NEEDS_FREE_BYTES["bf16"] > (24.56 + 1.65) * GIB
    assert NEEDS_FREE_BYTES["4bit"] > 10.74 * GIB


def test_fits_list_and_explanations() -> None:
    fits = precision_fits(20 * GIB)
    assert [(f.precision, f.fits) for f in fits] == [("bf16", False), ("8bit", True), ("4bit", True)]
    assert all(f.fits is None for f in precision_fits(None))
    text = explain_precision(int(23.5 * GIB), "NVIDIA GeForce RTX 4090")
    assert "RTX 4090 has 23.5 GiB free" in text and "runs in 4bit" in text and "does not fit" in text
    assert "8-bit fits too, but is several times slower per step" in text
    assert "8-bit" not in explain_precision(15 * GIB)  # a 16 GB card: 8-bit does not fit
    assert "Use a server" in explain_precision(None)
    assert "Use a server" in explain_precision(6 * GIB)
    assert "does not fit" not in explain_precision(70 * GIB)


def test_disk_need_is_the_checkpoint_plus_margin() -> None:
    assert disk_fits(CHECKPOINT_BYTES + 2 * GIB)
    assert not disk_fits(CHECKPOINT_BYTES)
