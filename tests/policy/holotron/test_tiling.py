"""tile_grid, plan_tiling and token counts against the worked values of InternVL's rule, plus a property test
of the rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from holodesk.policy.holotron import image_tiles, image_token_count, tile_grid
from holodesk.policy.holotron.tiling import Tiling, plan_tiling

WORKED = [
    # (width, height, (cols, rows), tiles incl. thumbnail)
    (1920, 1080, (4, 2), 9),
    (2560, 1440, (4, 2), 9),
    (3840, 2160, (4, 2), 9),
    (1366, 768, (4, 2), 9),
    (1280, 800, (3, 2), 7),
    (1280, 720, (2, 1), 3),
    (1024, 768, (4, 3), 13),
    (3440, 1440, (5, 2), 11),
    (1080, 1920, (2, 4), 9),
    (512, 512, (1, 1), 1),
]


@pytest.mark.parametrize(("width", "height", "grid", "tiles"), WORKED)
def test_worked_values(width: int, height: int, grid: tuple[int, int], tiles: int) -> None:
    assert tile_grid(width, height) == grid
    assert image_tiles(width, height) == tiles
    assert image_token_count(width, height) == 256 * tiles
    assert plan_tiling(width, height) == Tiling(grid[0], grid[1], tiles, 256 * tiles)


def test_1080p_is_2304_tokens() -> None:
    assert image_token_count(1920, 1080) == 2304


def test_rejects_empty_image() -> None:
    with pytest.raises(ValueError):
        tile_grid(0, 10)


def _reference_grid(width: int, height: int, max_tiles: int) -> tuple[int, int]:
    """The rule as stated in docs/holotron.md, written independently of the implementation.

    Among grids with cols*rows <= max_tiles, the closest cols/rows to width/height wins; among grids that
    are exactly as close, the scan goes in order of cols*rows and a later grid replaces the current one
    only when the image area exceeds half of 512*512*cols*rows of that later grid.
    """
    grids = [(c, r) for c in range(1, max_tiles + 1) for r in range(1, max_tiles + 1) if c * r <= max_tiles]
    aspect = width / height
    best_diff = min(abs(aspect - c / r) for c, r in grids)
    tied = sorted((g for g in grids if abs(aspect - g[0] / g[1]) == best_diff), key=lambda g: g[0] * g[1])
    # the first tied grid in product order is taken when first met; later tied ones replace it by area
    first_closest_seen = None
    for c, r in sorted(grids, key=lambda g: g[0] * g[1]):
        if abs(aspect - c / r) == best_diff:
            first_closest_seen = (c, r)
            break
    chosen = first_closest_seen
    for c, r in tied:
        if (c, r) == first_closest_seen:
            continue
        later = c * r >= first_closest_seen[0] * first_closest_seen[1]
        if later and width * height > 0.5 * 512 * 512 * c * r:
            chosen = (c, r)
    assert chosen is not None
    return chosen


@settings(max_examples=400, deadline=None)
@given(
    width=st.integers(min_value=1, max_value=8000),
    height=st.integers(min_value=1, max_value=8000),
    max_tiles=st.sampled_from([1, 4, 6, 12]),
)
def test_grid_matches_rule(width: int, height: int, max_tiles: int) -> None:
    cols, rows = tile_grid(width, height, max_tiles)
    assert 1 <= cols * rows <= max_tiles
    assert (cols, rows) == _reference_grid(width, height, max_tiles)


def _hard_edges(width: int, height: int, seed: int) -> object:
    """An RGB uint8 frame of hard black/white edges (text-like), where bicubic overshoot is largest."""
    import numpy as np

    rng = np.random.default_rng(seed)
    cells = rng.integers(0, 2, (height // 7 + 1, width // 5 + 1, 3), dtype=np.uint8) * 255
    return np.ascontiguousarray(np.repeat(np.repeat(cells, 7, axis=0), 5, axis=1)[:height, :width])


@pytest.mark.parametrize(("width", "height"), [(1920, 1080), (1366, 768), (1280, 800), (1280, 720), (1024, 768),
                                               (800, 600), (3440, 1440), (1080, 1920), (333, 517), (97, 61),
                                               (2560, 1440), (1600, 900)])
def test_tiles_are_resized_as_vllm_resizes_the_uint8_image(width: int, height: int) -> None:
    """vLLM (nano_nemotron_vl.py) resizes the uint8 image, then divides by 255: the reference here is torch's own
    uint8 bicubic antialiased kernel (a separate fixed-point implementation), on many sizes. A float resize
    without clamping overshoots at hard edges (below 0, above 1), which the reference never does."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from holodesk.policy.holotron.tiling import preprocess_pixels

    pixels = _hard_edges(width, height, seed=width * 7 + height)
    tiling = plan_tiling(width, height, 12, tile_size=64, use_thumbnail=True)  # 64 px tiles keep it quick
    ours = preprocess_pixels(pixels, tiling, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), tile_size=64)
    image = torch.from_numpy(pixels).permute(2, 0, 1)[None]  # uint8 (1, 3, h, w)

    def reference(h: int, w: int) -> object:
        out = F.interpolate(image, size=(h, w), mode="bicubic", align_corners=False, antialias=True)
        return out[0].to(torch.float32) / 255.0

    grid = reference(64 * tiling.rows, 64 * tiling.cols)
    tiles = grid.reshape(3, tiling.rows, 64, tiling.cols, 64).permute(1, 3, 0, 2, 4).reshape(-1, 3, 64, 64)
    if tiling.tiles > tiling.cols * tiling.rows:
        tiles = torch.cat([tiles, reference(64, 64)[None]])
    assert ours.shape == tiles.shape
    assert float(ours.min()) >= 0.0 and float(ours.max()) <= 1.0  # clamped, as a uint8 image is
    assert float((ours - tiles).abs().max()) <= 2.0 / 255 + 1e-6  # two steps of 0..255 at most (fixed point)
