"""Offer text on the X11 CLIPBOARD and know when a paste has fetched it (clipboard typing path, F15).

X11 copies and pastes asynchronously: after the paste chord, the target asks the clipboard's owner for the
text (a ``SelectionRequest``) when it gets round to it, which on a loaded machine can take well over a
second. Restoring the user's previous clipboard after a fixed delay races with that request: the target
then pastes the previous clipboard instead (the text is lost). :class:`ClipboardOffer` owns the
CLIPBOARD itself and serves the requests on a thread, so the paster can wait for the condition "the
target fetched the text" instead of a delay. It also sees another program take the CLIPBOARD over (a
``SelectionClear``: the user copied something), so the paster keeps that copy instead of restoring the
older clipboard over it (:func:`clipboard_owner` tells who owns it after the offer let go). Protocol:
ICCCM section 2 (selections), with the ``TARGETS`` / ``UTF8_STRING`` / ``STRING`` / ``TEXT`` targets that
toolkits ask for.
"""

from __future__ import annotations

import logging
import select
import threading
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)


class ClipboardOffer:
    """Own the X11 CLIPBOARD with ``text`` until closed, answering paste requests on a thread.

    Args:
        text: the text to offer (lone surrogates, which no encoding can carry, go out as U+FFFD).
        display_name: X display (None: ``$DISPLAY``).
    Raises:
        OSError / Xlib errors: the display cannot be opened; RuntimeError: ownership was refused.

    Use as a context manager; :meth:`wait_fetched` blocks until a client fetched the text.
    """

    def __init__(self, text: str, display_name: str | None = None) -> None:
        from Xlib import X, Xatom, display  # lazy: python-xlib (Linux only)

        self._X = X
        self._data = text.encode("utf-8", "replace")
        self._latin1 = text.encode("latin-1", "replace")
        self._display = display.Display(display_name)
        try:
            d = self._display
            self._clipboard = d.intern_atom("CLIPBOARD")
            self._targets = d.intern_atom("TARGETS")
            self._utf8 = d.intern_atom("UTF8_STRING")
            self._text = d.intern_atom("TEXT")
            self._string = Xatom.STRING
            self._atom = Xatom.ATOM
            self._window = d.screen().root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
            self._window.set_selection_owner(self._clipboard, X.CurrentTime)
            d.sync()
            if d.get_selection_owner(self._clipboard) != self._window:
                raise RuntimeError("the X server did not give Holodesk the clipboard")
        except BaseException:
            self._display.close()
            raise
        self.fetched = threading.Event()
        """Set once a client received the text (a request for a text target was answered)."""
        self.lost = threading.Event()
        """Set when another client took the clipboard over (a SelectionClear: someone copied)."""
        self._ended = threading.Event()  # fetched or lost
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="clipboard-offer", daemon=True)
        self._thread.start()

    def wait_fetched(self, timeout_s: float) -> bool:
        """Block until a client fetched the text (True), or another client took the clipboard over or
        ``timeout_s`` seconds passed (False; :attr:`lost` tells the two apart)."""
        self._ended.wait(timeout_s)
        return self.fetched.is_set()

    def owns_clipboard(self) -> bool:
        """True while the X server still names this offer the CLIPBOARD's owner (nobody copied since)."""
        if self.lost.is_set():
            return False
        try:
            return bool(self._display.get_selection_owner(self._clipboard) == self._window)
        except Exception as exc:  # the display went away
            log.debug("reading the clipboard owner: %s", exc)
            return False

    def _serve(self) -> None:
        d = self._display
        fd = d.fileno()
        try:
            while not self._stop.is_set():
                if not d.pending_events():
                    select.select([fd], [], [], 0.05)
                    if not d.pending_events():
                        continue
                event = d.next_event()
                if event.type == self._X.SelectionRequest:
                    self._answer(event)
                elif event.type == self._X.SelectionClear:
                    self.lost.set()
                    self._ended.set()
                    return
        except Exception as exc:  # the display went away: the offer ends, the paster reports it
            log.warning("serving the clipboard failed: %s", exc)
            self.lost.set()
            self._ended.set()

    def _answer(self, request: Any) -> None:
        from Xlib.protocol import event as xevent  # lazy: python-xlib (Linux only)

        prop = request.property or request.target  # ICCCM: obsolete clients send property None
        target = request.target
        requestor = request.requestor
        delivered = False
        if target == self._targets:
            requestor.change_property(prop, self._atom, 32, [self._targets, self._utf8, self._string, self._text])
        elif target in (self._utf8, self._text):
            requestor.change_property(prop, self._utf8, 8, self._data)
            delivered = True
        elif target == self._string:
            requestor.change_property(prop, self._string, 8, self._latin1)
            delivered = True
        else:
            prop = self._X.NONE  # a target we do not offer: refuse it
        requestor.send_event(xevent.SelectionNotify(time=request.time, requestor=requestor,
                                                    selection=request.selection, target=target, property=prop))
        self._display.flush()
        if delivered:
            self.fetched.set()
            self._ended.set()

    def close(self) -> None:
        """Stop serving and give the clipboard up (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=2.0)
        try:
            self._window.destroy()
            self._display.close()
        except Exception as exc:  # the display may already be gone
            log.debug("closing the clipboard offer: %s", exc)

    def __enter__(self) -> ClipboardOffer:
        return self

    def __exit__(self, etype: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def clipboard_owner(display_name: str | None = None) -> int:
    """The X window id that owns the CLIPBOARD now, 0 when nobody does (ICCCM 2.1, GetSelectionOwner).

    Raises:
        OSError / Xlib errors: the display cannot be opened.
    """
    from Xlib import display  # lazy: python-xlib (Linux only)

    conn = display.Display(display_name)
    try:
        owner = conn.get_selection_owner(conn.intern_atom("CLIPBOARD"))
        return int(owner) if isinstance(owner, int) else int(owner.id)
    finally:
        conn.close()
