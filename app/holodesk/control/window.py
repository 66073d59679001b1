"""Which window has keyboard focus (for risk assessment: typing into a terminal is high-risk, F11)."""

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
