"""What "think before acting" costs a step, derived from the model's bytes per decode step, the GPU's memory
bandwidth and the decoder's measured efficiency: checked against the H100 figures of docs/benchmarks.md with named
fake device facts (this machine has no GPU), the note's words for each case, NVML's bandwidth reading (a fake
NVML module, and the real one on this machine without a driver), and what doctor says."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from holodesk.core.fit import GIB
from holodesk.machine import GpuInfo, memory_bandwidth
from holodesk.policy.models import get_model
from holodesk.policy.thinking_cost import estimate, thinking_note

FAKE_H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", 80 * GIB, 79 * GIB)
"""Fake device facts: the H100 SXM of docs/benchmarks.md (HBM3, 5,120-bit bus, memory clock 2,619 MHz)."""
FAKE_H100_BANDWIDTH = 2619e6 * 5120 / 8 * 2
FAKE_RTX_4090 = GpuInfo(0, "NVIDIA GeForce RTX 4090", 24 * GIB, 23 * GIB)
"""Fake device facts: an RTX 4090 (GDDR6X, 384-bit bus, memory clock 10,501 MHz: 1,008 GB/s)."""
FAKE_RTX_4090_BANDWIDTH = 10501e6 * 384 / 8 * 2


@pytest.mark.parametrize(("precision", "measured_ms"), [("bf16", 8.51), ("8bit", 5.693), ("4bit", 4.342)])
def test_the_estimate_is_within_5_percent_of_the_measured_h100_decode(precision: str, measured_ms: float) -> None:
    cost = estimate(get_model("holotron-12b"), precision, FAKE_H100_BANDWIDTH)
    assert abs(cost.ms_per_token - measured_ms) / measured_ms < 0.05, cost
    assert cost.tokens == 300 and cost.seconds == pytest.approx(cost.ms_per_token * 0.3)


def test_a_bf16_thought_costs_what_the_bench_measured() -> None:
    # docs/benchmarks.md: 3,096 ms a step with a 300-token thought, 564 ms with reasoning off
    cost = estimate(get_model("holotron-12b"), "bf16", FAKE_H100_BANDWIDTH)
    assert abs(cost.seconds - (3.096 - 0.564)) < 0.15


def test_the_note_names_the_gpu_model_precision_and_tokens() -> None:
    note = thinking_note(policy="local", model="Hcompany/Holotron-12B", precision="bf16", gpu=FAKE_RTX_4090,
                         bandwidth=FAKE_RTX_4090_BANDWIDTH)
    assert note == ("Thinking adds about 8.2 s a step on this NVIDIA GeForce RTX 4090 with Holotron-12B bf16 "
                    "(about 300 tokens at ~27 ms each).")
    nf4 = thinking_note(policy="local", model="Hcompany/Holotron-12B", precision="4bit", gpu=FAKE_H100,
                        bandwidth=FAKE_H100_BANDWIDTH)
    assert nf4 == ("Thinking adds about 1.3 s a step on this NVIDIA H100 80GB HBM3 with Holotron-12B NF4 "
                   "(about 300 tokens at ~4 ms each).")
    native = thinking_note(policy="local", model="Hcompany/Holo2-8B", precision="bf16", gpu=FAKE_H100,
                           bandwidth=FAKE_H100_BANDWIDTH)  # run by transformers' generate: said
    assert native.startswith("Thinking adds about ") and "Holo2-8B bf16" in native
    assert native.endswith("this model runs on transformers' generate, which can be several times slower.")


@pytest.mark.parametrize(("kw", "words"), [
    ({"policy": "remote"}, "depends on the server"),
    ({"policy": "script"}, "A replay file does not think"),
    ({"gpu": None, "bandwidth": None}, "on the CPU is not estimated"),
    ({"bandwidth": None}, "the memory bandwidth of this NVIDIA GeForce RTX 4090 is unknown"),
    ({"model": "/data/my-own-checkpoint"}, "not estimated for a model outside Holodesk's model table"),
])
def test_the_note_says_why_when_it_cannot_estimate(kw: dict[str, object], words: str) -> None:
    args: dict[str, object] = {"policy": "local", "model": "Hcompany/Holo2-8B", "precision": "bf16",
                               "gpu": FAKE_RTX_4090, "bandwidth": FAKE_RTX_4090_BANDWIDTH, **kw}
    note = thinking_note(**args)  # type: ignore[arg-type]
    assert words in note and "Thinking adds about" not in note


class FakeNvml(types.ModuleType):
    """A named fake of nvidia-ml-py's module: an RTX 4090's memory clock and bus width."""

    NVML_CLOCK_MEM = 2

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.calls: list[str] = []

    def nvmlInit(self) -> None:
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock: int) -> int:
        assert (handle, clock) == ("gpu0", self.NVML_CLOCK_MEM)
        return 10501

    def nvmlDeviceGetMemoryBusWidth(self, handle: str) -> int:
        return 384


def test_nvml_bandwidth_is_the_memory_clock_times_the_bus_width(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert memory_bandwidth(0) == pytest.approx(1.008e12, rel=1e-3)
    assert fake.calls == ["init", "shutdown"]


def test_without_a_driver_the_bandwidth_is_unknown() -> None:
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has an NVIDIA driver")
    assert memory_bandwidth(0) is None  # the real NVML: its library is not found


def test_doctor_says_what_thinking_costs_on_this_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat

    from holodesk import doctor

    fake_smi = tmp_path / "nvidia-smi"  # a named fake: this machine has no NVIDIA driver; an RTX 4090, 22.9 GiB free
    fake_smi.write_text('#!/bin/sh\necho "0, NVIDIA GeForce RTX 4090, 24564, 23500"\n')
    fake_smi.chmod(fake_smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(doctor, "memory_bandwidth", lambda index: FAKE_RTX_4090_BANDWIDTH if index == 0 else None)
    config = tmp_path / "settings.toml"
    config.write_text('model = "Hcompany/Holotron-12B"\nprecision = "4bit"\n', encoding="utf-8")
    monkeypatch.setenv("HOLODESK_CONFIG", str(config))
    monkeypatch.setattr(doctor, "CHECKS", [("Model and GPU fit", doctor._local_fit)])
    section = doctor.collect(timeout_s=30)["Model and GPU fit"]
    assert section["cost of thinking"] == ("Thinking adds about 4.3 s a step on this NVIDIA GeForce RTX 4090 with "
                                           "Holotron-12B NF4 (about 300 tokens at ~14 ms each).")
    config.write_text('policy = "remote"\nendpoint = "http://127.0.0.1:9/v1"\nmodel = "Hcompany/Holo2-8B"\n',
                      encoding="utf-8")
    section = doctor.collect(timeout_s=30)["Model and GPU fit"]
    assert "depends on the server" in section["cost of thinking"]


def test_holodesk_run_says_what_thinking_costs_when_the_policy_thinks(tmp_path: Path) -> None:
    from holodesk.cli import thinking_line
    from holodesk.policy.generation import GenerationOptions
    from holodesk.policy.remote import RemotePolicy
    from holodesk.policy.scripted import ScriptedPolicy
    from holodesk.settings import Settings

    settings = Settings(data_dir=tmp_path, policy="remote", endpoint="http://127.0.0.1:9/v1", model="Hcompany/Holo2-8B")
    thinking = RemotePolicy(settings.endpoint, settings.model, api_key=None,
                            options=GenerationOptions.for_model(settings.model, reasoning="on"))
    quick = RemotePolicy(settings.endpoint, settings.model, api_key=None,
                         options=GenerationOptions.for_model(settings.model, reasoning="off"))
    try:
        assert thinking_line(thinking, settings) == ("Think before acting is on. What thinking adds a step depends "
                                                     "on the server (its GPU and the model it serves).")
        assert thinking_line(quick, settings) == ""
    finally:
        thinking.close()
        quick.close()
    assert thinking_line(ScriptedPolicy([]), settings) == ""
