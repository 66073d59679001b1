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


@pytest.fixture(autouse=True)
def _first_load_of_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test is a process's first load (a list is kept once a process: start_files._SAVED)."""
    monkeypatch.setattr(start_files, "_SAVED", False)


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


def _real(files: list[str]) -> set[str]:
    return {os.path.realpath(f) for f in files}


def test_a_recording_lists_mapped_libraries_then_opened_files_and_none_of_the_checkpoint(tmp_path: Path) -> None:
    snapshot, blob = _hub_like(tmp_path)
    other = tmp_path / "tokenizer-cache.json"
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
    assert not any(f.startswith(str(snapshot)) for f in files) and os.path.realpath(blob) not in _real(files)
    libraries = [i for i, f in enumerate(files) if ".so" in Path(f).name]  # this process maps Python's own
    assert libraries and max(libraries) < files.index(str(other))  # mapped files first
    assert len(files) == len(set(files)) and all(os.path.isfile(f) for f in files)


def test_the_list_keeps_to_its_byte_limits_and_leaves_out_weights(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that would pass the total is left out, not the end of the list; weight suffixes and files over the
    per-file limit never go in; nor do files opened for writing."""
    sizes = {"a.pyc": 1000, "big.so": 2000, "c.pyc": 1000, "huge.cache": 1600, "other.safetensors": 10,
             "tok.bin": 10}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x" * size)
    monkeypatch.setattr(start_files, "_mapped", list)  # no mapped files: only those opened count
    monkeypatch.setattr(start_files, "MAX_BYTES", 2500)
    monkeypatch.setattr(start_files, "MAX_FILE_BYTES", 1500)
    with Recording() as recording:
        for name in sizes:
            (tmp_path / name).read_bytes()
        (tmp_path / "written.log").write_text("w")  # opened for writing: not read by a start
    assert recording.files(exclude=tmp_path / "no-checkpoint") == [str(tmp_path / "a.pyc"), str(tmp_path / "c.pyc")]


def test_a_hub_blob_copied_instead_of_linked_is_left_out(tmp_path: Path) -> None:
    """Where the hub cache copies blobs into the snapshot (no symlinks), the blob is another file: the blobs folder
    beside the snapshots is left out as a whole."""
    blob = tmp_path / "repo" / "blobs" / "fedcba98"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"w" * 100)
    snapshot = tmp_path / "repo" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "model-00001-of-00002").write_bytes(blob.read_bytes())  # a copy, no weight suffix
    with Recording() as recording:
        blob.read_bytes()
        (snapshot / "model-00001-of-00002").read_bytes()
    files = recording.files(exclude=snapshot)
    assert str(blob) not in files and not any(f.startswith(str(snapshot)) for f in files)


def test_the_read_ahead_threads_own_opens_are_not_recorded(tmp_path: Path) -> None:
    """Else each list would carry the last one's files on, stale ones included."""
    stale = tmp_path / "stale-cache-entry"
    stale.write_bytes(b"s")
    kept = tmp_path / "start-files.json"
    kept.write_text(json.dumps({"files": [str(stale)]}))
    with Recording() as recording:
        thread = read_ahead(kept)
        assert thread is not None
        thread.join(timeout=30)
        assert thread.advised == 1
    assert str(stale) not in recording.opened


def test_only_the_first_successful_load_of_a_process_keeps_a_list(tmp_path: Path) -> None:
    """A later load finds the runtime imported and opens far fewer files: its list would replace a better one."""
    first, second = tmp_path / "first.pyc", tmp_path / "second.pyc"
    first.write_bytes(b"1")
    second.write_bytes(b"2")
    kept = tmp_path / "start-files.json"
    with Recording() as recording:
        first.read_bytes()
    assert str(first) in recording.save(exclude=tmp_path / "none", path=kept)
    with Recording() as later:
        second.read_bytes()
    assert later.save(exclude=tmp_path / "none", path=kept) == []
    files = json.loads(kept.read_text())["files"]
    assert str(first) in files and str(second) not in files


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


def test_keeping_the_list_never_fails_the_load(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A list that cannot be written, or files that cannot be listed, are logged: the load that just succeeded
    stands."""
    blocker = tmp_path / "state"
    blocker.write_text("a file where the folder should be")
    with Recording() as recording, caplog.at_level(logging.WARNING, logger="holodesk.policy.start_files"):
        assert recording.save(exclude=tmp_path / "none", path=blocker / "start-files.json") == []
    assert "could not keep" in caplog.text
    caplog.clear()

    def unreadable() -> list[str]:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "a mapped path that is not UTF-8")

    monkeypatch.setattr(start_files, "_mapped", unreadable)
    with Recording() as recording, caplog.at_level(logging.WARNING, logger="holodesk.policy.start_files"):
        assert recording.save(exclude=tmp_path / "none", path=tmp_path / "start-files.json") == []
    assert "UnicodeDecodeError" in caplog.text and not (tmp_path / "start-files.json").exists()


def test_doctor_says_what_the_next_start_reads_ahead(tmp_path: Path) -> None:
    kept = tmp_path / "start-files.json"
    assert start_files.describe(kept).startswith("none kept yet")
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"l" * 1500)
    kept.write_text(json.dumps({"files": [str(lib), str(tmp_path / "gone.pyc")]}))
    assert start_files.describe(kept).startswith("1 files (1.5 kB) the last start read")
    kept.write_text("{")
    assert start_files.describe(kept).startswith("unreadable")
