"""Image tiling for Holotron-12B (Nemotron Nano 2 VL): grid choice, pixel pipeline, token counts.

The algorithm reproduces the preprocessing the model was trained with (docs/holotron-runtime.md, "One
step"): InternVL's dynamic tiling (``find_closest_aspect_ratio`` in InternVL's ``dynamic_preprocess``,
also used by Nemotron Nano 2 VL), bicubic resize with antialiasing of the uint8 image as vLLM's
``nano_nemotron_vl.py`` does it (the resized values rounded and clamped to 0..255, then divided by 255, so the
bicubic overshoot at hard edges is cut), row-major tiles plus a thumbnail, per-channel normalisation.

:func:`plan_tiling` (grid, tiles and tokens of one image, computed once per frame) is pure Python;
:func:`preprocess_pixels` imports torch lazily, so importing this module needs neither torch nor numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

TILE_SIZE = 512
"""Tile edge in pixels (``force_image_size`` of the published config). The constants here are the
published values, for the worked examples and pure token counts; the runtime passes the values read from
the checkpoint (:class:`~holodesk.policy.holotron.checkpoint.CheckpointInfo`)."""

MAX_TILES = 12
"""Largest number of grid tiles (thumbnail not counted) Nemotron Nano 2 VL uses by default."""

TOKENS_PER_TILE = 256
"""LM tokens per 512x512 tile: (512/16)^2 = 1024 patches, pixel shuffle 0.5 keeps a quarter."""


def candidate_grids(max_tiles: int = MAX_TILES, min_tiles: int = 1) -> list[tuple[int, int]]:
    """All (cols, rows) with ``min_tiles <= cols*rows <= max_tiles``, ordered by ``cols*rows``.

    Built like InternVL's ``dynamic_preprocess``: a set of grids sorted by product only (Python's sort
    is stable, and CPython iterates a set of small-int tuples in a fixed order), so equal-product grids
    come in the same order as there.
    """
    if max_tiles < 1 or min_tiles < 1 or min_tiles > max_tiles:
        raise ValueError(f"need 1 <= min_tiles <= max_tiles, got {min_tiles}, {max_tiles}")
    grids = {(i, j) for n in range(min_tiles, max_tiles + 1) for i in range(1, n + 1) for j in range(1, n + 1)
             if min_tiles <= i * j <= max_tiles}
    return sorted(grids, key=lambda grid: grid[0] * grid[1])


def tile_grid(width: int, height: int, max_tiles: int = MAX_TILES, *, tile_size: int = TILE_SIZE) -> tuple[int, int]:
    """Choose the tile grid (cols, rows) for an image of ``width`` x ``height`` pixels.

    Rule (InternVL ``find_closest_aspect_ratio``, as used by Nemotron Nano 2 VL): walk the candidate
    grids in order of ``cols*rows``; keep the one whose ``cols/rows`` is closest to ``width/height``;
    on an exact tie, switch to the later (larger) grid when the image area exceeds
    ``0.5 * tile_size**2 * cols * rows`` of that grid.

    Worked values: 1920x1080 -> (4, 2); 1280x800 -> (3, 2); 1280x720 -> (2, 1);
    1024x768 -> (4, 3); 3440x1440 -> (5, 2); 1080x1920 -> (2, 4); 512x512 -> (1, 1).

    Args:
        width, height: image size in pixels (> 0).
        max_tiles: largest cols*rows allowed (12 for Holotron).
        tile_size: tile edge in pixels (512 for Holotron).
    Returns:
        (cols, rows).
    Raises:
        ValueError: for a non-positive size or ``max_tiles`` < 1.
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    aspect = width / height
    area = width * height
    best = (1, 1)
    best_diff = float("inf")
    for cols, rows in candidate_grids(max_tiles):
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best_diff = diff
            best = (cols, rows)
        elif diff == best_diff and area > 0.5 * tile_size * tile_size * cols * rows:
            best = (cols, rows)
    return best


@dataclass(frozen=True)
class Tiling:
    """How one image is cut: grid ``cols`` x ``rows``, ``tiles`` sent (thumbnail included) and the
    ``tokens`` (``<image>`` placeholders, without ``<img>``/``</img>``) they become."""

    cols: int
    rows: int
    tiles: int
    tokens: int


def plan_tiling(width: int, height: int, max_tiles: int = MAX_TILES, *, tile_size: int = TILE_SIZE,
                use_thumbnail: bool = True, tokens_per_tile: int = TOKENS_PER_TILE) -> Tiling:
    """The tiling of a ``width`` x ``height`` image: :func:`tile_grid`, plus one thumbnail when the grid
    has more than one tile. 1920x1080 -> ``Tiling(4, 2, tiles=9, tokens=2304)``.

    Raises:
        ValueError: as :func:`tile_grid`.
    """
    cols, rows = tile_grid(width, height, max_tiles, tile_size=tile_size)
    tiles = tile_count(cols * rows, use_thumbnail=use_thumbnail)
    return Tiling(cols, rows, tiles, tiles * tokens_per_tile)


