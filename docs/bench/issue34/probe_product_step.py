"""Where the product step's time goes (issue 34; a measurement script, not product code).

Builds the bench's random full-size Holotron-12B (``holodesk bench``'s ``_load``, the tekken stand-in tokenizer),
runs ``HolotronPolicy.propose`` at 1920x1080 for an episode (``STEPS``, default 8; from step 4 the oldest
screenshot leaves the window), then a second task's first step and a third's (the system prompt kept, the task
new), and per step prints: wall ms, the policy's stage ms, the floor of its new work
(``bench.product.new_work_floor_ms``), the host ms of the grammar's calls (mask, accept, forced tokens, forced
stop), of ``prepare``, ``_embed``, ``reply``, ``reply_constraint``, ``_proposal``, the engine's ``run``, the
decoder's ``prefill`` and doctor's ``record_decoder`` (the parts of a step outside its stage timings), and the GPU ms (CUDA events) of each decode step and each jump-forward pass
by its length. Then single decode steps against jump-forward passes of 2-32 tokens, and a torch.profiler
timeline of one more step (GPU busy, idle, the largest gaps). ``TINY=1`` runs the tiny model on the CPU (no
floors, no events) to check the script. The policy is made ready as a load does (``LocalPolicy.ready``: the
loaded objects frozen out of the garbage collector's scans); ``FREEZE=0`` leaves that out.

Run on the GPU machine from the repository root with the wheels installed as gpu-session.sh does:
``PYTHONPATH=/tmp/site:app python3 docs/bench/issue34/probe_product_step.py tekken OUT.json``
"""
import collections, json, sys, time
import torch
from holodesk.policy.holotron.kernels import prepare_kernels
prepare_kernels()
from holodesk.bench.cli import parse_args, _load, _device
from holodesk.bench.floors import measure_floors
from holodesk.bench.product import desktop_frame, TASK, OTHER_TASK, new_work_floor_ms
from holodesk.policy.base import HistoryStep, Observation
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.holotron import runtime, engine as engmod
from holodesk.policy.holotron.decoder import StaticDecoder
from holodesk.policy.holotron.policy import HolotronPolicy
from holodesk.policy.local_core import LocalPolicy

import gc, os
TINY = bool(os.environ.get("TINY"))
GC_T = [0.0]


def _gc_watch(phase, info):  # each garbage collection during a timed step, as "gc<generation>" host ms
    if not ON[0]:
        return
    if phase == "start":
        GC_T[0] = time.perf_counter()
    else:
        HOST[f"gc{info['generation']}"].append((time.perf_counter() - GC_T[0]) * 1e3)


args = parse_args(["--tokenizer", sys.argv[1] if len(sys.argv) > 1 else "tekken", "--product"] + (["--tiny", "--device", "cpu"] if TINY else []))
device, dtype = _device(args)
loaded = _load(args, device, dtype)
floors = measure_floors(device) if not TINY else {}
CUDA = device.type == 'cuda'
if not CUDA:
    torch.cuda.synchronize = lambda *a: None
HOST = collections.defaultdict(list)
EV = []
ON = [False]
gc.callbacks.append(_gc_watch)

def wrap(cls, name, label, cuda=False, sized=False):
    f = getattr(cls, name)
    def w(*a, **k):
        if not ON[0]:
            return f(*a, **k)
        t = time.perf_counter()
        if cuda and CUDA:
            e0 = torch.cuda.Event(enable_timing=True); e0.record()
        r = f(*a, **k)
        dt = time.perf_counter() - t
        lab = label + (f"[{len(a[1])}]" if sized else "")
        HOST[lab].append(dt * 1e3)
        if cuda and CUDA:
            e1 = torch.cuda.Event(enable_timing=True); e1.record(); EV.append((lab, e0, e1))
        return r
    setattr(cls, name, w)

for n in ("mask", "accept", "forced_tokens", "forced_stop"):
    wrap(runtime.Constraint, n, "c." + n)
wrap(runtime.Sampler, "choose", "sampler.choose")
wrap(engmod.StaticEngine, "_step", "step", cuda=True)
wrap(engmod.StaticEngine, "_forward", "extend", cuda=True, sized=True)
wrap(HolotronPolicy, "prepare", "policy.prepare")
wrap(engmod.StaticEngine, "_embed", "engine._embed")
wrap(runtime, "decode_loop", "decode_loop")
engmod.decode_loop = runtime.decode_loop
# the rest of a step outside the policy's stage timings (the second task's first step had ~70 ms of it, run 26)
wrap(HolotronPolicy, "reply", "policy.reply")
wrap(HolotronPolicy, "reply_constraint", "policy.reply_constraint")
wrap(LocalPolicy, "_proposal", "policy._proposal")
wrap(engmod.StaticEngine, "run", "engine.run")
wrap(StaticDecoder, "prefill", "decoder.prefill", cuda=True)
wrap(engmod, "record_decoder", "record_decoder")

policy = HolotronPolicy(loaded, GenerationOptions(max_images=3, max_reply_tokens=args.product_tokens, max_string_chars=24),
                        decoder="static")
if os.environ.get("FREEZE", "1") != "0":  # as a load ends (LocalPolicy.ready); FREEZE=0: the collector as before
    policy.ready()
