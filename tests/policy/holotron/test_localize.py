"""HolotronPolicy's element localization ("Click more precisely"): a crop and H Company's localization prompt in
one user turn, thinking off, the reply constrained to ``{"x", "y"}`` in [0, 1000] and read by the protocol's
parser; on the tiny random Holotron checkpoint, on the CPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from holodesk.core.actions import Point
from holodesk.policy.base import Localizer
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.holotron import HolotronPolicy, runtime


def test_localize_answers_a_point_of_the_crop(tiny_loaded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = HolotronPolicy(tiny_loaded, GenerationOptions(max_reply_tokens=256))
    assert isinstance(policy, Localizer)
    calls: list[dict[str, Any]] = []
    generate = runtime.generate

    def spy(loaded: Any, ids: Any, images: Any, **kw: Any) -> Any:
        calls.append({"ids": list(ids), "images": len(images), **kw})
        return generate(loaded, ids, images, **kw)

    monkeypatch.setattr(runtime, "generate", spy)
    crop = np.random.default_rng(2).integers(0, 256, (540, 540, 3), dtype=np.uint8)
    point = policy.localize(crop, "Blue 'Save' button")
    assert isinstance(point, Point) and 0 <= point.x <= 1000 and 0 <= point.y <= 1000
    (call,) = calls
    assert call["images"] == 1 and call["reasoning"] is False and call["constraint"] is not None
    prompt = tiny_loaded.tokenizer.decode(call["ids"])
    assert "Localize an element on the GUI image" in prompt and "Blue 'Save' button" in prompt
