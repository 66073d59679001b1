"""holodesk doctor: one broken or hanging probe never hides or blocks the others (F19)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from holodesk import doctor


def test_a_hanging_check_is_reported_and_the_others_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def hangs() -> dict[str, object]:
        release.wait(60)  # like a keychain waiting on an unlock prompt nobody sees
        return {"never": "shown"}

    def fails() -> dict[str, object]:
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(doctor, "CHECKS", [("Keychain", hangs), ("Broken", fails),
                                           ("Python", lambda: {"version": "3"})])
    t0 = time.monotonic()
    report = doctor.collect(timeout_s=0.5)
    release.set()
    assert time.monotonic() - t0 < 5
    assert "no answer within 0.5 s" in report["Keychain"]["error"]
    assert "unlock" in report["Keychain"]["error"]
    assert report["Broken"] == {"error": "RuntimeError: probe exploded"}
    assert report["Python"] == {"version": "3"}


def test_kernel_section_names_the_decoder_and_survives_bad_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setattr(doctor, "CHECKS", [("Holotron kernels", doctor._kernels)])
    config = tmp_path / "config.toml"
    monkeypatch.setenv("HOLODESK_CONFIG", str(config))
    config.write_text('decoder = "stock"\n')
    section = doctor.collect(timeout_s=30)["Holotron kernels"]
    assert section["decoder"].startswith("stock:") and "slow path" in section["decoder"]
    config.write_text('decoder = "fast"\n')  # invalid: the kernel report must still be shown
    section = doctor.collect(timeout_s=30)["Holotron kernels"]
    assert "functions" in section and section["decoder"].startswith("unknown: the settings could not be read")


def test_local_fit_names_the_precision_the_wizard_would_pick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat

    from holodesk.core.fit import best_precision

    exe = tmp_path / "nvidia-smi"  # a fake nvidia-smi: this machine has no NVIDIA driver
    exe.write_text('#!/bin/sh\necho "0, NVIDIA GeForce RTX 4090, 24564, 23500"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path))
    section = doctor._local_fit()
    assert section["precision that fits"] == best_precision(23500 * 2**20) == "8bit"
    assert "RTX 4090, 22.9 GiB free" in section["gpu"]
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    section = doctor._local_fit()
    assert section["precision that fits"] == "none: use a server" and "nvidia-smi" in section["gpu"]
