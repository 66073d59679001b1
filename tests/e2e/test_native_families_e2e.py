"""End to end: ``holodesk run --model <tiny checkpoint>`` for each native family (Holo2 / Qwen3-VL and
Qwen3-VL-MoE, Holo3 / Holo3.1 / Qwen3.5 and Qwen3.5-MoE, Holotron-3-Nano / Nemotron-H Omni) on a real Xvfb screen
with openbox
(tests/helpers/desktop.py).

The checkpoints are random (``holodesk tiny-checkpoint --family``), so what the model proposes is random
too; what is asserted is what must hold whatever it proposes: the run takes its steps, each reply was
constrained into a valid agent-loop-v1 action and recorded with it, each approved action was performed and
its result recorded, a performed pointer action moved the real pointer there, and nothing crashed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from holodesk.core.actions import ACTION_TYPES
from holodesk.policy.contract import Reply
from holodesk.session.episode import list_episodes, load_episode
from tests.helpers.desktop import Desktop

pytestmark = [pytest.mark.e2e, pytest.mark.gui, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
KINDS = set(ACTION_TYPES)
"""Every action kind of the vocabulary (the contract offers them all, key_down and key_up included)."""


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
@pytest.mark.parametrize("family", ["qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe",
                                    "nemotron_h_omni"])
def test_local_tiny_family_runs_its_steps_on_the_screen(desktop: Desktop, tmp_path: Path, family: str) -> None:
    from holodesk.bench.families import write_family_checkpoint

    ckpt = write_family_checkpoint(tmp_path / family, family, seed=0)
    # greedy: the random weights' replies are then the same every run (the profiles sample by default, with a new
    # seed each run); sampling under the grammar is tested in tests/policy/native and tests/policy/holotron
    env = desktop.env()
    env.update(OMP_NUM_THREADS="1", HOLODESK_MAX_STRING_CHARS="8", HOLODESK_MAX_REPLY_TOKENS="1024",
               HOLODESK_CONFIG=str(tmp_path / "no-settings.toml"))
    episodes = tmp_path / "episodes"
    res = subprocess.run([sys.executable, "-m", "holodesk", "run", "click OK", "--model", str(ckpt), "--approve",
                          "auto", "--max-steps", "2", "--greedy", "--episodes-dir", str(episodes)],
                         env=env, input="a\na\n", capture_output=True, text=True, timeout=300, cwd=ROOT)
    output = res.stdout + res.stderr
    assert "Traceback" not in output, output
    ep = load_episode(list_episodes(episodes)[0])
    assert ep.start["policy"] == "native-local", ep.start
    assert ep.steps, output
    for step in ep.steps:
        assert "error" not in step, (step.get("error"), step.get("raw_text"))  # constrained decoding: it parsed
        Reply.model_validate_json(step["raw_text"])  # the recorded reply is within the schema
        assert step["action"]["kind"] in KINDS, step
        if step["action"]["kind"] not in ("answer", "done", "plan"):
            assert step["decision"] == "approve", step  # the autopilot approved or asked (stdin says a)
            assert "status" in step["result"], step  # and what it did is recorded
    reason = (ep.end or {}).get("reason", "")
    finished = ep.steps[-1]["action"]["kind"] in ("answer", "done")
    assert (len(ep.steps) == 2 and "step cap (2 steps)" in reason) or finished, (reason, ep.steps)
    pointer = [s for s in ep.steps if s.get("result", {}).get("status") == "performed"
               and s["action"]["kind"] in ("click", "move")]
    if pointer:  # the pointer really went where the model's last pointer action said
        points = pointer[-1]["result"]["details"]["input_points"]
        loc = desktop.server.run("xdotool", "getmouselocation", "--shell").stdout
        where = dict(line.split("=") for line in loc.split())
        assert (int(where["X"]), int(where["Y"])) == tuple(points[-1]), (loc, points)
