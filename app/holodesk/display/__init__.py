"""Which display server Holodesk runs under, and which desktop backend captures and drives it.

Two backends: ``mss`` (mss + pyautogui/XTest: X11 sessions, Windows, macOS, and X11 windows only under
XWayland) and ``mutter`` (GNOME on Wayland: Mutter's ScreenCast and RemoteDesktop D-Bus APIs,
:mod:`holodesk.display.mutter`). :func:`choose_backend` picks one from the session (``XDG_SESSION_TYPE``,
``WAYLAND_DISPLAY``, the D-Bus names present) unless the ``desktop_backend`` setting names one.

mss and pyautogui on Linux talk to an X server only; with ``DISPLAY`` unset pyautogui even fails at import
(F16), so this module never imports pyautogui: call :func:`require_display` first and the user gets a
:class:`~holodesk.errors.DisplayError` saying what to do instead of a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from holodesk.display.mutter import interface_versions
from holodesk.errors import DisplayError

log = logging.getLogger(__name__)

DisplayKind = Literal["x11", "xwayland", "wayland", "windows", "macos", "none"]

_HINT_NO_DISPLAY = (
    "Start Holodesk from a graphical desktop session (Xorg/X11 on Linux), or for tests and servers run "
    "it under a virtual display, e.g. `Xvfb :99 -screen 0 1920x1080x24 -noreset &` then "
    "`export DISPLAY=:99`."
)
_HINT_WAYLAND = (
    "On GNOME, Holodesk's 'mutter' desktop backend sees and drives Wayland windows (Settings > Advanced > "
    "Desktop backend, or HOLODESK_DESKTOP_BACKEND=mutter); it needs Mutter's RemoteDesktop API on the session bus. "
    "Other Wayland desktops (KDE Plasma, ...) need xdg-desktop-portal with their backend (the 'portal' desktop "
    "backend); without either, only X11 windows under XWayland can be seen and controlled (DISPLAY set)."
)


@dataclass(frozen=True)
class DisplayInfo:
    """What the environment says about the display server.

    Attributes:
        kind: "x11" | "xwayland" | "wayland" | "windows" | "macos" | "none".
        display: value of ``DISPLAY`` ("" when unset).
        wayland_display: value of ``WAYLAND_DISPLAY`` ("" when unset).
        session_type: value of ``XDG_SESSION_TYPE`` ("" when unset).
        platform: ``sys.platform`` the check was made for.
        usable: True when capture and input can be expected to work.
        connected: True/False when a connection to the X server was attempted, None when not tried.
        problem: plain-words reason when not usable (or a caveat when usable, e.g. XWayland).
        hint: what the user can do about it.
    """

    kind: DisplayKind
    display: str
    wayland_display: str
    session_type: str
    platform: str
    usable: bool
    connected: bool | None = None
    problem: str = ""
    hint: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for ``holodesk doctor``."""
        return asdict(self)


def _probe_x_server(name: str) -> tuple[bool, str]:
    """Try to open (and close) a connection to X display ``name`` with python-xlib.

    Returns:
        (connected, error text).
    """
    try:
        from Xlib import display as xdisplay  # lazy: python-xlib (Linux only)
    except ImportError:  # python-xlib is a Linux dependency; without it we cannot probe.
        return True, ""
    try:
        conn = xdisplay.Display(name)
    except Exception as exc:  # Xlib raises several unrelated types (DisplayNameError, ConnectionClosedError...)
        return False, f"{type(exc).__name__}: {exc}"
    conn.close()
    return True, ""


