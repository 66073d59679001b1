"""A checkpoint's weight files (``holodesk.policy.weights``): which files, and the read-ahead that brings them
into the page cache while the model runtime is imported. Residency is read from the kernel (``mincore``) after
the files were dropped from the page cache (``fadvise``), so these tests see what the loader would find."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

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


def test_read_ahead_brings_the_weights_into_the_page_cache(tmp_path: Path) -> None:
    order = _shards(tmp_path, [3 * 2**20, 2 * 2**20 + 7, 5 * 2**20])
    _dropped(order)
    with weights.prefetching(tmp_path) as prefetch:
        assert prefetch is not None and prefetch.files == tuple(order) and prefetch.left == ()
        assert prefetch.join(timeout=60)
    assert prefetch.bytes_so_far() == prefetch.planned_bytes == sum(f.stat().st_size for f in order)
    assert page_cache.resident_fraction(order) == 1.0
    assert prefetch.describe().startswith("read ahead 3 weight file(s), 0.01 GB: 0.01 GB in ")


def test_read_ahead_stays_within_its_memory_budget_and_leaves_the_rest_to_the_load(tmp_path: Path) -> None:
    order = _shards(tmp_path, [2 * 2**20, 2 * 2**20, 2 * 2**20])
    _dropped(order)
    first_two = order[0].stat().st_size + order[1].stat().st_size
    prefetch = weights.Prefetch(order, budget=first_two + 2**20)  # the third does not fit
    assert prefetch.join(timeout=60)
    assert prefetch.files == tuple(order[:2]) and prefetch.left == (order[2],)
    assert prefetch.bytes_so_far() == first_two
    assert page_cache.resident_fraction(order[:2]) == 1.0
    assert page_cache.resident_fraction(order[2:]) < 0.05  # not read
    assert "1 file(s) left to the load" in prefetch.describe()


def test_read_ahead_stops_when_asked(tmp_path: Path) -> None:
    order = _shards(tmp_path, [2**20])
    stop = threading.Event()
    stop.set()
    assert weights.read_through(order, stop=stop) == 0  # stopped before the first read
    assert weights.read_through(order) == 2**20


def test_a_checkpoint_not_on_this_machine_is_not_read_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))  # an empty model cache: nothing is cached
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # and nothing may be fetched to find out
    caplog.set_level(logging.INFO, logger="holodesk.policy.weights")
    assert weights.local_folder("nobody-here/no-such-model") is None
    with weights.prefetching("nobody-here/no-such-model") as prefetch:
        assert prefetch is None
    assert "weights read ahead: no (nobody-here/no-such-model is not on this machine yet)" in caplog.text
    assert weights.local_folder(tmp_path) == tmp_path


def test_load_local_policy_reads_the_weights_ahead_while_the_runtime_loads(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The load itself is a fake here (it waits for the pages and returns what it saw): the read-ahead around it
    is the real one, on real files dropped from the page cache."""
    from holodesk.policy import local

    order = _shards(tmp_path, [4 * 2**20, 4 * 2**20])
    _dropped(order)
    seen: dict[str, Any] = {}

    def load(source: Path, *_args: Any, **_kwargs: Any) -> Any:
        deadline = time.monotonic() + 60
        while (resident := page_cache.resident_fraction(order)) != 1.0 and time.monotonic() < deadline:
            time.sleep(0.02)
        seen["resident"] = resident
        return "policy"

    monkeypatch.setattr(local, "_load", load)
    assert local.load_local_policy(tmp_path) == "policy"
    assert seen["resident"] == 1.0
