"""The files a start reads besides its weights: recorded while a load runs, read ahead at the next start
(:mod:`holodesk.policy.start_files`). Real files and this process's own mappings; whether the kernel then reads
them is its business (the effect on a cold start is measured on the GPU machine: docs/benchmarks.md, run 30)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from holodesk.policy import start_files
from holodesk.policy.start_files import Recording, read_ahead

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="Linux only (posix_fadvise, /proc)")


def _hub_like(tmp_path: Path) -> tuple[Path, Path]:
    """A hub-cache-shaped checkpoint (snapshot links to blobs) and the blob its weight file links to."""
    blob = tmp_path / "blobs" / "0123abcd"
    blob.parent.mkdir()
    blob.write_bytes(b"w" * 4096)
    snapshot = tmp_path / "snapshots" / "main"
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to(blob)
    (snapshot / "config.json").write_text("{}")
    return snapshot, blob


def test_a_recording_lists_mapped_libraries_then_opened_files_and_none_of_the_checkpoint(tmp_path: Path) -> None:
    snapshot, blob = _hub_like(tmp_path)
    other = tmp_path / "tokenizer-cache.bin"
    other.write_bytes(b"t" * 100)
    with Recording() as recording:
        other.read_bytes()
        (snapshot / "config.json").read_text()
        (snapshot / "model.safetensors").read_bytes()
        blob.read_bytes()  # the weights by their blob path too
    after = tmp_path / "after.txt"
    after.write_text("x")
    after.read_text()  # after the recording: not listed
    kept = tmp_path / "state" / "start-files.json"
    files = recording.save(exclude=snapshot, path=kept)

    assert json.loads(kept.read_text()) == {"files": files}
    assert str(other) in files and str(after) not in files
    assert not any(f.startswith(str(snapshot)) or os.path.realpath(f) == str(blob) for f in files)
    libraries = [i for i, f in enumerate(files) if ".so" in Path(f).name]  # this process maps Python's own
    assert libraries and max(libraries) < files.index(str(other))  # mapped files first
    assert len(files) == len(set(files)) and all(os.path.isfile(f) for f in files)


def test_the_list_stops_at_its_byte_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = [tmp_path / f"f{i}" for i in range(4)]
    for name in names:
        name.write_bytes(b"x" * 1000)
    monkeypatch.setattr(start_files, "_mapped", list)  # no mapped files: only those opened count
    monkeypatch.setattr(start_files, "MAX_BYTES", 2500)
    with Recording() as recording:
        for name in names:
            name.read_bytes()
    assert recording.files(exclude=tmp_path / "no-checkpoint") == [str(names[0]), str(names[1])]


def test_read_ahead_asks_for_each_listed_file_that_still_exists(tmp_path: Path) -> None:
    present = [tmp_path / "a.so", tmp_path / "b.pyc"]
    present[0].write_bytes(b"a" * 5000)
    present[1].write_bytes(b"b" * 300)
    kept = tmp_path / "start-files.json"
    kept.write_text(json.dumps({"files": [str(present[0]), str(tmp_path / "gone.pyc"), str(present[1])]}))
    thread = read_ahead(kept)
    assert thread is not None
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert (thread.listed, thread.advised, thread.bytes) == (3, 2, 5300)


def test_read_ahead_without_a_list_or_with_a_broken_one_reads_nothing(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    assert read_ahead(tmp_path / "none.json") is None  # the first start: no warning
    broken = tmp_path / "broken.json"
    for text in ("{not json", json.dumps({"files": "lib.so"}), json.dumps(["lib.so"])):
        broken.write_text(text)
        with caplog.at_level(logging.WARNING, logger="holodesk.policy.start_files"):
            assert read_ahead(broken) is None
        assert "reads without it" in caplog.text
        caplog.clear()


def test_a_list_that_cannot_be_written_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the folder should be")
    with Recording() as recording, caplog.at_level(logging.WARNING, logger="holodesk.policy.start_files"):
        files = recording.save(exclude=tmp_path / "none", path=blocker / "start-files.json")
    assert files and "could not keep" in caplog.text
