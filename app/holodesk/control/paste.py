"""Typing by pasting: puts the text on the clipboard, presses the paste chord, restores the user's clipboard.

Saves the user's clipboard text, puts the text on the clipboard, presses the paste chord (Ctrl+V,
Cmd+V on macOS, Ctrl+Shift+V in terminals), waits for the target to fetch it and then (try/finally)
restores the previous clipboard, but only while the clipboard still holds what Holodesk put there:
when another program took it meanwhile (the user copied something), that newer copy is kept and the
report says ``clipboard_taken_by_another``. On X11 "still holds" means the offer was never cleared
(no SelectionClear) and, after it let go, nobody owns the CLIPBOARD or its owner serves the pasted
text (a clipboard manager that took it over); elsewhere the clipboard reads back as the pasted text.
Only the CLIPBOARD is used; PRIMARY is never touched. Between the last check and the restore a copy
can still be overwritten: a window of one X round trip plus the start of the clipboard tool.
Whether the target received the text cannot be observed, so the report says ``verified: False`` (F15).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from holodesk.control.typing import TypingReport
from holodesk.control.x11_selection import ClipboardOffer, clipboard_owner
from holodesk.core.risk import is_terminal
from holodesk.errors import ActionError

log = logging.getLogger(__name__)


def default_paste_chord(platform: str | None = None, target_class: str | None = None) -> tuple[str, ...]:
    """The paste chord: ``("cmd", "v")`` on macOS, ``("ctrl", "shift", "v")`` into a terminal (WM_CLASS
    ``target_class``, by the risk rules' classifier :func:`holodesk.core.risk.is_terminal`, so a window whose keys
    need approval as a terminal also gets the terminal paste chord), else ``("ctrl", "v")``."""
    plat = sys.platform if platform is None else platform
    if plat == "darwin":
        return ("cmd", "v")
    if is_terminal(target_class):
        return ("ctrl", "shift", "v")
    return ("ctrl", "v")


def _x11_clipboard_unowned() -> bool:
    """Nobody owns the X11 CLIPBOARD (Holodesk's offer has let it go and nobody copied since); an X
    display that cannot be read counts as unowned, so the restore is tried (and its failure reported)."""
    try:
        return clipboard_owner() == 0
    except Exception as exc:  # Xlib raises several unrelated types on a bad display
        log.debug("reading the clipboard owner before restoring it: %s", exc)
        return True


RESTORE_CHECK_S = 3.0
"""Seconds to wait for the clipboard to read back the restored previous content."""


class ClipboardPaster:
    """Pastes text through the clipboard, always restoring the user's previous clipboard text.

    Args:
        press_chord: callback that presses a chord of normalised key names (e.g. the executor's).
        chord: paste chord; None = :func:`default_paste_chord` for the platform and focused window.
        restore_delay_s: where the fetch cannot be observed (not X11, or an injected ``clipboard``):
            seconds to wait after the chord before restoring the clipboard.
        fetch_timeout_s: on X11 Holodesk offers the text itself (:class:`~holodesk.control.x11_selection.
            ClipboardOffer`) and restores the previous clipboard as soon as the target has fetched the
            text, or after this many seconds when it never asks (the focus is not on a text field).
        clipboard: object with ``copy(str)`` / ``paste() -> str`` (default pyperclip); for tests.
        target_class: callable returning the focused window's WM_CLASS (for the terminal chord).
    """

    def __init__(
        self,
        press_chord: Callable[[Sequence[str]], object],
        *,
        chord: Sequence[str] | None = None,
        restore_delay_s: float = 0.3,
        fetch_timeout_s: float = 5.0,
        clipboard: Any = None,
        target_class: Callable[[], str | None] | None = None,
    ) -> None:
        self.press_chord = press_chord
        self.chord = tuple(chord) if chord else None
        self.restore_delay_s = restore_delay_s
        self.fetch_timeout_s = fetch_timeout_s
        self._clipboard = clipboard
        self._target_class = target_class

    def _cb(self) -> Any:
        if self._clipboard is None:
            try:
                import pyperclip  # lazy: a missing pyperclip becomes an ActionError that says what to install
            except ImportError as exc:
                raise ActionError("pyperclip is not installed; the clipboard path is unavailable",
                                  hint="pip install pyperclip") from exc
            self._clipboard = pyperclip
        return self._clipboard

    def paste_text(self, text: str) -> TypingReport:
        """Paste ``text`` into the focused widget and restore the previous clipboard, unless another
        program put something on the clipboard meanwhile (the user copied): that copy is kept.

        Returns:
            A report with ``verified=False`` and extras ``paste_chord``, ``clipboard_restored``,
            ``clipboard_taken_by_another`` (someone copied during the paste, so nothing was restored),
            ``previous_clipboard_saved`` and, on X11, ``target_fetched`` (whether a client fetched the
            text before the clipboard was restored).
        Raises:
            ActionError: the clipboard cannot be read or written (on Linux: install xclip or xsel).
        """
        x11_offer = self._clipboard is None and sys.platform.startswith("linux") and bool(os.environ.get("DISPLAY"))
        cb = self._cb()
        try:
            previous = cb.paste()
            saved = True
        except Exception as exc:
            raise ActionError(
                f"cannot read the clipboard ({type(exc).__name__}: {exc}); nothing was pasted",
                hint="On Linux install xclip (apt-get install xclip) or xsel.",
            ) from exc
        if not isinstance(previous, str):
            previous, saved = "", False
        target = self._target_class() if self._target_class else None
        chord = self.chord or default_paste_chord(target_class=target)
        extra: dict[str, Any] = {}
        # X11: whether Holodesk's offer still owned the clipboard when it let go (False: someone copied).
        owned: bool | None = True if x11_offer else None
        try:
            if x11_offer:
                extra["target_fetched"], owned = self._paste_offered(text, chord)
            else:
                try:
                    cb.copy(text)
                    now = cb.paste()
                except Exception as exc:
                    raise ActionError(
                        f"cannot write the clipboard ({type(exc).__name__}: {exc}); nothing was pasted",
                        hint="On Linux install xclip (apt-get install xclip) or xsel.",
                    ) from exc
                if now != text:
                    raise ActionError("the clipboard did not take the text (read back differs); nothing was pasted")
                self.press_chord(chord)
                time.sleep(self.restore_delay_s)
        finally:
            # Still what the paste put there: on X11 nobody took the clipboard from the offer and, since
            # the offer let it go, nobody owns it or its owner (a clipboard manager) serves the same text.
            ours = owned is not False and ((owned is True and _x11_clipboard_unowned()) or self._holds(cb, text))
            if ours:
                restored = self._restore(cb, previous)
            else:
                restored = False
                log.info("the clipboard no longer holds the pasted text (another program copied, or the text "
                         "never got there); it is left as it is, not overwritten with the clipboard from before")
        return TypingReport(
            method="clipboard", characters=len(text), verified=False,
            extra={"paste_chord": "+".join(chord), "target_class": target, "clipboard_restored": restored,
                   "clipboard_taken_by_another": not ours, "previous_clipboard_saved": saved, **extra},
        )

    @staticmethod
    def _holds(cb: Any, text: str) -> bool:
        """The clipboard still holds ``text`` (what the paste put there); a clipboard that cannot be read
        counts as holding it, so the restore is tried (and its failure reported)."""
        try:
            return bool(cb.paste() == text)
        except Exception as exc:
            log.debug("reading the clipboard before restoring it: %s", exc)
            return True

    def _restore(self, cb: Any, previous: str) -> bool:
        """Put ``previous`` back on the clipboard; True once reading the clipboard gives it back.

        The read-back is polled for up to :data:`RESTORE_CHECK_S` seconds: a clipboard tool may return
        before its background process owns the selection (xclip forks first), so an immediate read can
        still see the old owner."""
        try:
            cb.copy(previous)
            deadline = time.monotonic() + RESTORE_CHECK_S
            while True:
                if cb.paste() == previous:
                    return True
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.02)
        except Exception as exc:
            log.error("restoring the clipboard failed: %s", exc)
            return False
        log.error("the previous clipboard content could not be restored")
        return False

    def _paste_offered(self, text: str, chord: tuple[str, ...]) -> tuple[bool, bool]:
        """X11: own the clipboard with ``text``, press ``chord``, and wait until the target fetched the
        text or another program took the clipboard over (at most ``fetch_timeout_s``).

        Returns:
            (whether a client fetched the text, whether Holodesk still owned the clipboard at the end).

        Raises:
            ActionError: the clipboard cannot be taken; nothing was pasted.
        """
        try:
            offer = ClipboardOffer(text)
        except Exception as exc:  # Xlib raises several unrelated types on a bad display
            raise ActionError(f"cannot take the X11 clipboard ({type(exc).__name__}: {exc}); nothing was pasted",
                              hint="Check that the X display is reachable.") from exc
        with offer:
            self.press_chord(chord)
            fetched = offer.wait_fetched(self.fetch_timeout_s)
            owned = offer.owns_clipboard()
        if not fetched and owned:
            log.warning("no window fetched the pasted text within %.1f s (the focus may not be on a text "
                        "field); the previous clipboard is restored now", self.fetch_timeout_s)
        return fetched, owned
