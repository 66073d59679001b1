"""Episode records: frames are written off the loop's thread, but no line ever names a missing frame."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from holodesk.core.geometry import Frame, Monitor
from holodesk.errors import HolodeskError
from holodesk.session.episode import EPISODE_FILE, EpisodeRecorder, load_episode


def frame(value: int = 7) -> Frame:
    return Frame(np.full((540, 960, 3), value, np.uint8), Monitor(1, 0, 0, 960, 540))


def test_a_line_is_written_only_after_the_frames_queued_before_it(tmp_path: Path) -> None:
    rec = EpisodeRecorder(tmp_path, "task")
    names = [rec.save_frame(i, frame(i)) for i in range(3)]
    rec.write({"type": "step", "step": 0, "frame": names[0]})
    assert all((rec.path / n).is_file() for n in names)  # written by the time the line exists
    rec.close({"status": "finished"})
    ep = load_episode(rec.path)
    assert ep.status == "finished" and ep.steps[0]["frame"] == "step-000.png"
    from PIL import Image

    assert np.asarray(Image.open(rec.path / names[2]))[0, 0].tolist() == [2, 2, 2]


def test_a_frame_that_cannot_be_written_is_reported_and_the_end_record_says_so(tmp_path: Path) -> None:
    rec = EpisodeRecorder(tmp_path, "task")
    (rec.path / "step-000.png").mkdir()  # a folder where the file should go: the write fails
    rec.save_frame(0, frame())
    with pytest.raises(HolodeskError, match=r"cannot write episode frames.*step-000\.png"):
        rec.write({"type": "step", "step": 0})
    rec.save_frame(1, frame())
    (rec.path / "step-002.png").mkdir()
    rec.save_frame(2, frame())
    rec.close({"status": "failed"})
    end = json.loads((rec.path / EPISODE_FILE).read_text().splitlines()[-1])
    assert end["type"] == "end" and "step-002.png" in end["frame_error"]
    assert (rec.path / "step-001.png").is_file()


def test_episodes_are_private_folders_and_files(tmp_path: Path) -> None:
    """Screenshots of the desktop and typed text: only the user may read them, whatever the umask allows."""
    import os
    import stat

    previous = os.umask(0o022)
    try:
        rec = EpisodeRecorder(tmp_path / "episodes", "task")
        name = rec.save_frame(0, frame())
        rec.write({"type": "step", "step": 0, "frame": name})
        rec.close({"status": "finished"})
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "episodes").stat().st_mode) == 0o700
    assert stat.S_IMODE(rec.path.stat().st_mode) == 0o700
    for path in (rec.path / EPISODE_FILE, rec.path / name):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