def check_display(
    environ: Mapping[str, str] | None = None,
    platform: str | None = None,
    *,
    probe: bool = True,
) -> DisplayInfo:
    """Classify the display server from the environment (never raises for a missing display).

    Args:
        environ: environment to inspect (default ``os.environ``).
        platform: ``sys.platform`` value to assume (default the running one); for tests.
        probe: on Linux with ``DISPLAY`` set, also try to connect to the X server (python-xlib, no
            pyautogui) and report ``connected``. Only done when ``environ`` is the real environment.
    Returns:
        A :class:`DisplayInfo`; ``usable`` says whether capture and input can work.
    """
    real_env = environ is None
    env = os.environ if environ is None else environ
    plat = sys.platform if platform is None else platform
    display = env.get("DISPLAY", "")
    wayland = env.get("WAYLAND_DISPLAY", "")
    session = env.get("XDG_SESSION_TYPE", "").lower()

    def info(kind: DisplayKind, usable: bool, *, connected: bool | None = None, problem: str = "",
             hint: str = "") -> DisplayInfo:
        return DisplayInfo(kind=kind, display=display, wayland_display=wayland, session_type=session,
                           platform=plat, usable=usable, connected=connected, problem=problem, hint=hint)

    if plat.startswith("win"):
        return info("windows", usable=True)
    if plat == "darwin":
        return info(
            kind="macos", usable=True,
            problem="macOS needs Screen Recording and Accessibility permission for the app running Holodesk.",
            hint="Grant both in System Settings > Privacy & Security if clicks or screenshots do nothing.",
        )

    on_wayland = bool(wayland) or session == "wayland"
    if not display:
        if on_wayland:
            return info(
                kind="wayland", usable=False,
                problem=("This is a Wayland session without an X display (DISPLAY is unset): screen capture "
                         "(mss) and input (pyautogui/XTest) are X11-only on Linux and cannot work here."),
                hint=_HINT_WAYLAND,
            )
        return info(
            kind="none", usable=False,
            problem=("No display is available: DISPLAY is unset, so there is no X11 screen to capture or "
                     "control (and no Windows or macOS desktop)."),
            hint=_HINT_NO_DISPLAY,
        )

    connected: bool | None = None
    if probe and real_env:
        connected, error = _probe_x_server(display)
        if not connected:
            kind: DisplayKind = "xwayland" if on_wayland else "x11"
            return info(
                kind=kind, usable=False, connected=False,
                problem=f"Cannot connect to the X display DISPLAY={display!r} ({error}).",
                hint=("Check that the X server (or Xvfb/XWayland) is running and that DISPLAY and "
                      "XAUTHORITY point at it; `xdpyinfo` should work in the same shell."),
            )
    if on_wayland:
        problem = ("Running under XWayland: only X11 windows can be captured and controlled; native Wayland "
                   "windows appear black in screenshots and ignore input.")
        hint = ("On GNOME the 'mutter' desktop backend sees and drives every window (`holodesk doctor` says "
                "which backend is chosen and why).")
        return info("xwayland", usable=True, connected=connected, problem=problem, hint=hint)
    return info("x11", usable=True, connected=connected)


def require_display(
    environ: Mapping[str, str] | None = None,
    platform: str | None = None,
    *,
    probe: bool = True,
) -> DisplayInfo:
    """Make sure capture and input can work; call before grabbing the screen or importing pyautogui.

    Args: as :func:`check_display`.
    Returns:
        The :class:`DisplayInfo` (usable). A caveat such as XWayland is logged as a warning.
    Raises:
        DisplayError: DISPLAY unset on Linux (F16), a Wayland session without a usable X display (F17),
            or an X display that cannot be connected to; the message explains, ``hint`` says what to do.
    """
    info = check_display(environ, platform, probe=probe)
    if not info.usable:
        raise DisplayError(info.problem, hint=info.hint)
    if info.problem:
        log.warning("%s %s", info.problem, info.hint)
    return info


BackendName = Literal["mss", "mutter", "portal"]
BACKEND_SETTINGS = ("auto", "mss", "mutter", "portal")
"""Values of the ``desktop_backend`` setting."""

MUTTER_NAMES = ("org.gnome.Mutter.RemoteDesktop", "org.gnome.Mutter.ScreenCast")
PORTAL_NAME = "org.freedesktop.portal.Desktop"


