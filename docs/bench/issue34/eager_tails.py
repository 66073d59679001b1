"""Do prompt tails need CUDA graphs? (issue 34; a measurement script, not product code.)

A product step's prefill of a new length records 7 segment graphs on first use (140-170 ms, runs 16-18), which
is most of what the first step of a task, a cleaned step and a second task's first step lose against their
floors. This script measures what the graphs of the long tails buy once recorded: the bench's random full-size
Holotron-12B (tekken stand-in), ``HolotronPolicy.propose`` at 1920x1080, four 8-step episodes in one process:

* A: the first (graphs recorded on first use, as a fresh app);
* B: the same again on new frames (the lengths seen in A replay their graphs);
* C: every segment graph of a tail length dropped except the short passes' (``short_rows``) and the full chunk's,
  and no prefill graph recorded from then on: tails launch their kernels from Python;
* D: as C on new frames (noise of C).

Per step: wall ms, prefill ms, the floor of the step's new work (``bench.product.new_work_floor_ms``), graphs
recorded on first use. Run on the GPU machine from the repository root with the wheels installed as
gpu-session.sh does: ``PYTHONPATH=/tmp/site:app python3 docs/bench/issue34/eager_tails.py OUT.json``;
``TINY=1`` checks the script on the CPU (tiny model, no floors).
"""
import json
import os
import sys
import time

import torch

from holodesk.policy.holotron.kernels import prepare_kernels

prepare_kernels()
from holodesk.bench.cli import _device, _load, parse_args  # noqa: E402
from holodesk.bench.floors import measure_floors  # noqa: E402
from holodesk.bench.product import TASK, desktop_frame, new_work_floor_ms  # noqa: E402
from holodesk.policy.base import HistoryStep, Observation  # noqa: E402
from holodesk.policy.generation import GenerationOptions  # noqa: E402
from holodesk.policy.holotron.policy import HolotronPolicy  # noqa: E402

TINY = bool(os.environ.get("TINY"))
args = parse_args(["--tokenizer", "test" if TINY else "tekken", "--product"]
                  + (["--tiny", "--device", "cpu"] if TINY else []))
device, dtype = _device(args)
loaded = _load(args, device, dtype)
floors = {} if TINY else measure_floors(device)
policy = HolotronPolicy(loaded, GenerationOptions(max_images=3, max_reply_tokens=args.product_tokens,
                                                  max_string_chars=24), decoder="static")
dec = policy.engine.decoder if policy.engine is not None else None


def sync() -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def episode(name: str, seed: int, steps: int = 8) -> list[dict]:
    rows, past = [], []
    for k in range(steps):
        frame = desktop_frame(seed + k)
        before = len(dec.lazy_captures) if dec is not None else 0
        sync()
        t0 = time.perf_counter()
        p = policy.propose(Observation(task=TASK, frame=frame, history=tuple(past)))
        sync()
        wall = (time.perf_counter() - t0) * 1e3
        floor = new_work_floor_ms(loaded, floors, p.extra) if floors else None
        lazy = dec.lazy_captures[before:] if dec is not None else []
        row = {"episode": name, "step": k + 1, "wall_ms": round(wall, 1),
               "prefill_ms": round(p.timings_ms.get("prefill", 0.0), 1),
               "floor_ms": None if floor is None else round(floor, 1),
               "over_floor": None if not floor else round(wall / floor, 3),
               "prefill_tokens": p.extra.get("prefill_tokens"), "reused_tokens": p.extra.get("reused_tokens"),
               "lazy": [len(lazy), round(sum(s for _, s in lazy), 3)]}
        print(json.dumps(row), flush=True)
        rows.append(row)
        past.append(HistoryStep(index=k, frame=frame, action=p.action, thought=p.thought, note=p.note,
                                raw_text=p.raw_text, outcome="performed"))
    return rows


out = {"floors": floors, "rows": []}
out["rows"] += episode("A first", 100)
out["rows"] += episode("B graphs", 200)
if dec is not None:
    kept = set(dec.short_rows) | {dec.chunk}
    dropped = [key for key in dec.graphs if len(key) == 2 and key[1] not in kept]
    for key in dropped:
        del dec.graphs[key]
    dec._recording.discard("prefill")
    print(f"dropped {len(dropped)} tail graphs; prefill graphs kept for rows {sorted(kept)}", flush=True)
out["rows"] += episode("C eager tails", 300)
out["rows"] += episode("D eager tails", 400)
for name in ("A first", "B graphs", "C eager tails", "D eager tails"):
    rows = [r for r in out["rows"] if r["episode"] == name]
    print(name, "wall", [r["wall_ms"] for r in rows], "prefill", [r["prefill_ms"] for r in rows],
          "x floor", [r["over_floor"] for r in rows], flush=True)
if len(sys.argv) > 1:
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh)
