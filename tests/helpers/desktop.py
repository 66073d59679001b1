"""Real desktops for tests: a window manager and other people's programs on a test's Xvfb.

Fixtures (registered for every test through ``pytest_plugins`` in tests/conftest.py):

* ``desktop`` — the session Xvfb (the one pyautogui is bound to, so in-process executors work) with a
  window manager running, parametrised over :data:`WINDOW_MANAGERS` (``openbox``, and ``xfwm4`` with
  its compositor on). Pick one with
  ``@pytest.mark.parametrize("desktop", ["openbox+picom"], indirect=True)``. Everything it started
  (window manager, compositor, D-Bus session bus, apps) is stopped at the end of the test.
* ``make_desktop`` — factory ``make_desktop(wm, width=1920, height=1080) -> Desktop`` on a fresh Xvfb
  of that size (for tests that run ``holodesk`` as a subprocess); stopped at the end of the test.

A :class:`Desktop`:

    def test_editor(desktop: Desktop, tmp_path: Path) -> None:
        env = desktop.env()                                   # DISPLAY, D-Bus, XDG dirs of this desktop
        editor = desktop.launch(["mousepad", "--disable-server", str(tmp_path / "a.txt")], wm_class="mousepad")
        x, y, w, h = editor.geometry()                        # client area, root pixels
        form = desktop.tk_form()                              # tests/apps/tk_form.py
        cx, cy = form.center("Submit")                        # from the form's own layout report
        ...                                                   # drive it (holodesk run ..., executor)
        assert form.result() == {"name": "...", "agree": True, "count": 0, "submitted": True}
        zen = desktop.launch(["zenity", "--entry", "--text", "Name"], name="Name|Zenity")
        assert zen.wait_exit() == 0 and zen.stdout() == "typed text\\n"

* ``Desktop.launch(argv, wm_class=..., name=..., timeout=...)`` starts a program with the desktop's
  environment and waits (bounded poll of ``xdotool search --onlyvisible``) until its window is viewable
  and its position has stopped changing (the window manager has placed it). ``wm_class``/``name`` are
  xdotool regular expressions; without either the window is found by ``_NET_WM_PID``.
* ``Desktop.tk_form(x, y)`` / ``Desktop.gtk_form(x, y)`` start tests/apps/tk_form.py (our venv's Python)
  or tests/apps/gtk_form.py (the system Python with PyGObject) and return a :class:`FormApp`.
* ``Desktop.place(app, x, y, width=None, height=None)`` moves/resizes a window through the window
  manager and waits until it stays put.
* :class:`App`: ``window`` (X id), ``geometry()``, ``activate()``, ``wait_exit(timeout)``, ``stdout()``,
  ``close()``. :class:`FormApp` adds ``layout()``, ``rects()``, ``center(name)``, ``wait_layout(pred)``
  ``wait_current()`` and ``result(timeout)`` (the JSON the form printed when submitted).
* ``Desktop.xdotool(*args)`` / ``Desktop.pointer()`` / ``Desktop.click(x, y)`` drive this display with
  xdotool (Holodesk-independent input for setting up a scene); ``Desktop.run(*argv)`` runs any other
  command (numlockx, xrandr ...) on it.
* ``Desktop.wm`` is the :class:`WindowManager` (``name``, ``compositing``); ``compositor_running(env)``
  asks the X server whether a compositing manager is running.

Without the fixtures: ``start_window_manager(env, name, log_dir) -> WindowManager`` starts one on any
display (``env["DISPLAY"]``; call ``.stop()``), e.g. on a display a test suite already owns (the UI e2e
tests do this); ``wait_until(predicate, timeout, what)`` is the bounded poll everything here uses.

Each desktop has its own D-Bus session bus (``dbus-daemon --session``), its own XDG config/cache/data
directories, ``GSETTINGS_BACKEND=memory`` and ``NO_AT_BRIDGE=1``, so GTK programs neither autolaunch a
bus nor touch the user's settings, and nothing outlives the test.

All waits are condition-based polls with generous bounds (a loaded 2-core machine).
System packages (installers/_setup.sh APT_TEST): openbox xfwm4 picom mousepad xterm zenity yad
python3-tk python3-gi gir1.2-gtk-3.0 numlockx dbus x11-utils xdotool.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers.processes import stop_process

if TYPE_CHECKING:
    from tests.conftest import XvfbServer

APPS = Path(__file__).resolve().parent.parent / "apps"
Rect = tuple[int, int, int, int]

#: Window-manager setups the ``desktop`` fixture runs every test under (xfwm4 with its compositor on).
WINDOW_MANAGERS: tuple[str, ...] = ("openbox", "xfwm4")
#: Every setup :func:`start_window_manager` knows (``openbox+picom``: openbox with the picom compositor).
ALL_WINDOW_MANAGERS: tuple[str, ...] = ("openbox", "xfwm4", "openbox+picom")

START_TIMEOUT_S = 30.0
WINDOW_TIMEOUT_S = 30.0
#: The system Python that has PyGObject (python3-gi) for tests/apps/gtk_form.py.
SYSTEM_PYTHON = "/usr/bin/python3"
ACCESSIBLE = {"NO_AT_BRIDGE": "0", "GTK_A11Y": "atspi"}
"""What a GTK program (3 or 4) needs to publish its accessibility tree on the AT-SPI bus (the desktop's own
environment turns it off)."""


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Poll ``predicate()`` until it returns a truthy value; return that value.

    Raises:
        TimeoutError: not truthy within ``timeout`` seconds (the message names ``what``).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def _require(*programs: str) -> None:
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        message = f"not installed: {' '.join(missing)} (installers/_setup.sh APT_TEST installs them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@dataclass
class WindowManager:
    """A window manager (and compositor) running on one X display.

    Attributes:
        name: one of :data:`ALL_WINDOW_MANAGERS`.
        compositing: True when a compositing manager owns ``_NET_WM_CM_S0``.
        processes: the processes started for it (stopped in reverse order by :meth:`stop`).
    """

    name: str
    compositing: bool
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    log_paths: list[Path] = field(default_factory=list)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            stop_process(proc)
        for path in self.log_paths:
            path.unlink(missing_ok=True)

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-1500:] for p in self.log_paths if p.exists())


def _root_property_window(env: dict[str, str], atom: str) -> bool:
    res = subprocess.run(["xprop", "-root", atom], env=env, capture_output=True, text=True, timeout=10)
    return res.returncode == 0 and "window id #" in res.stdout


def _selection_owned(env: dict[str, str], selection: str) -> bool:
    """True when a client owns ``selection`` on ``env["DISPLAY"]``. The X server drops an owner the
    moment its client is gone, so unlike a root-window property this is never left over from a window
    manager of an earlier test that was killed."""
    from Xlib import X, display

    conn = display.Display(env["DISPLAY"])
    try:
        owner = conn.get_selection_owner(conn.intern_atom(selection))
        return bool(owner != X.NONE and getattr(owner, "id", owner))
    finally:
        conn.close()


def compositor_running(env: dict[str, str]) -> bool:
    """True when a compositing manager owns ``_NET_WM_CM_S0`` on ``env["DISPLAY"]``."""
    return _selection_owned(env, "_NET_WM_CM_S0")


def start_window_manager(env: dict[str, str], name: str, log_dir: Path, timeout: float = START_TIMEOUT_S
                         ) -> WindowManager:
    """Start window manager ``name`` (see :data:`ALL_WINDOW_MANAGERS`) on ``env["DISPLAY"]`` and wait until
    it has announced itself (it owns the ``WM_S0`` selection and ``_NET_SUPPORTING_WM_CHECK`` is on the
    root window) and, for compositing
    setups, until the compositor owns ``_NET_WM_CM_S0``.

    Raises:
        ValueError: unknown name. RuntimeError: it exited or did not become ready in ``timeout`` s.
    """
    if name not in ALL_WINDOW_MANAGERS:
        raise ValueError(f"unknown window manager {name!r}; use one of {ALL_WINDOW_MANAGERS}")
    wm_exe, compositor = {"openbox": ("openbox", None), "xfwm4": ("xfwm4", "xfwm4"),
                          "openbox+picom": ("openbox", "picom")}[name]
    _require(wm_exe, "xprop", *([compositor] if compositor else []))
    commands: list[list[str]] = [
        {"openbox": ["openbox", "--sm-disable"],
         "xfwm4": ["xfwm4", "--compositor=on", "--sm-client-disable"]}[wm_exe]]
    if compositor == "picom":
        # Xvfb has no GL: the XRender backend; no fading so windows are final as soon as they map.
        commands.append(["picom", "--backend", "xrender", "--no-fading-openclose", "--no-fading-destroyed-argb"])
    wm = WindowManager(name=name, compositing=compositor is not None)
    try:
        for argv in commands:
            fd, log_name = tempfile.mkstemp(prefix=f"holodesk-{argv[0]}-", suffix=".log", dir=log_dir)
            wm.log_paths.append(Path(log_name))
            proc = subprocess.Popen(argv, env=env, stdout=fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            os.close(fd)
            wm.processes.append(proc)

            def ready(argv: list[str] = argv, proc: subprocess.Popen[bytes] = proc) -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(f"{argv[0]} exited with {proc.returncode}:\n{wm.log()}")
                if argv[0] == "picom" or (argv[0] == "xfwm4" and compositor == "xfwm4"):
                    return (_selection_owned(env, "WM_S0") and _root_property_window(env, "_NET_SUPPORTING_WM_CHECK")
                            if argv[0] == "xfwm4" else True) and compositor_running(env)
                # WM_S0 (ICCCM 2.8): held by the running window manager itself; the EWMH property alone
                # may still name the window of a window manager an earlier test killed
                return _selection_owned(env, "WM_S0") and _root_property_window(env, "_NET_SUPPORTING_WM_CHECK")

            wait_until(ready, timeout, f"{argv[0]} on {env['DISPLAY']}", interval=0.1)
    except BaseException:
        wm.stop()
        raise
    return wm


@dataclass
class App:
    """A program running on a :class:`Desktop`, with its top-level window.

    Attributes:
        argv: the command line. process: the process. window: X window id of its top-level client
        window. stdout_path / stderr_path: what it printed.
    """

    argv: list[str]
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    stdout_path: Path
    stderr_path: Path
    window: int = 0

    def geometry(self) -> Rect:
        """The client window's (x, y, width, height) in root-window pixels (inside any WM frame)."""
        out = subprocess.run(["xwininfo", "-id", str(self.window)], env=self.env, capture_output=True,
                             text=True, timeout=10, check=True).stdout
        values = {k: int(v) for k, v in re.findall(r"(Absolute upper-left [XY]|Width|Height):\s+(-?\d+)", out)}
        return (values["Absolute upper-left X"], values["Absolute upper-left Y"], values["Width"],
                values["Height"])

    def activate(self, timeout: float = WINDOW_TIMEOUT_S) -> None:
        """Raise and focus the window through the window manager and wait until it has the focus."""
        subprocess.run(["xdotool", "windowactivate", str(self.window)], env=self.env, capture_output=True,
                       timeout=10)

        def focused() -> bool:
            res = subprocess.run(["xdotool", "getactivewindow"], env=self.env, capture_output=True, text=True,
                                 timeout=10)
            return res.returncode == 0 and res.stdout.strip() == str(self.window)

        wait_until(focused, timeout, f"window {self.window} ({self.argv[0]}) to get the focus", interval=0.1)

    def wait_exit(self, timeout: float = WINDOW_TIMEOUT_S) -> int:
        """Wait for the program to exit; return its exit status.

        Raises:
            TimeoutError: still running after ``timeout`` s (its stderr tail is in the message).
        """
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{self.argv[0]} still running after {timeout:g} s; stderr: {self.stderr()}") from None

    def stdout(self) -> str:
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")[-2000:]

    def close(self) -> None:
        stop_process(self.process)


