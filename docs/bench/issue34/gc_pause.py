"""What one full garbage collection costs in a process running Holotron-12B, before and after the load's freeze
(issue 34; a measurement script, not product code).

Builds the bench's random full-size model (``holodesk bench``'s ``_load``, the tekken stand-in tokenizer), makes one
``HolotronPolicy.propose`` at 1920x1080 (graphs recorded, grammar compiled), then times ``gc.collect(2)`` three times
with every object tracked, calls ``LocalPolicy.ready()`` (``gc.freeze()`` after a collection), makes one more
proposal and times ``gc.collect(2)`` three times again. Prints the tracked objects and the ms of each collection.
``TINY=1`` runs the tiny model on the CPU.

Run on the GPU machine from the repository root with the wheels installed as gpu-session.sh does:
``PYTHONPATH=/tmp/site:app python3 docs/bench/issue34/gc_pause.py tekken``
"""
import gc
import json
import os
import sys
import time

from holodesk.policy.holotron.kernels import prepare_kernels

prepare_kernels()
from holodesk.bench.cli import _device, _load, parse_args  # noqa: E402
from holodesk.bench.product import TASK, desktop_frame  # noqa: E402
from holodesk.policy.base import Observation  # noqa: E402
from holodesk.policy.generation import GenerationOptions  # noqa: E402
from holodesk.policy.holotron.policy import HolotronPolicy  # noqa: E402

tiny = ["--tiny", "--device", "cpu"] if os.environ.get("TINY") else []  # TINY=1: the tiny model on the CPU
args = parse_args(["--tokenizer", sys.argv[1] if len(sys.argv) > 1 else "tekken", "--product", *tiny])
device, dtype = _device(args)
loaded = _load(args, device, dtype)
policy = HolotronPolicy(loaded, GenerationOptions(max_images=3, max_string_chars=24), decoder="static")


def collections(label: str) -> None:
    times = []
    for _ in range(3):
        t = time.perf_counter()
        gc.collect(2)
        times.append(round((time.perf_counter() - t) * 1e3, 1))
    print(json.dumps({"when": label, "tracked_objects": len(gc.get_objects()), "frozen": gc.get_freeze_count(),
                      "full_collection_ms": times}), flush=True)


policy.propose(Observation(task=TASK, frame=desktop_frame(1)))
collections("after a proposal, nothing frozen")
policy.ready()
policy.propose(Observation(task=TASK, frame=desktop_frame(2)))
collections("after ready() and a proposal")
policy.close()
collections("after close()")
