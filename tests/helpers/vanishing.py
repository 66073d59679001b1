"""Windows that go away while Holodesk reads the windows of the X server (:class:`VanishingWindows`).

Reading which window is at a point, or which one has the focus, takes several X requests (the stacking order,
then each window's attributes, geometry, class, tree); another program's window can be destroyed between two of
them: an approval overlay that the window manager stops managing (openbox destroys its frame), a tooltip or a
notification that closes. The server then answers BadWindow (or BadDrawable) for it. This helper makes that
happen at a chosen moment on a real X server: the first request this process makes about one of its windows
finds that window destroyed by its owner, another X client, just before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

READS = ("get_attributes", "get_geometry", "query_tree", "get_wm_class", "get_wm_name", "get_full_property")
"""The requests about a window (python-xlib's ``Window`` methods) whose first use on a vanishing window finds it
gone."""


class VanishingWindows:
    """Windows of another X client (this helper's own connection to ``$DISPLAY``) that are destroyed just before
    this process first asks the X server about them.

    Args:
        monkeypatch: patches python-xlib's ``Window`` requests (:data:`READS`) in this process for the test.
        rect: ``(x, y, width, height)`` of each window (root pixels; override-redirect, so no window manager
            moves, frames or focuses it).
        again: map a new window on top each time one vanishes, so that every later read of the stacking
            order meets one too (False: only :meth:`add`'s windows vanish).
        requests: the ``Window`` requests whose first use on a vanishing window finds it gone (default
            :data:`READS`; e.g. ``("set_input_focus",)`` for a window destroyed after it was read, just before
            a request that acts on it).

    Attributes:
        vanished: how many windows went away under a read.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, rect: tuple[int, int, int, int], again: bool = True,
                 requests: Sequence[str] = READS) -> None:
        from Xlib import display
        from Xlib.xobject import drawable

        self.display = display.Display()
        self.rect = rect
        self.again = again
        self.vanished = 0
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        for name in requests:
            monkeypatch.setattr(drawable.Window, name, self._vanishing(getattr(drawable.Window, name)))

    def add(self, parent: int | None = None, rect: tuple[int, int, int, int] | None = None) -> int:
        """Map a new vanishing window (a child of window ``parent``, else of the root; at ``rect``, else
        :attr:`rect`) and return its id once the server has it."""
        from Xlib import X

        x, y, width, height = rect or self.rect
        under = self.display.create_resource_object("window", parent) if parent else self.display.screen().root
        win = under.create_window(x, y, width, height, 0, X.CopyFromParent, X.InputOutput, X.CopyFromParent,
                                  override_redirect=1, background_pixel=self.display.screen().black_pixel)
        win.map()
        self.display.sync()
        with self._lock:
            self._ids.add(int(win.id))
        return int(win.id)

    def _vanishing(self, request: Callable[..., Any]) -> Callable[..., Any]:
        def read(win: Any, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                gone = int(win.id) in self._ids and win.display is not self.display.display
                if gone:
                    self._ids.discard(int(win.id))
            if gone:
                self._destroy(int(win.id))
                self.display.sync()
                self.vanished += 1
                if self.again:
                    self.add()
            return request(win, *args, **kwargs)

        return read

    def _destroy(self, wid: int) -> None:
        """Destroy window ``wid`` without handing its id back to python-xlib (``Window.destroy`` does): the next
        window would get the same id at once, and a read still holding the old one would meet the new window."""
        from Xlib.protocol import request

        request.DestroyWindow(display=self.display.display, window=wid)

    def close(self) -> None:
        """Destroy the windows still there and close the connection."""
        with self._lock:
            left, self._ids = list(self._ids), set()
        for wid in left:
            self._destroy(wid)
        self.display.close()


@contextmanager
def vanishing_windows(monkeypatch: pytest.MonkeyPatch, rect: tuple[int, int, int, int], again: bool = True,
                      requests: Sequence[str] = READS) -> Iterator[VanishingWindows]:
    """:class:`VanishingWindows` for the block (one window mapped at ``rect`` at the start when ``again``)."""
    windows = VanishingWindows(monkeypatch, rect, again, requests)
    try:
        if again:
            windows.add()
        yield windows
    finally:
        windows.close()
