"""The local Holotron start imports what it needs and no more (issue 34: "import what a start needs").

A fresh interpreter takes the path of ``holodesk run --model DIR`` to a loaded policy
(:func:`holodesk.policy.local.load_local_policy` on the tiny checkpoint, on the CPU) and lists the modules it
imported; none of those that only another path uses may be among them. What the start's imports cost, and
which of them transformers imports on its own, is in docs/benchmarks.md ("Issue 34: what a start's imports
cost")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

NOT_FOR_A_BF16_START = {
    "holodesk.bench": "the bench (its frames, checkpoint writers and the tekken stand-in tokenizer)",
    "mistral_common": "the bench's stand-in tokenizer data (a bench-only dependency)",
    "bitsandbytes": "8-bit / 4-bit weights only",
    "holodesk.policy.native.policy": "the runtime of the other model families",
    "holodesk.policy.native.processor": "the other families' image processor",
    "holodesk.policy.remote": "the server policy",
    "holodesk.doctor": "the doctor command",
    "PySide6": "the window and tray",
}
"""Module (or package) -> the path that needs it instead."""

START = """
import json, sys
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.local import load_local_policy

policy = load_local_policy(sys.argv[1], GenerationOptions(max_images=1, max_reply_tokens=16), device="cpu",
                           dtype="float32")
print(json.dumps({"policy": type(policy).__name__, "modules": sorted(sys.modules)}))
"""


@pytest.mark.slow
def test_the_local_start_imports_no_module_that_only_another_path_uses(tiny_dir: Path) -> None:
    pytest.importorskip("transformers.models.nemotron_h_omni")
    pytest.importorskip("xgrammar")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # PYTHONPATH kept: the checkout's holodesk
    res = subprocess.run([sys.executable, "-c", START, str(tiny_dir)], env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded = json.loads(res.stdout.strip().splitlines()[-1])
    modules = set(loaded["modules"])
    # the start really loaded the runtime (torch, transformers' model, the grammar)
    assert loaded["policy"] == "HolotronPolicy"
    assert {"torch", "transformers.models.nemotron_h_omni.modeling_nemotron_h_omni", "xgrammar"} <= modules
    found = {name: why for name, why in NOT_FOR_A_BF16_START.items()
             if name in modules or any(m.startswith(name + ".") for m in modules)}
    assert not found, f"the bf16 start imported modules it does not use: {found}"
