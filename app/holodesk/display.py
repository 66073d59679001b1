"""Which display server Holodesk runs under, and whether capture and input can work there.

Screen capture (mss) and input (pyautogui, XTest) on Linux talk to an X server only: they work on an
Xorg session and, for X11 windows, under XWayland; a pure Wayland session without ``DISPLAY`` cannot be
captured or driven (F17). With ``DISPLAY`` unset pyautogui even fails at import (F16), so this module
never imports pyautogui: call :func:`require_display` first and the user gets a
:class:`~holodesk.errors.DisplayError` saying what to do instead of a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from holodesk.errors import DisplayError

log = logging.getLogger(__name__)

DisplayKind = Literal["x11", "xwayland", "wayland", "windows", "macos", "none"]

_HINT_NO_DISPLAY = (
    "Start Holodesk from a graphical desktop session (Xorg/X11 on Linux), or for tests and servers run "
    "it under a virtual display, e.g. `Xvfb :99 -screen 0 1920x1080x24 -noreset &` then "
    "`export DISPLAY=:99`."
)
_HINT_WAYLAND = (
    "Log out and pick an \"Xorg\" / \"GNOME on Xorg\" / X11 session on the login screen, or run Holodesk "
    "under XWayland with DISPLAY set (e.g. `export DISPLAY=:0`); under XWayland only X11 windows can be "
    "seen and controlled."
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
        from Xlib import display as xdisplay
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
        hint = "For full control log into an \"Xorg\" / X11 session."
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