dd = policy.kernel_report()["decoder"]
print("setup", json.dumps({k: dd.get(k) for k in ("setup_seconds", "build_seconds", "warm_up_seconds", "capture_seconds", "prefill", "decode_graphs", "warm_up_captures")})[:1500], flush=True)
t0 = time.perf_counter()
policy.propose(Observation(task=TASK, frame=desktop_frame(1)))
print("first propose s", time.perf_counter() - t0, flush=True)
out = {"floors": floors, "steps": []}
past = []
steps = int(os.environ.get("STEPS", "8"))
for k in range(steps + 2):  # the episode, then a second task's first step twice (as the bench's "next task")
    frame = desktop_frame(100 + k)
    HOST.clear(); EV.clear(); ON[0] = True
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    task, history = (TASK, tuple(past)) if k < steps else ((OTHER_TASK, TASK)[k - steps], ())
    p = policy.propose(Observation(task=task, frame=frame, history=history))
    wall = (time.perf_counter() - t0) * 1e3
    ON[0] = False
    torch.cuda.synchronize()
    gpu = collections.defaultdict(list)
    for lab, e0, e1 in EV:
        gpu[lab].append(e0.elapsed_time(e1))
    row = {"step": k + 1 if k < steps else f"next task {k - steps + 1}", "wall": round(wall, 1), "timings": p.timings_ms, "floor": new_work_floor_ms(loaded, floors, p.extra) if floors else None,
           "extra": {x: p.extra.get(x) for x in ("prompt_tokens", "reused_tokens", "prefill_tokens", "model_steps", "forced_tokens", "generated_tokens")},
           "host": {k2: [round(sum(v), 2), len(v)] for k2, v in HOST.items()},
           "gpu_event_ms": {k2: [round(sum(v), 2), len(v), [round(x, 2) for x in v][:40]] for k2, v in gpu.items()}}
    print(json.dumps(row), flush=True)
    out["steps"].append(row)
    past.append(HistoryStep(index=k, frame=frame, action=p.action, thought=p.thought, note=p.note, raw_text=p.raw_text, outcome="performed"))

dd = policy.kernel_report()["decoder"]
print("after steps lazy", json.dumps(dd.get("lazy_captures"))[:600], flush=True)
# microbench: single steps vs extend(k) after a long prompt
eng = policy.engine
dec = eng.decoder
def timed(fn, n=10):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t) * 1e3 / n
micro = {}
dec.token.fill_(5)
micro["step_replay_no_sync"] = timed(lambda: dec.step())
micro["step_with_item"] = timed(lambda: int(torch.argmax(dec.step()[0]).item()))
for kk in (2, 3, 4, 6, 8, 12, 16, 24, 32):
    micro[f"extend_{kk}"] = timed(lambda: int(torch.argmax(dec.extend([7] * kk)[0]).item()), n=6)
print("micro", json.dumps({k: round(v, 3) for k, v in micro.items()}), flush=True)
out["micro"] = micro
if not CUDA:
    sys.exit(0)
# where a jump-forward pass's time goes against a decode step's: GPU time per kernel, 5 of each
from torch.profiler import profile, ProfilerActivity
for name, fn in (("step", lambda: dec.step()), ("extend_6", lambda: dec.extend([7] * 6))):
    fn(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    ka = sorted(prof.key_averages(), key=lambda e: -e.self_device_time_total)
    print(f"kernels of 5 x {name} (us total, calls):",
          [(e.key[:70], round(e.self_device_time_total), e.count) for e in ka[:25]], flush=True)
# torch profiler over one more product step, a cleaned one (the episode's whole history): GPU idle gaps, kernels
frame = desktop_frame(999)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    p = policy.propose(Observation(task=TASK, frame=frame, history=tuple(past)))
    torch.cuda.synchronize()
ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
ev.sort(key=lambda e: e.time_range.start)
busy = 0.0; gaps = []
end = ev[0].time_range.start
for e in ev:
    s, t = e.time_range.start, e.time_range.end
    if s > end:
        gaps.append((s - end, e.name[:60]))
    busy += max(0, t - max(s, end)); end = max(end, t)
span = ev[-1].time_range.end - ev[0].time_range.start
gaps.sort(reverse=True)
print("profile span_ms", span / 1e3, "busy_ms", busy / 1e3, "idle_ms", (span - busy) / 1e3, "gaps>50us", sum(1 for g in gaps if g[0] > 50), "sum gaps>50us ms", sum(g[0] for g in gaps if g[0] > 50) / 1e3)
print("largest gaps (us, next kernel):", [(round(g[0]), g[1]) for g in gaps[:25]])
print("profiled step", json.dumps({x: p.extra.get(x) for x in ("prompt_tokens", "reused_tokens", "prefill_tokens", "model_steps")}), json.dumps(p.timings_ms))
ka = sorted((e for e in prof.key_averages() if e.self_device_time_total > 0), key=lambda e: -e.self_device_time_total)
print("GPU kernels of the profiled step (us total, calls):", [(e.key[:60], round(e.self_device_time_total), e.count) for e in ka[:30]], flush=True)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)[:6000])
json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/probe34.json", "w"))
