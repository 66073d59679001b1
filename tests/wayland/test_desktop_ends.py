"""A dead desktop is noticed: GNOME's compositor (the private headless mutter) is killed while a task of a
Holodesk process waits between two clicks; the task ends at once with "the desktop session ended" in its
reason and end record, and nothing is proposed on a frame from before (the scripted second click never
reaches the record).

Its own mutter session: killing the compositor ends it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from holodesk.session.episode import list_episodes, load_episode
from tests.helpers.mutter import MutterSession, mutter_session
from tests.helpers.processes import stop_process
from tests.wayland.test_lived_in import host, next_task, write_script
from tests.wayland.test_wayland_cli import point

pytestmark = [pytest.mark.wayland, pytest.mark.e2e]


@pytest.fixture
def doomed() -> Iterator[MutterSession]:
    """A private headless mutter session of this test alone."""
    from tests.wayland.conftest import _require_programs

    _require_programs()
    with mutter_session() as session:
        yield session


def test_compositor_killed_mid_task_ends_the_task_at_once(doomed: MutterSession, tmp_path: Path) -> None:
    app = doomed.start_app()
    button = {"tool_name": "click", **point(doomed, app, "button")}
    script = write_script(tmp_path / "steps.jsonl", [button, {"tool_name": "wait", "seconds": 30}, button,
                                                     {"tool_name": "answer", "text": "never reached"}])
    proc = host(doomed, tmp_path, [script, script])
    try:
        app.wait_state(lambda s: s["clicks"] == 1, timeout_s=60)
        assert doomed.compositor is not None
        deadline = time.monotonic() + 60
        while "approved wait" not in (tmp_path / "host.log").read_text(encoding="utf-8"):  # the 30 s wait runs
            assert time.monotonic() < deadline, "the task never came to its wait"
            time.sleep(0.05)
        t0 = time.monotonic()
        doomed.compositor.kill()
        outcome = next_task(proc, tmp_path)
        elapsed = time.monotonic() - t0
        assert proc.stdin is not None
        proc.stdin.write("next\n")  # the process's next task: told at once, no wait for frames
        proc.stdin.flush()
        t1 = time.monotonic()
        later = next_task(proc, tmp_path)
        later_elapsed = time.monotonic() - t1
    finally:
        stop_process(proc)
    # The desktop's end stopped the task: its stop request ended the wait at once.
    assert outcome["status"] == "stopped", outcome
    assert outcome["reason"].startswith("stopped by the desktop (the desktop session ended: "), outcome
    assert elapsed < 5, f"the task ended {elapsed:.1f} s after the compositor died (the wait was 30 s)"
    assert later["status"] == "error" and "the desktop session ended" in later["reason"], later
    assert later_elapsed < 5, f"the next task took {later_elapsed:.1f} s to fail"
    ep = load_episode(list_episodes(tmp_path / "episodes")[0])
    assert ep.end is not None and "the desktop session ended" in ep.end["reason"], ep.end
    kinds = [s.get("action", {}).get("kind") for s in ep.steps]
    assert kinds == ["click", "wait"], kinds  # the second click was never proposed
