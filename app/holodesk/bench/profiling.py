"""The GPU's work in one measured step, by kernel (``holodesk bench --profile``): torch.profiler over a step
run as :mod:`holodesk.bench.runs` runs them, each kernel's time and calls, and the idle time between kernels."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from holodesk.bench.runs import prompt_ids, prompt_images, random_frame, size, timed_step

if TYPE_CHECKING:
    import argparse

    from holodesk.policy.holotron.engine import StaticEngine


def kernel_gaps(prof: Any, *, pairs: int = 12) -> dict[str, Any]:
    """The GPU's idle time between the profiled kernels (``prof``: a finished ``torch.profiler.profile``):
    microseconds from the first kernel's start to the last one's end, with no kernel running, and that idle
    time split into gaps of at most 5 us (one kernel's launch after the previous one, as inside a CUDA graph)
    and longer ones (the GPU waiting for the host; longer under the profiler than without it). ``where``:
    the longer gaps summed by the kernels on either side (``after``: the kernel that ended last before the
    gap, ``before``: the one that starts it; names cut to 60 characters), the ``pairs`` largest sums first."""
    from torch.autograd import DeviceType  # lazy: torch (optional: the local extra)

    spans = sorted((e.time_range.start, e.time_range.end, str(getattr(e, "name", ""))[:60]) for e in prof.events()
                   if e.device_type == DeviceType.CUDA and e.time_range.end > e.time_range.start)
    if not spans:
        return {}
    short = long = 0.0
    count_long = 0
    where: dict[tuple[str, str], list[float]] = {}
    reach, last = spans[0][1], spans[0][2]
    for start, end, name in spans[1:]:
        gap = start - reach
        if gap > 5.0:
            long, count_long = long + gap, count_long + 1
            total = where.setdefault((last, name), [0.0, 0])
            total[0], total[1] = total[0] + gap, total[1] + 1
        elif gap > 0:
            short += gap
        if end >= reach:
            reach, last = end, name
    ranked = sorted(where.items(), key=lambda kv: -kv[1][0])[:pairs]
    return {"span_us": round(reach - spans[0][0], 1), "idle_us": round(short + long, 1),
            "idle_in_gaps_upto_5us": round(short, 1), "idle_in_gaps_over_5us": round(long, 1),
            "gaps_over_5us": count_long,
            "where": [{"after": a, "before": b, "gaps": int(n), "us": round(us, 1)} for (a, b), (us, n) in ranked]}


def profile_step(engine: StaticEngine, args: argparse.Namespace) -> dict[str, Any]:
    """GPU time per kernel over one cold ``--history-size`` step after a warm-up (torch.profiler with CUPTI,
    which also records the kernels a CUDA graph replay launches): GPU-busy microseconds, kernel launches, the
    25 kernels with the most time (``top``; every kernel in ``kernels``) and the idle time between kernels
    (:func:`kernel_gaps`). Profiling slows the host, so its wall time is not a measurement."""
    from torch.profiler import ProfilerActivity, profile  # lazy: torch (optional: the local extra)

    loaded = engine.loaded
    pixels = random_frame(*size(args.history_size), seed=5)
    ids, images = prompt_ids(loaded, [pixels], args, seed=5), prompt_images(loaded, [pixels])
    for _ in range(2):  # the first run warms up, the second is profiled
        engine.reset()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            timed_step(engine, ids, images, args.reply_tokens, 0)
    engine.reset()
    rows = []
    for event in prof.key_averages():
        us = float(getattr(event, "device_time_total", 0.0) or 0.0)
        if us > 0 and event.count > 0:
            rows.append({"kernel": event.key[:120], "calls": int(event.count), "us": round(us, 1)})
    rows.sort(key=lambda r: -float(r["us"]))
    out = {"prompt_tokens": len(ids), "reply_tokens": args.reply_tokens,
           "gpu_busy_us": round(sum(float(r["us"]) for r in rows), 1),
           "kernel_launches": sum(int(r["calls"]) for r in rows), "top": rows[:25], "kernels": rows,
           "gaps": kernel_gaps(prof)}
    print(f"profile: {out['gpu_busy_us']} us GPU-busy, {out['kernel_launches']} kernel launches over one step of "
          f"{len(ids)} prompt and {args.reply_tokens} reply tokens; idle between kernels "
          f"{ {k: v for k, v in out['gaps'].items() if k != 'where'} }", flush=True)
    for r in rows[:25]:
        print(f"  {r['us']:10.1f} us  x{r['calls']:5d}  {r['kernel']}", flush=True)
    for w in out["gaps"].get("where", []):
        print(f"  idle {w['us']:9.1f} us in {w['gaps']:4d} gaps after {w['after']} before {w['before']}", flush=True)
    return out