@dataclass
class FormApp(App):
    """tests/apps/tk_form.py or tests/apps/gtk_form.py (see their docstrings for the JSON shapes)."""

    layout_path: Path = Path()

    def layout(self) -> dict[str, Any]:
        """The form's latest layout report ({} before the first)."""
        try:
            return dict(json.loads(self.layout_path.read_text(encoding="utf-8")))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def wait_layout(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = WINDOW_TIMEOUT_S
                    ) -> dict[str, Any]:
        """Poll the layout report until ``predicate(layout)`` holds; return it.

        Raises:
            RuntimeError: the form exited. TimeoutError: not reached in ``timeout`` s.
        """
        def check() -> dict[str, Any] | None:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.argv[-1]} exited with {self.process.returncode}: {self.stderr()}")
            layout = self.layout()
            return layout if layout and predicate(layout) else None

        result: dict[str, Any] = wait_until(check, timeout, f"the form layout ({self.layout()})")
        return result

    def wait_current(self, timeout: float = WINDOW_TIMEOUT_S) -> dict[str, Any]:
        """Wait until the form's layout report agrees with where the X server says its window is (after
        the window manager placed or moved it); return the report."""
        def current(data: dict[str, Any]) -> bool:
            gx, gy, _, _ = self.geometry()
            return list(data.get("window", [None, None])[:2]) == [gx, gy]

        return self.wait_layout(current, timeout)

    def rects(self) -> dict[str, Rect]:
        """Widget name -> (x, y, w, h) in root pixels, as the form last reported them."""
        return {name: (r[0], r[1], r[2], r[3]) for name, r in self.layout().get("rects", {}).items()}

    def center(self, name: str) -> tuple[int, int]:
        """Centre of widget ``name`` ("name", "agree", "Count", "Submit") in root pixels."""
        x, y, w, h = self.rects()[name]
        return x + w // 2, y + h // 2

    def result(self, timeout: float = WINDOW_TIMEOUT_S) -> dict[str, Any]:
        """Wait for the form to exit and return the JSON it printed (the last stdout line).

        Raises:
            TimeoutError: not submitted within ``timeout`` s. AssertionError: no JSON on stdout.
        """
        self.wait_exit(timeout)
        lines = [line for line in self.stdout().splitlines() if line.strip()]
        assert lines, f"the form printed nothing; stderr: {self.stderr()}"
        return dict(json.loads(lines[-1]))


