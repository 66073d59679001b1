"""Which window has keyboard focus, and which window lies under a point (for the risk rules: typing or
clicking into a terminal asks, F11/F23)."""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)


def focused_window_class() -> str | None:
    """WM_CLASS (instance and class, space-separated) of the focused X11 window, e.g. ``"xterm XTerm"``.

    Returns None where it cannot be known (no X display, not Linux, no focused window); the approval
    policy then treats keyboard actions by their content alone.
    """
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return None
    try:
        from Xlib import X, display
        from Xlib.error import XError
    except ImportError:
        log.warning("python-xlib is missing; the focused window cannot be identified")
        return None
    try:
        d = display.Display()
        try:
            win = d.get_input_focus().focus
            for _ in range(8):  # walk up to the client window that carries WM_CLASS
                if win in (None, X.NONE, X.PointerRoot) or isinstance(win, int):
                    return None
                cls = win.get_wm_class()
                if cls:
                    return " ".join(cls).strip()
                tree = win.query_tree()
                if tree.parent in (None, X.NONE) or tree.parent == tree.root:
                    return None
                win = tree.parent
            return None
        finally:
            d.close()
    except (XError, OSError, Exception) as exc:  # Xlib raises several unrelated types on a bad display
        log.warning("could not read the focused window: %s", exc)
        return None


def window_class_at(x: int, y: int) -> str | None:
    """WM_CLASS (instance and class, space-separated) of the X11 window that shows at input point
    ``(x, y)`` (OS input pixels of the whole X screen), e.g. ``"xterm XTerm"``.

    Walks down from the root window with XTranslateCoordinates (which follows the stacking order and
    skips unmapped windows) until a window carries WM_CLASS. Returns None where it cannot be known (no X
    display, not Linux, no client window there: the bare desktop).
    """
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return None
    try:
        from Xlib import X, display
    except ImportError:
        log.warning("python-xlib is missing; the window under the pointer cannot be identified")
        return None
    try:
        d = display.Display()
        try:
            root = d.screen().root
            win = root
            for _ in range(10):
                child = win.translate_coords(root, x, y).child  # the child of `win` under the point
                if child in (None, X.NONE) or isinstance(child, int) or not getattr(child, "id", 0):
                    return None
                cls = child.get_wm_class()
                if cls:
                    return " ".join(cls).strip()
                win = child
            return None
        finally:
            d.close()
    except Exception as exc:  # Xlib raises several unrelated types on a bad display
        log.warning("could not read the window under (%d, %d): %s", x, y, exc)
        return None
