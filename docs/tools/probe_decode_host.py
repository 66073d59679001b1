"""Where a decode step's host time goes: ``holodesk bench`` run with timers around the decode loop's parts.

Usage: ``python docs/tools/probe_decode_host.py [holodesk bench arguments]`` (on the GPU machine, with the
bench's usual arguments). Each timed part is wrapped (``runtime._choose`` split into the grammar's ``mask``
and the token's read, ``StaticEngine._step``/``_forward``, the grammar's ``accept``, ``forced_tokens``,
``forced_stop``); after the bench, per part: calls, total and median microseconds. The timers add a few
microseconds a call, so the bench's own figures from this run are not measurements.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from holodesk.bench.cli import main
from holodesk.policy.holotron import engine, runtime

TIMES: dict[str, list[float]] = defaultdict(list)


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[name].append((time.perf_counter() - t0) * 1e6)
    return wrapper


def choose(loaded: Any, logits: Any, constraint: Any, *, thinking_over: bool) -> int:
    import torch

    t0 = time.perf_counter()
    if constraint is not None and not thinking_over:
        constraint.mask(logits)
    t1 = time.perf_counter()
    token = int(torch.argmax(logits).item())
    t2 = time.perf_counter()
    TIMES["choose: mask (host)"].append((t1 - t0) * 1e6)
    TIMES["choose: argmax + item (waits for the step)"].append((t2 - t1) * 1e6)
    return token


runtime._choose = choose
engine.StaticEngine._step = timed("engine._step (fill + replay)", engine.StaticEngine._step)
engine.StaticEngine._forward = timed("engine._forward (extend)", engine.StaticEngine._forward)
for name in ("accept", "forced_tokens", "forced_stop"):
    setattr(runtime.Constraint, name, timed(f"Constraint.{name}", getattr(runtime.Constraint, name)))
runtime.decode_loop = timed("decode_loop (whole reply)", runtime.decode_loop)
engine.decode_loop = runtime.decode_loop

if __name__ == "__main__":
    code = main(sys.argv[1:])
    print("\nhost time per part (us): calls, total, median, p90")
    for name, values in TIMES.items():
        values.sort()
        print(f"  {name:48s} {len(values):6d} {sum(values):12.0f} {statistics.median(values):9.1f} "
              f"{values[int(0.9 * (len(values) - 1))]:9.1f}")
    sys.exit(code)
