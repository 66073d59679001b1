"""What this machine offers the local model, measured without importing torch: NVIDIA GPUs through
``nvidia-smi`` (part of the NVIDIA driver), their memory bandwidth through NVML, and free disk space.

Used by the first-run wizard and the Settings dialog (which must not import torch, and must not create a
CUDA context in the GUI process just to read a number) and by ``holodesk doctor``.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MIB = 2**20


@dataclass(frozen=True)
class GpuInfo:
    """One NVIDIA GPU.

    Attributes:
        index: CUDA index (nvidia-smi order).
        name: e.g. "NVIDIA GeForce RTX 4090".
        total_bytes / free_bytes: memory, bytes.
    """

    index: int
    name: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class GpuProbe:
    """The result of :func:`probe_gpus`.

    Attributes:
        gpus: every GPU found (empty when none).
        detail: why none was found, or "" when some were.
    """

    gpus: tuple[GpuInfo, ...]
    detail: str = ""

    @property
    def best(self) -> GpuInfo | None:
        """The GPU with the most free memory (where the local model would go), or None."""
        return max(self.gpus, key=lambda g: g.free_bytes, default=None)


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv,noheader,nounits``
    output (MiB values) into GpuInfo; lines that do not parse are skipped and logged."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        try:
            index, total, free = int(parts[0]), int(float(parts[-2])), int(float(parts[-1]))
        except ValueError:
            log.warning("nvidia-smi line not understood: %r", line)
            continue
        name = ",".join(parts[1:-2]).strip()
        gpus.append(GpuInfo(index, name, total * MIB, free * MIB))
    return gpus


def probe_gpus(timeout_s: float = 10.0) -> GpuProbe:
    """The NVIDIA GPUs of this machine and their free memory, from ``nvidia-smi``. Never raises."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return GpuProbe((), "no NVIDIA driver found (nvidia-smi is not installed)")
    try:
        proc = subprocess.run([exe, "--query-gpu=index,name,memory.total,memory.free",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuProbe((), f"nvidia-smi failed: {type(exc).__name__}")
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()[:1]
        return GpuProbe((), f"nvidia-smi failed: {first[0] if first else f'exit {proc.returncode}'}")
    gpus = tuple(parse_nvidia_smi(proc.stdout))
    return GpuProbe(gpus, "" if gpus else "nvidia-smi lists no GPU")


def memory_bandwidth(index: int) -> float | None:
    """Peak memory bandwidth of NVIDIA GPU ``index`` (nvidia-smi order), bytes per second, from NVML
    (nvidia-ml-py; reads the driver, creates no CUDA context): the memory's maximum clock
    (``nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)``, MHz) x the bus width (``nvmlDeviceGetMemoryBusWidth``, bits)
    / 8 x 2 (two transfers a clock: 3.35 TB/s for an H100 SXM, 1.01 TB/s for an RTX 4090). None when NVML cannot
    tell (no driver, a driver without the bus-width call); logged. Never raises."""
    try:
        import pynvml  # lazy: loads the driver's libnvidia-ml, only when asked

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            clock_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)
            bus_bits = pynvml.nvmlDeviceGetMemoryBusWidth(handle)
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # NVMLError (no driver, unsupported call), ImportError, AttributeError
        log.info("the memory bandwidth of GPU %d is unknown: %s: %s", index, type(exc).__name__, exc)
        return None
    if clock_mhz <= 0 or bus_bits <= 0:
        return None
    return float(clock_mhz) * 1e6 * bus_bits / 8 * 2


def disk_free_bytes(path: Path) -> int:
    """Free bytes on the file system that holds ``path`` (or its nearest existing parent)."""
    p = Path(path).expanduser()
    while not p.exists() and p != p.parent:
        p = p.parent
    return int(shutil.disk_usage(p).free)

