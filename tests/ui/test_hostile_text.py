"""F24 in the app: a reply whose thought and typed text hold a lone surrogate, bidi overrides and control
characters is shown as escapes on the approval card and in the history, performed once approved, and
recorded exactly. (Scripted policy, FakeCapture and RecordingExecutor: fakes of the model, the screen and
the input.)"""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest
from PySide6.QtCore import Qt

from holodesk.core.actions import Type
from holodesk.session.episode import load_episode
from holodesk.session.state import State
from holodesk.ui.history import step_details
from tests.ui.conftest import wait_finished, wait_overlay

pytestmark = pytest.mark.gui

HOSTILE = "ok \ud83d \u202egnp.exe\u202c \x1b[2J \x00 end"


def _unsafe(text: str) -> list[str]:
    return [ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") and ch != "\n"]


def test_F24_card_and_history_show_hostile_text_as_escapes(qtbot: Any, make_app: Any) -> None:
    from holodesk.policy.registry import get_protocol

    reply = get_protocol().to_reply(Type(HOSTILE), thought=HOSTILE)
    kit = make_app([reply])
    kit.app.start_task("type it")
    overlay = wait_overlay(qtbot, kit.app)
    card = overlay.card
    shown = [card.thought.text(), card.description.text(), card.details.text(), card.risk_reason.text()]
    assert all(_unsafe(text) == [] for text in shown), shown
    assert "\\ud83d" in card.thought.text() and "\\u202e" in card.thought.text()
    qtbot.keyClick(overlay, Qt.Key.Key_Return)
    result = wait_finished(qtbot, kit.app)
    assert result.status is State.FINISHED
    assert [c.action for c in kit.executor.calls] == [Type(HOSTILE)]  # performed, exactly
    step = load_episode(result.episode_path).steps[0]
    assert step["thought"] == HOSTILE and step["action"]["text"] == HOSTILE  # recorded exactly
    details = step_details(step)
    assert _unsafe(details) == [] and "\\u202e" in details
