"""A fake capture backend that replays recorded images for fake monitor layouts (tests, replays).

It touches no display. Scale factors and monitor layouts that cannot be produced under Xvfb (Retina 2x,
175 % Windows scaling, monitors with different scales) are faked by giving an image whose pixel size
differs from its monitor's input-space size.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

import numpy as np
from PIL import Image

from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import CaptureError

ImageSource = Union[str, Path, "np.ndarray[Any, Any]"]
"""A PNG (or any Pillow-readable image) path, or an RGB ``uint8`` array of shape (height, width, 3)."""


def load_image(source: ImageSource) -> np.ndarray[Any, Any]:
    """Load one image as an RGB ``uint8`` array of shape ``(height, width, 3)``.

    Raises:
        CaptureError: unreadable file or an array of the wrong shape/dtype.
    """
    if isinstance(source, np.ndarray):
        arr = source
    else:
        try:
            with Image.open(source) as img:
                arr = np.asarray(img.convert("RGB"))
        except (OSError, ValueError) as exc:
            raise CaptureError(f"cannot read image {str(source)!r}: {exc}") from exc
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise CaptureError(f"fake frame must be uint8 (height, width, 3), got {arr.dtype} {arr.shape}")
    return arr


class FakeCapture:
    """A fake :class:`~holodesk.capture.base.CaptureBackend` replaying images.

    Args:
        frames: either one sequence of images used for every monitor, or a mapping monitor index ->
            sequence of images. Each ``grab(i)`` returns monitor i's next image; after the last one,
            the last image repeats.
        monitors: the fake monitor layout (input space). Default: one monitor at (0, 0) whose size is
            the first image's size (scale 1.0).
    Raises:
        CaptureError: no images, or images for a monitor index that is not in the layout.

    Attributes:
        grab_counts: number of grabs per monitor index so far.
    """

    name = "fake"

    def __init__(
        self,
        frames: Sequence[ImageSource] | Mapping[int, Sequence[ImageSource]],
        monitors: Sequence[Monitor] | None = None,
    ) -> None:
        per_monitor: dict[int, list[np.ndarray[Any, Any]]] | None = None
        shared: list[np.ndarray[Any, Any]] | None = None
        if isinstance(frames, Mapping):
            per_monitor = {int(k): [load_image(s) for s in v] for k, v in frames.items()}
            first = next((imgs[0] for imgs in per_monitor.values() if imgs), None)
        else:
            shared = [load_image(s) for s in frames]
            first = shared[0] if shared else None
        if first is None:
            raise CaptureError("FakeCapture needs at least one image")
        if monitors is None:
            monitors = [Monitor(index=1, left=0, top=0, width=first.shape[1], height=first.shape[0],
                                name="Fake monitor 1")]
        self._monitors = list(monitors)
        indices = {m.index for m in self._monitors}
        if per_monitor is not None:
            unknown = sorted(set(per_monitor) - indices)
            if unknown:
                raise CaptureError(f"images given for unknown fake monitors {unknown}; layout has {sorted(indices)}")
            self._images = per_monitor
        else:
            assert shared is not None
            self._images = {i: shared for i in indices}
        self._cursor: dict[int, int] = dict.fromkeys(indices, 0)
        self.grab_counts: dict[int, int] = dict.fromkeys(indices, 0)
        self._lock = threading.Lock()

    @classmethod
    def from_directory(cls, directory: str | Path, monitors: Sequence[Monitor] | None = None) -> FakeCapture:
        """Replay every ``*.png`` in ``directory`` in name order (e.g. an episode's frames).

        Raises:
            CaptureError: no PNG files there.
        """
        files = sorted(Path(directory).glob("*.png"))
        if not files:
            raise CaptureError(f"no PNG files in {str(directory)!r}")
        return cls(list(files), monitors)

    def monitors(self) -> list[Monitor]:
        """The fake layout, as given."""
        return list(self._monitors)

    def grab(self, monitor_index: int) -> Frame:
        """Next image of monitor ``monitor_index`` (the last one repeats) as a Frame.

        Raises:
            CaptureError: unknown index (listing the valid ones) or no images for that monitor.
        """
        monitor = next((m for m in self._monitors if m.index == monitor_index), None)
        if monitor is None:
            valid = ", ".join(str(m.index) for m in self._monitors)
            raise CaptureError(f"there is no monitor {monitor_index!r}; valid monitor indices are {valid}")
        images = self._images.get(monitor_index) or []
        if not images:
            raise CaptureError(f"FakeCapture has no images for monitor {monitor_index}")
        with self._lock:
            pos = self._cursor[monitor_index]
            self._cursor[monitor_index] = min(pos + 1, len(images) - 1)
            self.grab_counts[monitor_index] += 1
        return Frame(pixels=images[pos].copy(), monitor=monitor, captured_at=time.time())

    def close(self) -> None:
        """Nothing to release."""
