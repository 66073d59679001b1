"""Builds the parts of a session (policy, capture, executor) from settings.

Shared by the CLI and the tray app so both run the very same configuration. Heavy backends are
imported only when chosen.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from holodesk.errors import SettingsError

if TYPE_CHECKING:
    from holodesk.capture.base import CaptureBackend
    from holodesk.control.base import Executor
    from holodesk.display import BackendChoice
    from holodesk.display.mutter import MutterRemoteDesktop
    from holodesk.display.portal import PortalRemoteDesktop
    from holodesk.policy.base import Policy
    from holodesk.settings import Settings

log = logging.getLogger(__name__)


def build_policy(settings: Settings, *, script: Path | None = None, progress: Any = None,
                 cancel: threading.Event | None = None) -> Policy:
    """The policy the settings (or an explicit script) select. ``progress(stage, fraction)`` and ``cancel``
    reach the local model's download and load.

    Raises:
        SettingsError: remote policy without an endpoint, unknown policy.
        ModelLoadError / PolicyError: from the chosen backend.
    """
    if script is None and settings.policy == "script":
        script = settings.script_file
    if script is not None or settings.policy == "script":
        if script is None:
            raise SettingsError("policy 'script' needs a script file",
                                hint="Choose the replay file in Settings (Replay file), or pass --script FILE.")
        from holodesk.policy.scripted import ScriptedPolicy

        return ScriptedPolicy(script)  # the script file names its protocol (old files: holo-v1)
    if settings.policy == "remote":
        if not settings.endpoint:
            raise SettingsError("the remote policy needs an endpoint URL",
                                hint="Pass --endpoint URL or set 'endpoint' in the settings.")
        from holodesk.policy.remote import RemotePolicy
        from holodesk.secrets import resolve_api_key

        api_key, source = resolve_api_key(settings.endpoint)
        log.info("remote policy %s: API key from %s", settings.endpoint, source)
        return RemotePolicy(
            settings.endpoint,
            settings.model,
            api_key=api_key,
            protocol=settings.protocol,
            max_images=settings.max_images,
            structured_output=settings.constrained_decoding,
            reasoning=settings.reasoning,
        )
    if settings.policy == "local":
        from holodesk.policy.holotron import HolotronPolicy

        quant = {"bf16": None, "8bit": "8bit", "4bit": "4bit"}[settings.precision]
        return HolotronPolicy.load(
            settings.model,
            quantization=quant,
            reasoning=settings.reasoning,
            max_images=settings.max_images,
            constrained=settings.constrained_decoding,
            protocol=settings.protocol,
            progress=progress,
            max_new_tokens=settings.max_reply_tokens,
            max_string_chars=settings.max_string_chars,
            decoder=settings.decoder,
            cancel=cancel,
        )
    raise SettingsError(f"unknown policy {settings.policy!r}")


_mutter_lock = threading.Lock()
_mutter_session: MutterRemoteDesktop | None = None
_portal_session: PortalRemoteDesktop | None = None


def desktop_backend(settings: Settings | None = None) -> BackendChoice:
    """The desktop backend for this session (``desktop_backend`` setting, else chosen from the session).

    Raises:
        DisplayError: the backend cannot work here (the message says why, the hint what to do).
    """
    from holodesk.display import choose_backend

    choice = choose_backend(settings.desktop_backend if settings is not None else "auto")
    log.info("desktop backend: %s (%s)", choice.backend, choice.reason)
    if choice.display.problem and choice.backend == "mss":
        log.warning("%s %s", choice.display.problem, choice.display.hint)
    return choice


def mutter_session() -> MutterRemoteDesktop:
    """The process's one Mutter remote-desktop session, shared by the capture backend and the executor
    (input goes through the streams the capture reads). Started on first use, closed at exit."""
    global _mutter_session
    with _mutter_lock:
        if _mutter_session is None:
            import atexit

            from holodesk.display.mutter import MutterRemoteDesktop

            _mutter_session = MutterRemoteDesktop()
            atexit.register(_mutter_session.close)
        return _mutter_session


def portal_session() -> PortalRemoteDesktop:
    """The process's one xdg-desktop-portal remote-desktop session (as :func:`mutter_session`; the desktop
    may ask for permission when it starts). Started on first use, closed at exit."""
    global _portal_session
    with _mutter_lock:
        if _portal_session is None:
            import atexit

            from holodesk.display.portal import PortalRemoteDesktop

            _portal_session = PortalRemoteDesktop()
            atexit.register(_portal_session.close)
        return _portal_session


def _wayland_session(backend: str) -> MutterRemoteDesktop | PortalRemoteDesktop:
    return portal_session() if backend == "portal" else mutter_session()


def build_capture(settings: Settings | None = None) -> CaptureBackend:
    """The real screen capture backend of :func:`desktop_backend` (needs a display).

    Raises:
        DisplayError: no backend can work here.
    """
    backend = desktop_backend(settings).backend
    if backend in ("mutter", "portal"):
        from holodesk.capture.pipewire_backend import MutterCapture

        return MutterCapture(_wayland_session(backend))
    from holodesk.capture.mss_backend import MssCapture

    return MssCapture()


def build_executor(settings: Settings, stop_event: threading.Event | None = None) -> Executor:
    """The real input executor of :func:`desktop_backend` (needs a display). ``stop_event`` ends a running
    ``wait`` early; share it with the Session (its ``stop_event`` argument).

    Raises:
        DisplayError: no backend can work here.
    """
    backend = desktop_backend(settings).backend
    if backend in ("mutter", "portal"):
        from holodesk.control.mutter_executor import MutterExecutor

        return MutterExecutor(_wayland_session(backend), stop_event=stop_event)
    from holodesk.control.pyautogui_executor import PyAutoGUIExecutor

    return PyAutoGUIExecutor(typing=settings.typing, stop_event=stop_event)
