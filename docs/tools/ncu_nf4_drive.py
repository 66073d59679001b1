"""Drive for ``ncu`` (GPU): a few launches of one NF4 matrix-vector tile at two Holotron-12B shapes, NF4 with
double quantisation, so that Nsight Compute profiles the shuffle kernel alone (``docs/tools/ncu_nf4.sh``).

Run from the repo root on the GPU machine: ``PYTHONPATH=app python docs/tools/ncu_nf4_drive.py`` (the tiles
are those ``quant.choose`` picked in run 10d)."""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, "docs/tools")
from probe_nf4_gemv import layer

from holodesk.policy.holotron.ops import quant

for role, (n, k), tile in (("in_proj", (22656, 5120), (8, 1024, 1)), ("down", (5120, 20480), (4, 2048, 2))):
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = quant.quant_weight(layer(n, k, True, gen))
    x = torch.randn(1, k, generator=gen, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        quant.linear(x, w, ("nf4-shfl", *tile))
    torch.cuda.synchronize()
    print(role, "done", flush=True)
