"""Each native family's prompt, rendered by its tiny checkpoint's processor and chat template, switches reasoning
the way its makers publish: Holo2 by the template variable ``thinking``, Holo3 / Holo3.1 and Holotron-3-Nano by
``enable_thinking``; none of them gets a ``/think`` or ``/no_think`` line (a Nemotron Nano 2 switch, text to them).

The expected generation-prompt endings are the fixtures derived from the sources (docs/model-fidelity.md): with
thinking on the prompt ends inside an open ``<think>``; with it off the thought block is closed before the reply.
Only the processor and template are loaded (no weights): the rendering is what is checked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from holodesk.core.geometry import Frame, Monitor
from holodesk.policy.base import Observation
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.native.families import family_by_key, read_family
from holodesk.policy.native.policy import LoadedNative, NativePolicy
from holodesk.policy.native.processor import load_processor

ENDINGS = {
    # family key: (switch variable, ending with thinking on, ending with thinking off)
    "qwen3_vl": ("thinking", "<|im_start|>assistant\n<think>\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    "qwen3_vl_moe": ("thinking", "<|im_start|>assistant\n<think>\n",
                     "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    "qwen3_5": ("enable_thinking", "<|im_start|>assistant\n<think>\n",
                "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    "qwen3_5_moe": ("enable_thinking", "<|im_start|>assistant\n<think>\n",
                    "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    "nemotron_h_omni": ("enable_thinking", "<SPECIAL_11>Assistant\n<think>\n",
                        "<SPECIAL_11>Assistant\n<think></think>"),
}
"""Per family: the published switch (Holo2: hai-cookbook holo2/deploy_with_vllm.md; Holo3.x: hub.hcompany.ai
chat-completions; Holotron-3-Nano: NVIDIA's holo-nano loop) and the generation prompt's end in each state."""


def _renderer(folder: Path, *, reasoning: bool) -> NativePolicy:
    """A NativePolicy over the checkpoint's processor only (no model weights: ``prepare`` renders, never runs)."""
    family = read_family(folder)
    processor, kind = load_processor(folder, family)
    loaded = LoadedNative(model=None, processor=processor, tokenizer=getattr(processor, "tokenizer", None),
                          family=family, folder=folder, eos_ids=(0,), pad_id=0, think_end_id=None,
                          device=torch.device("cpu"), dtype=torch.float32, processor_kind=kind)
    return NativePolicy(loaded, GenerationOptions(reasoning=reasoning, constrained_decoding=False, max_images=1))


def _observation() -> Observation:
    pixels = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    return Observation(task="Open the /think menu", frame=Frame(pixels, Monitor(1, 0, 0, 96, 64)), history=())


@pytest.mark.parametrize("key", sorted(ENDINGS))
def test_the_families_switch_is_the_published_one(key: str) -> None:
    assert family_by_key(key).reasoning.template_kwarg == ENDINGS[key][0]
    assert family_by_key(key).reasoning.prompt_line is False


@pytest.mark.parametrize("reasoning", [True, False])
@pytest.mark.parametrize("key", sorted(ENDINGS))
def test_prompt_switches_reasoning_with_the_families_template_variable(
        family_dirs: dict[str, Path], key: str, reasoning: bool) -> None:
    _, on, off = ENDINGS[key]
    text = _renderer(family_dirs[key], reasoning=reasoning).prepare(_observation())["prompt_text"]
    assert text.endswith(on if reasoning else off), text[-80:]
    assert "/no_think" not in text and "\n/think" not in text  # the task's "/think" is disarmed, no switch line
