"""The GNOME-on-Wayland executor: input through Mutter's RemoteDesktop ``Notify*`` calls.

* Actions arrive placed (:class:`holodesk.core.geometry.PlacedAction`, the input points the approval showed,
  in Mutter's logical layout); each goes into its monitor's stream pixels for ``NotifyPointerMotionAbsolute``
  only while that monitor still has the layout of the frame.
* Keys are sent as keysyms; Mutter finds the keycode and the shift level in the active layout.
* Text of printable ASCII, newlines and tabs is typed key by key; a text with any other character (outside
  the keyboard layout on most systems: CJK, most accented letters on ``us``, which Mutter drops as keys) is
  pasted as a whole through the compositor clipboard (Mutter's selection API, Ctrl+V), and the clipboard's
  previous text is put back afterwards unless the user copied something meanwhile; a final newline (the
  ``press_enter`` of ``write_desktop``) is pressed as Enter after the paste. The paste is known to be taken
  when the focused window fetched the text; a paste nobody fetches fails the action.
* The stop event ends a running ``wait`` and every action not yet started with ``stopped_by_user``.
* When the desktop ends (the session's ``ended``: the compositor left the bus) a running ``wait`` and every
  later action fail at once with "the desktop session ended".
* Errors are returned as failed :class:`ActionResult` values, never raised.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from holodesk.control.base import ActionResult, Capability, ExecutorCapabilities, click_result, handler_of
from holodesk.control.held_keys import HeldKeys, key_result, refuse_typing_while_held
from holodesk.control.window import refuse_holodesk_target
from holodesk.core.actions import OFF_SCREEN_TYPES, Action, Click, Drag, Key, KeyDown, KeyUp, Move, Scroll, Type, Wait
from holodesk.core.geometry import Frame, InputPoint, Monitor, PlacedAction
from holodesk.display.mutter import (
    AXIS_HORIZONTAL,
    AXIS_VERTICAL,
    BTN_LEFT,
    BTN_MIDDLE,
    BTN_RIGHT,
    MutterRemoteDesktop,
    keysym_for,
)
from holodesk.display.portal import PortalRemoteDesktop
from holodesk.display.remote import DESKTOP_ENDED
from holodesk.errors import ActionError, GeometryMismatch, HolodeskError

log = logging.getLogger(__name__)

_BUTTON_CODES = {"left": BTN_LEFT, "right": BTN_RIGHT, "middle": BTN_MIDDLE}
"""Evdev codes of the buttons of :data:`holodesk.core.actions.MOUSE_BUTTONS`."""

TYPED_DIRECTLY = frozenset(chr(c) for c in range(0x20, 0x7F)) | {"\n", "\t"}
"""Characters typed key by key (on every layout Mutter maps them); a text with any other character is
pasted as a whole."""


class _Stopped(Exception):
    """The stop event was set."""


MUTTER_CAPABILITIES = ExecutorCapabilities(
    geometry_check=Capability(True, "the monitor the capture reports must be a monitor of the remote-desktop "
                              "session with the same logical geometry (Mutter cannot report the pointer's "
                              "position, so no probe is read back)"),
    failsafe_corners=Capability(False, "GNOME on Wayland tells no client where the pointer is, so a screen "
                                "corner cannot stop a run; stop it with the overlay's Stop or the `holodesk stop` "
                                "command bound to a key (Settings > Keyboard > Custom Shortcuts)"),
    episode_end=Capability(True, "keys held by key_down are released (each other action releases its keys and "
                           "buttons, and the clipboard's text is put back within the paste)"),
    desktop_end=Capability(True, "the compositor leaving the session bus stops the running task, and later "
                           "tasks fail at once"),
    own_windows=Capability(True, "a pointer action whose point is on one of Holodesk's windows is refused: on a "
                           "Wayland session Holodesk's UI runs through XWayland, whose stacking order names them "
                           "(a native Wayland window above one is not seen there, so a point on it is refused too; "
                           "never the other way round). Keys are not checked (XWayland does not know which "
                           "Wayland window has the focus); without XWayland (no DISPLAY) nothing can be checked, "
                           "and the log says so"),
)
"""What :class:`MutterExecutor` can do beyond ``execute`` (shown by ``holodesk doctor``)."""


class MutterExecutor:
    """:class:`~holodesk.control.base.Executor` on Mutter's RemoteDesktop API (GNOME on Wayland).

    Args:
        session: the remote-desktop session (shared with :class:`~holodesk.capture.pipewire_backend.MutterCapture`,
            whose frames carry the monitors this executor acts on).
        stop_event: when set, a running ``wait`` and any later action end with ``stopped_by_user``.
        drag_duration_s: seconds for the motion between press and release of a drag.
        key_delay_s: pause after each key release while typing (lets slow clients keep up).
        paste_timeout_s: how long the focused window may take to fetch pasted text.
        input_ready_timeout_s: how long an action waits for the session's input to be confirmed
            (``session.input_ready``, set by the capture backend's first grab).
        paste_settle_s: pause after the focused window fetched pasted text, before the action ends, so
            the window has read and inserted it before the next input (Holodesk cannot observe that).
    """

    name = "mutter"
    capabilities = MUTTER_CAPABILITIES

    def __init__(
        self,
        session: MutterRemoteDesktop | PortalRemoteDesktop,
        *,
        stop_event: threading.Event | None = None,
        drag_duration_s: float = 0.25,
        key_delay_s: float = 0.002,
        paste_timeout_s: float = 5.0,
        input_ready_timeout_s: float = 10.0,
        paste_settle_s: float = 0.15,
    ) -> None:
        self.session = session
        self.name = getattr(session, "backend_name", "mutter")
        self.stop_event = stop_event or threading.Event()
        self.drag_duration_s = drag_duration_s
        self.key_delay_s = key_delay_s
        self.paste_timeout_s = paste_timeout_s
        self.input_ready_timeout_s = input_ready_timeout_s
        self.paste_settle_s = paste_settle_s
        self._own_windows_warned = False  # no XWayland: the own-window check cannot run (logged once)
        self._held = HeldKeys(self.name)

    def execute(self, placed: PlacedAction) -> ActionResult:
        """Perform ``placed.action`` at ``placed.input_points`` (the points the approval showed); refused
        when the frame's monitor no longer has the layout it had at capture.

        Returns:
            ActionResult: "performed", "failed" (with the reason) or "stopped_by_user". ``details`` carry
            ``input_points``, ``method`` and, for text, ``typing_method`` and the runs pasted. Never raises.
        """
        t0 = time.perf_counter()
        action, frame = placed.action, placed.frame
        details: dict[str, Any] = {"kind": action.kind, "monitor": frame.monitor.index, "backend": self.name}
        try:
            if self.stop_event.is_set():
                raise _Stopped()
            message = self._perform(placed, details)
            status, ok = "performed", True
        except _Stopped:
            status, ok, message = "stopped_by_user", False, "stopped by user"
        except HolodeskError as exc:
            details["error"] = type(exc).__name__
            status, ok, message = "failed", False, str(exc)
        except Exception as exc:
            log.exception("action %s failed", action.kind)
            details["error"] = type(exc).__name__
            status, ok, message = "failed", False, f"{action.kind} failed: {type(exc).__name__}: {exc}"
        return ActionResult(ok=ok, status=status, message=message, details=details,
                            duration_ms=(time.perf_counter() - t0) * 1000.0)

    @property
    def held_keys(self) -> tuple[str, ...]:
        """The keys held down now by ``key_down`` (canonical names, press order)."""
        return self._held.keys

    def end_episode(self) -> None:
        """Release the keys held by ``key_down`` (:meth:`HeldKeys.release_all`). Never raises."""
        if self._held.keys:
            self._held.release_all(self._key_up)

    def release_left_held_keys(self) -> tuple[str, ...]:
        """Release the keys a killed earlier run left held on this desktop (:meth:`HeldKeys.release_left_over`);
        Mutter also releases a closed remote-desktop session's keys itself. Never raises.

        Returns:
            The keys released.
        """
        return self._held.release_left_over(self._key_up)

    def _key_down(self, key: str) -> None:
        self.session.key(keysym_for(key), True)

    def _key_up(self, key: str) -> None:
        self.session.key(keysym_for(key), False)

    def watch_desktop(self, stop: Callable[[str], None]) -> None:
        """Call ``stop(reason)`` when the desktop ends during this task (replacing the previous task's
        watcher: the session runs one task at a time); at once when it has ended already."""
        self.session.on_end = stop
        if self.session.ended.is_set():
            stop(f"{DESKTOP_ENDED}: {self.session.ended_reason}")

    def check_geometry(self, monitor: Monitor) -> list[list[int]]:
        """Start-up self-check (F28): ``monitor`` (as the capture reports it, logical layout) must be the
        session's monitor of that index with the same geometry, so input points map into its stream. The
        pointer is not moved: Mutter reports no pointer position to read back.

        Returns:
            ``[[left, top], [right, bottom]]``: the corners checked (input space).
        Raises:
            GeometryMismatch: the session has no such monitor, or it has another geometry.
            DisplayError: Mutter's APIs are not reachable, or the desktop ended.
        """
        try:
            mon = self.session.monitor(monitor.index)
        except ActionError as exc:
            raise GeometryMismatch(f"start-up geometry check failed: the screen capture reports {monitor.label}, "
                                   f"which the remote-desktop session does not have ({exc.message}); the run was "
                                   "refused before any action", hint="Run 'holodesk doctor'.") from exc
        if mon.monitor != monitor:
            raise GeometryMismatch(f"start-up geometry check failed: the screen capture reports {monitor.label}, "
                                   f"but the remote-desktop session's monitor {monitor.index} is "
                                   f"{mon.monitor.label}; clicks would land in the wrong place, so the run was "
                                   "refused before any action",
                                   hint="Check the monitor layout in GNOME's display settings, then run "
                                        "'holodesk doctor'.")
        right, bottom = monitor.left + monitor.width - 1, monitor.top + monitor.height - 1
        return [[monitor.left, monitor.top], [right, bottom]]

    def _refuse_holodesk_target(self, points: Sequence[InputPoint]) -> None:
        """Refuse a pointer action whose point is on one of Holodesk's own windows (XWayland's stacking order,
        :func:`~holodesk.control.window.refuse_holodesk_target`; the points are in Mutter's logical layout,
        which is XWayland's root space). Without XWayland nothing can be checked: logged once.

        Raises:
            ActionError: a point is on Holodesk's own window; nothing was done.
        """
        if not os.environ.get("DISPLAY"):
            if not self._own_windows_warned:
                self._own_windows_warned = True
                log.warning("no XWayland (DISPLAY is unset): a point on Holodesk's own window cannot be told "
                            "apart from the program under it, so such actions are not refused")
            return
        refuse_holodesk_target([(p.x, p.y) for p in points])

    # -- pointer ------------------------------------------------------------------------------------
    def _stream_point(self, frame: Frame, ip: InputPoint) -> tuple[str, float, float]:
        """``(connector, x, y)`` in stream pixels of the frame's monitor for input point ``ip``.

        Raises:
            ActionError: the monitor layout changed since the frame was captured.
        """
        mon = self.session.monitor(frame.monitor.index)
        if mon.monitor != frame.monitor:
            raise ActionError(f"the monitor layout changed since the frame was captured ({frame.monitor.label} "
                              f"is now {mon.monitor.label}); did nothing",
                              hint="Capture a new frame and propose the action again.")
        # Stream pixels = logical offset on the monitor times Mutter's scale (centre of the input cell).
        return (mon.connector, (ip.x - mon.monitor.left + 0.5) * mon.scale,
                (ip.y - mon.monitor.top + 0.5) * mon.scale)

    def _move(self, frame: Frame, ip: InputPoint) -> None:
        self.session.move_pointer(*self._stream_point(frame, ip))

    def _click(self, button: int, count: int = 1) -> None:
        for _ in range(count):
            self.session.button(button, True)
            self.session.button(button, False)

    def _wait(self, seconds: float) -> str:
        """Wait ``seconds`` (s), ending early on a stop or when the desktop session ends."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.stop_event.wait(min(left, 0.1)):
                raise _Stopped()
            self.session.raise_if_ended()
        return f"waited {seconds:g} s"

    def _drag(self, frame: Frame, start: InputPoint, end: InputPoint) -> str:
        """Press the left button at ``start``, move in small steps to ``end`` (input pixels), release."""
        self._stream_point(frame, end)  # the end must be on the frame's monitor before anything is pressed
        self._move(frame, start)
        self.session.button(BTN_LEFT, True)
        try:
            steps = max(2, int(self.drag_duration_s / 0.02))
            for i in range(1, steps + 1):
                x = start.x + (end.x - start.x) * i // steps
                y = start.y + (end.y - start.y) * i // steps
                self._move(frame, InputPoint(x, y))
                time.sleep(self.drag_duration_s / steps)
        finally:
            self.session.button(BTN_LEFT, False)
        return f"dragged from ({start.x}, {start.y}) to ({end.x}, {end.y})"

    def _perform(self, placed: PlacedAction, details: dict[str, Any]) -> str:
        action, frame, points = placed.action, placed.frame, placed.input_points
        handler = handler_of(self.name, self._handlers, action)
        if not action.on_screen and not isinstance(action, Wait):
            return handler(action, frame, points, details)
        self.session.raise_if_ended()
        if isinstance(action, Wait):
            return handler(action, frame, points, details)
        if not self.session.input_ready.wait(self.input_ready_timeout_s):
            raise ActionError("Holodesk's input on this desktop is not confirmed yet (no frame has been captured "
                              "since the remote-desktop session started); did nothing",
                              hint="Capture a frame first; `holodesk doctor` shows the Wayland backend's state.")
        details["input_points"] = [[p.x, p.y] for p in points]
        if points:
            self._refuse_holodesk_target(points)
        return handler(action, frame, points, details)

    @property
    def _handlers(self) -> dict[type[Action], Callable[[Any, Frame, tuple[InputPoint, ...], dict[str, Any]], str]]:
        """What this executor does for each action class it performs: ``handler(action, frame, points, details)``
        returns the result in words."""
        return {**dict.fromkeys(OFF_SCREEN_TYPES, self._nothing), Wait: self._wait_step,
                Click: self._click_step, Move: self._move_step, Drag: self._drag_step, Scroll: self._scroll_step,
                Key: self._keys, KeyDown: self._keys, KeyUp: self._keys, Type: self._type_step}

    def _nothing(self, action: Action, frame: Frame, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        details["method"] = "none"
        return "nothing to do on screen"

    def _wait_step(self, action: Wait, frame: Frame, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        details["method"] = "wait"
        return self._wait(action.seconds)

    def _click_step(self, action: Click, frame: Frame, points: tuple[InputPoint, ...],
                    details: dict[str, Any]) -> str:
        (ip,) = points
        self._move(frame, ip)
        self._click(_BUTTON_CODES[action.button], action.count)
        details["method"] = f"NotifyPointerButton({action.button}) x{action.count}"
        return click_result(action, ip)

    def _move_step(self, action: Move, frame: Frame, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        (ip,) = points
        self._move(frame, ip)
        details["method"] = "NotifyPointerMotionAbsolute"
        return f"moved the pointer to ({ip.x}, {ip.y})"

    def _drag_step(self, action: Drag, frame: Frame, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        details["method"] = "NotifyPointerButton + motion"
        return self._drag(frame, *points)

    def _scroll_step(self, action: Scroll, frame: Frame, points: tuple[InputPoint, ...],
                     details: dict[str, Any]) -> str:
        if points:
            self._move(frame, points[0])
        axis = AXIS_VERTICAL if action.direction in ("up", "down") else AXIS_HORIZONTAL
        steps = action.amount if action.direction in ("down", "right") else -action.amount
        self.session.scroll(axis, steps)
        details["method"] = "NotifyPointerAxisDiscrete"
        return f"scrolled {action.direction} by {action.amount}"

    def _type_step(self, action: Type, frame: Frame, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        refuse_typing_while_held(self._held.keys)
        if action.replace:  # select what the field holds, so the text replaces it
            self._press_chord(("ctrl", "a"))
            details["replaced"] = True
        return self._type(action.text, details)

    # -- keyboard -----------------------------------------------------------------------------------
    def _keys(self, action: Key | KeyDown | KeyUp, frame: Frame, points: tuple[InputPoint, ...],
              details: dict[str, Any]) -> str:
        """Perform a key action: a chord (with taps), or keys held down or released across steps.

        Raises:
            ActionError: a key without keysym, a key held twice or released without being held.
        """
        if isinstance(action, Key):
            for _ in range(action.repeat):
                self._press_chord(action.keys, action.taps)
            details["method"] = "NotifyKeyboardKeysym"
            return key_result(action)
        if isinstance(action, KeyDown):
            for key in action.keys:
                keysym_for(key)  # every key has a keysym before any goes down
            self._held.hold(action.keys, self._key_down)
            details["method"] = "NotifyKeyboardKeysym (held)"
        else:
            self._held.release(action.keys, self._key_up)
            details["method"] = "NotifyKeyboardKeysym (released)"
        details["held_keys"] = list(self._held.keys)
        return key_result(action)

    def _press_chord(self, keys: Sequence[str], taps: Sequence[str] = ()) -> None:
        """Press ``keys`` in order, tap each key of ``taps`` in turn, release ``keys`` in reverse order (always
        released). Keys held by ``key_down`` are neither pressed again nor released.

        Raises:
            ActionError: a key without keysym (checked before anything is pressed).
        """
        keysyms = [keysym_for(k) for k in keys]
        tap_syms = [keysym_for(k) for k in taps]
        pressed: list[int] = []
        try:
            for key, sym in zip(keys, keysyms, strict=True):
                if key not in self._held.keys:
                    self.session.key(sym, True)
                    pressed.append(sym)
            for sym in tap_syms:
                self.session.key(sym, True)
                self.session.key(sym, False)
        finally:
            for sym in reversed(pressed):
                self.session.key(sym, False)

    def _type(self, text: str, details: dict[str, Any]) -> str:
        if all(ch in TYPED_DIRECTLY for ch in text):
            details["typing_method"] = details["method"] = "keysym"
            for ch in text:
                if self.stop_event.is_set():
                    raise _Stopped()
                sym = keysym_for(ch)
                self.session.key(sym, True)
                self.session.key(sym, False)
                if self.key_delay_s:
                    time.sleep(self.key_delay_s)
            return f"typed {len(text)} characters"
        # One paste for the whole text: keys sent after a paste can overtake the pasted text (the app
        # reads it from a pipe over several main-loop turns while key events keep arriving). A final newline
        # (write_desktop's press_enter) is the Enter key after the paste: a pasted newline submits nothing.
        body, enter = (text[:-1], True) if text.endswith("\n") else (text, False)
        details["typing_method"] = "clipboard"
        details["method"] = "compositor clipboard + Ctrl+V" + (" + Enter" if enter else "")
        if not self.session.paste_text(body, lambda: self._press_chord(("ctrl", "v")), timeout_s=self.paste_timeout_s):
            raise ActionError(f"the focused window did not take the pasted text within {self.paste_timeout_s:g} s; "
                              "nothing was typed", hint="Click into a text field first.")
        # The app fetched the text; give it time to read and insert it before the next input arrives.
        time.sleep(self.paste_settle_s)
        if enter:
            if self.stop_event.is_set():
                raise _Stopped()
            self._press_chord(("enter",))
            return f"pasted {len(body)} characters and pressed Enter"
        return f"pasted {len(text)} characters"
