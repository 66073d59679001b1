"""A click's count end to end on X11: the pyautogui executor's triple click selects a whole line in xterm (a
program that is not ours, under openbox), where a double click at the same point selects one word.

Asserted from the X server's state: the PRIMARY selection xterm owns after the click, read by xclip.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.core.actions import Click
from holodesk.core.geometry import Frame, frame_pixel_to_point, place
from tests.helpers.desktop import Desktop, wait_until

LINE = "alpha beta gamma"
CELL_W, CELL_H, BORDER = 6, 13, 2
"""xterm's ``fixed`` font cell (pixels) and its internal border."""


def grab() -> Frame:
    with MssCapture() as cap:
        return cap.grab(1)


def primary(desktop: Desktop) -> str | None:
    """The PRIMARY selection's text as another program reads it, or None while nobody owns it."""
    res = subprocess.run(["xclip", "-o", "-selection", "primary"], env=desktop.env(), capture_output=True,
                         text=True, timeout=15, check=False)
    return res.stdout if res.returncode == 0 else None


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_triple_click_selects_the_line_where_a_double_click_selects_a_word(desktop: Desktop) -> None:
    term = desktop.launch(["xterm", "-T", "Count xterm", "-fn", "fixed", "-geometry", "40x4",
                           "-e", "sh", "-c", f"printf '{LINE}'; exec sleep 600"], name="^Count xterm$")
    desktop.place(term, 300, 200)
    left, top, _, _ = term.geometry()
    # "beta" (columns 6..9) on the first row
    word = (left + BORDER + 7 * CELL_W + CELL_W // 2, top + BORDER + CELL_H // 2)

    def row_drawn() -> bool:  # xterm has drawn the text of the first row
        row = grab().pixels[top + BORDER:top + BORDER + CELL_H, left + BORDER:left + BORDER + len(LINE) * CELL_W]
        return bool(np.ptp(row.reshape(-1, row.shape[-1]), axis=0).any())

    wait_until(row_drawn, 20, "xterm to draw its first row")
    frame = grab()
    executor = PyAutoGUIExecutor()
    executor.move_pointer_out_of_corner()
    point = frame_pixel_to_point(frame, *word)

    double = executor.execute(place(Click(point, count=2), frame))
    assert double.ok, double
    wait_until(lambda: primary(desktop) == "beta", 15, "the double click to select the word")

    triple = executor.execute(place(Click(point, count=3), frame))
    assert triple.ok and triple.message.startswith("triple-clicked at"), triple
    assert triple.details["method"] == "pyautogui.click(button='left', clicks=3)"
    wait_until(lambda: (primary(desktop) or "").rstrip("\n") == LINE, 15, "the triple click to select the line")
