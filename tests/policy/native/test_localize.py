"""NativePolicy's element localization ("Click more precisely"): a crop and H Company's localization prompt in
one user turn, thinking off, the reply constrained to ``{"x", "y"}`` in [0, 1000] and read by the protocol's
parser; on the tiny random Qwen3-VL checkpoint, on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from holodesk.core.actions import Point
from holodesk.policy.base import Localizer
from tests.policy.native.test_native_policy import LoadPolicy, load_policy  # noqa: F401 (a fixture)


def test_localize_answers_a_point_of_the_crop(load_policy: LoadPolicy, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    policy = load_policy("qwen3_vl")
    assert isinstance(policy, Localizer)
    chats: list[object] = []
    render = policy._model_inputs

    def spy(chat: list[dict[str, object]], images: list[object], reasoning: bool) -> object:
        chats.append((chat, len(images), reasoning))
        return render(chat, images, reasoning)

    monkeypatch.setattr(policy, "_model_inputs", spy)
    crop = np.random.default_rng(1).integers(0, 256, (540, 540, 3), dtype=np.uint8)
    point = policy.localize(crop, "Blue 'Save' button")
    assert isinstance(point, Point) and 0 <= point.x <= 1000 and 0 <= point.y <= 1000
    ((chat, images, reasoning),) = chats
    assert images == 1 and reasoning is False
    (turn,) = chat  # type: ignore[misc]
    assert turn["content"][1]["text"] == policy.protocol.localization_prompt("Blue 'Save' button")  # type: ignore[index]
