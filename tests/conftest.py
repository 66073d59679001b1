"""Shared fixtures: real Xvfb servers for tests marked ``gui``.

Nothing here starts a display unless a test asks for one:

* ``xvfb``       — the session's 1920x1080x24 Xvfb server, with DISPLAY/XAUTHORITY set for this test.
* ``make_xvfb``  — factory ``make_xvfb(width, height, depth=24)`` starting an extra server for this test
                   (killed afterwards), with DISPLAY/XAUTHORITY set to it.
* ``xvfb_session`` — the session server object without touching the environment.
* ``desktop`` / ``make_desktop`` — a window manager and third-party programs on those servers
                   (tests/helpers/desktop.py).

Servers pick a free display number from :100 upward (lock file + socket check, and Xvfb's own lock
decides races between parallel test processes), run with ``-nolisten tcp -noreset``, get an empty
Xauthority file, and are considered ready when ``xdpyinfo`` answers. Tests that use these fixtures are
marked ``gui`` automatically. If Xvfb is not installed they are skipped, unless ``CI`` is set, where a
missing Xvfb is an error.

Note: pyautogui connects to ``$DISPLAY`` once, at import; tests driving it must use ``xvfb`` (the
session server), not ``make_xvfb``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.processes import stop_process

pytest_plugins = ("tests.helpers.desktop",)  # the ``desktop`` / ``make_desktop`` fixtures

FIRST_DISPLAY = 100
LAST_DISPLAY = 499
READY_TIMEOUT_S = 15.0


@dataclass
class XvfbServer:
    """A running Xvfb server.

    Attributes:
        number: display number (``DISPLAY=":<number>"``).
        width, height, depth: screen 0 geometry in pixels / bits per pixel.
        xauthority: path of the (empty) Xauthority file clients use.
        process: the Xvfb process.
        log_path: Xvfb's stdout+stderr.
    """

    number: int
    width: int
    height: int
    depth: int
    xauthority: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    _extra: list[Path] = field(default_factory=list)

    @property
    def display(self) -> str:
        return f":{self.number}"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """A copy of ``base`` (default ``os.environ``) pointing DISPLAY/XAUTHORITY at this server and
        with Wayland variables removed."""
        env = dict(os.environ if base is None else base)
        env["DISPLAY"] = self.display
        env["XAUTHORITY"] = str(self.xauthority)
        env.pop("WAYLAND_DISPLAY", None)
        env["XDG_SESSION_TYPE"] = "x11"
        return env

    def run(self, *args: str, check: bool = True, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
        """Run an X client (xrandr, xdotool, xsetroot ...) against this server."""
        return subprocess.run(list(args), env=self.env(), check=check, capture_output=True, text=True,
                              timeout=timeout)

    def stop(self) -> None:
        stop_process(self.process)
        for path in [self.xauthority, self.log_path, *self._extra]:
            path.unlink(missing_ok=True)


def _display_taken(n: int) -> bool:
    return Path(f"/tmp/.X{n}-lock").exists() or Path(f"/tmp/.X11-unix/X{n}").exists()


def _lock_pid(n: int) -> int | None:
    try:
        return int(Path(f"/tmp/.X{n}-lock").read_text().strip())
    except (OSError, ValueError):
        return None


def _socket_answers(n: int) -> bool:
    path = f"/tmp/.X11-unix/X{n}"
    if not os.path.exists(path):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(path)
        except OSError:
            return False
    return True


def _ready(server: XvfbServer) -> bool:
    if not _socket_answers(server.number) or _lock_pid(server.number) != server.process.pid:
        return False
    if shutil.which("xdpyinfo"):
        res = subprocess.run(["xdpyinfo"], env=server.env(), capture_output=True, timeout=5)
        return res.returncode == 0
    return True


def start_xvfb(width: int = 1920, height: int = 1080, depth: int = 24) -> XvfbServer:
    """Start Xvfb on the first free display number >= :100 and wait until it accepts clients.

    Raises:
        RuntimeError: Xvfb failed for a reason other than a taken display, or no free number.
    """
    exe = shutil.which("Xvfb")
    if exe is None:
        message = ("Xvfb is not installed (apt-get install xvfb); gui tests need it")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    for n in range(FIRST_DISPLAY, LAST_DISPLAY + 1):
        if _display_taken(n):
            continue
        fd, auth = tempfile.mkstemp(prefix=f"holodesk-xauth-{n}-")
        os.close(fd)  # an empty Xauthority file is enough for local clients
        log_fd, log_name = tempfile.mkstemp(prefix=f"holodesk-xvfb-{n}-", suffix=".log")
        proc = subprocess.Popen(
            [exe, f":{n}", "-screen", "0", f"{width}x{height}x{depth}", "-nolisten", "tcp", "-noreset"],
            stdout=log_fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        os.close(log_fd)
        server = XvfbServer(n, width, height, depth, Path(auth), proc, Path(log_name))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if _ready(server):
                return server
            time.sleep(0.05)
        log_text = server.log_path.read_text(errors="replace")
        server.stop()
        if "already active" in log_text or "lock" in log_text.lower():
            continue  # another process won the race for this number
        raise RuntimeError(f"Xvfb :{n} did not become ready (exit {proc.returncode}):\n{log_text[-2000:]}")
    raise RuntimeError(f"no free X display number in :{FIRST_DISPLAY}..:{LAST_DISPLAY}")


def _set_env(monkeypatch: pytest.MonkeyPatch, server: XvfbServer) -> None:
    monkeypatch.setenv("DISPLAY", server.display)
    monkeypatch.setenv("XAUTHORITY", str(server.xauthority))
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("XDG_SESSION_TYPE", "x11")


@pytest.fixture(scope="session")
def xvfb_session() -> Iterator[XvfbServer]:
    """The session's 1920x1080x24 Xvfb server (environment untouched; use ``xvfb`` in tests)."""
    server = start_xvfb(1920, 1080, 24)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def xvfb(xvfb_session: XvfbServer, monkeypatch: pytest.MonkeyPatch) -> XvfbServer:
    """The shared 1920x1080x24 Xvfb server with DISPLAY/XAUTHORITY set for this test."""
    if xvfb_session.process.poll() is not None:
        pytest.fail(f"the session Xvfb {xvfb_session.display} died; see {xvfb_session.log_path}")
    _set_env(monkeypatch, xvfb_session)
    return xvfb_session


