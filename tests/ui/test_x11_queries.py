"""The UI's own X11 queries (holodesk.ui.x11) on the real X display of the UI tests."""

from __future__ import annotations

import pytest

from holodesk.ui import x11


def test_focus_given_back_to_a_window_destroyed_meanwhile_is_not_reported_given(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The window that had the focus before the approval overlay is destroyed after it was found viewable, just
    before the focus is given to it: the X server refuses the focus, so giving it back fails (False), and no X
    protocol error is written to the app's stderr."""
    from tests.helpers.vanishing import vanishing_windows

    with vanishing_windows(monkeypatch, (40, 40, 30, 30), again=False, requests=("set_input_focus",)) as gone:
        window = gone.add()
        given = x11.set_input_focus(window)
        assert gone.vanished == 1
    assert given is False
    assert x11.input_focus() != window
    assert "X protocol error" not in capsys.readouterr().err
