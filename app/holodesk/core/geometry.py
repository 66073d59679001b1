"""The only coordinate transforms in Holodesk.

Three spaces:

* **model space** — the action protocol's normalised space, integers ``0..1000`` across the frame the
  model saw (:class:`~holodesk.core.actions.Point`).
* **frame pixels** — physical pixels of the captured image, ``0..width-1`` x ``0..height-1``.
* **input space** — the coordinates the OS input API takes (pyautogui / XTest on X11, logical pixels on
  scaled Windows and macOS displays), covering every monitor; a monitor's ``left/top`` is its origin there.

The ratio between frame pixels and input space is *measured* from the frame's size and its monitor's
input-space size (never assumed from a DPI setting): on a 2880x1620 panel at 175 % scaling whose input
space is 1646x926, each input unit covers 2880/1646 frame pixels. Every conversion goes through the
frame the action was computed from, never through the current screen size.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from holodesk.core.actions import NORM_MAX, Action, Point
from holodesk.errors import ActionError, CaptureError

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class Monitor:
    """One monitor as the OS input API sees it.

    Attributes:
        index: 1-based monitor number as listed by the capture backend (mss numbering; 0 = all).
        left, top: origin in input space (may be negative for monitors left of / above the primary).
        width, height: size in input space units (logical pixels where the OS scales).
        name: human-readable name (output name, or "Monitor N").
        physical_width, physical_height: panel size in physical pixels when known (else equal to the
            input size); the frame's real size is authoritative for conversions.
    """

    index: int
    left: int
    top: int
    width: int
    height: int
    name: str = ""
    physical_width: int | None = None
    physical_height: int | None = None

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise CaptureError(f"monitor {self.index} has an empty size {self.width}x{self.height}")

    @property
    def label(self) -> str:
        """``"Monitor 2 (HDMI-1, 1920x1080 at +1920+0)"`` for approval cards and doctor."""
        name = f", {self.name}" if self.name and self.name != f"Monitor {self.index}" else ""
        return f"Monitor {self.index}{name}, {self.width}x{self.height} at {self.left:+d}{self.top:+d}"

    def contains(self, x: int, y: int) -> bool:
        """True when input-space point (x, y) lies on this monitor."""
        return self.left <= x < self.left + self.width and self.top <= y < self.top + self.height


@dataclass(frozen=True, eq=False)
class Frame:
    """One screenshot of one monitor.

    Attributes:
        pixels: RGB image, ``uint8`` array of shape ``(height, width, 3)`` in physical pixels.
        monitor: the monitor it shows.
        captured_at: wall-clock time of the grab, seconds since the epoch.
    """

    pixels: np.ndarray[Any, Any]
    monitor: Monitor
    captured_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        shape = getattr(self.pixels, "shape", None)
        if shape is None or len(shape) != 3 or shape[2] != 3 or shape[0] == 0 or shape[1] == 0:
            raise CaptureError(f"frame pixels must have shape (height, width, 3), got {shape}")

    @property
    def width(self) -> int:
        """Frame width in physical pixels."""
        return int(self.pixels.shape[1])

    @property
    def height(self) -> int:
        """Frame height in physical pixels."""
        return int(self.pixels.shape[0])

    @property
    def scale(self) -> tuple[float, float]:
        """Measured frame pixels per input-space unit, (x, y). 1.0 on unscaled X11; 2.0 on Retina."""
        return self.width / self.monitor.width, self.height / self.monitor.height


@dataclass(frozen=True)
class InputPoint:
    """A point in OS input space (what pyautogui.moveTo takes), integers."""

    x: int
    y: int


def point_to_frame_pixel(frame: Frame, point: Point) -> tuple[int, int]:
    """Map a model-space point to the frame pixel it designates.

    ``x`` in ``0..1000`` spans the whole frame width, so pixel = floor(x / 1000 * width), with 1000
    landing on the last pixel.

    Returns:
        (px, py) with ``0 <= px < frame.width`` and ``0 <= py < frame.height``.
    Raises:
        ActionError: when ``point`` is not a Point (its own constructor rejects values outside 0..1000).
    """
    if not isinstance(point, Point):
        raise ActionError(f"expected a Point, got {type(point).__name__}", field="point")
    px = min(math.floor(point.x / NORM_MAX * frame.width), frame.width - 1)
    py = min(math.floor(point.y / NORM_MAX * frame.height), frame.height - 1)
    return px, py


def frame_pixel_to_input(frame: Frame, px: float, py: float) -> InputPoint:
    """Map a frame pixel to input space using the measured frame/monitor ratio and the monitor origin.

    The pixel's centre is mapped, so the result lies inside the input-space cell covering that pixel.

    Raises:
        ActionError: when (px, py) lies outside the frame.
    """
    if not (0 <= px < frame.width and 0 <= py < frame.height):
        raise ActionError(f"frame pixel ({px}, {py}) lies outside the {frame.width}x{frame.height} frame")
    mon = frame.monitor
    sx, sy = frame.scale
    ix = mon.left + math.floor((math.floor(px) + 0.5) / sx)
    iy = mon.top + math.floor((math.floor(py) + 0.5) / sy)
    return InputPoint(min(ix, mon.left + mon.width - 1), min(iy, mon.top + mon.height - 1))


def to_input_point(frame: Frame, point: Point) -> InputPoint:
    """THE conversion from a proposed point to the OS input coordinates where the action happens.

    Args:
        frame: the frame the model saw when it proposed ``point`` (not the current screen).
        point: model-space point, integers in ``[0, 1000]``.
    Returns:
        Input-space point on ``frame.monitor`` (offset by the monitor origin, divided by the measured
        scale).
    Raises:
        ActionError: when ``point`` is not a valid Point.
    """
    px, py = point_to_frame_pixel(frame, point)
    return frame_pixel_to_input(frame, px, py)


@dataclass(frozen=True)
class PlacedAction:
    """An action with the OS input-space points where it happens, mapped once from the frame it was
    proposed for: the approval shows these points and the executor performs exactly these points
    (never a recomputation, which could land elsewhere if the mapping changed in between).

    Attributes:
        action: the action (its points are in model space).
        frame: the frame the action was proposed for (its monitor is where it happens).
        input_points: ``to_input_point(frame, p)`` for each of ``action.points()``, in order.
    """

    action: Action
    frame: Frame
    input_points: tuple[InputPoint, ...]


def place(action: Action, frame: Frame) -> PlacedAction:
    """Map each of ``action``'s points to input space through ``frame`` (:func:`to_input_point`).

    Raises:
        ActionError: a point is not a valid Point.
    """
    return PlacedAction(action, frame, tuple(to_input_point(frame, p) for p in action.points()))


def frame_pixel_to_point(frame: Frame, px: float, py: float) -> Point:
    """Inverse of :func:`point_to_frame_pixel` for a pixel's centre: the model-space point that lands
    on frame pixel (px, py). Used to write scripts and to turn an edited on-screen point back into an
    action.

    Raises:
        ActionError: when (px, py) lies outside the frame.
    """
    if not (0 <= px < frame.width and 0 <= py < frame.height):
        raise ActionError(f"frame pixel ({px}, {py}) lies outside the {frame.width}x{frame.height} frame")
    x = round((math.floor(px) + 0.5) / frame.width * NORM_MAX)
    y = round((math.floor(py) + 0.5) / frame.height * NORM_MAX)
    return Point(x, y)


def input_to_point(frame: Frame, ix: int, iy: int) -> Point:
    """Map an input-space point (e.g. where the user clicked to edit a target) into model space.

    Raises:
        ActionError: when (ix, iy) is not on ``frame.monitor``.
    """
    mon = frame.monitor
    if not mon.contains(ix, iy):
        raise ActionError(f"point ({ix}, {iy}) is not on {mon.label}")
    sx, sy = frame.scale
    return frame_pixel_to_point(frame, (ix - mon.left + 0.5) * sx, (iy - mon.top + 0.5) * sy)

