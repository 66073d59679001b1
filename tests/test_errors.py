"""How an error's message and its hint are joined into the one text people read."""

from __future__ import annotations

import pytest

from holodesk.errors import HolodeskError


@pytest.mark.parametrize(("message", "text"), [
    ("the hub cannot be reached", "the hub cannot be reached. Try again."),
    ("the hub cannot be reached.", "the hub cannot be reached. Try again."),
    ("which one?", "which one? Try again."),
    ("these are missing:", "these are missing: Try again."),
    # a parenthesis closes a remark, not the sentence: the full stop still comes after it
    ("not downloaded here (about 25 GB of weights)", "not downloaded here (about 25 GB of weights). Try again."),
    ("cannot reach the hub ([Errno -2] Name or service not known)",
     "cannot reach the hub ([Errno -2] Name or service not known). Try again."),
    ("unknown protocol 'x'", "unknown protocol 'x'. Try again."),
    # ... unless the sentence inside it ended already
    ("it stopped (see the log.)", "it stopped (see the log.) Try again."),
])
def test_the_hint_follows_a_finished_sentence(message: str, text: str) -> None:
    assert str(HolodeskError(message, hint="Try again.")) == text


def test_without_a_hint_the_message_is_shown_as_is() -> None:
    assert str(HolodeskError("no display (DISPLAY is unset)")) == "no display (DISPLAY is unset)"