class Desktop:
    """An X display with a window manager, a private D-Bus session bus and the programs started on it."""

    def __init__(self, server: XvfbServer, wm_name: str, directory: Path) -> None:
        self.server = server
        self.directory = directory
        self.apps: list[App] = []
        self._bus: subprocess.Popen[bytes] | None = None
        self._env = self._make_env()
        try:
            self.wm = start_window_manager(self._env, wm_name, directory)
        except BaseException:
            self._stop_bus()
            raise

    @property
    def display(self) -> str:
        return self.server.display

    def _make_env(self) -> dict[str, str]:
        env = self.server.env()
        env.pop("QT_QPA_PLATFORM", None)
        for key, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache"), ("XDG_DATA_HOME", "data"),
                         ("XDG_RUNTIME_DIR", "runtime")):
            path = self.directory / sub
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            env[key] = str(path)
        env.update(GSETTINGS_BACKEND="memory", NO_AT_BRIDGE="1", GTK_A11Y="none", GDK_BACKEND="x11")
        if shutil.which("dbus-daemon"):
            self._bus = subprocess.Popen(
                ["dbus-daemon", "--session", "--nofork", "--print-address=1", "--nopidfile"], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                start_new_session=True)
            assert self._bus.stdout is not None
            address = self._bus.stdout.readline().decode().strip()
            if not address:
                raise RuntimeError("dbus-daemon --session printed no address")
            env["DBUS_SESSION_BUS_ADDRESS"] = address
        else:
            env["DBUS_SESSION_BUS_ADDRESS"] = "disabled:"  # never autolaunch a bus that outlives the test
        return env

    def env(self) -> dict[str, str]:
        """A copy of the environment programs on this desktop run with (DISPLAY, XAUTHORITY, the
        desktop's D-Bus session bus and XDG directories)."""
        return dict(self._env)

    def xdotool(self, *args: str, check: bool = True, timeout: float = 15.0) -> str:
        """Run ``xdotool ARGS`` on this display; return its stdout."""
        return subprocess.run(["xdotool", *args], env=self._env, capture_output=True, text=True, check=check,
                              timeout=timeout).stdout

    def run(self, *argv: str, check: bool = True, timeout: float = 15.0) -> str:
        """Run a command (numlockx, xrandr, xprop ...) with this desktop's environment; return its stdout."""
        return subprocess.run(list(argv), env=self._env, capture_output=True, text=True, check=check,
                              timeout=timeout).stdout

    def pointer(self) -> tuple[int, int]:
        """The pointer position in root pixels (``xdotool getmouselocation``)."""
        out = self.xdotool("getmouselocation", "--shell")
        where = dict(line.split("=", 1) for line in out.split())
        return int(where["X"]), int(where["Y"])

    def click(self, x: int, y: int, button: int = 1, timeout: float = 15.0) -> None:
        """Move the pointer to (x, y) with xdotool, wait until it is there, then click ``button``.
        (``xdotool mousemove --sync`` hangs when the pointer is already at the point.)"""
        self.xdotool("mousemove", str(x), str(y))
        wait_until(lambda: self.pointer() == (x, y), timeout, f"the pointer to reach ({x}, {y})")
        self.xdotool("click", str(button))

    def _search(self, app: App, wm_class: str | None, name: str | None) -> int:
        if wm_class is not None:
            args = ["--class", wm_class]
        elif name is not None:
            args = ["--name", name]
        else:
            args = ["--pid", str(app.process.pid)]
        res = subprocess.run(["xdotool", "search", "--onlyvisible", *args], env=self._env, capture_output=True,
                             text=True, timeout=15)
        ids = [int(line) for line in res.stdout.split() if line.isdigit()]
        return ids[-1] if ids else 0

    def launch(self, argv: list[str], *, wm_class: str | None = None, name: str | None = None,
               timeout: float = WINDOW_TIMEOUT_S, env: dict[str, str] | None = None, cwd: Path | None = None,
               cls: type[App] = App, **extra: Any) -> Any:
        """Start ``argv`` on this desktop and wait until its window is viewable and placed.

        Args:
            wm_class / name: xdotool regular expressions for WM_CLASS / the window title; default:
                the window whose ``_NET_WM_PID`` is the process.
            env: extra variables over :meth:`env`.
        Returns:
            The :class:`App` (or ``cls``), also stopped at the end of the test.
        Raises:
            RuntimeError: the program exited before showing a window. TimeoutError: no window in time.
        """
        _require(argv[0])
        run_env = {**self._env, **(env or {})}
        tag = f"{Path(argv[0]).name}-{time.monotonic_ns()}"
        out_path, err_path = self.directory / f"{tag}.out", self.directory / f"{tag}.err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(argv, env=run_env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    cwd=cwd, start_new_session=True)
        app = cls(argv=list(argv), process=proc, env=run_env, stdout_path=out_path, stderr_path=err_path, **extra)
        self.apps.append(app)

        def found() -> int:
            if proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {proc.returncode} before showing a window: "
                                   f"{app.stderr()}")
            return self._search(app, wm_class, name)

        try:
            app.window = wait_until(found, timeout, f"a window of {argv}", interval=0.1)
        except TimeoutError as exc:  # say what the program and the window manager printed
            raise TimeoutError(f"{exc}; its stderr: {app.stderr()[-1500:]!r}; window manager log: "
                               f"{self.wm.log()[-1500:]!r}") from None
        self.wait_placed(app, timeout)
        return app

    def wait_placed(self, app: App, timeout: float = WINDOW_TIMEOUT_S) -> Rect:
        """Wait until ``app``'s window geometry is the same in three polls 0.1 s apart (the window manager
        has placed, framed and sized it); return it."""
        history: list[Rect] = []

        def stable() -> Rect | None:
            history.append(app.geometry())
            return history[-1] if len(history) >= 3 and len(set(history[-3:])) == 1 else None

        result: Rect = wait_until(stable, timeout, f"the window of {app.argv[0]} to stop moving", interval=0.1)
        return result

    def place(self, app: App, x: int, y: int, width: int | None = None, height: int | None = None,
              timeout: float = WINDOW_TIMEOUT_S) -> Rect:
        """Ask the window manager to move ``app``'s window to (x, y) (and resize it), then wait until it
        has stopped moving; return its client geometry (which includes the WM's frame offset)."""
        if width is not None and height is not None:
            self.xdotool("windowsize", str(app.window), str(width), str(height))
        self.xdotool("windowmove", str(app.window), str(x), str(y))
        rect = self.wait_placed(app, timeout)
        if isinstance(app, FormApp):
            app.wait_current(timeout)
        return rect

    def _form(self, argv: list[str], x: int, y: int, wm_class: str, timeout: float) -> FormApp:
        layout = self.directory / f"form-{time.monotonic_ns()}.json"
        form: FormApp = self.launch([*argv, "--layout", str(layout), "--x", str(x), "--y", str(y)],
                                    wm_class=wm_class, timeout=timeout, cls=FormApp, layout_path=layout)

        form.wait_current(timeout)
        return form

    def tk_form(self, x: int = 300, y: int = 200, timeout: float = WINDOW_TIMEOUT_S) -> FormApp:
        """Start tests/apps/tk_form.py (this interpreter's tkinter) at about (x, y)."""
        return self._form([sys.executable, str(APPS / "tk_form.py")], x, y, "HolodeskTkForm", timeout)

    def gtk_form(self, x: int = 300, y: int = 200, timeout: float = WINDOW_TIMEOUT_S) -> FormApp:
        """Start tests/apps/gtk_form.py with the system Python (PyGObject, GTK 3) at about (x, y)."""
        _require(SYSTEM_PYTHON)
        probe = subprocess.run([SYSTEM_PYTHON, "-c", "import gi; gi.require_version('Gtk', '3.0')"],
                               capture_output=True, timeout=30)
        if probe.returncode != 0:
            message = "the system Python has no PyGObject/GTK 3 (apt-get install python3-gi gir1.2-gtk-3.0)"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
        return self._form([SYSTEM_PYTHON, str(APPS / "gtk_form.py")], x, y, "HolodeskGtkForm", timeout)

    def stop(self) -> None:
        """Stop every app, the window manager and the D-Bus bus (in that order)."""
        for app in reversed(self.apps):
            app.close()
        self.wm.stop()
        self._stop_bus()

    def _stop_bus(self) -> None:
        if self._bus is not None:
            stop_process(self._bus)
            if self._bus.stdout is not None:
                self._bus.stdout.close()


@pytest.fixture(params=WINDOW_MANAGERS)
def desktop(request: pytest.FixtureRequest, xvfb: XvfbServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Desktop]:
    """The session Xvfb with window manager ``request.param`` (default params: :data:`WINDOW_MANAGERS`)."""
    desk = Desktop(xvfb, str(request.param), tmp_path_factory.mktemp("desktop"))
    try:
        yield desk
    finally:
        desk.stop()


@pytest.fixture
def make_desktop(make_xvfb: Callable[..., XvfbServer], tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Callable[..., Desktop]]:
    """Factory ``make_desktop(wm, width=1920, height=1080) -> Desktop`` on a new Xvfb of that size
    (DISPLAY points at it for the rest of the test); all are stopped afterwards."""
    desktops: list[Desktop] = []

    def make(wm: str, width: int = 1920, height: int = 1080) -> Desktop:
        server = make_xvfb(width, height)
        desk = Desktop(server, wm, tmp_path_factory.mktemp("desktop"))
        desktops.append(desk)
        return desk

    try:
        yield make
    finally:
        for desk in reversed(desktops):
            desk.stop()
