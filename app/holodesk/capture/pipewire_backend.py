"""Screen capture on GNOME Wayland: frames from Mutter's PipeWire screen-cast streams, in-process.

Each monitor's stream (:class:`holodesk.display.mutter.MutterRemoteDesktop`) feeds a GStreamer pipeline
``pipewiresrc fd=… path=NODE always-copy=true ! videoconvert ! video/x-raw,format=BGRx ! appsink`` (PyGObject;
``videoconvert`` passes Mutter's BGRx through untouched), kept running so a grab costs one frame, not a
stream start (0.8-1.7 s). The compositor sends a frame only when something is redrawn; a grab therefore
moves the pointer one pixel and back (the cursor is embedded in the stream) and takes the first frame that
arrives after that, so the frame shows the screen as it is at the time of the call (the overlay hidden by
the session's ``before_capture`` hook, the last keystroke drawn). The newest frame is never taken as
current while a fresh one may still come: a loaded machine took 0.1-0.3 s to send the frame after a nudge,
so the pointer is nudged again every 0.25 s, for up to ``fresh_timeout_s``.

Frames are RGB ``uint8`` ``(height, width, 3)`` in stream pixels; the monitor is in Mutter's logical layout,
so :attr:`Frame.scale` is Mutter's monitor scale.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from holodesk.core.geometry import Frame, Monitor
from holodesk.display.mutter import MutterMonitor, MutterRemoteDesktop
from holodesk.display.portal import PortalRemoteDesktop
from holodesk.errors import ActionError, CaptureError

log = logging.getLogger(__name__)

NUDGE_INTERVAL_S = 0.25
"""While waiting for a fresh frame, the pointer is nudged again this often (a loaded machine took up to
0.3 s to send the frame that follows a nudge)."""
INPUT_READY_TIMEOUT_S = 10.0
"""Most seconds to wait until a new session's input is applied (see ``MutterCapture._await_input``)."""
FIRST_FRAME_TIMEOUT_S = 10.0
"""Most seconds to wait for a stream's first frame (a stream start took up to 1.7 s on a loaded machine)."""


def import_gstreamer() -> tuple[Any, Any]:
    """``(Gst, GstApp)`` from PyGObject, initialised.

    Raises:
        CaptureError: PyGObject or GStreamer's introspection data is missing, or no ``pipewiresrc``.
    """
    try:
        import gi  # lazy: PyGObject (optional: the wayland extra)

        gi.require_version("Gst", "1.0")
        gi.require_version("GstApp", "1.0")
        from gi.repository import Gst, GstApp  # lazy: PyGObject (optional: the wayland extra)
    except (ImportError, ValueError) as exc:
        raise CaptureError(
            f"GStreamer cannot be loaded from Python ({exc})",
            hint="Install PyGObject into Holodesk's environment (`pip install 'holodesk[wayland]'`) and the "
                 "packages gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0 gstreamer1.0-pipewire.",
        ) from exc
    if not Gst.is_initialized():
        Gst.init(None)
    if Gst.ElementFactory.find("pipewiresrc") is None:
        raise CaptureError("GStreamer has no pipewiresrc element",
                           hint="Install the package gstreamer1.0-pipewire (Fedora: pipewire-gstreamer).")
    return Gst, GstApp


