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
