"""The disposable desktop an evaluation runs on: Xvfb at a fixed size, a private D-Bus session bus and the
openbox window manager, started by the harness itself and stopped at the end.

Nothing here touches the user's own display: the X server is a new one (``Xvfb -displayfd`` picks a free
display number), every program started on it gets private XDG directories and ``GSETTINGS_BACKEND=memory``,
and publishes its accessibility tree on the desktop's private session bus (:data:`ACCESSIBLE_ENV`).
Between tasks :meth:`EvalDesktop.reset` stops every program a task started and proves the desktop fresh:
the window manager's client list (``_NET_CLIENT_LIST``) is empty again.

System packages: xvfb, openbox, dbus, x11-utils (xprop, xwininfo), xdotool.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from holodesk.errors import HolodeskError

SCREEN = (1280, 800)
"""Width and height of the evaluation screen, in pixels (one monitor, 96 DPI)."""
START_TIMEOUT_S = 30.0
WINDOW_TIMEOUT_S = 30.0
Rect = tuple[int, int, int, int]
T = TypeVar("T")


ACCESSIBLE_ENV = {"NO_AT_BRIDGE": "0", "GTK_A11Y": "atspi"}
"""Variables under which GTK 3 and GTK 4 programs publish their accessibility tree (AT-SPI) on the desktop's
session bus, as on a user's desktop: the autopilot's element lookup and the grounding set read it."""


class EvalDesktopError(HolodeskError):
    """The evaluation desktop could not be started, or a task's program did not come up."""


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``predicate()`` until it returns a truthy value and return it.

    Raises:
        EvalDesktopError: still falsy after ``timeout`` seconds (the message names ``what``).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise EvalDesktopError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def stop_process(proc: subprocess.Popen[Any], timeout: float = 5.0) -> None:
    """Terminate ``proc`` (its whole process group: it was started in a new session), kill it after ``timeout`` s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, 15)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=timeout)


def require(*programs: str) -> None:
    """Raise :class:`EvalDesktopError` naming the programs that are not installed."""
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        raise EvalDesktopError(f"not installed: {' '.join(missing)}",
                               hint="Install them (bash installers/test.sh installs every program the suite uses).")


@dataclass
class Program:
    """A program a task started on the desktop, with its top-level window (0 until it is found)."""

    argv: list[str]
    process: subprocess.Popen[bytes]
    stdout_path: Path
    window: int = 0

    def stdout(self) -> str:
        """What the program printed on stdout so far."""
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")


@dataclass
class EvalDesktop:
    """A running disposable X desktop. Start with :meth:`start`; call :meth:`stop` at the end.

    Attributes:
        display: the X display name (":N").
        width, height: the screen size in pixels.
        directory: scratch folder of this desktop (XDG directories, program output).
    """

    display: str
    width: int
    height: int
    directory: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    programs: list[Program] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, width: int = SCREEN[0], height: int = SCREEN[1], directory: Path | None = None) -> EvalDesktop:
        """Start Xvfb (``width`` x ``height`` x 24, 96 DPI), a D-Bus session bus and openbox.

        Raises:
            EvalDesktopError: a program is missing or did not come up in time.
        """
        require("Xvfb", "openbox", "dbus-daemon", "xprop", "xwininfo", "xdotool")
        folder = directory or Path(tempfile.mkdtemp(prefix="holodesk-eval-desktop-"))
        folder.mkdir(parents=True, exist_ok=True)
        read_fd, write_fd = os.pipe()
        with open(folder / "xvfb.log", "wb") as xvfb_log:
            xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{width}x{height}x24",
                                     "-dpi", "96", "-nolisten", "tcp", "-noreset"], pass_fds=(write_fd,),
                                    stdout=subprocess.DEVNULL, stderr=xvfb_log, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            number = pipe.readline().strip()
        desk = cls(f":{number.decode()}", width, height, folder, [xvfb])
        if not number:
            desk.stop()
            raise EvalDesktopError(f"Xvfb did not start: {(folder / 'xvfb.log').read_text(errors='replace')[-500:]}")
        try:
            desk._start_session()
        except BaseException:
            desk.stop()
            raise
        return desk

    def _start_session(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WAYLAND_", "DBUS_SESSION"))}
        env.update(DISPLAY=self.display, XDG_SESSION_TYPE="x11", GSETTINGS_BACKEND="memory", GDK_BACKEND="x11",
                   LANG="C.UTF-8", LC_ALL="C.UTF-8", **ACCESSIBLE_ENV)
        env.pop("XAUTHORITY", None)
        for key, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache"), ("XDG_DATA_HOME", "data"),
                         ("XDG_RUNTIME_DIR", "runtime"), ("HOME", "home")):
            path = self.directory / sub
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            env[key] = str(path)
        bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1", "--nopidfile"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                               start_new_session=True)
        self.processes.append(bus)
        assert bus.stdout is not None
        address = bus.stdout.readline().decode().strip()
        if not address:
            raise EvalDesktopError("dbus-daemon --session printed no address")
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        self.env = env
        wm = subprocess.Popen(["openbox", "--sm-disable"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
        self.processes.append(wm)
        wait_for(lambda: self._root_has("_NET_SUPPORTING_WM_CHECK") and wm.poll() is None, START_TIMEOUT_S,
                 f"openbox on {self.display}")

    def _root_has(self, atom: str) -> bool:
        res = subprocess.run(["xprop", "-root", atom], env=self.env, capture_output=True, text=True, timeout=10)
        return res.returncode == 0 and "window id #" in res.stdout

    def run(self, *argv: str, timeout: float = 15.0) -> str:
        """Run an X client (xdotool, xprop ...) on this desktop; its stdout (raises on failure)."""
        res = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise EvalDesktopError(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()[-300:]}")
        return res.stdout

    def client_windows(self) -> list[int]:
        """The top-level windows the window manager manages (``_NET_CLIENT_LIST`` of the root window)."""
        out = self.run("xprop", "-root", "_NET_CLIENT_LIST")
        return [int(w, 16) for w in re.findall(r"0x[0-9a-fA-F]+", out)]

    def window_title(self, window: int) -> str:
        """The window's title as the window manager shows it (``xdotool getwindowname``, UTF-8)."""
        return self.run("xdotool", "getwindowname", str(window)).rstrip("\n")

    def geometry(self, window: int) -> Rect:
        """The window's client area (x, y, width, height) in root pixels."""
        out = self.run("xwininfo", "-id", str(window))
        values = {k: int(v) for k, v in re.findall(r"(Absolute upper-left [XY]|Width|Height):\s+(-?\d+)", out)}
        return (values["Absolute upper-left X"], values["Absolute upper-left Y"], values["Width"], values["Height"])

    def launch(self, argv: list[str], *, window_class: str | None = None, window_name: str | None = None,
               cwd: Path | None = None, timeout: float = WINDOW_TIMEOUT_S) -> Program:
        """Start ``argv`` and wait until its window (found by WM_CLASS / title regular expression, else by
        ``_NET_WM_PID``) is viewable and no longer moving.

        Raises:
            EvalDesktopError: not installed, exited before showing a window, or no window in ``timeout`` s.
        """
        require(argv[0])
        out_path = self.directory / f"{Path(argv[0]).name}-{time.monotonic_ns()}.out"
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
        program = Program(list(argv), proc, out_path)
        self.programs.append(program)
        args = (["--class", window_class] if window_class else ["--name", window_name] if window_name
                else ["--pid", str(proc.pid)])

        def found() -> int:
            if proc.poll() is not None:
                raise EvalDesktopError(f"{argv[0]} exited with {proc.returncode} before showing a window: "
                                       f"{program.stdout()[-500:]}")
            res = subprocess.run(["xdotool", "search", "--onlyvisible", *args], env=self.env, capture_output=True,
                                 text=True, timeout=15)
            ids = [int(line) for line in res.stdout.split() if line.isdigit()]
            return ids[-1] if ids else 0

        program.window = wait_for(found, timeout, f"a window of {argv[0]}", interval=0.1)
        self.wait_placed(program.window, timeout)
        return program

    def wait_placed(self, window: int, timeout: float = WINDOW_TIMEOUT_S) -> Rect:
        """Wait until the window's geometry is the same in three polls 0.1 s apart; return it."""
        seen: list[Rect] = []

        def stable() -> Rect | None:
            seen.append(self.geometry(window))
            return seen[-1] if len(seen) >= 3 and len(set(seen[-3:])) == 1 else None

        return wait_for(stable, timeout, f"window {window} to stop moving", interval=0.1)

    def place(self, window: int, x: int, y: int, width: int, height: int) -> Rect:
        """Move and resize the window through the window manager; wait until it stays put."""
        self.run("xdotool", "windowsize", str(window), str(width), str(height))
        self.run("xdotool", "windowmove", str(window), str(x), str(y))
        return self.wait_placed(window)

    def activate(self, window: int, timeout: float = WINDOW_TIMEOUT_S) -> None:
        """Raise and focus the window; wait until it has the focus."""
        self.run("xdotool", "windowactivate", str(window))

        def focused() -> bool:
            res = subprocess.run(["xdotool", "getactivewindow"], env=self.env, capture_output=True, text=True,
                                 timeout=10)
            return res.stdout.strip() == str(window)

        wait_for(focused, timeout, f"window {window} ({self.title_or_id(window)}) to get the focus", interval=0.1)

    def title_or_id(self, window: int) -> str:
        try:
            return self.window_title(window) or str(window)
        except EvalDesktopError:
            return str(window)

    def reset(self, timeout: float = WINDOW_TIMEOUT_S) -> None:
        """Stop every program started since the last reset and wait until the window manager manages no
        window any more, with the pointer back at the screen's centre: the next task starts on a fresh desktop.

        Raises:
            EvalDesktopError: a window is still there after ``timeout`` s.
        """
        for program in reversed(self.programs):
            stop_process(program.process)
        self.programs.clear()
        wait_for(lambda: not self.client_windows(), timeout, "every window of the last task to close", interval=0.1)
        self.run("xdotool", "mousemove", str(self.width // 2), str(self.height // 2))

    def stop(self) -> None:
        """Stop the programs, openbox, the bus and Xvfb."""
        for program in reversed(self.programs):
            stop_process(program.process)
        for proc in reversed(self.processes):
            stop_process(proc)
        self.programs.clear()
        self.processes.clear()
