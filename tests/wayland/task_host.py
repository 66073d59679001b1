"""One Holodesk process running tasks in a row on the desktop of its environment, built as the tray app and
``holodesk mcp`` build each task (:func:`holodesk.session.factory.build_session` with the real capture and
executor factories), for ``tests/wayland/test_lived_in.py``.

``python -m tests.wayland.task_host EPISODES SCRIPT...``: one task per script file (a scripted policy's
replies), in order; every proposed action is approved by :func:`approve_everything` (the stand-in for the
user pressing Approve: the overlay that asks cannot be answered from here). After each task one JSON line
goes to stdout: ``{"task", "status", "reason", "fds", "threads", "rss_kb"}`` (open file descriptors, native
threads of the process and its resident memory, from ``/proc/self``); the next task starts when a line
arrives on stdin, so the caller can check each task's effect before the next one acts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.factory import build_session
from holodesk.settings import load_settings


def approve_everything(request: ApprovalRequest) -> ApprovalResponse:
    """The user pressing Approve on every step; ``approved KIND`` goes to stderr for the caller."""
    print(f"approved {request.proposal.action.kind}", file=sys.stderr, flush=True)
    return ApprovalResponse(Decision.APPROVE)


def process_figures() -> dict[str, int]:
    """``{"fds", "threads", "rss_kb"}`` of this process."""
    status = Path("/proc/self/status").read_text(encoding="utf-8")
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return {"fds": len(os.listdir("/proc/self/fd")), "threads": len(os.listdir("/proc/self/task")), "rss_kb": rss}


def main(episodes: Path, scripts: list[Path]) -> int:
    for task, script in enumerate(scripts, start=1):
        if task > 1 and not sys.stdin.readline():
            return 1
        settings = load_settings().model_copy(update={"policy": "script", "script_file": script})
        try:
            session = build_session(settings, ApprovalPolicy("step", approve_everything), episodes_dir=episodes)
            try:
                result = session.run(f"task {task}")
            finally:
                session.close()  # as the app's task worker does
            status, reason = result.status.value, result.reason
        except Exception as exc:  # the test reads the failure from the line
            status, reason = "error", f"{type(exc).__name__}: {exc}"
        print(json.dumps({"task": task, "status": status, "reason": reason, **process_figures()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), [Path(a) for a in sys.argv[2:]]))
