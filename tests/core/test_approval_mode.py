"""The approval modes: one enum whose values are the words of settings.toml, read back from either."""

from __future__ import annotations

import json

import pytest

from holodesk.core.approval import ApprovalMode, approval_mode


def test_words_and_members_name_the_same_mode() -> None:
    assert approval_mode("step") is ApprovalMode.STEP
    assert approval_mode(ApprovalMode.AUTO) is ApprovalMode.AUTO
    assert json.dumps({"mode": ApprovalMode.AUTO}) == '{"mode": "auto"}'  # records keep the word


def test_an_unknown_mode_is_refused_naming_the_modes() -> None:
    with pytest.raises(ValueError, match="approval mode must be 'step' or 'auto', got 'autopilot'"):
        approval_mode("autopilot")
