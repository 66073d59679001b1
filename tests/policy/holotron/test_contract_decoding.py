"""Constrained decoding in agent-loop-v1 never leaves the reply schema (tiny random checkpoint, CPU).

Each reply is decoded by the stock decoder's real loop (``runtime.generate``: greedy, xgrammar mask from
``runtime.Constraint``) from a short seeded task prompt, so the random model's logits differ per seed.
The grammar is compiled from the contract's schema with strings capped (``max_string_chars``), as the
policy does. Every reply must end by the grammar (``eos``), validate against the schema (jsonschema, an
independent validator) and parse to an action.

Cost: about 0.23 s per reply on one CPU thread (measured: 1,000 replies in about 4 minutes on the shared
2-core box). CI runs ``HOLODESK_DECODING_REPLIES`` replies (default 150); set it to 1000 for the full run.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter

import pytest
import torch

from holodesk.core.actions import Action, Point
from holodesk.policy.contract import tool_names
from holodesk.policy.holotron import runtime
from holodesk.policy.protocol import get_protocol

jsonschema = pytest.importorskip("jsonschema")

REPLIES = int(os.environ.get("HOLODESK_DECODING_REPLIES", "150"))
WORDS = ("open", "click", "the", "save", "button", "menu", "file", "edit", "type", "hello", "scroll", "down",
         "wait", "answer", "form", "name", "drag", "move", "double", "right", "press", "enter", "ctrl", "window",
         "field", "submit")


@pytest.mark.slow
def test_constrained_replies_never_leave_the_contract_schema(tiny_loaded) -> None:  # type: ignore[no-untyped-def]
    protocol = get_protocol("agent-loop-v1")
    schema = runtime.cap_strings(protocol.json_schema(), 12)
    validator = jsonschema.Draft202012Validator(schema)
    constraint = runtime.Constraint(tiny_loaded, schema)
    embed = tiny_loaded.model.get_input_embeddings()
    stops: Counter[str] = Counter()
    tools: Counter[str] = Counter()
    for seed in range(REPLIES):
        rng = random.Random(seed)
        task = "Task: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
        ids = tiny_loaded.tokenizer.encode(task, add_special_tokens=False)
        with torch.no_grad():
            generation = runtime.generate(tiny_loaded, embed(torch.tensor([ids])), max_new_tokens=200,
                                          constraint=constraint)
        stops[generation.stop_reason] += 1
        assert generation.stop_reason == "eos", (seed, generation.stop_reason, generation.text)
        reply = json.loads(generation.text)
        errors = [e.message for e in validator.iter_errors(reply)]
        assert not errors, (seed, generation.text, errors)
        parsed = protocol.parse(generation.text, pointer=Point(500, 500))
        assert isinstance(parsed.action, Action)
        tools[reply["tool_call"]["tool_name"]] += 1
    assert stops == Counter({"eos": REPLIES})
    assert set(tools) <= set(tool_names())
    assert len(tools) >= 3, tools  # the seeds reach several branches of the union, not one
