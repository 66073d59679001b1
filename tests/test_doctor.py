"""holodesk doctor: one broken or hanging probe never hides or blocks the others (F19)."""

from __future__ import annotations

import threading
import time

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
