"""Whether another X11 client holds the keyboard or the pointer grab (issue 31).

While a client holds an active grab, every key (or pointer event) goes to it, whatever window the approval
card named: a hidden window with a keyboard grab takes typed text, an open menu takes the next click. X11
has no request that asks who holds a grab, so this asks for one: ``XGrabKeyboard`` / ``XGrabPointer`` on the
root window, asynchronous, with no event mask, released at once (``XUngrab*``) when it succeeds. The reply
``AlreadyGrabbed`` says another client holds it (core and XInput 2 grabs both count); ``GrabFrozen`` says a
client froze the device. The probe's own grab lasts one round trip to the X server.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

_ANSWERS = {1: "another program holds the {what} grab (all {what} input goes to it, whatever the card names)",
            2: "the {what} grab was refused (invalid time)", 3: "the {what} grab was refused (root not viewable)",
            4: "another program froze the {what}"}
"""The X11 grab replies other than ``GrabSuccess`` (0), in words: ``AlreadyGrabbed`` 1, ``GrabInvalidTime`` 2,
``GrabNotViewable`` 3, ``GrabFrozen`` 4 (Xlib's ``X.h``)."""


def input_grab_problem() -> str | None:
    """Why keys or clicks would not go where the approval says: another client's keyboard or pointer grab
    (module docstring), or an X display that cannot be asked; None when neither device is grabbed."""
    try:
        from Xlib import X, display  # lazy: python-xlib (Linux only)

        d = display.Display()
    except Exception as exc:  # python-xlib raises several unrelated types for a missing display
        return f"the X server cannot be asked whether another program holds an input grab: {exc}"
    try:
        root = d.screen().root
        answer = root.grab_keyboard(False, X.GrabModeAsync, X.GrabModeAsync, X.CurrentTime)
        if answer == X.GrabSuccess:
            d.ungrab_keyboard(X.CurrentTime)
        else:
            return _ANSWERS.get(answer, "the keyboard grab was refused").format(what="keyboard")
        answer = root.grab_pointer(False, 0, X.GrabModeAsync, X.GrabModeAsync, X.NONE, X.NONE, X.CurrentTime)
        if answer == X.GrabSuccess:
            d.ungrab_pointer(X.CurrentTime)
        else:
            return _ANSWERS.get(answer, "the pointer grab was refused").format(what="pointer")
        d.sync()
        return None
    finally:
        d.close()
