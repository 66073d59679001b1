"""GPU facts from nvidia-smi (no torch in the GUI process) and free disk space."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from holodesk.machine import GpuProbe, disk_free_bytes, parse_nvidia_smi, probe_gpus

MIB = 2**20


def test_parse_nvidia_smi_csv() -> None:
    text = "0, NVIDIA GeForce RTX 4090, 24564, 23010\n1, NVIDIA H200, 143771, 143000\nbad line\n"
    gpus = parse_nvidia_smi(text)
    assert [(g.index, g.name, g.total_bytes, g.free_bytes) for g in gpus] == [
        (0, "NVIDIA GeForce RTX 4090", 24564 * MIB, 23010 * MIB), (1, "NVIDIA H200", 143771 * MIB, 143000 * MIB)]
    assert GpuProbe(tuple(gpus)).best == gpus[1]
    assert GpuProbe(()).best is None


def _fake_nvidia_smi(folder: Path, body: str) -> None:
    """A fake nvidia-smi (this machine has no NVIDIA driver) printing ``body`` as a shell script."""
    exe = folder / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def test_probe_runs_nvidia_smi_and_reports_failures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert probe_gpus().detail.startswith("no NVIDIA driver found")
    _fake_nvidia_smi(tmp_path, 'echo "0, NVIDIA GeForce RTX 3090, 24576, 22000"')
    probe = probe_gpus()
    assert probe.best is not None and probe.best.free_bytes == 22000 * MIB and probe.detail == ""
    _fake_nvidia_smi(tmp_path, 'echo "NVIDIA-SMI has failed because it could not communicate with the driver" >&2'
                     "; exit 9")
    probe = probe_gpus()
    assert probe.gpus == () and "could not communicate with the driver" in probe.detail


def test_disk_free_of_a_folder_not_yet_made(tmp_path: Path) -> None:
    free = disk_free_bytes(tmp_path / "not" / "yet")
    st = os.statvfs(tmp_path)
    assert abs(free - st.f_bavail * st.f_frsize) < 64 * MIB