@dataclass(frozen=True)
class BackendChoice:
    """The desktop backend that captures and drives this session, and why.

    Attributes:
        backend: "mss" (mss + pyautogui), "mutter" (GNOME on Wayland) or "portal" (xdg-desktop-portal).
        reason: plain words: what in the session made this choice.
        setting: the ``desktop_backend`` setting it was made under ("auto" or a backend name).
        display: the display server classification (:func:`check_display`).
    """

    backend: BackendName
    reason: str
    setting: str
    display: DisplayInfo

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for ``holodesk doctor``."""
        return {"backend": self.backend, "reason": self.reason, "setting": self.setting}


def session_bus_names(address: str | None = None, timeout_s: float = 2.0) -> set[str] | None:
    """Names on the session D-Bus (``ListNames``), or None when there is no session bus to ask.

    Args:
        address: bus address (default ``$DBUS_SESSION_BUS_ADDRESS``).
    """
    try:
        from jeepney import DBusAddress, new_method_call  # lazy: jeepney (Linux only)
        from jeepney.io.blocking import open_dbus_connection  # lazy: jeepney (Linux only)
    except ImportError:
        return None
    bus = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
    try:
        with open_dbus_connection(bus=address or "SESSION", auth_timeout=timeout_s) as conn:
            reply = conn.send_and_get_reply(new_method_call(bus, "ListNames"), timeout=timeout_s)
    except (OSError, KeyError, ValueError, TimeoutError) as exc:
        log.debug("no session bus to ask: %s", exc)
        return None
    return {str(n) for n in reply.body[0]}


def choose_backend(
    setting: str = "auto",
    environ: Mapping[str, str] | None = None,
    platform: str | None = None,
    bus_names: set[str] | None = None,
    *,
    probe: bool = True,
    portal_versions: Mapping[str, str] | None = None,
) -> BackendChoice:
    """Pick the desktop backend for this session.

    ``auto``: on a Wayland session (``XDG_SESSION_TYPE=wayland`` or ``WAYLAND_DISPLAY`` set) with Mutter's
    RemoteDesktop and ScreenCast names on the session bus -> ``mutter``; else, when
    ``org.freedesktop.portal.Desktop`` offers both the ScreenCast and RemoteDesktop portals -> ``portal``;
    anywhere else ``mss`` (which works on X11, Windows and macOS, and sees only X11 windows under XWayland).
    A named backend is used as named.

    Args:
        setting: the ``desktop_backend`` setting: "auto", "mss" or "mutter".
        environ, platform, probe: as :func:`check_display`.
        bus_names: names on the session bus (default: asked with :func:`session_bus_names` when needed).
        portal_versions: ``{"portal ScreenCast": "4", "portal RemoteDesktop": "1", ...}`` (default: asked with
            :func:`holodesk.display.mutter.interface_versions` when the portal's name is on the bus).
    Raises:
        DisplayError: the chosen backend cannot work here (``mutter`` without Mutter's APIs on the bus; ``mss``
            on a Wayland session without DISPLAY, F17; no display at all, F16); the hint says what to do.
    """
    if setting not in BACKEND_SETTINGS:
        raise DisplayError(f"unknown desktop backend {setting!r}", hint=f"Use one of {', '.join(BACKEND_SETTINGS)}.")
    info = check_display(environ, platform, probe=probe)
    if info.platform.startswith("linux") and setting in ("auto", "mutter", "portal"):
        wayland = info.kind in ("wayland", "xwayland") or info.session_type == "wayland"
        if setting in ("mutter", "portal") or wayland:
            env = os.environ if environ is None else environ
            if bus_names is None:
                bus_names = session_bus_names(env.get("DBUS_SESSION_BUS_ADDRESS") or None)
            missing = [n for n in MUTTER_NAMES if n not in (bus_names or set())]
            portal_problem = (_portal_problem(bus_names, portal_versions, env)
                              if setting == "portal" or (setting == "auto" and missing) else "")
            if setting == "portal" or (setting == "auto" and missing and not portal_problem):
                if portal_problem:
                    raise DisplayError(f"the 'portal' desktop backend needs xdg-desktop-portal, but {portal_problem}",
                                       hint="Install and start xdg-desktop-portal with your desktop's backend "
                                       "(e.g. xdg-desktop-portal-gnome or -kde), or use desktop_backend = auto.")
                why = ("chosen in Settings (desktop_backend = portal)" if setting == "portal" else
                       "a Wayland session without Mutter's APIs whose xdg-desktop-portal offers ScreenCast and "
                       "RemoteDesktop (the desktop asks for permission)")
                return BackendChoice("portal", why, setting, info)
            if not missing:
                why = ("chosen in Settings (desktop_backend = mutter)" if setting == "mutter" else
                       "a Wayland session with GNOME's Mutter: its ScreenCast and RemoteDesktop APIs are on the "
                       "session bus")
                return BackendChoice("mutter", why, setting, info)
            bus_text = ("there is no session D-Bus" if bus_names is None
                        else f"{', '.join(missing)} not on the session bus")
            if setting == "mutter":
                raise DisplayError(
                    f"the 'mutter' desktop backend needs GNOME's Mutter, but {bus_text}",
                    hint="Use desktop_backend = auto (or mss on X11), or run Holodesk inside a GNOME session.")
            if not info.usable:
                raise DisplayError(f"{info.problem} Mutter's remote-desktop API is not available either: "
                                   f"{bus_text}; nor the desktop portal: {portal_problem}.", hint=_HINT_WAYLAND)
            return BackendChoice("mss", f"a Wayland session without Mutter's APIs ({bus_text}): X11 windows "
                                 "through XWayland only", setting, info)
    if not info.usable:
        raise DisplayError(info.problem, hint=info.hint)
    why = "chosen in Settings (desktop_backend = mss)" if setting == "mss" else {
        "x11": "an X11 session", "xwayland": "XWayland (X11 windows only)", "windows": "Windows",
        "macos": "macOS"}.get(info.kind, info.kind)
    return BackendChoice("mss", why, setting, info)


def _portal_problem(bus_names: set[str] | None, versions: Mapping[str, str] | None,
                    environ: Mapping[str, str]) -> str:
    """Why the portal route cannot work ("" when it can): no bus, no portal, or a portal interface absent."""
    if bus_names is None:
        return "there is no session D-Bus"
    if PORTAL_NAME not in bus_names:
        return f"{PORTAL_NAME} is not on the session bus"
    if versions is None:
        versions = interface_versions(environ.get("DBUS_SESSION_BUS_ADDRESS") or None)
    absent = [label for label in ("portal ScreenCast", "portal RemoteDesktop")
              if not str(versions.get(label, "")).isdigit()]
    return f"it does not offer {' and '.join(absent)}" if absent else ""
