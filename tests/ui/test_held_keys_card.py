"""The real approval card names the keys an earlier key_down holds, and a key_down step cannot be edited."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from holodesk.core.actions import Click, KeyDown, Point
from holodesk.core.geometry import Frame, Monitor, place
from holodesk.core.risk import assess
from holodesk.policy.base import Proposal
from holodesk.session.approval import make_request
from holodesk.ui.approval import ApprovalController
from holodesk.ui.workers import PendingDecision, WindowGuard

pytestmark = pytest.mark.gui

FRAME = Frame(np.zeros((1080, 1920, 3), np.uint8), Monitor(1, 0, 0, 1920, 1080))


def _card_of(action: Any, held: tuple[str, ...]) -> tuple[ApprovalController, Any]:
    risk = assess(action, focused_window="mousepad", pointer_windows=["mousepad"], held_keys=held)
    request = make_request(0, Proposal(action, thought="t"), place(action, FRAME), risk, "step", held_keys=held)
    controller = ApprovalController(WindowGuard())
    controller.present(PendingDecision(request, "user"))
    assert controller.overlay is not None
    return controller, controller.overlay


def test_the_card_names_the_held_keys_and_why_it_asks(qtbot: Any) -> None:
    controller, overlay = _card_of(Click(Point(500, 500), element="file"), ("shift", "ctrl"))
    try:
        card = overlay.card
        assert "Held down: Shift+Ctrl (released by a key up, or when the task ends)" in card.details.text()
        assert "Shift+Ctrl are held down" in card.risk_reason.text()
    finally:
        controller.close()
    controller, overlay = _card_of(Click(Point(500, 500), element="file"), ())
    try:
        assert "Held down" not in overlay.card.details.text()
    finally:
        controller.close()


def test_a_key_down_step_says_it_stays_held_and_cannot_be_edited(qtbot: Any) -> None:
    controller, overlay = _card_of(KeyDown(("shift",)), ())
    try:
        card = overlay.card
        assert card.description.text() == "Hold Shift down"
        assert "Stays held for the next steps" in card.details.text()
        assert not card.edit_button.isEnabled()
    finally:
        controller.close()
