"""Capture backend interface."""

from __future__ import annotations

from typing import Protocol

from holodesk.core.geometry import Frame, Monitor


class CaptureBackend(Protocol):
    """Lists monitors and grabs frames. Implementations must be callable from any thread.

    Raises :class:`~holodesk.errors.CaptureError` with a message saying what to do.
    """

    name: str

    def monitors(self) -> list[Monitor]:
        """Monitors in backend order, ``index`` 1-based."""
        ...

    def grab(self, monitor_index: int) -> Frame:
        """Grab monitor ``monitor_index`` (1-based) as an RGB frame."""
        ...

    def close(self) -> None: ...
