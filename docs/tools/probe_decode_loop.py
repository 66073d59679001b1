"""Where the GPU waits between decode steps: the bench's engine (``holodesk bench`` arguments), then decode loops
timed on the host after its frame runs, with no grammar (as the bench's TTFA row):

* ``engine``: ``StaticEngine._step(token)`` then ``int(argmax(logits).item())``, as ``decode_loop`` does;
* the same with host timestamps between its parts (fill, step, argmax launch, token read);
* ``replay + sync``: ``graph.replay()`` and ``torch.cuda.synchronize()`` only;
* the replayed graph with the token written and read in other ways (a page-locked buffer and an event);
* ``back to back``: replays with no host wait (the GPU time of a step).

Usage: ``python docs/tools/probe_decode_loop.py [holodesk bench arguments]`` on the GPU machine. Prints
microseconds per step (medians over 40 steps)."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import torch

from holodesk.bench import cli, runs

STEPS = 40


def experiments(engine: Any) -> None:
    d = engine.decoder
    engine.reset()
    ids = torch.arange(200, device=engine.loaded.device)[None] % 97 + 3
    with torch.inference_mode():
        logits, _ = d.prefill(engine.loaded.model.get_input_embeddings()(ids), None)
        token = int(torch.argmax(logits[0]).item())
        walls, parts = [], []
        for _ in range(STEPS):
            t0 = time.perf_counter()
            d.token.fill_(token)
            t1 = time.perf_counter()
            out = d.step()[0]
            t2 = time.perf_counter()
            chosen = torch.argmax(out)
            t3 = time.perf_counter()
            token = int(chosen.item())
            t4 = time.perf_counter()
            walls.append((t4 - t0) * 1e6)
            parts.append(((t1 - t0) * 1e6, (t2 - t1) * 1e6, (t3 - t2) * 1e6, (t4 - t3) * 1e6))
        graph = d.graphs.get((d.state.window(d.state.length),))
        if graph is None:  # no CUDA graphs (CPU)
            print(f"engine path: {statistics.median(walls):.1f} us a step; no graph to replay")
            return
        syncs = []
        for _ in range(STEPS):
            t0 = time.perf_counter()
            graph.replay()
            torch.cuda.synchronize()
            syncs.append((time.perf_counter() - t0) * 1e6)
        variants: dict[str, list[float]] = {}
        pinned_in = torch.zeros(1, 1, dtype=torch.long).pin_memory()
        pinned_out = torch.zeros((), dtype=torch.long).pin_memory()
        done = torch.cuda.Event()
        for name in ("fill + replay + argmax + item", "pinned token in, argmax, pinned out + event",
                     "fill + replay + item of the logits' first value"):
            walls = variants.setdefault(name, [])
            for _ in range(STEPS):
                t0 = time.perf_counter()
                if name.startswith("pinned"):
                    pinned_in[0, 0] = token
                    d.token.copy_(pinned_in, non_blocking=True)
                else:
                    d.token.fill_(token)
                graph.replay()
                if name.startswith("pinned"):
                    pinned_out.copy_(torch.argmax(d.logits[0]), non_blocking=True)
                    done.record()
                    done.synchronize()
                    token = int(pinned_out)
                elif name.endswith("first value"):
                    float(d.logits[0, 0].item())
                else:
                    token = int(torch.argmax(d.logits[0]).item())
                walls.append((time.perf_counter() - t0) * 1e6)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        for _ in range(STEPS):
            graph.replay()
        host = (time.perf_counter() - t0) * 1e6 / STEPS
        end.record()
        end.synchronize()
        gpu = start.elapsed_time(end) * 1e3 / STEPS
    engine.reset()
    med = [statistics.median(p[i] for p in parts) for i in range(4)]
    print(f"decode loop, {STEPS} steps (us per step, medians):")
    print(f"  engine path (fill, step, argmax, item): {statistics.median(walls):8.1f}")
    print(f"    host parts: fill {med[0]:.1f}, step() {med[1]:.1f}, argmax launch {med[2]:.1f}, "
          f"item (waits) {med[3]:.1f}")
    print(f"  replay + synchronize:                   {statistics.median(syncs):8.1f}")
    for name, values in variants.items():
        print(f"  {name}: {statistics.median(values):8.1f}")
    print(f"  back to back (GPU time a step):         {gpu:8.1f}  (host time of replay() {host:.1f})", flush=True)


def frame_runs(engine: Any, *args: Any) -> Any:
    rows = ORIGINAL(engine, *args)
    experiments(engine)
    return rows


ORIGINAL = runs.frame_runs
runs.frame_runs = frame_runs
runs.agent_reply_runs = lambda *a, **k: {"checks_failed": []}

if __name__ == "__main__":
    sys.exit(cli.main(sys.argv[1:]))
