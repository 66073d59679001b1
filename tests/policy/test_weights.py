"""A checkpoint's weight files (``holodesk.policy.weights``): which files, and reading them through the page
cache. Residency is read from the kernel (``mincore``) after the files were dropped from the page cache
(``fadvise``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from holodesk.bench import page_cache
from holodesk.errors import ModelLoadError
from holodesk.policy import weights


def _shards(folder: Path, sizes: list[int]) -> list[Path]:
    """Shards of random bytes with an index that names them (last shard first, to check the order)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / f"model-{i:05d}.safetensors" for i in range(len(sizes))]
    for f, size in zip(files, sizes, strict=True):
        f.write_bytes(os.urandom(size))
    order = files[::-1]
    index = {"weight_map": {f"layer{i}.weight": f.name for i, f in enumerate(order)} | {"extra": order[0].name}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    page_cache.flush(files)
    page_cache.drop(files, system=False)
    return order


def _dropped(files: list[Path]) -> float:
    resident = page_cache.resident_fraction(files)
    if resident is None:
        pytest.skip("mincore is not available here")
    assert resident < 0.05, "the files stayed in the page cache after fadvise(DONTNEED)"
    return resident


def test_weight_files_follow_the_index_then_the_single_file_then_every_shard(tmp_path: Path) -> None:
    order = _shards(tmp_path / "indexed", [1000, 2000, 3000])
    assert weights.weight_files(tmp_path / "indexed") == tuple(order)

    single = tmp_path / "single"
    single.mkdir()
    (single / "model.safetensors").write_bytes(b"x")
    (single / "other.safetensors").write_bytes(b"y")
    assert weights.weight_files(single) == (single / "model.safetensors",)

    loose = tmp_path / "loose"
    loose.mkdir()
    for name in ("b.safetensors", "a.safetensors"):
        (loose / name).write_bytes(b"z")
    assert weights.weight_files(loose) == (loose / "a.safetensors", loose / "b.safetensors")


@pytest.mark.parametrize(("index", "words"), [
    (None, "no .safetensors weights"),
    ("{not json", "could not be read"),
    ("[]", "has no weight_map"),
    (json.dumps({"weight_map": {"w": "gone.safetensors"}}), "are missing: gone.safetensors"),
])
def test_a_folder_without_readable_weights_is_refused_with_the_reason(tmp_path: Path, index: str | None,
                                                                      words: str) -> None:
    if index is not None:
        (tmp_path / "model.safetensors.index.json").write_text(index)
    with pytest.raises(ModelLoadError, match=words):
        weights.weight_files(tmp_path)


def test_reading_through_brings_the_weights_into_the_page_cache(tmp_path: Path) -> None:
    order = _shards(tmp_path, [3 * 2**20, 2 * 2**20 + 7, 5 * 2**20])
    _dropped(order)
    seen: list[int] = []
    assert weights.read_through(order, on_read=seen.append) == sum(seen) == sum(f.stat().st_size for f in order)
    assert page_cache.resident_fraction(order) == 1.0
