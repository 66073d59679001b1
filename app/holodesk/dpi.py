"""DPI awareness on Windows (field cases F01, F03).

A Windows process that is not *per-monitor* DPI aware sees virtualised coordinates on scaled monitors:
screen grabs and pointer positions are stretched by the system, and on monitors with different scale
factors the two disagree. Holodesk therefore declares per-monitor (v2) awareness before mss or
pyautogui touch the screen (pyautogui would otherwise declare only *system* awareness at import, and
the first declaration wins for the whole process). Holodesk's geometry still measures the frame/input
ratio from every frame, so no scale factor is assumed either way.

On Linux and macOS there is nothing to declare: X11 input space is in pixels, and macOS reports points
consistently to both capture and input; :func:`dpi_awareness` reports "n/a on this OS" there.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

_PER_MONITOR_AWARE_V2 = -4  # DPI_AWARENESS_CONTEXT_PER_MONITOR_AWARE_V2 (Windows 10 1703+)
_PROCESS_PER_MONITOR_DPI_AWARE = 2  # PROCESS_DPI_AWARENESS for SetProcessDpiAwareness (Windows 8.1+)
AWARENESS_NAMES = {-1: "invalid", 0: "unaware", 1: "system aware", 2: "per-monitor aware"}
"""DPI_AWARENESS values (GetAwarenessFromDpiAwarenessContext) in words."""

_HINT_UNAWARE = ("Holodesk declares per-monitor DPI awareness before its first grab; if another part of "
                 "the process declared a weaker mode first, restart Holodesk, and report it if this stays.")


def _windll(name: str) -> Any:
    loader: Any = vars(ctypes)["windll"]  # exists on Windows only
    return getattr(loader, name)


def ensure_per_monitor_dpi_awareness(platform: str | None = None, user32: Any = None, shcore: Any = None) -> bool:
    """Declare per-monitor DPI awareness for this process on Windows; a no-op elsewhere.

    Args:
        platform: ``sys.platform`` to assume (tests).
        user32, shcore: the Windows DLLs (tests pass fakes); default ``ctypes.windll``'s.
    Returns:
        True when the process is per-monitor aware afterwards (always True off Windows).
    Never raises: a failure is logged and shown by ``holodesk doctor``.
    """
    plat = sys.platform if platform is None else platform
    if not plat.startswith("win"):
        return True
    try:
        user32 = user32 if user32 is not None else _windll("user32")
        setter = getattr(user32, "SetProcessDpiAwarenessContext", None)
        if setter is not None and setter(ctypes.c_void_p(_PER_MONITOR_AWARE_V2)):
            return True
        shcore = shcore if shcore is not None else _windll("shcore")
        shcore.SetProcessDpiAwareness(_PROCESS_PER_MONITOR_DPI_AWARE)  # fails harmlessly if already set
    except (AttributeError, OSError) as exc:
        log.warning("could not declare per-monitor DPI awareness: %s", exc)
    info = dpi_awareness(plat, user32=user32, shcore=shcore)
    if info.get("awareness") != "per-monitor aware":
        log.warning("this process is %s, not per-monitor DPI aware", info.get("awareness"))
        return False
    return True


def dpi_awareness(platform: str | None = None, *, user32: Any = None, shcore: Any = None) -> dict[str, Any]:
    """Report this process's DPI awareness for ``holodesk doctor``.

    Returns:
        Off Windows ``{"status": "n/a on this OS", "detail": ...}``; on Windows ``{"status": "ok" |
        "problem", "awareness": "unaware" | "system aware" | "per-monitor aware" | "unknown", "detail":
        ..., "hint": ...}``. Never raises.
    """
    plat = sys.platform if platform is None else platform
    if not plat.startswith("win"):
        return {"status": "n/a on this OS",
                "detail": "DPI awareness is a Windows setting; the frame/input ratio is measured per frame."}
    awareness = "unknown"
    try:
        user32 = user32 if user32 is not None else _windll("user32")
        get_ctx = getattr(user32, "GetThreadDpiAwarenessContext", None)
        if get_ctx is not None:
            value = int(user32.GetAwarenessFromDpiAwarenessContext(get_ctx()))
        else:  # Windows 8.1: ask shcore
            shcore = shcore if shcore is not None else _windll("shcore")
            out = ctypes.c_int(-1)
            shcore.GetProcessDpiAwareness(None, ctypes.byref(out))
            value = int(out.value)
        awareness = AWARENESS_NAMES.get(value, f"unknown ({value})")
    except (AttributeError, OSError, ValueError) as exc:
        return {"status": "problem", "awareness": awareness, "detail": f"could not query: {exc}",
                "hint": _HINT_UNAWARE}
    if awareness == "per-monitor aware":
        return {"status": "ok", "awareness": awareness,
                "detail": "screen grabs and pointer positions are in physical pixels on every monitor"}
    return {"status": "problem", "awareness": awareness,
            "detail": "Windows virtualises coordinates on scaled monitors for this process", "hint": _HINT_UNAWARE}
