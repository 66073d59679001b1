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


def build_capture() -> CaptureBackend:
    """The real screen capture backend (needs a display)."""
    from holodesk.capture.mss_backend import MssCapture

    return MssCapture()


def build_executor(settings: Settings, stop_event: threading.Event | None = None) -> Executor:
    """The real input executor (needs a display). ``stop_event`` ends a running ``wait`` early; share it
    with the Session (its ``stop_event`` argument)."""
    from holodesk.control.pyautogui_executor import PyAutoGUIExecutor

    return PyAutoGUIExecutor(typing=settings.typing, stop_event=stop_event)
