"""A private headless GNOME Wayland session for tests and benchmarks: D-Bus, PipeWire, WirePlumber,
mutter (``--headless --wayland --no-x11`` with one virtual monitor) and, on demand, a native GTK4
Wayland app to drive (``tests/apps/gtk4_wayland_target.py``, run by the system python3 with python3-gi).

Everything runs in a fresh ``XDG_RUNTIME_DIR`` (mode 0700) with private config/data/cache folders and
its own session bus, so nothing touches the user's desktop and several sessions can run side by side.
Readiness is waited for on conditions (sockets, bus names, the app's state file), never on sleeps.

Debian packages: mutter pipewire wireplumber gstreamer1.0-pipewire gstreamer1.0-plugins-base
python3-gi gir1.2-gtk-4.0 dbus (``installers/_setup.sh`` lists them in ``APT_WAYLAND_TEST``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.processes import stop_process

REQUIRED_PROGRAMS = ("dbus-daemon", "pipewire", "wireplumber", "mutter")
TARGET_APP = Path(__file__).resolve().parent.parent / "apps" / "gtk4_wayland_target.py"
SYSTEM_PYTHON = "/usr/bin/python3"


PORTAL_PROGRAMS = ("gnome-shell", "/usr/libexec/xdg-desktop-portal", "/usr/libexec/xdg-desktop-portal-gnome")
"""What :func:`mutter_session` with ``portal=True`` needs on top (and python3-dbusmock for the system python)."""


def missing_programs(portal: bool = False) -> list[str]:
    """Programs (and the GTK4 app's system python) a session needs that are not installed."""
    missing = [p for p in (*REQUIRED_PROGRAMS, *(PORTAL_PROGRAMS if portal else ())) if shutil.which(p) is None]
    if not Path(SYSTEM_PYTHON).exists():
        missing.append(SYSTEM_PYTHON)
    elif portal and subprocess.run([SYSTEM_PYTHON, "-c", "import dbusmock"], capture_output=True).returncode:
        missing.append("python3-dbusmock")
    return missing


def _wait_for(condition: Any, timeout_s: float, what: str, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: {proc.args!r} exited with status {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not ready after {timeout_s:g} s")
        time.sleep(0.02)


def _bus_has_name(address: str, name: str) -> bool:
    """True when ``name`` has an owner on the bus at ``address``; False also while the bus does not accept
    connections yet (dbus-daemon creates its socket file before it listens)."""
    from jeepney import DBusAddress, new_method_call
    from jeepney.io.blocking import open_dbus_connection

    bus = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
    try:
        conn = open_dbus_connection(bus=address)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    with conn:
        reply = conn.send_and_get_reply(new_method_call(bus, "NameHasOwner", "s", (name,)), timeout=5)
    return bool(reply.body[0])


def _wireplumber_connected(env: dict[str, str]) -> bool:
    """True once WirePlumber is a client of the session's PipeWire (it links the screen-cast streams)."""
    out = subprocess.run(["pw-dump", "Client"], env=env, capture_output=True, text=True, timeout=10).stdout
    return '"WirePlumber"' in out


@dataclass
class TargetApp:
    """The GTK4 test app (``tests/apps/gtk4_wayland_target.py``) and its state file.

    The state file is JSON the app rewrites atomically on every event: ``ready`` (the window is shown
    fullscreen), ``clicks`` (button clicks), ``presses`` (``[x, y]`` of each press on the stripes,
    window coordinates = screen coordinates when fullscreen), ``text`` (the entry's text), ``inverted``
    (the stripes' colours flip on each press), ``area``/``button``/``entry`` (``[x, y, w, h]`` on the screen),
    ``clipboard`` (the clipboard's text as the app read it on its latest button click).
    """

    process: subprocess.Popen[bytes]
    state_path: Path
    log_path: Path

    def state(self) -> dict[str, Any]:
        """The app's latest state ({} before its first write)."""
        try:
            return dict(json.loads(self.state_path.read_text(encoding="utf-8")))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def wait_state(self, predicate: Any, timeout_s: float = 15.0) -> dict[str, Any]:
        """Poll the state until ``predicate(state)`` holds; return it.

        Raises:
            AssertionError: not reached in ``timeout_s`` (the message shows the last state and the app log).
        """
        deadline = time.monotonic() + timeout_s
        state = self.state()
        while not predicate(state):
            if self.process.poll() is not None:
                raise AssertionError(f"the GTK4 app exited ({self.process.returncode}): {self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"app state not reached in {timeout_s:g} s; last state {state}; log: {self.log()}")
            time.sleep(0.02)
            state = self.state()
        return state

    def center(self, name: str) -> tuple[float, float]:
        """Screen coordinates of the centre of widget ``name`` ("area", "button", "entry")."""
        x, y, w, h = self.state()[name]
        return x + w / 2, y + h / 2

    def stop(self) -> None:
        """End the app."""
        stop_process(self.process)

    def log(self) -> str:
        """The app's stderr/stdout so far."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        except FileNotFoundError:
            return ""


@dataclass
class MutterSession:
    """A running private headless mutter session.

    Attributes:
        root: temporary folder holding the runtime dir, config, data and logs.
        env: environment for clients of this session (``XDG_RUNTIME_DIR``, ``DBUS_SESSION_BUS_ADDRESS``,
            ``WAYLAND_DISPLAY``, ``XDG_SESSION_TYPE=wayland``, no ``DISPLAY``).
        bus_address: the session bus address.
        width, height: the virtual monitor's size in pixels (connector ``Meta-0``).
    """

    root: Path
    env: dict[str, str]
    bus_address: str
    width: int
    height: int
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    apps: list[TargetApp] = field(default_factory=list)
    compositor: subprocess.Popen[bytes] | None = None
    """The mutter (or gnome-shell) process: killing it ends the desktop."""

    def start_app(self, timeout_s: float = 30.0, env: dict[str, str] | None = None) -> TargetApp:
        """Start the GTK4 target app (native Wayland) and wait until it is shown fullscreen and drawn; ``env``
        is added to its environment (``{"GTK_A11Y": "atspi"}`` publishes its accessibility tree)."""
        n = len(self.apps)
        state_path = self.root / f"app{n}.json"
        log_path = self.root / f"app{n}.log"
        env = {**self.env, "GDK_BACKEND": "wayland", "GSK_RENDERER": "cairo", "NO_AT_BRIDGE": "1", **(env or {})}
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([SYSTEM_PYTHON, str(TARGET_APP), str(state_path)], env=env,
                                    stdout=log, stderr=subprocess.STDOUT)
        app = TargetApp(proc, state_path, log_path)
        self.apps.append(app)
        app.wait_state(lambda s: s.get("ready") is True, timeout_s)
        return app

    def stop(self) -> None:
        """Stop the apps and the session's processes (newest first) and remove the folder."""
        for app in reversed(self.apps):
            stop_process(app.process)
        for proc in reversed(self.processes):
            stop_process(proc)
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def mutter_session(width: int = 1280, height: int = 800, timeout_s: float = 30.0, *,
                   xwayland: bool = False, portal: bool = False) -> Iterator[MutterSession]:
    """Start a private headless mutter session; stop it and delete its files on exit.

    With ``xwayland`` mutter also serves X11 clients through Xwayland (started on the first X client); the
    session's ``env`` then has ``DISPLAY`` (the display mutter announces in its log). Without it mutter
    runs ``--no-x11`` and there is no X server at all.

    With ``portal`` the compositor is GNOME Shell (the portal's dialogs need it) with a private system bus
    holding python-dbusmock's logind template (GNOME Shell exits without logind), and
    xdg-desktop-portal with its GNOME backend runs on the session bus. GNOME Shell starts in the
    Activities overview.

    Raises:
        RuntimeError: a program is missing or exited during start-up. TimeoutError: not ready in time.
    """
    missing = missing_programs(portal)
    if missing:
        raise RuntimeError(f"a headless mutter session needs {', '.join(missing)}")
    root = Path(tempfile.mkdtemp(prefix="holodesk-mutter-"))
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "XAUTHORITY",
                        "PIPEWIRE_REMOTE", "PIPEWIRE_RUNTIME_DIR", "QT_QPA_PLATFORM")}
    for name in ("config", "data", "cache", "state", "home"):
        (root / name).mkdir()
    env.update({
        "XDG_RUNTIME_DIR": str(runtime), "XDG_CONFIG_HOME": str(root / "config"),
        "XDG_DATA_HOME": str(root / "data"), "XDG_CACHE_HOME": str(root / "cache"),
        "XDG_STATE_HOME": str(root / "state"), "HOME": str(root / "home"),
        "XDG_SESSION_TYPE": "wayland", "GSETTINGS_BACKEND": "keyfile", "NO_AT_BRIDGE": "1",
    })
    # No window animations: a window still scaling in (mutter's map effect, 250 ms nominal and longer on a
    # loaded machine) maps a click at screen point p to another point of the window than p.
    # No key repeat: Wayland clients repeat a held key themselves, from their own timer (500 ms here), and a
    # target app stalled on a loaded machine between a key's press and its release repeats it (a full run here
    # once ended with the pasted text in the GTK4 app twice, as a repeated V of the paste chord enters it).
    # Holodesk sends each release right after its press; a repeat is the app's.
    keyfile = root / "config" / "glib-2.0" / "settings" / "keyfile"
    keyfile.parent.mkdir(parents=True)
    keyfile.write_text("[org/gnome/desktop/interface]\nenable-animations=false\n\n"
                       "[org/gnome/desktop/peripherals/keyboard]\nrepeat=false\n", encoding="utf-8")
    session = MutterSession(root=root, env=env, bus_address="", width=width, height=height)

    def spawn(args: list[str], log_name: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        with open(root / log_name, "wb") as log:
            proc = subprocess.Popen(args, env=session.env, stdout=kwargs.pop("stdout", log),
                                    stderr=subprocess.STDOUT if "stdout" not in kwargs else log, **kwargs)
        session.processes.append(proc)
        return proc

    try:
        bus_socket = runtime / "bus"
        bus = spawn(["dbus-daemon", "--session", "--nofork", "--nosyslog", f"--address=unix:path={bus_socket}"],
                    "dbus.log")
        _wait_for(bus_socket.exists, timeout_s, "dbus-daemon", [bus])
        session.bus_address = f"unix:path={bus_socket}"
        session.env["DBUS_SESSION_BUS_ADDRESS"] = session.bus_address
        if portal:
            system_socket = runtime / "system_bus"
            system_bus = spawn(["dbus-daemon", "--session", "--nofork", "--nosyslog",
                                f"--address=unix:path={system_socket}"], "system-dbus.log")
            _wait_for(system_socket.exists, timeout_s, "the private system bus", [system_bus])
            session.env["DBUS_SYSTEM_BUS_ADDRESS"] = f"unix:path={system_socket}"
            logind = spawn([SYSTEM_PYTHON, "-m", "dbusmock", "--system", "--template", "logind"], "logind.log")
            _wait_for(lambda: _bus_has_name(f"unix:path={system_socket}", "org.freedesktop.login1"), timeout_s,
                      "the logind mock", [system_bus, logind])
        pipewire = spawn(["pipewire"], "pipewire.log")
        _wait_for((runtime / "pipewire-0").exists, timeout_s, "pipewire", [pipewire])
        wireplumber = spawn(["wireplumber"], "wireplumber.log")
        display_name = "holodesk-wayland-0"
        compositor = "gnome-shell" if portal else "mutter"
        mutter = spawn([compositor, "--headless", "--wayland", *([] if xwayland else ["--no-x11"]),
                        "--virtual-monitor", f"{width}x{height}", "--wayland-display", display_name], "mutter.log")
        session.compositor = mutter
        procs = [bus, pipewire, wireplumber, mutter]
        _wait_for((runtime / display_name).exists, timeout_s, "mutter's Wayland socket", procs)
        _wait_for(lambda: _bus_has_name(session.bus_address, "org.gnome.Mutter.RemoteDesktop"), timeout_s,
                  "mutter's RemoteDesktop API", procs)
        _wait_for(lambda: _wireplumber_connected(session.env), timeout_s, "wireplumber", procs)
        session.env["WAYLAND_DISPLAY"] = display_name
        if portal:
            portal_backend = spawn(["/usr/libexec/xdg-desktop-portal-gnome"], "xdp-gnome.log")
            _wait_for(lambda: _bus_has_name(session.bus_address, "org.freedesktop.impl.portal.desktop.gnome"),
                      timeout_s, "xdg-desktop-portal-gnome", [*procs, portal_backend])
            frontend = spawn(["/usr/libexec/xdg-desktop-portal"], "xdp.log")
            _wait_for(lambda: _bus_has_name(session.bus_address, "org.freedesktop.portal.Desktop"), timeout_s,
                      "xdg-desktop-portal", [*procs, portal_backend, frontend])
        if xwayland:
            found: list[str] = []

            def x_display_announced() -> bool:
                log_text = (root / "mutter.log").read_text("utf-8", "replace")
                found[:] = re.findall(r"Using public X11 display (:\d+)", log_text)
                return bool(found)

            _wait_for(x_display_announced, timeout_s, "mutter's X11 display", procs)
            session.env["DISPLAY"] = found[0]
            # mutter writes Xwayland's cookie into the runtime dir (it would hand it to gnome-session).
            _wait_for(lambda: any(runtime.glob(".mutter-Xwaylandauth.*")), timeout_s, "Xwayland's cookie", procs)
            session.env["XAUTHORITY"] = str(next(runtime.glob(".mutter-Xwaylandauth.*")))
        yield session
    finally:
        session.stop()
