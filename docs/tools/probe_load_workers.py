"""Probe (GPU, run 12c): ``load_holotron``'s load time against the thread count of transformers' loader
(``transformers.core_model_loading.GLOBAL_WORKERS``, set in each child), page cache warm and cold, each in a
fresh process, on the cold-start bench's 26 GB random checkpoint (written first, or reused).

Measured before the page-locked reader (``holodesk.policy.holotron.stream``): a bf16 load on CUDA now does not
go through transformers' reader, so this probe only measures that path on code before it. Run from the repo root
on the GPU machine: ``PYTHONPATH=app python docs/tools/probe_load_workers.py`` (root: it drops the page cache).
"""

import json
import subprocess
import sys
import time
from pathlib import Path

FOLDER = Path("/var/tmp/holodesk-cold-start")


def child(workers: int) -> None:
    t0 = time.time()
    import torch
    import transformers.core_model_loading as cml

    from holodesk.policy.holotron.kernels import prepare_kernels
    from holodesk.policy.holotron.loader import load_holotron

    prepare_kernels()
    from transformers.models.nemotron_h_omni import NemotronH_Omni_Reasoning_V3  # noqa: F401

    torch.zeros(1, device="cuda")
    cml.GLOBAL_WORKERS = workers
    t1 = time.time()
    load_holotron(FOLDER, device="cuda")
    torch.cuda.synchronize()
    t2 = time.time()
    print(
        json.dumps(
            {
                "workers": workers,
                "imports_s": round(t1 - t0, 2),
                "load_s": round(t2 - t1, 2),
                "gpu_gb": round(torch.cuda.memory_allocated() / 1e9, 2),
            }
        ),
        flush=True,
    )


def main() -> None:
    from holodesk.bench import cold_start as cs

    t = time.time()
    info = cs.prepare_checkpoint(FOLDER, tiny=False, seed=0, device="cuda")
    import torch

    torch.cuda.empty_cache()
    print("checkpoint", info, f"{time.time() - t:.0f} s", flush=True)
    files = cs.checkpoint_files(FOLDER)
    floor = cs.measure_floor(files, system_drop=True)
    print("floor", json.dumps(floor), flush=True)
    for mode, w in [("warm", 4), ("warm", 8), ("warm", 16), ("warm", 4), ("cold", 4), ("cold", 16), ("warm", 32)]:
        if mode == "cold":
            cs._drop(files, True)
        else:
            cs._cache(files)
        r = subprocess.run([sys.executable, __file__, "child", str(w)], capture_output=True, text=True, timeout=200)
        line = [x for x in r.stdout.splitlines() if x.startswith("{")]
        res = json.loads(line[-1]) if line else {"error": (r.stdout + r.stderr)[-800:]}
        if "load_s" in res:
            res["over_floor"] = round(res["load_s"] / floor[mode]["seconds"], 2)
        print(mode, json.dumps(res), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "child":
        child(int(sys.argv[2]))
    else:
        main()
