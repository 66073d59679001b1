"""The after-action settle (:mod:`holodesk.session.settle`): a blinking text caret is not a change.

Real: GTK 3 and GTK 4 text fields (tests/apps/gtk_text_field.py, the system's GTK under openbox on Xvfb),
typed into by the real Session and executor; the settle time is the step's recorded capture time, the
typed text is read from the field's own state. Pure: :func:`screen_changed` on synthetic frames.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.core.geometry import Frame, Monitor
from holodesk.session.loop import SCREEN_SETTLE_S, SETTLE_TIMEOUT_S, frame_digest
from holodesk.session.settle import changed_box, screen_changed
from holodesk.session.state import State
from tests.field_cases.fakes import make_run, reply
from tests.helpers.desktop import APPS, SYSTEM_PYTHON, Desktop, wait_until

TEXT = "hello caret"
BLINK_MS = 200
#: A settle that took this long was held by something other than the 0.25 s + 3 grabs it needs; the
#: caret kept it until the 3 s timeout before.
SETTLE_BOUND_S = 2.0


def frame(pixels: np.ndarray, width: int = 200, height: int = 100) -> Frame:
    return Frame(pixels, Monitor(1, 0, 0, width, height))


def test_screen_changed_ignores_a_caret_sized_box_only() -> None:
    base = np.full((100, 200, 3), 255, np.uint8)
    caret = base.copy()
    caret[20:38, 50] = 0  # a 1x18 caret
    glyph = base.copy()
    glyph[20:38, 50:56] = 0  # a typed character and the caret moved: 6 wide
    assert changed_box(frame(base), frame(base)) is None
    assert changed_box(frame(base), frame(caret)) == (50, 20, 1, 18)
    assert not screen_changed(frame(base), frame(caret))
    assert screen_changed(frame(base), frame(glyph))
    tall = base.copy()
    tall[0:100, 10] = 0  # a full-height line is not a caret
    assert screen_changed(frame(base), frame(tall))
    apart = caret.copy()
    apart[20:38, 150] = 0  # two thin changes far apart span a wide box
    assert screen_changed(frame(base), frame(apart))
    # At scale 2 (a 100x50 monitor shown in 200x100 frame pixels) a 2-pixel caret is still a caret.
    wide_caret = base.copy()
    wide_caret[20:56, 50:52] = 0
    assert not screen_changed(frame(base, 100, 50), frame(wide_caret, 100, 50))
    assert screen_changed(frame(base), frame(np.full((50, 200, 3), 255, np.uint8), 200, 50))


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
@pytest.mark.parametrize("gtk", [4, 3], ids=["gtk4", "gtk3"])
def test_settle_after_typing_into_a_gtk_field_is_not_held_by_the_caret(desktop: Desktop, gtk: int,
                                                                       tmp_path: Path) -> None:
    """With a 200 ms caret blink cycle (GtkSettings ``gtk-cursor-blink-time``, a desktop setting) no caret
    phase lasts the settle's 0.25 s: GTK 3 shows the caret 133 ms and hides it 67 ms, GTK 4 fades it in and out.
    (At GTK's default 1200 ms cycle a 0.25 s quiet phase exists, and whether the settle finds it depends on
    the machine's load.) Typing restarts the blinking. The step after typing must still settle well
    before the 3 s timeout."""
    state = tmp_path / "field.json"
    field = desktop.launch([SYSTEM_PYTHON, str(APPS / "gtk_text_field.py"), "--gtk", str(gtk), "--state", str(state),
                            "--blink-ms", str(BLINK_MS)], name=f"^GTK{gtk} text field$")
    field.activate()
    episodes = tmp_path / "episodes"
    with MssCapture() as cap:
        run = make_run([reply({"tool_name": "type", "text": TEXT}), reply(None, "typed")], cap,
                       PyAutoGUIExecutor(), settle_s=SCREEN_SETTLE_S, episodes_dir=episodes)
        result = run.session.run("type into the field")
        assert result.status is State.FINISHED, result
        wait_until(lambda: json.loads(state.read_text(encoding="utf-8"))["text"] == TEXT, 10, "the typed text")
        # Positive control: the caret really keeps changing the screen (not only a thin box of it).
        first = cap.grab(1)
        changed = wait_until(lambda: (lambda f: f if frame_digest(f) != frame_digest(first) else None)(cap.grab(1)),
                             5, "the caret to change the screen")
        assert not screen_changed(first, changed)
    (log,) = episodes.glob("*/episode.jsonl")
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    after_typing = [r for r in records if r.get("step") == 1 and "timings_ms" in r]
    assert after_typing, records
    settle_s = after_typing[0]["timings_ms"]["capture"] / 1000
    assert settle_s < SETTLE_BOUND_S < SETTLE_TIMEOUT_S, f"the settle after typing took {settle_s:.2f} s"