def tile_count(cells: int, *, use_thumbnail: bool) -> int:
    """Tiles sent for a grid of ``cells`` tiles: one thumbnail more when there is more than one."""
    return cells + (1 if use_thumbnail and cells > 1 else 0)


def image_tiles(width: int, height: int, max_tiles: int = MAX_TILES, *, tile_size: int = TILE_SIZE,
                use_thumbnail: bool = True) -> int:
    """Number of tiles (thumbnail included) for a ``width`` x ``height`` image. 1920x1080 -> 9."""
    return plan_tiling(width, height, max_tiles, tile_size=tile_size, use_thumbnail=use_thumbnail).tiles


def image_token_count(width: int, height: int, max_tiles: int = MAX_TILES, *, tile_size: int = TILE_SIZE,
                      tokens_per_tile: int = TOKENS_PER_TILE, use_thumbnail: bool = True) -> int:
    """Image-context tokens for one image (:attr:`Tiling.tokens`). 1920x1080 -> 9 tiles x 256 = 2304."""
    return plan_tiling(width, height, max_tiles, tile_size=tile_size, use_thumbnail=use_thumbnail,
                       tokens_per_tile=tokens_per_tile).tokens


def preprocess_pixels(pixels: np.ndarray[Any, Any], tiling: Tiling, *, mean: Sequence[float], std: Sequence[float],
                      tile_size: int, device: torch.device | None = None) -> torch.Tensor:
    """Turn one RGB frame into normalised tiles, cut as ``tiling`` says (:func:`plan_tiling` of its size).

    Steps: bicubic antialiased resize of the whole image to ``tile_size*cols`` x ``tile_size*rows`` (aspect
    ratio not kept) on the 0..255 values, rounded and clamped back to 0..255 as a uint8 resize is (vLLM
    resizes the uint8 image, then divides by 255); cut row-major; when ``tiling`` has a thumbnail, append
    the whole image resized to ``tile_size`` x ``tile_size`` the same way; divide by 255; normalise each
    channel with ``(x - mean) / std``. The arithmetic is float32 on every device (CUDA has no uint8 bicubic
    kernel), in two passes rounded and clamped as the uint8 kernel is; it agrees with torch's own uint8 kernel
    within 2/255 (its fixed-point weights; tests/policy/holotron/test_tiling.py), where one float pass without
    rounding between the passes differs by up to 19/255 at hard edges.

    Args:
        pixels: ``uint8`` array of shape ``(height, width, 3)``, RGB.
        tiling: the image's :class:`Tiling`, computed once per frame by the caller.
        mean, std, tile_size: the checkpoint's values (``LoadedHolotron``); no default, so a caller cannot
            silently use other values.
        device: torch device to do the work on (default the CPU). On a GPU the frame goes over as uint8
            (a quarter of the float32 bytes): 1-2 ms instead of 25-100 ms on the CPU for a 1080p frame
            (docs/benchmarks.md), equal up to float rounding.
    Returns:
        float32 ``(tiling.tiles, 3, tile_size, tile_size)`` on ``device``: tiles row-major, then the
        thumbnail.
    Raises:
        ValueError: when ``pixels`` is not ``(h, w, 3)``.
    """
    # lazy (here and below): torch (optional, heavy); numpy (a core dependency) kept with it (GPU runtime, not
    # re-checked this session)
    import numpy as np
    import torch
    import torch.nn.functional as F

    arr = np.asarray(pixels)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"expected RGB pixels of shape (height, width, 3), got {arr.shape}")
    height, width = int(arr.shape[0]), int(arr.shape[1])
    cols, rows = tiling.cols, tiling.rows
    raw = torch.from_numpy(np.ascontiguousarray(arr)).to(device or "cpu")
    image = raw.permute(2, 0, 1).to(torch.float32).unsqueeze(0)  # (1, 3, h, w), values 0..255

    def one_pass(source: torch.Tensor, target_h: int, target_w: int) -> torch.Tensor:
        out = F.interpolate(source, size=(target_h, target_w), mode="bicubic", align_corners=False, antialias=True)
        return out.round_().clamp_(0.0, 255.0)

    def resize(target_h: int, target_w: int) -> torch.Tensor:
        """The image at ``target_h`` x ``target_w``, in [0, 1], as a uint8 resize makes it: the width pass, then
        the height pass, each rounded and clamped to 0..255 (torch's uint8 kernel stores its horizontal pass
        as uint8 before the vertical one)."""
        out = image if target_w == width else one_pass(image, height, target_w)
        if target_h != height:
            out = one_pass(out, target_h, target_w)
        return out / 255.0

    resized = resize(tile_size * rows, tile_size * cols)[0]  # (3, S*rows, S*cols)
    tiles = resized.reshape(3, rows, tile_size, cols, tile_size).permute(1, 3, 0, 2, 4)
    tiles = tiles.reshape(rows * cols, 3, tile_size, tile_size)
    if tiling.tiles > rows * cols:
        tiles = torch.cat([tiles, resize(tile_size, tile_size)], dim=0)
    mean_t, std_t = (torch.tensor([float(v) for v in x], device=image.device).view(1, 3, 1, 1) for x in (mean, std))
    return ((tiles - mean_t) / std_t).contiguous()
