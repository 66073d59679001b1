"""A cold start with the model and the static engine built beside the weights' read, against one that reads first,
and how many page-locked readers should read meanwhile (``holodesk.policy.holotron.stream.READERS_BESIDE``): one
fresh cold-start process per variant, the page cache dropped before each, on the checkpoint ``holodesk bench
--cold-start`` wrote (run it first: it also fills the compile caches). A measurement script (not run by CI).

    python3 docs/bench/issue34/readers_beside.py [FOLDER] [OUT.json] [VARIANTS]   # e.g. sync,2,8,8pre,sync,2

Each child also records every file Python opens (an audit hook): ``opened_after_imports`` counts those opened
between its imports and its last weight (the weights' own folder left out), their bytes and the folders with the
most; files mapped or opened by C code (shared libraries, CUDA's caches) are not seen.

A variant is ``sync`` (``HolotronPolicy.load`` made to read first: ``load_holotron(background=False)``), a number
(the readers reading beside the build), or a number with ``pre`` (also importing torch's compiler, Triton and the
runtime's kernels before the child's own timing starts: counted in ``startup_s`` and ``total_s`` only). A variant
ending in ``hot`` (``synchot``, ``2hot``) evicts only the weights' pages (``posix_fadvise``), not the whole page
cache: every other file the start reads (libraries, compile caches, tokenizer) stays as the runs before left it, so
that the build's own cold reads are taken out of the comparison. Since the child reads ahead as the product does
(``holodesk.policy.start_files``: the list the previous child recorded), a variant ending in ``bare`` (``2bare``)
passes the child ``--no-read-ahead``: the start without it. (Run 30's ``pf`` variants, the child's own read-ahead
before the product had one, are in this file's history: 153dca9.)

Each child also samples this process's ``read_bytes`` (``/proc/self/io``) and the machine's ``pgpgin`` every 0.1 s:
``disk_since_spawn`` gives the bytes read from the disk (GB, the machine's count) up to each of the child's stamps. Each
child is ``python -m holodesk.bench.cold_start``'s child; the phases are :func:`holodesk.bench.cold_start.phases`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from holodesk.bench import page_cache
from holodesk.bench.cold_checkpoint import checkpoint_files
from holodesk.bench.cold_start import imports_split, phases

CHILD = """
import sys, runpy, time, atexit, json, os, threading
variant, opened_to = sys.argv.pop(1), sys.argv.pop(1)
opened = []  # (wall time, path) of every file Python opens from here on: what the start reads besides the weights
io = []  # (wall time, this process's read_bytes, the machine's pgpgin KiB) every 0.1 s
def audit(event, args):
    if event == "open" and isinstance(args[0], str):
        opened.append((time.time(), args[0]))
sys.addaudithook(audit)
def sample():
    while True:
        with open("/proc/self/io") as f:
            mine = int(next(l for l in f if l.startswith("read_bytes")).split()[1])
        with open("/proc/vmstat") as f:
            machine = int(next(l for l in f if l.startswith("pgpgin ")).split()[1])
        io.append((time.time(), mine, machine))
        time.sleep(0.1)
threading.Thread(target=sample, daemon=True).start()
def written():
    open(opened_to, "w").write(json.dumps({"opened": opened, "io": io}))
atexit.register(written)
import holodesk.policy.holotron.stream as s
import holodesk.policy.holotron.policy as p
base = variant.removesuffix("pre")
if base == "sync":  # read first (all readers), then build: the load before the read went beside the build
    real = p.load_holotron
    p.load_holotron = lambda *a, background=True, **k: real(*a, background=False, **k)
    s.READERS_BESIDE = s.READERS
else:
    s.READERS_BESIDE = int(base)  # "8pre": 8
if variant.endswith("pre"):
    import torch, torch._dynamo, torch._inductor.compile_fx, triton  # noqa
    import holodesk.policy.holotron.decoder, holodesk.policy.holotron.engine  # noqa