class _Stream:
    """One running pipeline on one monitor's PipeWire node; keeps the newest frame."""

    def __init__(self, gst: Any, node: int, fd: int, check_desktop: Callable[[], None]) -> None:
        self._gst = gst
        self._check_desktop = check_desktop
        self._cond = threading.Condition()
        self._sample: Any = None
        self._seq = 0
        self._error = ""
        description = (f"pipewiresrc fd={fd} path={node} always-copy=true do-timestamp=true ! videoconvert ! "
                       "video/x-raw,format=BGRx ! appsink name=sink max-buffers=1 drop=true sync=false "
                       "emit-signals=true")
        self._fd = fd
        self.pipeline = gst.parse_launch(description)
        self._sink = self.pipeline.get_by_name("sink")
        self._handler = self._sink.connect("new-sample", self._on_sample)
        self._bus = self.pipeline.get_bus()  # no main loop: errors are polled in wait()
        if self.pipeline.set_state(gst.State.PLAYING) == gst.StateChangeReturn.FAILURE:
            self.close()
            raise CaptureError(f"the screen-cast pipeline on PipeWire node {node} did not start",
                               hint="Check that PipeWire and WirePlumber run in your session.")

    def _on_sample(self, sink: Any) -> Any:
        sample = sink.emit("pull-sample")
        with self._cond:
            self._sample = sample
            self._seq += 1
            self._cond.notify_all()
        return self._gst.FlowReturn.OK

    @property
    def seq(self) -> int:
        with self._cond:
            return self._seq

    def _bus_error(self) -> str:
        msg = self._bus.pop_filtered(self._gst.MessageType.ERROR)
        if msg is None:
            return ""
        err, debug = msg.parse_error()
        return f"{err.message} ({debug})"

    def wait(self, after_seq: int, timeout_s: float) -> Any:
        """The first sample numbered above ``after_seq`` within ``timeout_s``, else None.

        Raises:
            CaptureError: the pipeline reported an error.
            DisplayError: the desktop ended (checked every 0.1 s: the stream then stays silent).
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._seq <= after_seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.1))
                if self._seq <= after_seq:
                    self._check_desktop()
                    error = self._bus_error()
                    if error:
                        raise CaptureError(f"the screen-cast stream failed: {error}")
            return self._sample if self._seq > after_seq else None

    def latest(self) -> Any:
        with self._cond:
            return self._sample

    def close(self) -> None:
        """Stop the pipeline and let it go. The sink's signal handler refers to this stream, which refers to
        the pipeline: a cycle through GObject that Python's collector cannot see, so the handler is
        disconnected and the references dropped here (else each closed stream kept its 4 sockets and its
        last frame)."""
        if self.pipeline is None:
            return
        self.pipeline.set_state(self._gst.State.NULL)
        self._sink.disconnect(self._handler)
        with self._cond:
            self._sample = None
        self.pipeline = self._sink = self._bus = None
        with contextlib.suppress(OSError):  # pipewiresrc may have closed it already
            os.close(self._fd)


class MutterCapture:
    """:class:`~holodesk.capture.base.CaptureBackend` on Mutter's screen cast (GNOME on Wayland).

    Args:
        session: the remote-desktop session whose streams are read (shared with the executor).
        fresh_timeout_s: how long to wait (nudging the pointer every 0.25 s) for a frame rendered after
            the call before the newest frame is taken as current (logged as a warning).

    Thread safety: every method may be called from any thread.
    """

    name = "mutter"

    def __init__(self, session: MutterRemoteDesktop | PortalRemoteDesktop, *, fresh_timeout_s: float = 3.0) -> None:
        self.session = session
        self.name = getattr(session, "backend_name", "mutter")
        self.fresh_timeout_s = fresh_timeout_s
        self._lock = threading.Lock()
        self._streams: dict[str, _Stream] = {}
        self._generation = -1
        self._gst: Any = None

    def monitors(self) -> list[Monitor]:
        """Mutter's monitors, ``index`` 1-based (primary first), geometry in the logical layout.

        Raises:
            DisplayError: Mutter's APIs are not reachable.
        """
        return [m.monitor for m in self.session.monitors()]

    def _stream(self, mon: MutterMonitor) -> tuple[_Stream, bool]:
        with self._lock:
            if self._generation != self.session.generation:  # a new session: new streams and nodes
                for old in self._streams.values():
                    old.close()
                self._streams.clear()
                self._generation = self.session.generation
            stream = self._streams.get(mon.connector)
            if stream is not None:
                return stream, False
            if self._gst is None:
                self._gst, _ = import_gstreamer()
            node = self.session.pipewire_node(mon.connector)
            stream = _Stream(self._gst, node, self.session.open_pipewire_fd(), self.session.raise_if_ended)
            self._streams[mon.connector] = stream
            return stream, True

    def grab(self, monitor_index: int) -> Frame:
        """Grab monitor ``monitor_index`` as it is now.

        Returns:
            :class:`Frame` with RGB ``uint8`` pixels ``(height, width, 3)`` in stream pixels.
        Raises:
            CaptureError: unknown index (listing the valid ones), GStreamer missing, the stream failed or
                sent no frame within 10 s.
            DisplayError: Mutter's APIs are not reachable; the desktop ended (before or during the grab:
                no older frame is returned then).
        """
        try:
            mon = self.session.monitor(monitor_index)
        except ActionError as exc:
            raise CaptureError(exc.message, hint=exc.hint) from exc
        stream, new = self._stream(mon)
        captured_at = time.time()
        if new and stream.wait(0, FIRST_FRAME_TIMEOUT_S) is None:
            raise CaptureError(f"the screen cast of {mon.connector} sent no frame within {FIRST_FRAME_TIMEOUT_S:g} s",
                               hint="Check that PipeWire and WirePlumber run in your session.")
        if not self.session.input_ready.is_set():
            self._await_input(stream)
        sample = self._fresh_sample(stream, mon.connector)
        return Frame(pixels=_sample_to_rgb(self._gst, sample), monitor=mon.monitor, captured_at=captured_at)

    def _fresh_sample(self, stream: _Stream, connector: str) -> Any:
        """The first frame rendered after this call: nudge the pointer (again every ``NUDGE_INTERVAL_S``)
        until a frame arrives, for up to ``fresh_timeout_s``; then the newest frame (logged)."""
        seq = stream.seq
        deadline = time.monotonic() + self.fresh_timeout_s
        while True:
            self.session.nudge_pointer()
            left = deadline - time.monotonic()
            sample = stream.wait(seq, max(0.0, min(NUDGE_INTERVAL_S, left)))
            if sample is not None:
                return sample
            if left <= NUDGE_INTERVAL_S:
                self.session.raise_if_ended()
                log.warning("no new frame of %s within %.1f s of a pointer nudge (is the pointer hidden?); "
                            "using the newest frame", connector, self.fresh_timeout_s)
                return stream.latest()

    def _await_input(self, stream: _Stream) -> None:
        """Wait until Mutter applies pointer motion from this session, then set ``session.input_ready``.

        Mutter drops input sent in the first 50-200 ms after a session starts (its virtual devices are
        still being added). Motion is seen in the stream: the embedded cursor moves, so a frame follows a
        nudge. Two nudges in a row must each be followed by a frame within 0.5 s (one frame could come
        from other damage, e.g. a blinking text cursor; a loaded machine took up to 0.3 s per frame).

        Raises:
            CaptureError: no nudge was followed by a frame within 10 s.
        """
        deadline = time.monotonic() + INPUT_READY_TIMEOUT_S
        confirmed = 0
        while confirmed < 2:
            if time.monotonic() > deadline:
                raise CaptureError("the pointer of Holodesk's remote-desktop session does not move (Mutter "
                                   f"applied no input within {INPUT_READY_TIMEOUT_S:g} s)",
                                   hint="Run 'holodesk doctor'; another remote-desktop session may hold the input.")
            seq = stream.seq
            self.session.nudge_pointer()
            confirmed = confirmed + 1 if stream.wait(seq, 0.5) is not None else 0
        self.session.input_ready.set()

    def close(self) -> None:
        """Stop every pipeline (the session is closed by its owner)."""
        with self._lock:
            streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.close()


def _sample_to_rgb(gst: Any, sample: Any) -> np.ndarray[Any, Any]:
    """A BGRx GstSample -> RGB ``uint8`` array ``(height, width, 3)``, writable (rows may be padded).

    One output array, filled channel by channel from the mapped buffer: at 1080p this took 34 ms from
    request to frame against 43-52 ms through Pillow's ``BGRX`` unpacker and ``np.array`` (docs/benchmarks.md),
    whose two intermediate 6 MB buffers are fresh memory that is page-faulted in on every frame."""
    caps = sample.get_caps().get_structure(0)
    width, height = int(caps.get_value("width")), int(caps.get_value("height"))
    buffer = sample.get_buffer()
    ok, info = buffer.map(gst.MapFlags.READ)
    if not ok:
        raise CaptureError("cannot read the screen-cast frame's memory")
    try:
        size = len(info.data)
        stride = size // height
        if stride < width * 4:
            raise CaptureError(f"the screen cast sent {size} bytes for a {width}x{height} BGRx frame")
        rows = np.frombuffer(info.data, np.uint8, count=stride * height).reshape(height, stride)
        bgrx = rows[:, : width * 4].reshape(height, width, 4)
        rgb = np.empty((height, width, 3), np.uint8)
        for channel in range(3):
            rgb[..., channel] = bgrx[..., 2 - channel]
        return rgb
    finally:
        buffer.unmap(info)
