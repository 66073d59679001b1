"""Giving the memory the C allocator keeps back to the system when a task ends.

A task makes frame-sized temporaries (a 1280x800 RGB frame is 2.9 MiB: the grab's raw image, its RGB copy, the
settle comparison) on several threads (the session's worker, the episode writer, the channel's threads). glibc's
allocator serves each thread from one of its arenas (up to 8 per core) and, once it has freed one block of a size,
no longer maps blocks of that size on their own (its mapping threshold rises to it): each arena a frame-handling
thread used keeps a few freed frames. Which arena a task's new threads get depends on how the threads of the task
before were scheduled, so a long-running process's resident memory rose in steps of one frame, task after task
under CPU load (the X11 soak: up to 34 MiB from task 5 to 25), with no object kept. ``malloc_trim(0)`` gives the
free pages of every arena back to the system.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
import time
from typing import Any

log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``int malloc_trim(size_t pad)``, or None where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):  # musl and other C libraries have no malloc_trim
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Give the free memory glibc's allocator keeps in its arenas back to the system (``malloc_trim(0)``: every
    arena's whole free pages). Nothing where the C library is not glibc (macOS, Windows, musl). It walks every arena
    (a few ms in the desktop app); called when a task ends, not in a step.

    Returns:
        Whether it ran.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    t0 = time.perf_counter()
    trim(0)
    log.debug("free memory given back to the system in %.1f ms", (time.perf_counter() - t0) * 1e3)
    return True
