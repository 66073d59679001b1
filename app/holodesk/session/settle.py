"""When the screen has settled after an action: which differences between two frames count as a change.

After a performed action the loop waits for the screen to stop changing before it takes the next step's
frame (:meth:`holodesk.session.loop.Session._settled_grab`), so the model sees the action's effect. A text
caret keeps changing the screen without anything happening: GTK 3 toggles it on and off, GTK 4 fades it
in and out in many steps (every grab differs), and typing or clicking restarts the blinking (for 10 s by
default, GtkSettings ``gtk-cursor-blink-timeout``). Waiting for identical frames then always ran into
the settle timeout after every step that focused a text field.

A difference therefore counts as a change only when the pixels that differ do not fit in a caret-sized
box: at most :data:`CARET_MAX_WIDTH` input-space pixels wide and :data:`CARET_MAX_HEIGHT` tall (converted
to frame pixels with the frame's scale; on X11 input-space pixels are physical ones, where a caret of a
desktop scaled by 2 is 2 pixels wide). A GTK caret is 1 logical pixel wide (a fading GTK 4 caret measured
1x18 frame pixels on Xvfb at scale 1); a typed character changes the glyph and moves the caret, a box at
least a few pixels wider. What is not seen as a change: a thin vertical line that changes by itself (a
caret, or a one-pixel-wide indicator), as long as it stays within one such box.
"""

from __future__ import annotations

import numpy as np

from holodesk.core.geometry import Frame

CARET_MAX_WIDTH = 3
"""Widest change, in input-space pixels, that still counts as a blinking caret (GTK / Qt / Tk carets: 1-2)."""
CARET_MAX_HEIGHT = 64
"""Tallest change, in input-space pixels, that still counts as a blinking caret (it spans one text line)."""


def changed_box(before: Frame, after: Frame) -> tuple[int, int, int, int] | None:
    """The smallest box holding every pixel that differs between two frames of one monitor.

    Returns:
        ``(left, top, width, height)`` in frame pixels, or None when the pixels are identical.
    Raises:
        ValueError: the frames have different sizes.
    """
    if before.pixels.shape != after.pixels.shape:
        raise ValueError(f"frames of different sizes: {before.width}x{before.height} and {after.width}x{after.height}")
    differs = np.any(before.pixels != after.pixels, axis=2)
    rows = np.flatnonzero(differs.any(axis=1))
    if rows.size == 0:
        return None
    cols = np.flatnonzero(differs.any(axis=0))
    top, left = int(rows[0]), int(cols[0])
    return left, top, int(cols[-1]) - left + 1, int(rows[-1]) - top + 1


def screen_changed(before: Frame, after: Frame) -> bool:
    """True when ``after`` differs from ``before`` by more than a caret-sized box (see the module
    docstring); frames of different sizes (a resolution change) always count as changed."""
    if before.pixels.shape != after.pixels.shape:
        return True
    box = changed_box(before, after)
    if box is None:
        return False
    scale_x, scale_y = after.scale
    _left, _top, width, height = box
    return width > CARET_MAX_WIDTH * scale_x or height > CARET_MAX_HEIGHT * scale_y
