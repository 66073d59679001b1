"""Issue 34, cold start: how deep may the weights' read-ahead go before it slows the imports it runs beside?

Run 24 found the read-ahead (4 readers, 64 MiB reads) stretching the cold ``import torch`` from 1.3 s to 11.7 s: the
start gained nothing. This writes ``GB`` GB of weight-sized files, then for each reader count x read size (and with
the readers' I/O class set to idle) drops the page cache, starts the read (holodesk.policy.weights.read_through) and,
at the same moment, a fresh process doing the cold start's imports (holodesk.bench.cold_start._import_steps);
it prints the imports' seconds and the read's seconds and GB/s. Baselines: the imports alone, each read alone.
    python3 docs/bench/issue34/read_ahead_depth.py OUT.json [GB [idle]]   (root: drop_caches; PYTHONPATH with app/)
"""
import ctypes
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from holodesk.bench import page_cache
from holodesk.policy import weights

out = Path(sys.argv[1])
gb = int(sys.argv[2]) if len(sys.argv) > 2 else 16
folder = Path("/var/tmp/holodesk-read-ahead")
folder.mkdir(exist_ok=True)
files = [folder / f"w{i}.bin" for i in range(gb // 2)]
for f in files:
    if not f.exists() or f.stat().st_size != 2 * 2**30:
        subprocess.run(["dd", "if=/dev/zero", f"of={f}", "bs=64M", "count=32", "status=none"], check=True)
page_cache.flush(files)
total = sum(f.stat().st_size for f in files)
sched = {p.parent.parent.name: p.read_text().strip() for p in Path("/sys/block").glob("*/queue/scheduler")}
print("schedulers", sched, flush=True)
IMPORTS = ("import time, sys; t=time.time(); from holodesk.bench.cold_start import _import_steps; s={}; "
           "_import_steps(True, 0, s); print(round(time.time()-t, 3)); "
           "print({k: round(v-t, 3) for k, v in s.items()})")
subprocess.run([sys.executable, "-c", IMPORTS], check=True, capture_output=True)  # bytecode written, kernels cached
libc = ctypes.CDLL(None, use_errno=True)


def idle_class() -> None:  # ioprio_set(IOPRIO_WHO_PROCESS, this thread, IOPRIO_CLASS_IDLE)
    libc.syscall(251, 1, 0, 3 << 13)


def trial(readers: int, chunk_mb: int, imports: bool, idle: bool = False) -> dict:
    page_cache.drop(files)
    weights.READ_CHUNK = chunk_mb * 2**20
    seen: set[int] = set()

    def on_read(_n: int) -> None:
        if idle and threading.get_ident() not in seen:
            seen.add(threading.get_ident())
            idle_class()

    res: dict = {"readers": readers, "chunk_MiB": chunk_mb, "idle": idle, "imports": imports}
    proc = None
    t0 = time.perf_counter()
    if imports:
        proc = subprocess.Popen([sys.executable, "-c", IMPORTS], stdout=subprocess.PIPE, text=True)
    if readers:
        weights.read_through(files, threads=readers, on_read=on_read)
        res["read_s"] = round(time.perf_counter() - t0, 3)
        res["read_GBps"] = round(total / 1e9 / res["read_s"], 3)
    if proc is not None:
        lines = proc.communicate()[0].splitlines()
        res["imports_s"] = float(lines[0])
        res["import_steps"] = lines[1]
        res["wall_s"] = round(time.perf_counter() - t0, 3)
    print(res, flush=True)
    return res


if len(sys.argv) > 3 and sys.argv[3] == "idle":  # the idle I/O class alone, then the imports alone again
    results = [trial(4, 64, True, idle=True), trial(0, 0, True)]
else:
    results = [trial(0, 0, True)]
    for readers, chunk in ((4, 64), (1, 64), (1, 8), (2, 8), (2, 2), (4, 2)):
        results.append(trial(readers, chunk, False))
        results.append(trial(readers, chunk, True))
    results.append(trial(4, 64, True, idle=True))
    results.append(trial(0, 0, True))
out.write_text(json.dumps({"bytes": total, "schedulers": sched, "trials": results}, indent=1))
