"""Builds sessions from settings: the policy, capture, executor, approval and limits.

:func:`build_session` is the one place a :class:`~holodesk.session.loop.Session` is assembled; the CLI,
the tray app (and through it the MCP server) and the tests use it, so all run the very same
configuration. The backends' libraries (pyautogui, GStreamer, D-Bus) are imported only when chosen.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from holodesk.control.accessibility import NO_SCREEN_POSITIONS, AccessibilityProbe
from holodesk.control.grabs import grab_watcher, input_grab_problem
from holodesk.errors import HolodeskError, SettingsError
from holodesk.policy.generation import GenerationOptions
from holodesk.policy.scripted import ScriptedPolicy
from holodesk.session.approval import ApprovalPolicy
from holodesk.session.desktop import desktop
from holodesk.session.loop import SCREEN_SETTLE_S, Session
from holodesk.session.state import SessionLimits
from holodesk.settings import policy_fields

if TYPE_CHECKING:
    from holodesk.capture.base import CaptureBackend
    from holodesk.control.base import Executor
    from holodesk.core.element import ElementProbe
    from holodesk.core.wording import WindowInfo
    from holodesk.display import BackendChoice
    from holodesk.policy.base import Policy
    from holodesk.settings import Settings

log = logging.getLogger(__name__)


def build_policy(settings: Settings, *, progress: Any = None, cancel: threading.Event | None = None) -> Policy:
    """The policy the settings select, built from the settings of :func:`holodesk.settings.policy_fields`
    only (:func:`policy_key` keeps a built one while they stay the same). ``progress(stage, fraction)`` and
    ``cancel`` reach the local model's download and load.

    Raises:
        SettingsError: replay without a script file, remote policy without an endpoint, unknown policy.
        ModelLoadError / PolicyError: from the chosen backend.
    """
    if settings.policy == "script":
        if settings.script_file is None:
            raise SettingsError("policy 'script' needs a script file",
                                hint="Choose the replay file in Settings (Replay file), or pass --script FILE.")
        return ScriptedPolicy(settings.script_file)  # the script file names its protocol (old files: holo-v1)
    if settings.policy == "remote":
        if not settings.endpoint:
            raise SettingsError("the remote policy needs an endpoint URL",
                                hint="Pass --endpoint URL or set 'endpoint' in the settings.")
        # lazy: start-up time (httpx and the remote policy, about 0.06 s; the tray imports this module); the
        # keychain (keyring) loads only for a remote policy (field case F19)
        from holodesk.policy.remote import RemotePolicy
        from holodesk.secrets import resolve_api_key

        api_key, source = resolve_api_key(settings.endpoint)
        log.info("remote policy %s: API key from %s", settings.endpoint, source)
        return RemotePolicy(settings.endpoint, settings.model, api_key=api_key, options=generation_options(settings),
                            timeout_s=settings.request_timeout_s)
    if settings.policy == "local":
        # lazy: the local runtime loads torch and transformers (the tray starts without them)
        from holodesk.policy.local import load_local_policy

        quant = {"bf16": None, "8bit": "8bit", "4bit": "4bit"}[settings.precision]
        return load_local_policy(  # Holotron-12B or a native family, by the checkpoint's config.json
            settings.model, generation_options(settings), quantization=quant, decoder=settings.decoder,
            progress=progress, cancel=cancel)
    raise SettingsError(f"unknown policy {settings.policy!r}")


def generation_options(settings: Settings) -> GenerationOptions:
    """The generation options of the settings (:meth:`GenerationOptions.from_settings
    <holodesk.policy.generation.GenerationOptions.from_settings>`: the model's profile where the settings say
    "auto" / unset), each choice logged.

    Raises:
        SettingsError, PolicyError: see :meth:`~holodesk.policy.generation.GenerationOptions.for_model`.
    """
    options = GenerationOptions.from_settings(settings)
    known = options.reasoning_switch is not None
    for note in options.notes:
        log.log(logging.INFO if known else logging.WARNING, "%s", note)
    sampling = options.sampling
    log.info("generation: think before acting %s, %s, seed %d", "on" if options.reasoning else "off",
             "greedy" if sampling.greedy else f"temperature {sampling.temperature}, top_p {sampling.top_p}",
             sampling.seed)
    return options


def default_focus_probe() -> Callable[[], str | None] | None:
    """The focused window's class, as the risk rules read it (:func:`holodesk.control.window.focused_window_class`),
    or None where the X11 window helpers cannot be imported."""
    try:
        # lazy: None where the X11 window helpers cannot be imported (the docstring)
        from holodesk.control.window import focused_window_class
    except ImportError:
        return None
    return focused_window_class


def default_window_probe() -> Callable[..., Any] | None:
    """The window at an input point (:func:`holodesk.control.window.window_at`), or None where the X11 window
    helpers cannot be imported."""
    try:
        # lazy: None where the X11 window helpers cannot be imported (the docstring)
        from holodesk.control.window import window_at
    except ImportError:
        return None
    return window_at


def desktop_backend(settings: Settings | None = None) -> BackendChoice:
    """The desktop backend of this process (``desktop_backend`` setting, else chosen from the session), chosen
    once per process (:func:`holodesk.session.desktop.desktop`).

    Raises:
        DisplayError: the backend cannot work here (the message says why, the hint what to do).
    """
    return desktop(settings).choice


def build_capture(settings: Settings | None = None) -> CaptureBackend:
    """A task's screen capture on the process's desktop backend (needs a display); on Wayland the process's
    one screen-cast capture, which the task's ``close`` leaves open (:class:`holodesk.session.desktop.Desktop`).

    Raises:
        DisplayError: no backend can work here.
    """
    return desktop(settings).capture()


def build_executor(settings: Settings, stop_event: threading.Event | None = None) -> Executor:
    """A task's input executor on the process's desktop backend (needs a display). ``stop_event`` ends a
    running ``wait`` early; share it with the Session (its ``stop_event`` argument).

    Raises:
        DisplayError: no backend can work here.
    """
    return desktop(settings).executor(settings, stop_event)


def build_element_probe(settings: Settings) -> ElementProbe | None:
    """The accessibility lookup of :func:`desktop_backend`'s desktop
    (:class:`~holodesk.control.accessibility.AccessibilityProbe`): on X11 the element under a point and the
    focused one; on GNOME Wayland and the portal the focused element only, from the window that states it is
    active (no window's screen position is known there:
    :data:`~holodesk.control.accessibility.NO_SCREEN_POSITIONS`; ``holodesk doctor`` says so). None where no
    desktop backend works (the executor reports that)."""
    try:
        backend = desktop_backend(settings).backend
    except HolodeskError as exc:
        log.warning("no accessibility lookup: %s", exc)
        return None
    if backend in ("mutter", "portal"):
        log.warning("the accessibility lookup on the %s backend finds the focused element only: %s; pointer actions "
                    "ask, as every pointer action does there", backend, NO_SCREEN_POSITIONS)
        return AccessibilityProbe(screen_coordinates=False)
    return AccessibilityProbe()


def build_grab_probe(settings: Settings) -> Callable[[Sequence[int | None]], str | None] | None:
    """The input-grab check of :func:`desktop_backend`'s desktop: on X11 a
    :class:`holodesk.control.grabs.GrabWatcher` (a program's own open menu is not another client's grab), or
    where it cannot watch (no RECORD extension) :func:`holodesk.control.grabs.input_grab_problem` (every grab
    asks; logged); None on GNOME Wayland and the portal (no client can grab input from another there) and
    where no desktop backend works."""
    try:
        backend = desktop_backend(settings).backend
    except HolodeskError:
        return None
    if backend in ("mutter", "portal"):
        return None
    try:
        return grab_watcher()
    except OSError as exc:
        log.warning("input grabs are checked without knowing who holds them (every grab asks, an open menu too): %s",
                    exc)
        return input_grab_problem


# -- the session ------------------------------------------------------------------------------------------
PolicyKey = tuple[tuple[str, Any], ...]


def policy_key(settings: Settings) -> PolicyKey:
    """``((name, value), ...)`` of every setting the policy is built from (:func:`holodesk.settings.policy_fields`):
    two settings with the same key build the same policy."""
    return tuple((name, getattr(settings, name)) for name in policy_fields())


class PolicyCache:
    """One policy kept from task to task, built again when :func:`policy_key` changes (a setting the policy
    reads was changed); a replay is used up by its run, so it is read again for every task."""

    def __init__(self) -> None:
        self.policy: Policy | None = None
        self.key: PolicyKey | None = None

    def get(self, settings: Settings, build: Callable[[Settings], Policy]) -> Policy:
        """The kept policy when ``settings`` have its key, else ``build(settings)`` (the old one is closed).

        Raises:
            Whatever ``build`` raises (the old policy is closed and forgotten first).
        """
        key = policy_key(settings)
        if self.policy is None or key != self.key or settings.policy == "script":
            self.close()
            self.policy = build(settings)
            self.key = key
        return self.policy

    def close(self) -> None:
        """Close the kept policy (if any) and forget it."""
        policy, self.policy, self.key = self.policy, None, None
        if policy is not None:
            policy.close()


def session_limits(settings: Settings) -> SessionLimits:
    """The caps of one task and its monitor, from the settings."""
    return SessionLimits(settings.max_steps, settings.max_wall_s, settings.max_parse_failures,
                         settings.max_repeats, settings.monitor)


def build_session(
    settings: Settings,
    approval: ApprovalPolicy | Callable[[Policy], ApprovalPolicy],
    *,
    policy: Callable[[Settings], Policy] = build_policy,
    capture: Callable[[Settings], CaptureBackend] = build_capture,
    executor: Callable[[Settings, threading.Event], Executor] = build_executor,
    element_probe: Callable[[Settings], ElementProbe | None] = build_element_probe,
    stop_event: threading.Event | None = None,
    episodes_dir: Path | None = None,
    focus_probe: Callable[[], str | None] | None = None,
    window_probe: Callable[..., WindowInfo | None] | None = None,
    before_capture: Callable[[], None] | None = None,
    after_capture: Callable[[], None] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Session:
    """The session for one task with ``settings``: capture, executor (``prepare()``d when it has one),
    policy, approval and limits, all from the same settings, sharing one stop event.

    Args:
        settings: the effective settings of the task (overrides already applied, e.g. ``load_settings(**flags)``).
        approval: the approval policy, or a function of the policy that makes it (a terminal approver
            speaks the policy's protocol).
        policy / capture / executor: how each part is built from the settings (defaults:
            :func:`build_policy`, :func:`build_capture`, :func:`build_executor`); a :class:`PolicyCache`'s
            ``get`` keeps a loaded model between tasks.
        element_probe: how the accessibility lookup is built (default :func:`build_element_probe`).
        stop_event: the task's stop event (default: a new one); the executor and the Session share it, so a
            stop or the wall-time cap also ends a running ``wait`` (F09, F12).
        episodes_dir: where the episode is recorded (default ``settings.episodes_dir``).
        focus_probe / window_probe / before_capture / after_capture: as :class:`Session` takes them.
        meta: extra fields for the episode's start record (the monitor's label is added).

    Raises:
        SettingsError: ``settings.monitor`` does not exist on this display (or from the policy).
        DisplayError, CaptureError, ModelLoadError, SecretStoreError, PolicyError: from the parts.
    """
    stop = stop_event if stop_event is not None else threading.Event()
    grabber = capture(settings)
    monitors = grabber.monitors()
    if not 1 <= settings.monitor <= len(monitors):
        raise SettingsError(f"monitor {settings.monitor} does not exist; this display has {len(monitors)}",
                            hint="Pick another monitor (Settings, or --monitor N); `holodesk doctor` lists them.")
    performer = executor(settings, stop)
    if getattr(performer, "stop_event", stop) is not stop:
        performer.stop_event = stop  # type: ignore[attr-defined]  # executors that wait watch it
    prepare = getattr(performer, "prepare", None)
    if callable(prepare):
        prepare()
    chosen = policy(settings)
    session = Session(
        chosen, grabber, performer, approval if isinstance(approval, ApprovalPolicy) else approval(chosen),
        session_limits(settings),
        episodes_dir=episodes_dir if episodes_dir is not None else settings.episodes_dir,
        focus_probe=focus_probe,
        window_probe=window_probe,
        element_probe=element_probe(settings),
        grab_probe=build_grab_probe(settings),
        before_capture=before_capture,
        after_capture=after_capture,
        meta={"monitor_label": monitors[settings.monitor - 1].label, **(meta or {})},
        stop_event=stop,
        settle_s=SCREEN_SETTLE_S,
    )
    watch_desktop = getattr(performer, "watch_desktop", None)
    if callable(watch_desktop):  # the desktop ending stops the task at once, whatever it waits for
        watch_desktop(lambda reason: session.request_stop(by=f"the desktop ({reason})"))
    return session