@pytest.fixture
def make_xvfb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., XvfbServer]]:
    """Factory ``make_xvfb(width, height, depth=24) -> XvfbServer`` for other screen sizes.

    The newest server becomes DISPLAY for the rest of the test; all are killed afterwards.
    """
    servers: list[XvfbServer] = []

    def make(width: int = 1920, height: int = 1080, depth: int = 24) -> XvfbServer:
        server = start_xvfb(width, height, depth)
        servers.append(server)
        _set_env(monkeypatch, server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.stop()


_DISPLAY_FIXTURES = {"xvfb", "make_xvfb", "xvfb_session", "desktop", "make_desktop"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses a display fixture as ``gui`` (so ``-m "not gui"`` deselects it)."""
    for item in items:
        if _DISPLAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.gui)


@pytest.fixture(autouse=True)
def _executors_end_their_episode(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every PyAutoGUIExecutor a test makes gives back what it held between steps (the X11 typer's
    keyboard bindings) when the test ends, as a session does when an episode ends: the X servers are
    shared between tests, and their few spare keycodes must not run out."""
    from holodesk.control.pyautogui_executor import PyAutoGUIExecutor

    made: list[PyAutoGUIExecutor] = []
    original = PyAutoGUIExecutor.__init__

    def init(self: PyAutoGUIExecutor, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(PyAutoGUIExecutor, "__init__", init)
    yield
    for executor in made:
        executor.end_episode()


@pytest.fixture(autouse=True, scope="session")
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What the code under test keeps in the XDG state folder (e.g. the static decoder's record for
    doctor, kernels.record_decoder) goes to a temporary folder, not the user's."""
    old = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if old is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = old
