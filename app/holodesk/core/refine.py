"""Refining a pointer target ("Click more precisely" on the approval card): the crop around a proposed point
that the model's element localization is shown, and its answer mapped back onto the frame.

The crop is a square of :data:`REFINE_CROP_SHARE` of the frame's shorter side, centred on the proposed point and
shifted to lie inside the frame; the model answers a point in ``[0, 1000]`` of the crop (H Company's element
localization, hub.hcompany.ai/element-localization), which lands on the crop pixel
``floor(x / 1000 * width)`` (the convention of :func:`holodesk.core.geometry.point_to_frame_pixel`), and that
pixel's frame position becomes the refined point.
"""

from __future__ import annotations

import math

from holodesk.core.actions import NORM_MAX, Point
from holodesk.core.geometry import Frame, frame_pixel_to_point, point_to_frame_pixel

REFINE_CROP_SHARE = 0.5
"""Side of the crop as a share of the frame's shorter side (540 px of a 1920x1080 frame)."""

Crop = tuple[int, int, int, int]
"""``(left, top, width, height)`` in frame pixels."""


def refine_crop(frame: Frame, point: Point) -> Crop:
    """The square crop of ``frame`` centred on ``point`` (model space), inside the frame.

    Returns:
        ``(left, top, width, height)`` in frame pixels; width = height = ``REFINE_CROP_SHARE`` of the
        shorter side (at least 1 pixel).
    """
    side = max(1, int(min(frame.width, frame.height) * REFINE_CROP_SHARE))
    px, py = point_to_frame_pixel(frame, point)
    left = min(max(px - side // 2, 0), frame.width - side)
    top = min(max(py - side // 2, 0), frame.height - side)
    return left, top, side, side


def crop_point_to_frame(frame: Frame, crop: Crop, point: Point) -> Point:
    """The frame's model-space point of ``point``, a point in ``[0, 1000]`` of ``crop``.

    Raises:
        ActionError: ``point`` is not a Point.
    """
    left, top, width, height = crop
    cx = min(math.floor(point.x / NORM_MAX * width), width - 1)
    cy = min(math.floor(point.y / NORM_MAX * height), height - 1)
    return frame_pixel_to_point(frame, left + cx, top + cy)
