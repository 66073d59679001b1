"""Probe (GPU, run 12d): where a warm-page-cache load's time goes, and what other host->GPU paths take for the
same files, each in a fresh process: safetensors' ``load_file(device="cuda")`` one file at a time; page-locked
chunks copied into one device buffer (4 or 8 reader threads, 64 or 256 MiB chunks); and ``load_holotron``
under cProfile (its cumulative figures count time in other threads: read them as a listing, not a split).

Run from the repo root on the GPU machine: ``PYTHONPATH=app python docs/tools/probe_load_paths.py``.
"""

import cProfile
import io
import pstats
import subprocess
import sys
import threading
import time
from pathlib import Path

FOLDER = Path("/var/tmp/holodesk-cold-start")


def files():
    return sorted(FOLDER.glob("*.safetensors"))


def child_profile():
    import torch

    from holodesk.policy.holotron.kernels import prepare_kernels
    from holodesk.policy.holotron.loader import load_holotron

    prepare_kernels()
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3  # noqa: F401

    torch.zeros(1, device="cuda")
    pr = cProfile.Profile()
    t = time.time()
    pr.enable()
    load_holotron(FOLDER, device="cuda")
    torch.cuda.synchronize()
    pr.disable()
    print(f"profiled load {time.time() - t:.2f} s")
    for key in ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(key).print_stats(28)
        print(s.getvalue()[-6000:])


def child_safetensors():
    import torch
    from safetensors.torch import load_file

    torch.zeros(1, device="cuda")
    t = time.time()
    n = 0
    for f in files():
        sd = load_file(str(f), device="cuda")
        n += sum(v.numel() * v.element_size() for v in sd.values())
        del sd
    torch.cuda.synchronize()
    dt = time.time() - t
    print(f"safetensors load_file(device=cuda), one file at a time: {dt:.2f} s, {n / dt / 1e9:.2f} GB/s")


def child_pinned(readers: int, chunk_mb: int):
    import torch

    torch.zeros(1, device="cuda")
    chunk = chunk_mb << 20
    total = sum(f.stat().st_size for f in files())
    dst = torch.empty(total, dtype=torch.uint8, device="cuda")
    jobs = []
    off = 0
    for f in files():
        size = f.stat().st_size
        for o in range(0, size, chunk):
            jobs.append((f, o, min(chunk, size - o), off + o))
        off += size
    lock = threading.Lock()
    t = time.time()

    def work():
        buf = torch.empty(chunk, dtype=torch.uint8, pin_memory=True)
        stream = torch.cuda.Stream()
        mv = memoryview(buf.numpy())
        while True:
            with lock:
                if not jobs:
                    break
                f, o, n, d = jobs.pop()
            stream.synchronize()
            with open(f, "rb", buffering=0) as fh:
                fh.seek(o)
                got = 0
                while got < n:
                    got += fh.readinto(mv[got:n])
            with torch.cuda.stream(stream):
                dst[d : d + n].copy_(buf[:n], non_blocking=True)
        stream.synchronize()

    ths = [threading.Thread(target=work) for _ in range(readers)]
    [th.start() for th in ths]
    [th.join() for th in ths]
    torch.cuda.synchronize()
    dt = time.time() - t
    print(f"pinned chunks {chunk_mb} MB, {readers} readers: {dt:.2f} s, {total / dt / 1e9:.2f} GB/s")


def main():
    from holodesk.bench import cold_start as cs

    print(cs.prepare_checkpoint(FOLDER, tiny=False, seed=0, device="cuda"), flush=True)
    import torch

    torch.cuda.empty_cache()
    fs = cs.checkpoint_files(FOLDER)
    for args in (["safetensors"], ["pinned", "4", "64"], ["pinned", "8", "64"], ["pinned", "4", "256"], ["profile"]):
        cs._cache(fs)
        r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=200)
        print(
            f"=== {args}\n" + "\n".join(x for x in (r.stdout + r.stderr[-1500:]).splitlines() if "Warning" not in x),
            flush=True,
        )


if __name__ == "__main__":
    a = sys.argv[1:]
    if not a:
        main()
    elif a[0] == "profile":
        child_profile()
    elif a[0] == "safetensors":
        child_safetensors()
    else:
        child_pinned(int(a[1]), int(a[2]))
