"""The free memory the C allocator keeps goes back to the system when a task ends (holodesk.session.memory): a
real glibc process, resident memory read from /proc; and the session calls it at the end of every run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from holodesk.session import loop
from holodesk.session.memory import release_free_memory
from holodesk.session.state import State
from tests.session.test_loop import A, Q, answer, click, make_session

APP = Path(__file__).resolve().parents[2] / "app"

ARENAS = r"""
import ctypes, sys, threading
sys.path.insert(0, sys.argv[1])
from holodesk.session.memory import release_free_memory

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
FRAME, THREADS, FRAMES = 3 * 2**20, 4, 12

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

libc.free(libc.malloc(FRAME))  # a freed mapped block: blocks of its size now come from the arenas, as in the app
kept, start = [], threading.Barrier(THREADS)

def task():
    start.wait()  # the threads overlap: several arenas
    frames = []
    for _ in range(FRAMES):
        frames.append(libc.malloc(FRAME))
        ctypes.memset(frames[-1], 1, FRAME)
        kept.append(libc.malloc(64))  # a live small block after each frame: the freed frames are not at a heap's top
    for f in frames:
        libc.free(f)

threads = [threading.Thread(target=task) for _ in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
before = rss_mib()
ran = release_free_memory()
print(ran, before, rss_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator (Linux)")
def test_the_free_frames_kept_by_every_arena_go_back_to_the_system() -> None:
    """Four threads each free twelve frame-sized blocks, each followed by a small live block (so the allocator keeps
    them, as it kept the app's frames); release_free_memory() gives them back: resident memory falls by most of the
    4 x 12 x 3 MiB."""
    res = subprocess.run([sys.executable, "-c", ARENAS, str(APP)], capture_output=True, text=True, timeout=120,
                         check=True)
    ran, before, after = res.stdout.split()
    freed = 4 * 12 * 3
    assert ran == "True" and float(before) - float(after) >= 0.75 * freed, res.stdout


def test_every_run_gives_the_free_memory_back_after_its_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that finishes and one that the approval stops: each gives the free memory back once, after its episode
    record is closed."""
    calls: list[bool] = []
    session, _spy, _executor, _ = make_session([click(1, 1), answer("ok"), click(2, 2)], [A, Q], tmp_path)
    real_end = session._end

    def end(result: object) -> None:
        real_end(result)  # type: ignore[arg-type]
        calls.append(False)

    monkeypatch.setattr(session, "_end", end)
    monkeypatch.setattr(loop, "release_free_memory", lambda: calls.append(True) or True)
    assert session.run("first").status is State.FINISHED
    assert calls == [False, True]
    assert session.run("second").status is State.STOPPED
    assert calls == [False, True, False, True]


def test_release_free_memory_runs_here() -> None:
    """This machine's C library is glibc (the CI's and the desktop's): the call is made."""
    assert release_free_memory() is sys.platform.startswith("linux")
