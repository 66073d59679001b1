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