sys.argv[0] = "cold_start"
runpy.run_module("holodesk.bench.cold_start", run_name="__main__")
"""


def opened_files(opened: list[list[Any]], start: float, end: float, weights: Path) -> dict[str, Any]:
    """The files the child opened between ``start`` and ``end`` (wall times), the weights' folder left out: how
    many, their bytes (their sizes now), and the 8 folders with the most bytes."""
    sizes: dict[str, int] = {}
    for t, path in opened:
        if start <= t <= end and not path.startswith(str(weights)) and path not in sizes:
            with contextlib.suppress(OSError):
                sizes[path] = os.stat(path).st_size if os.path.isfile(path) else 0
    folders: dict[str, list[int]] = {}
    for path, size in sizes.items():
        entry = folders.setdefault(os.path.dirname(path), [0, 0])
        entry[0] += 1
        entry[1] += size
    top = sorted(folders.items(), key=lambda kv: -kv[1][1])[:8]
    return {"files": len(sizes), "bytes": sum(sizes.values()),
            "folders": {k: {"files": n, "bytes": b} for k, (n, b) in top}}


def disk_at_stamps(io: list[list[float]], stamps: dict[str, float]) -> dict[str, Any]:
    """GB read from the disk from the child's first sample to each stamp (the machine's ``pgpgin``, KiB; the
    child's own ``read_bytes`` in ``process``)."""
    samples = io
    if not samples:
        return {}
    t0, mine0, machine0 = samples[0]

    def at(t: float) -> list[float]:
        last = samples[0]
        for sample in samples:
            if sample[0] > t:
                break
            last = sample
        return [round((last[2] - machine0) * 1024 / 1e9, 3), round((last[1] - mine0) / 1e9, 3)]

    marks = {k: at(v) for k, v in sorted(stamps.items(), key=lambda kv: kv[1]) if v >= t0}
    return {"machine_gb, process_gb": marks, "end": at(samples[-1][0])}


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "/var/tmp/holodesk-cold-start")
    out = Path(sys.argv[2] if len(sys.argv) > 2 else "readers-beside.json")
    values = (sys.argv[3] if len(sys.argv) > 3 else "sync,2,8,8pre").split(",")
    files = checkpoint_files(folder)
    device = os.environ.get("DEVICE", "cuda")  # cpu: a check of this script on the tiny checkpoint
    rows = []
    for beside in values:
        drop = page_cache.drop(files, system=not beside.endswith("hot"))
        with tempfile.TemporaryDirectory() as tmp:
            result, opened_path = Path(tmp) / "child.json", Path(tmp) / "opened.json"
            bare = beside.endswith("bare")
            cmd = [sys.executable, "-c", CHILD, beside.removesuffix("hot").removesuffix("bare"), str(opened_path),
                   str(folder), *(["--no-read-ahead"] if bare else []), "--device", device,
                   "--dtype", "bfloat16",
                   "--result", str(result), "--steps", "2", "--max-new-tokens", "1024"]
            spawn = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
            if proc.returncode != 0 or not result.exists():
                print(f"{beside}: child failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-2000:]}")
                continue
            child = json.loads(result.read_text())
            record = json.loads(opened_path.read_text()) if opened_path.exists() else {}
        opened = record.get("opened", [])
        child["spawn"] = spawn
        engine = child.get("engine") or {}
        stamps = child["timestamps"]
        row = {"variant": beside, "read_ahead": child.get("read_ahead"), "drop": drop, **phases(child),
               "imports_split": imports_split(stamps),
               "weights_reader": engine.get("weights_reader"), "engine_setup_s": engine.get("setup_seconds"),
               "engine_build_s": engine.get("build_seconds"), "capture_seconds": engine.get("capture_seconds"),
               "warm_up_s": engine.get("warm_up_seconds"), "steps": [s["wall_s"] for s in child["steps"]],
               "since_imports": {k: round(v - stamps["imports"], 2) for k, v in stamps.items()
                                 if v >= stamps["imports"]},
               "opened_after_imports": opened_files(opened, stamps["imports"], stamps.get("weights", stamps["graphs"]),
                                                    folder),
               "disk_since_spawn": disk_at_stamps(record.get("io", []), stamps)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
