"""Screen capture with python-mss, one mss handle per thread.

mss handles wrap an X connection (or a Windows/macOS device context) that must not be shared between
threads, so each thread that grabs gets its own handle, created on first use (F18: the backend may be
created on the GUI thread and used from worker threads, several at once).

Monitor numbering is mss's: index 0 is the whole virtual desktop, 1..N the monitors in mss order.
Monitor geometry (``left/top/width/height``) is what mss reports, which is the OS input space on X11;
the frame's pixel size is what the grab returned (physical pixels), so the two together give the
measured scale used by :mod:`holodesk.core.geometry`.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import numpy as np

from holodesk.core.geometry import Frame, Monitor
from holodesk.display import require_display
from holodesk.dpi import ensure_per_monitor_dpi_awareness
from holodesk.errors import CaptureError, DisplayError, HolodeskError

log = logging.getLogger(__name__)


def _import_mss() -> Any:
    try:
        import mss  # lazy: a missing mss becomes a CaptureError that says what to install
    except ImportError as exc:
        raise CaptureError(
            f"the screen capture library mss cannot be imported ({exc})",
            hint="Install it into Holodesk's environment: `pip install 'mss>=9'`.",
        ) from exc
    return mss


class MssCapture:
    """:class:`~holodesk.capture.base.CaptureBackend` on python-mss.

    Args:
        display: X display name to capture (Linux only; default ``$DISPLAY``).
        check_display: on Linux, call :func:`holodesk.display.require_display` before the first
            handle is opened so a missing/Wayland display gives a :class:`DisplayError` with a hint.

    Thread safety: every method may be called from any thread; each thread uses its own mss handle.
    """

    name = "mss"

    def __init__(self, display: str | None = None, *, check_display: bool = True) -> None:
        self._display = display
        self._check_display = check_display
        self._local = threading.local()
        self._lock = threading.Lock()
        self._handles: list[Any] = []
        self._checked = False
        self._closed = False

    # -- handles ---------------------------------------------------------------------------------
    def _handle(self) -> Any:
        handle = getattr(self._local, "handle", None)
        if handle is not None:
            return handle
        if self._closed:
            raise CaptureError("this capture backend was closed", hint="Create a new MssCapture.")
        if self._check_display and not self._checked and sys.platform.startswith("linux"):
            if self._display is None:
                require_display()
            self._checked = True
        if sys.platform.startswith("win"):
            ensure_per_monitor_dpi_awareness()  # grabs in physical pixels on every monitor
        mss = _import_mss()
        factory = getattr(mss, "MSS", None) or mss.mss  # mss >= 10.2 names the class MSS
        kwargs: dict[str, Any] = {}
        if self._display is not None and sys.platform.startswith("linux"):
            kwargs["display"] = self._display
        try:
            handle = factory(**kwargs)
        except Exception as exc:
            raise DisplayError(
                f"cannot open the screen for capture ({type(exc).__name__}: {exc})",
                hint="Check that a desktop session (or Xvfb) is running and DISPLAY points at it.",
            ) from exc
        self._local.handle = handle
        with self._lock:
            self._handles.append(handle)
        log.debug("opened mss handle %s for thread %s", handle, threading.current_thread().name)
        return handle

    @property
    def open_handles(self) -> int:
        """Number of mss handles opened so far (one per thread that captured)."""
        with self._lock:
            return len(self._handles)

    def _raw_monitors(self) -> list[dict[str, Any]]:
        try:
            return [dict(m) for m in self._handle().monitors]
        except HolodeskError:
            raise
        except Exception as exc:
            raise CaptureError(f"listing monitors failed ({type(exc).__name__}: {exc})") from exc

    # -- CaptureBackend --------------------------------------------------------------------------
    def monitors(self) -> list[Monitor]:
        """Monitors in mss order, ``index`` 1-based, geometry in input space (pixels on X11).

        Raises:
            DisplayError: no usable display. CaptureError: mss failed.
        """
        raw = self._raw_monitors()
        return [_to_monitor(i, m) for i, m in enumerate(raw) if i >= 1]

    def grab(self, monitor_index: int) -> Frame:
        """Grab one monitor as an RGB frame.

        Args:
            monitor_index: 1..N (mss numbering); 0 grabs the whole virtual desktop.
        Returns:
            :class:`Frame` with ``pixels`` of shape ``(height, width, 3)`` uint8 RGB in physical pixels.
        Raises:
            CaptureError: unknown index (the message lists the valid ones) or the grab failed.
            DisplayError: no usable display.
        """
        raw = self._raw_monitors()
        if isinstance(monitor_index, bool) or not isinstance(monitor_index, int) or not (
            0 <= monitor_index < len(raw)
        ):
            valid = ", ".join(str(i) for i in range(1, len(raw)))
            raise CaptureError(
                f"there is no monitor {monitor_index!r}; valid monitor indices are {valid}",
                hint="Pick one of the listed monitors (`holodesk doctor` shows them).",
            )
        geometry = raw[monitor_index]
        captured_at = time.time()
        try:
            shot = self._handle().grab(geometry)
        except Exception as exc:
            raise CaptureError(
                f"grabbing monitor {monitor_index} failed ({type(exc).__name__}: {exc})",
                hint="The monitor layout may have changed; list the monitors again.",
            ) from exc
        width, height = int(shot.size[0]), int(shot.size[1])
        bgra = np.frombuffer(shot.raw, dtype=np.uint8)
        if bgra.size != width * height * 4:
            raise CaptureError(f"mss returned {bgra.size} bytes for a {width}x{height} BGRA image")
        rgb = np.ascontiguousarray(bgra.reshape(height, width, 4)[:, :, 2::-1])
        return Frame(pixels=rgb, monitor=_to_monitor(monitor_index, geometry, width, height),
                     captured_at=captured_at)

    def close(self) -> None:
        """Close every handle this backend opened (from any thread). Later calls raise CaptureError."""
        with self._lock:
            handles, self._handles = self._handles, []
            self._closed = True
        for handle in handles:
            try:
                handle.close()
            except Exception as exc:  # closing must not raise; a dead X connection is already closed
                log.debug("closing mss handle failed: %s", exc)
        self._local = threading.local()

    def __enter__(self) -> MssCapture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _to_monitor(index: int, m: dict[str, Any], frame_w: int | None = None, frame_h: int | None = None
                ) -> Monitor:
    name = str(m.get("output") or m.get("name") or (f"Monitor {index}" if index else "All monitors"))
    return Monitor(
        index=index, left=int(m["left"]), top=int(m["top"]), width=int(m["width"]), height=int(m["height"]),
        name=name,
        physical_width=frame_w if frame_w is not None else int(m["width"]),
        physical_height=frame_h if frame_h is not None else int(m["height"]),
    )
