"""The real executor: performs actions with pyautogui (pointer, keys) and the typers in
:mod:`holodesk.control.typing` (X11) and :mod:`holodesk.control.paste` (the clipboard).

* pyautogui is imported lazily, after :func:`holodesk.display.require_display`, because it
  raises at import without a display (F16).
* Actions arrive placed (:class:`holodesk.core.geometry.PlacedAction`): the pointer goes to exactly the
  input points the approval showed; there is no coordinate math here.
* After each pointer move the position is read back until it has settled (F22,
  :class:`holodesk.control.pointer.PointerSettle`); only a pointer that really is elsewhere fails the step:
  nothing is clicked and the result is "failed" (F06). A drag visits its end point before pressing the
  button, so an unreachable end fails before anything is pressed.
* :meth:`PyAutoGUIExecutor.check_geometry` is the start-up self-check (F28): the pointer is sent to
  points just inside the corners and to the centre of the chosen monitor and read back; if the input
  space disagrees with the capture geometry, :class:`~holodesk.errors.GeometryMismatch` is raised
  before anything is clicked. The session calls it once per run.
* The fail-safe (pointer in a corner of the screen or of any monitor,
  :func:`holodesk.control.pointer.failsafe_points`) becomes
  ``status="stopped_by_user"`` (F12); it is checked before every action and during waits.
* When the X server goes away (``desktop_watch``, :class:`~holodesk.display.x11.X11Watch`) the running task is
  told (:meth:`PyAutoGUIExecutor.watch_desktop`), a running ``wait`` ends, and this and every later action
  fail at once with "the desktop session ended" (never an Xlib traceback).
* Errors are returned as failed :class:`ActionResult` values, never raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

from holodesk.control.base import ActionResult, Capability, ExecutorCapabilities, click_result, handler_of
from holodesk.control.held_keys import HeldKeys, key_result, refuse_typing_while_held
from holodesk.control.paste import ClipboardPaster
from holodesk.control.pointer import PointerSettle, Unreachable, failsafe_points
from holodesk.control.typing import X11KeysymTyper
from holodesk.control.window import (
    focused_window_class,
    monitor_rects,
    refuse_holodesk_target,
    toplevel_at_pointer,
    wait_for_focus_in,
)
from holodesk.core.actions import OFF_SCREEN_TYPES, Action, Click, Drag, Key, KeyDown, KeyUp, Move, Scroll, Type, Wait
from holodesk.core.geometry import InputPoint, Monitor, PlacedAction
from holodesk.display import require_display
from holodesk.display.remote import DESKTOP_ENDED
from holodesk.display.x11 import X11Watch, is_connection_closed
from holodesk.dpi import ensure_per_monitor_dpi_awareness
from holodesk.errors import ActionError, DisplayError, GeometryMismatch, HolodeskError

log = logging.getLogger(__name__)

TypingMethod = Literal["auto", "xtest", "clipboard"]

_WHEEL_DELTA_WINDOWS = 120  # pyautogui on Windows passes clicks straight to MOUSEEVENTF_WHEEL (1/120 notch)
#: How far inside each monitor corner the geometry self-check probes (pixels; clear of the fail-safe corner).
GEOMETRY_PROBE_INSET_PX = 8


def pyautogui_key_name(key: str, platform: str | None = None) -> str:
    """Map a normalised key name (:func:`holodesk.core.actions.normalize_key`) to pyautogui's name.

    Raises:
        ActionError: (field ``keys``) when pyautogui has no such key on this platform.
    """
    plat = sys.platform if platform is None else platform
    mac = plat == "darwin"
    table = {
        "super": "command" if mac else "win", "win": "command" if mac else "win",
        "cmd": "command" if mac else "win", "option": "option" if mac else "alt",
        "altgr": "altright", "menu": "apps", "apps": "apps", "delete": "delete",
    }
    return table.get(key, key)


_CLICK_NOT_DONE = -1
"""``_clicked_toplevel`` while a left click is being performed; it stays there when the click fails."""


class _Stopped(Exception):
    """The stop event was set while waiting."""


X11_CAPABILITIES = ExecutorCapabilities(
    geometry_check=Capability(True, "the pointer is sent to points inside each corner of the monitor and to "
                              "its centre, and each position is read back"),
    failsafe_corners=Capability(True, "pyautogui's fail-safe: the pointer pushed into a screen corner stops the "
                                "run; a pointer resting there is moved away before the first action"),
    episode_end=Capability(True, "keys held by key_down are released, and the characters the X11 typer bound to "
                           "spare keycodes are unbound"),
    desktop_end=Capability(True, "on Linux a connection of its own to the X server is watched: when the server "
                           "goes away the running task stops and later tasks fail at once (Windows and macOS "
                           "desktops do not end under a running process)"),
    own_windows=Capability(True, "X11: a pointer action whose point, or keys whose focused window, is one of "
                           "Holodesk's windows (X stacking order; WM_CLASS or the X client's process) are refused"),
)
"""What :class:`PyAutoGUIExecutor` can do beyond ``execute`` (shown by ``holodesk doctor``)."""


class _TargetChanged(Exception):
    """``before_input`` found the target changed since approval (the message says how)."""


class PyAutoGUIExecutor:
    """:class:`~holodesk.control.base.Executor` using pyautogui.

    Args:
        pause_s: pyautogui.PAUSE, seconds slept after each pyautogui call (default 0.02).
        typing: "auto" (X11 keysym typer on Linux X11/XWayland, clipboard elsewhere), "xtest" or
            "clipboard".
        move_duration_s: seconds for pointer moves (0 = jump).
        drag_duration_s: seconds for the move between press and release of a drag (apps need motion).
        paste_chord: override the clipboard paste chord (default per platform / terminal).
        clipboard_restore_delay_s: wait after the paste chord before the clipboard is restored.
        stop_event: when set, a running ``wait`` ends with ``stopped_by_user``.
        pointer_readback: callable returning the pointer position in input space; default
            ``pyautogui.position``. Tests pass a fake to simulate a clamped pointer.
        settle_timeout_s: the longest wait, in seconds, for the pointer to arrive after a move before
            the step is reported as a miss (default 2.0; :class:`~holodesk.control.pointer.PointerSettle`).
        pointer_tolerance_px: largest distance (per axis, input-space pixels) between the pointer and
            the target that still counts as arrived (default 0: exact).
        target_class: callable returning the focused window's WM_CLASS (clipboard terminal chord);
            default :func:`holodesk.control.window.focused_window_class` on X11.
        focus_timeout_s: X11: the longest wait, in seconds, for the window a left click went to to take
            the keyboard focus before the next key or type step sends keys (default 2.0; the wait ends on
            the FocusIn event, see ``_await_click_focus``).
        desktop_watch: the process's watch of the X server (None: the server's end is noticed only as
            pyautogui's connection error, in the action that meets it).

    Attributes:
        before_input: called with the action and its input points once the pointer rests on the first
            point, immediately before any button, wheel or key goes down; a returned reason (the target
            changed since approval) cancels the action: ``status="target_changed"``, nothing pressed. The
            session sets it for each step (:func:`holodesk.session.judge.recheck`).
        settle: the pointer read-back after each move (:class:`~holodesk.control.pointer.PointerSettle`).
    """

    name = "pyautogui"
    capabilities = X11_CAPABILITIES

    def __init__(
        self,
        *,
        pause_s: float = 0.02,
        typing: TypingMethod = "auto",
        move_duration_s: float = 0.0,
        drag_duration_s: float = 0.25,
        paste_chord: Sequence[str] | None = None,
        clipboard_restore_delay_s: float = 0.3,
        stop_event: threading.Event | None = None,
        pointer_readback: Callable[[], tuple[int, int]] | None = None,
        target_class: Callable[[], str | None] | None = None,
        settle_timeout_s: float = 2.0,
        pointer_tolerance_px: int = 0,
        focus_timeout_s: float = 2.0,
        desktop_watch: X11Watch | None = None,
    ) -> None:
        if typing not in ("auto", "xtest", "clipboard"):
            raise ActionError(f"unknown typing method {typing!r}; use auto, xtest or clipboard")
        self.pause_s = pause_s
        self.typing: TypingMethod = typing
        self.move_duration_s = move_duration_s
        self.drag_duration_s = drag_duration_s
        self.paste_chord = tuple(paste_chord) if paste_chord else None
        self.clipboard_restore_delay_s = clipboard_restore_delay_s
        self.stop_event = stop_event or threading.Event()
        self._pointer_readback = pointer_readback
        self.settle = PointerSettle(self._position, settle_timeout_s, pointer_tolerance_px)
        self._target_class = target_class
        self._gui_module: Any = None
        self._x11_typer: X11KeysymTyper | None = None
        self.focus_timeout_s = focus_timeout_s
        self._clicked_toplevel: int | None = None  # X11 window a left click went to, until keys follow
        self._monitors_warned = False  # the fail-safe fell back to the screen's corners (logged once)
        self.before_input: Callable[[Action, tuple[InputPoint, ...]], str | None] | None = None
        self.desktop_watch = desktop_watch
        self._held = HeldKeys(self.name)

    # -- pyautogui ----------------------------------------------------------------------------------
    def _gui(self) -> Any:
        """Import and configure pyautogui (lazily).

        Raises:
            DisplayError: no usable display, pyautogui cannot be imported, or pyautogui is bound to
                another X display than ``$DISPLAY`` (it opens its connection once, at import).
        """
        if self._gui_module is not None:
            return self._gui_module
        if sys.platform.startswith("linux"):
            require_display()
        ensure_per_monitor_dpi_awareness()  # before pyautogui declares system awareness (Windows)
        try:
            import pyautogui  # lazy: pyautogui connects to the X display on import (its failure is a DisplayError)
        except Exception as exc:  # pyautogui raises KeyError/Xlib errors at import without a display
            raise DisplayError(f"pyautogui cannot start ({type(exc).__name__}: {exc})",
                               hint="Run Holodesk inside a desktop session with a working display.") from exc
        bound = _pyautogui_x_display(pyautogui)
        current = os.environ.get("DISPLAY", "")
        if bound is not None and current and _same_display(bound, current) is False:
            raise DisplayError(
                f"pyautogui is connected to X display {bound!r} (the DISPLAY at its import) but DISPLAY is "
                f"now {current!r}",
                hint="Restart Holodesk with the DISPLAY you want to control.",
            )
        pyautogui.PAUSE = self.pause_s
        pyautogui.FAILSAFE = True
        self._gui_module = pyautogui
        return pyautogui

    def _position(self) -> tuple[int, int]:
        if self._pointer_readback is not None:
            x, y = self._pointer_readback()
        else:
            x, y = self._gui().position()
        return int(x), int(y)

    def pointer_in_failsafe_corner(self) -> bool:
        """True when the pointer sits on one of pyautogui's fail-safe points (screen corners), which
        would stop the first action (F12). Call before the first action of a run.

        Raises:
            DisplayError: no usable display.
        """
        gui = self._gui()
        return tuple(gui.position()) in self._failsafe_corners(gui)

    def _monitors(self) -> list[tuple[int, int, int, int]]:
        """The X11 monitors (:func:`holodesk.control.window.monitor_rects`); [] elsewhere, or where the X
        server cannot list them (logged once: then only the screen's corners stop a run)."""
        if not (sys.platform.startswith("linux") and os.environ.get("DISPLAY")):
            return []
        try:
            return monitor_rects()
        except DisplayError as exc:
            if not self._monitors_warned:
                self._monitors_warned = True
                log.warning("fail-safe: only the screen's corners stop a run, not each monitor's: %s", exc)
            return []

    def _failsafe_corners(self, gui: Any) -> list[tuple[int, int]]:
        """The fail-safe corners now (:func:`~holodesk.control.pointer.failsafe_points` of the screen and the
        current monitors, which can change during a run). They also become pyautogui's ``FAILSAFE_POINTS``, so
        its own checks in every pointer and key call stop at the same corners."""
        width, height = gui.size()
        points = failsafe_points((int(width), int(height)), self._monitors())
        gui.FAILSAFE_POINTS = points
        return points

    def _away_from_corners(self, gui: Any, near: tuple[int, int]) -> tuple[int, int]:
        """Where to put a pointer that must leave a fail-safe corner: the centre of the monitor holding
        ``near`` (else of the first monitor, else of the screen), so it lands on a monitor."""
        monitors = self._monitors()
        for left, top, w, h in monitors:
            if left <= near[0] < left + w and top <= near[1] < top + h:
                return left + w // 2, top + h // 2
        if monitors:
            left, top, w, h = monitors[0]
            return left + w // 2, top + h // 2
        width, height = gui.size()
        return int(width) // 2, int(height) // 2

    def watch_desktop(self, stop: Callable[[str], None]) -> None:
        """Call ``stop(reason)`` when the X server goes away during this task (replacing the previous task's
        watcher: one task at a time); at once when it has gone already. Nothing without a ``desktop_watch``."""
        watch = self.desktop_watch
        if watch is None:
            return
        watch.on_end = stop
        if watch.ended.is_set():
            stop(f"{DESKTOP_ENDED}: {watch.ended_reason}")

    def _desktop_ended(self, exc: BaseException) -> DisplayError | None:
        """The "desktop session ended" error when ``exc`` came from the X server's end (its connection
        closed, or the watch saw it go), else None. A closed connection is reported to the watch."""
        watch = self.desktop_watch
        if is_connection_closed(exc):
            if watch is None:
                return DisplayError(f"{DESKTOP_ENDED} (the X server closed pyautogui's connection)",
                                    hint="Start the desktop (the X server) again, then start Holodesk again.")
            watch.mark_ended(f"the X server {watch.display_name} closed the connection")
        if watch is not None and watch.ended.is_set():
            return watch.desktop_ended_error()
        return None

    def end_episode(self) -> None:
        """Undo what the executor keeps between the steps of an episode: the keys held by ``key_down``
        (released, the fail-safe off for it) and the characters the X11 typer bound to spare keycodes
        (:meth:`~holodesk.control.typing.X11KeysymTyper.release`); nothing once the X server is gone. Never
        raises; the executor stays usable."""
        if self.desktop_watch is not None and self.desktop_watch.ended.is_set():
            return
        if self._held.keys:
            self._held.release_all(self._key_up)
        if self._x11_typer is not None:
            self._x11_typer.release()

    @property
    def held_keys(self) -> tuple[str, ...]:
        """The keys held down now by ``key_down`` (canonical names, press order)."""
        return self._held.keys

    def release_left_held_keys(self) -> tuple[str, ...]:
        """Release the keys a killed earlier run left held on this desktop (:meth:`HeldKeys.release_left_over`).
        Never raises.

        Returns:
            The keys released.
        """
        return self._held.release_left_over(self._key_up)

    def _key_down(self, key: str) -> None:
        """Press one key (canonical name) and leave it down."""
        self._gui().keyDown(pyautogui_key_name(key))

    def _key_up(self, key: str) -> None:
        """Release one key (canonical name); pyautogui's fail-safe is off for it, so a pointer in a corner
        never keeps a key held."""
        gui = self._gui()
        with _failsafe_off(gui):
            gui.keyUp(pyautogui_key_name(key))

    def move_pointer_out_of_corner(self) -> InputPoint | None:
        """If the pointer is in a fail-safe corner, move it to the centre of its monitor
        (:meth:`_away_from_corners`).

        Returns:
            The new pointer position (input space), or None when it was not in a corner.
        Raises:
            DisplayError: no usable display.
        """
        gui = self._gui()
        if not self.pointer_in_failsafe_corner():
            return None
        self._put_pointer_back(gui, self._position())
        x, y = gui.position()
        log.info("moved the pointer out of a fail-safe corner to (%d, %d)", x, y)
        return InputPoint(int(x), int(y))

    def check_geometry(self, monitor: Monitor) -> list[list[int]]:
        """Start-up self-check (F28): send the pointer to points :data:`GEOMETRY_PROBE_INSET_PX` inside
        each corner of ``monitor`` (as the capture backend reports it, input space) and to its centre,
        read each position back (after the pointer has settled, F22), then put the pointer back where
        it was. Nothing is clicked.

        Returns:
            The probed points ``[[x, y], ...]`` (all reached).
        Raises:
            GeometryMismatch: a probe point could not be reached: the monitor the capture reports does
                not exist in the input space (misreported size or position, a layout change, or capture
                and input on different displays).
            DisplayError: no usable display.
        """
        gui = self._gui()
        inset = GEOMETRY_PROBE_INSET_PX
        left, top = monitor.left, monitor.top
        right, bottom = left + monitor.width - 1, top + monitor.height - 1
        probes = [InputPoint(left + inset, top + inset), InputPoint(right - inset, top + inset),
                  InputPoint(left + inset, bottom - inset), InputPoint(right - inset, bottom - inset),
                  InputPoint(left + monitor.width // 2, top + monitor.height // 2)]
        start = self._position()
        try:
            for probe in probes:
                try:
                    self._move_verified(gui, probe)
                except Unreachable as exc:
                    seen = exc.details.get("pointer_readback", ["?", "?"])
                    width, height = gui.size()
                    raise GeometryMismatch(
                        f"start-up geometry check failed: the screen capture reports {monitor.label}, but the "
                        f"pointer sent to ({probe.x}, {probe.y}) on it stopped at ({seen[0]}, {seen[1]}); the "
                        f"input space is {width}x{height}. Clicks would land in the wrong place, so the run "
                        "was refused before any action",
                        hint="Check the display scaling and monitor layout (xrandr, or the desktop's display "
                             "settings), make sure Holodesk captures and controls the same display (DISPLAY), "
                             "then run 'holodesk doctor'.",
                    ) from None
        finally:
            self._put_pointer_back(gui, start)
        log.info("geometry self-check passed on %s (%d points)", monitor.label, len(probes))
        return [[p.x, p.y] for p in probes]

    def _put_pointer_back(self, gui: Any, position: tuple[int, int]) -> None:
        """Move the pointer to ``position`` without triggering the fail-safe; if that is a fail-safe
        corner, to the centre of its monitor instead (F12)."""
        if position in self._failsafe_corners(gui):
            position = self._away_from_corners(gui, position)
        with _failsafe_off(gui):
            gui.moveTo(position[0], position[1])

    def _raise_if_failsafe(self, gui: Any) -> None:
        """Raise pyautogui's FailSafeException when its fail-safe is on and the pointer sits in a corner of
        the screen or of any monitor (:meth:`_failsafe_corners`)."""
        if gui.FAILSAFE and tuple(gui.position()) in self._failsafe_corners(gui):
            raise gui.FailSafeException("the pointer is in a corner of the screen or a monitor (fail-safe)")

    def _wait(self, seconds: float) -> None:
        """Sleep ``seconds``, ending early (``_Stopped`` / FailSafeException) on the stop event or when
        the user moves the pointer into a fail-safe corner (checked every 0.1 s where a display exists)."""
        try:
            gui: Any = self._gui()
        except HolodeskError:  # no display: only the stop event can end the wait
            gui = None
        deadline = time.monotonic() + seconds
        while True:
            if self.desktop_watch is not None:
                self.desktop_watch.raise_if_ended()
            if gui is not None:
                self._raise_if_failsafe(gui)
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self.stop_event.wait(min(left, 0.1)):
                raise _Stopped()

    # -- Executor ------------------------------------------------------------------------------------
    def execute(self, placed: PlacedAction) -> ActionResult:
        """Perform ``placed.action`` at ``placed.input_points`` (the points the approval showed).

        Returns:
            ActionResult: "performed" (ok), "failed" (with the reason) or "stopped_by_user"
            (fail-safe corner or stop event). ``details`` carry ``input_points``, ``method`` and, for
            typing, which path ran. Never raises.
        """
        t0 = time.perf_counter()
        action = placed.action
        details: dict[str, Any] = {"kind": action.kind, "monitor": placed.frame.monitor.index}
        try:
            if self.desktop_watch is not None:
                self.desktop_watch.raise_if_ended()
            message = self._perform(action, placed.input_points, details)
            status, ok = "performed", True
        except Unreachable as exc:
            details.update(exc.details)
            status, ok, message = "failed", False, str(exc)
        except _Stopped:
            status, ok, message = "stopped_by_user", False, "stopped by user while waiting"
        except _TargetChanged as exc:
            status, ok, message = "target_changed", False, str(exc)
        except HolodeskError as exc:
            details["error"] = type(exc).__name__
            status, ok, message = "failed", False, str(exc)
        except Exception as exc:
            if type(exc).__name__ == "FailSafeException":
                details["failsafe"] = True
                status, ok = "stopped_by_user", False
                message = "stopped by the fail-safe: the pointer was moved to a corner of the screen or a monitor"
            elif (ended := self._desktop_ended(exc)) is not None:
                details["error"] = "DisplayError"
                status, ok, message = "failed", False, str(ended)
            else:
                log.exception("action %s failed", action.kind)
                details["error"] = type(exc).__name__
                status, ok, message = "failed", False, f"{action.kind} failed: {type(exc).__name__}: {exc}"
        # A paste is sent blind: whether the target took it cannot be observed (F15).
        verified = False if ok and details.get("typing_method") == "clipboard" else None
        return ActionResult(ok=ok, status=status, message=message, details=details,
                            duration_ms=(time.perf_counter() - t0) * 1000.0, verified=verified)

    def _check_target(self, gui: Any, action: Action, points: tuple[InputPoint, ...]) -> None:
        """The checks just before the input: never onto Holodesk's own windows (keys: ``_await_click_focus``),
        and the target re-checked where the input is about to land (``before_input``).

        Raises:
            ActionError: the point, or the window with the focus, is one of Holodesk's own windows.
            _TargetChanged: ``before_input`` found the window, element or focus changed since approval.
        """
        if isinstance(action, Click) and action.button == "left":  # keys after it wait for its window, or fail
            self._clicked_toplevel = _CLICK_NOT_DONE
        if points or isinstance(action, Scroll):
            refuse_holodesk_target([(p.x, p.y) for p in points] or [self._position()])
        if self.before_input is not None:
            if points and not isinstance(action, Move):
                self._move_verified(gui, points[0])
            if (changed := self.before_input(action, points)) is not None:
                raise _TargetChanged(changed)

    def _perform(self, action: Action, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        """Perform ``action`` at ``points`` (OS input space, in the order of ``action.points()``) and return
        what was done, in words. Records ``method`` (the pyautogui calls, "wait" or "none") and, for an
        action on the screen, ``input_points`` as ``[[x, y], ...]`` in ``details``.

        Raises:
            Unreachable: a target point cannot be reached (F06).
            _Stopped: the stop event was set during a wait.
            ActionError: an action this executor cannot perform, or a key pyautogui does not know.
            DisplayError: no usable display for pyautogui (:meth:`_gui`).
            FailSafeException: the pointer is in a screen corner (the user's stop signal, F12).
        """
        handler = handler_of(self.name, self._handlers, action)
        if not action.on_screen:
            return handler(None, action, points, details)
        details["input_points"] = [[p.x, p.y] for p in points]
        gui = self._gui()
        # The corner is a stop signal for every action (F12), also for typing through XTest, which
        # never passes pyautogui's own fail-safe check.
        self._raise_if_failsafe(gui)
        self._check_target(gui, action, points)
        return handler(gui, action, points, details)

    @property
    def _handlers(self) -> dict[type[Action], Callable[[Any, Any, tuple[InputPoint, ...], dict[str, Any]], str]]:
        """What this executor does for each action class it performs: ``handler(gui, action, points, details)``
        returns the result in words (``gui`` is None for the actions that do not touch the screen)."""
        return {**dict.fromkeys(OFF_SCREEN_TYPES, self._nothing), Wait: self._wait_step,
                Click: self._click, Move: self._move, Drag: self._drag, Scroll: self._scroll, Key: self._key,
                KeyDown: self._key_down_step, KeyUp: self._key_up_step, Type: self._type_step}

    def _nothing(self, gui: Any, action: Action, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        details["method"] = "none"
        return "nothing to do on screen"

    def _wait_step(self, gui: Any, action: Wait, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        details["method"] = "wait"
        self._wait(action.seconds)
        return f"waited {action.seconds:g} s"

    def _click(self, gui: Any, action: Click, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        """Click the action's button ``action.count`` times at the one point in ``points``."""
        (ip,) = points
        details["pointer_settle_s"] = self._move_verified(gui, ip)
        gui.click(button=action.button, clicks=action.count, interval=0.0)
        if action.button == "left":
            self._note_clicked_window()
        details["method"] = f"pyautogui.click(button={action.button!r}, clicks={action.count})"
        return click_result(action, ip)

    def _move(self, gui: Any, action: Move, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        (ip,) = points
        details["pointer_settle_s"] = self._move_verified(gui, ip)
        details["method"] = "pyautogui.moveTo"
        return f"moved the pointer to ({ip.x}, {ip.y})"

    def _key(self, gui: Any, action: Key, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        self._await_click_focus(details)
        for _ in range(action.repeat):
            names = self._press_chord(action.keys, action.taps)
        details["method"] = "pyautogui.keyDown/keyUp"
        details["pyautogui_keys"] = names
        return key_result(action)

    def _key_down_step(self, gui: Any, action: KeyDown, points: tuple[InputPoint, ...],
                       details: dict[str, Any]) -> str:
        self._await_click_focus(details)
        self._check_keys(action.keys)
        self._held.hold(action.keys, self._key_down)
        details["method"] = "pyautogui.keyDown"
        details["held_keys"] = list(self._held.keys)
        return key_result(action)

    def _key_up_step(self, gui: Any, action: KeyUp, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        self._held.release(action.keys, self._key_up)
        details["method"] = "pyautogui.keyUp"
        details["held_keys"] = list(self._held.keys)
        return key_result(action)

    def _type_step(self, gui: Any, action: Type, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        refuse_typing_while_held(self._held.keys)
        self._await_click_focus(details)
        if action.replace:  # select what the field holds, so the text replaces it
            self._press_chord(("ctrl", "a"))
            details["replaced"] = True
        return self._type_text(action.text, details)

    def _drag(self, gui: Any, action: Drag, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        """Press the left button at ``points[0]``, move to ``points[1]`` and release (always released)."""
        start, end = points
        # Check that the end is reachable before the button goes down: a release at a clamped
        # position would drop whatever was dragged there (F06).
        self._move_verified(gui, end)
        self._move_verified(gui, start)
        gui.mouseDown(button="left")
        try:
            gui.moveTo(end.x, end.y, duration=self.drag_duration_s)
            self.settle.check(end, "drag end", released_note=True, before=(start.x, start.y))
        finally:
            gui.mouseUp(button="left")
        details["method"] = "pyautogui.mouseDown/moveTo/mouseUp"
        return f"dragged from ({start.x}, {start.y}) to ({end.x}, {end.y})"

    def _scroll(self, gui: Any, action: Scroll, points: tuple[InputPoint, ...], details: dict[str, Any]) -> str:
        """Turn the wheel ``action.amount`` notches, at ``points[0]`` when given, else where the pointer is."""
        if points:
            self._move_verified(gui, points[0])
        clicks = action.amount * (_WHEEL_DELTA_WINDOWS if sys.platform.startswith("win") else 1)
        if action.direction in ("up", "down"):
            gui.scroll(clicks if action.direction == "up" else -clicks)
            details["method"] = "pyautogui.scroll"
        else:
            gui.hscroll(clicks if action.direction == "right" else -clicks)
            details["method"] = "pyautogui.hscroll"
        details["wheel_clicks"] = action.amount
        return f"scrolled {action.direction} by {action.amount}"

    def _type_text(self, text: str, details: dict[str, Any]) -> str:
        """Type ``text`` (:meth:`_type`); ``details`` get the typing report and ``method`` ("xtest_keysym" or
        "clipboard"). The words say when a paste could not be verified or the clipboard not restored."""
        report = self._type(text)
        details.update(report.to_details())
        details["method"] = report.method
        if report.method != "clipboard":
            return f"typed {report.characters} characters ({report.remapped} via temporary keycodes)"
        if report.extra and report.extra.get("clipboard_taken_by_another"):
            return (f"pasted {report.characters} characters with {details.get('paste_chord')}; another program "
                    "put something on the clipboard meanwhile, so that was kept (not restored); whether the "
                    "target received the text could not be verified")
        if not report.extra or not report.extra.get("clipboard_restored"):
            return (f"pasted {report.characters} characters with {details.get('paste_chord')}, but "
                    "the previous clipboard could NOT be restored; the result was not verified")
        return (f"pasted {report.characters} characters with {details.get('paste_chord')} "
                "(clipboard restored); whether the target received them could not be verified")

    # -- pointer -------------------------------------------------------------------------------------
    def _move_verified(self, gui: Any, target: InputPoint) -> float:
        """Move to ``target`` and make sure the pointer is there (F06, F22); return the seconds it took
        the pointer to arrive after the move request.

        Raises:
            Unreachable: target is a fail-safe corner, or the pointer ended elsewhere (clamped).
            FailSafeException: the user moved the pointer into a corner.
        """
        corners = self._failsafe_corners(gui)
        if (target.x, target.y) in corners:
            raise Unreachable(
                f"target ({target.x}, {target.y}) is a screen corner or a monitor's corner, which triggers the "
                "fail-safe; the pointer was not moved there",
                {"target": [target.x, target.y]},
            )
        before = self._position()
        try:
            gui.moveTo(target.x, target.y, duration=self.move_duration_s)
        except Exception as exc:
            if type(exc).__name__ != "FailSafeException":
                raise
            # moveTo checks the fail-safe after moving. If the OS clamped an unreachable target into a
            # corner, that is our failure (F06), not the user's stop signal.
            width, height = gui.size()
            clamped = (min(max(target.x, 0), width - 1), min(max(target.y, 0), height - 1))
            if clamped != (target.x, target.y) and self._position() == clamped:
                self.settle.check(target, "target", before=before)
            raise
        return self.settle.check(target, "target", before=before)

    # -- keyboard ------------------------------------------------------------------------------------
    def _note_clicked_window(self) -> None:
        """Remember the X11 top-level a left click went to, so the next keys wait for it to take the focus."""
        self._clicked_toplevel = None
        if sys.platform.startswith("linux") and os.environ.get("DISPLAY"):
            self._clicked_toplevel = toplevel_at_pointer()

    def _await_click_focus(self, details: dict[str, Any]) -> None:
        """Before keys that follow a left click: wait (at most ``focus_timeout_s``) until the X input focus
        is in the clicked top-level window (:func:`holodesk.control.window.wait_for_focus_in`, proven by a
        FocusIn event and a GetInputFocus read-back). A busy client handles the click, and takes the focus,
        only when it gets to it; keys sent before would go to the previously focused window (F14). A
        window that never takes the focus (the desktop, a window that refuses it) costs the timeout and
        fails the step: keys are never sent into another window than the one clicked. Then the window keys
        go to must not be one of Holodesk's own. Sets ``details["focus_after_click"]`` to
        ``{"window": id, "focused": bool, "waited_s": seconds}``.

        Raises:
            ActionError: the click before the keys was not performed (refused, unreachable), the clicked
                window did not take the focus in time (the keys would go to another window), or the window
                keys go to is one of Holodesk's own (:func:`holodesk.control.window.refuse_holodesk_target`);
                no key was sent."""
        toplevel, self._clicked_toplevel = self._clicked_toplevel, None
        if toplevel == _CLICK_NOT_DONE:
            raise ActionError("the keys were not sent: the click before them was not performed, so they would "
                              "have gone to another window than the one it aimed at",
                              hint="Click the field again, then type.")
        if toplevel is not None:
            focused, waited = wait_for_focus_in(toplevel, self.focus_timeout_s)
            details["focus_after_click"] = {"window": toplevel, "focused": focused, "waited_s": round(waited, 3)}
            if not focused:
                raise ActionError(
                    f"the keys were not sent: the window the last click went to (0x{toplevel:x}) did not take the "
                    f"keyboard focus within {self.focus_timeout_s:g} s, so they would have gone to another window",
                    hint="Click into the field again (or a window that accepts typing), then type.")
            if waited > 0.05:
                log.info("waited %.2f s for the clicked window 0x%x to take the keyboard focus", waited, toplevel)
        refuse_holodesk_target(None)

    def _check_keys(self, keys: Sequence[str]) -> list[str]:
        """pyautogui's names of ``keys``.

        Raises:
            ActionError: a key pyautogui does not know.
        """
        gui = self._gui()
        names = [pyautogui_key_name(k) for k in keys]
        for key, name in zip(keys, names, strict=True):
            if not gui.isValidKey(name):
                raise ActionError(
                    f"key {key!r} cannot be pressed with pyautogui on this platform", field="keys",
                    hint="Use a type action for characters that are not on the keyboard.",
                )
        return names

    def _press_chord(self, keys: Sequence[str], taps: Sequence[str] = ()) -> Any:
        """Press ``keys`` in order, tap each key of ``taps`` in turn, and release ``keys`` in reverse order
        (always released). Keys held by ``key_down`` are neither pressed again nor released.

        Raises:
            ActionError: a key pyautogui does not know (checked before anything is pressed).
        """
        gui = self._gui()
        names = self._check_keys([*keys, *taps])
        held = {pyautogui_key_name(k) for k in self._held.keys}
        pressed: list[str] = []
        try:
            for name in names[:len(keys)]:
                if name not in held:
                    gui.keyDown(name)
                    pressed.append(name)
            for name in names[len(keys):]:
                gui.keyDown(name)
                gui.keyUp(name)
        finally:
            for name in reversed(pressed):
                gui.keyUp(name)
        return names

    def _typing_method(self) -> Literal["xtest", "clipboard"]:
        if self.typing != "auto":
            return self.typing
        if sys.platform.startswith("linux") and os.environ.get("DISPLAY"):
            return "xtest"
        return "clipboard"

    def _type(self, text: str) -> Any:
        method = self._typing_method()
        if method == "xtest":
            self._gui()  # same display checks as for pointer actions
            if self._x11_typer is None:
                self._x11_typer = X11KeysymTyper()
            return self._x11_typer.type_text(text)
        target_class = self._target_class
        if target_class is None and sys.platform.startswith("linux"):
            target_class = focused_window_class
        paster = ClipboardPaster(
            self._press_chord,
            chord=self.paste_chord, restore_delay_s=self.clipboard_restore_delay_s, target_class=target_class,
        )
        return paster.paste_text(text)


@contextlib.contextmanager
def _failsafe_off(gui: Any) -> Iterator[None]:
    """pyautogui's fail-safe off while the block runs (a release or a move out of a corner must not stop on
    the corner), then as it was."""
    saved = gui.FAILSAFE
    gui.FAILSAFE = False
    try:
        yield
    finally:
        gui.FAILSAFE = saved


def _pyautogui_x_display(gui: Any) -> str | None:
    """Name of the X display pyautogui connected to at import (X11 only), else None."""
    x11 = getattr(gui, "platformModule", None)
    conn = getattr(x11, "_display", None)
    try:
        return str(conn.get_display_name()) if conn is not None else None
    except Exception:
        return None


def _same_display(a: str, b: str) -> bool | None:
    """Compare two X display names by host and display number (":1" == ":1.0"); None if unparsable."""
    def key(name: str) -> tuple[str, str] | None:
        host, sep, rest = name.rpartition(":")
        if not sep:
            return None
        return host, rest.split(".", 1)[0]

    ka, kb = key(a), key(b)
    if ka is None or kb is None:
        return None
    return ka == kb
