"""Whether another X11 client holds the keyboard or the pointer grab, and which client took it (issue 31).

While a client holds an active grab, every key (or pointer event) goes to it, whatever window the approval
card named: a hidden window with a keyboard grab takes typed text, an open menu takes the next click. X11
has no request that asks who holds a grab, so :func:`input_grab_problem` asks for one: ``XGrabKeyboard`` /
``XGrabPointer`` on the root window, asynchronous, with no event mask, released at once (``XUngrab*``) when it
succeeds. The reply ``AlreadyGrabbed`` says another client holds it (core and XInput 2 grabs both count);
``GrabFrozen`` says a client froze the device. The probe's own grab lasts one round trip to the X server.

Who holds it is known only by having watched it taken: :class:`GrabWatcher` records, through the X server's
RECORD extension, every client's grab and ungrab requests (core ``GrabPointer``/``GrabKeyboard`` and their
``Ungrab``, XInput 2 ``XIGrabDevice``/``XIUngrabDevice`` on a master device) with the server's replies, and
keeps, for the keyboard and the pointer, the client (its resource-id base) whose grab succeeded last and the
window it grabbed on. A grab is its owner's when the owner released nothing since, is still connected, and its
grab window is still viewable (the server ends a grab whose window is unmapped). A grab taken before the
watcher started, or without a request (a passive grab that a key or button press activated), has no known
owner. A GTK 3 menu grabs both devices on its popup window with ``XIGrabDevice``: the program's own open menu is
a grab whose owner is the client of the window the keys go to (and of the windows under the pointer).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Sequence
from typing import Any

from holodesk.control.window import read_while_windows_vanish, vanished_errors

log = logging.getLogger(__name__)

_ANSWERS = {1: "another program holds the {what} grab (all {what} input goes to it, whatever the card names)",
            2: "the {what} grab was refused (invalid time)", 3: "the {what} grab was refused (root not viewable)",
            4: "another program froze the {what}"}
"""The X11 grab replies other than ``GrabSuccess`` (0), in words: ``AlreadyGrabbed`` 1, ``GrabInvalidTime`` 2,
``GrabNotViewable`` 3, ``GrabFrozen`` 4 (Xlib's ``X.h``)."""


def input_grab_problem(windows: Sequence[int | None] = ()) -> str | None:
    """Why keys or clicks would not go where the approval says: another client's keyboard or pointer grab
    (module docstring), or an X display that cannot be asked; None when neither device is grabbed.
    ``windows`` is not read (:class:`GrabWatcher` takes the same arguments)."""
    try:
        from Xlib import display  # lazy: python-xlib (Linux only)

        d = display.Display()
    except Exception as exc:  # python-xlib raises several unrelated types for a missing display
        return f"the X server cannot be asked whether another program holds an input grab: {exc}"
    try:
        grabbed = _grabbed(d)
        return grabbed[0][1] if grabbed else None
    finally:
        d.close()


def _grabbed(d: Any) -> list[tuple[str, str]]:
    """``(device, reason)`` for each of "keyboard" and "pointer" that another client holds (or froze) on the
    display connection ``d``, by trying to grab it (module docstring)."""
    from Xlib import X  # lazy: python-xlib (Linux only)

    root = d.screen().root
    found = []
    answer = root.grab_keyboard(False, X.GrabModeAsync, X.GrabModeAsync, X.CurrentTime)
    if answer == X.GrabSuccess:
        d.ungrab_keyboard(X.CurrentTime)
    else:
        found.append(("keyboard", _ANSWERS.get(answer, "the keyboard grab was refused").format(what="keyboard")))
    answer = root.grab_pointer(False, 0, X.GrabModeAsync, X.GrabModeAsync, X.NONE, X.NONE, X.CurrentTime)
    if answer == X.GrabSuccess:
        d.ungrab_pointer(X.CurrentTime)
    else:
        found.append(("pointer", _ANSWERS.get(answer, "the pointer grab was refused").format(what="pointer")))
    d.sync()
    return found


_GRAB_POINTER, _UNGRAB_POINTER, _GRAB_KEYBOARD, _UNGRAB_KEYBOARD = 26, 27, 31, 32
"""Core request opcodes (X11 protocol, ``Xproto.h``)."""
_XI_GRAB_DEVICE, _XI_UNGRAB_DEVICE = 51, 52
"""XInput 2 minor opcodes (``XI2proto.h``)."""


class GrabWatcher:
    """Watches which X11 client takes the keyboard and pointer grabs (module docstring); called like
    :func:`input_grab_problem`, it says why input would not go where the approval says, or None.

    Args:
        display_name: the X display (default: ``DISPLAY``).

    Attributes:
        own_grab: True when the last call found the grabs held by the program the step acts in (its open menu).

    Raises:
        OSError: no python-xlib, the X server cannot be reached or has no RECORD extension (the caller then uses
            :func:`input_grab_problem`, which cannot tell a program's own menu from another client's grab).
    """

    def __init__(self, display_name: str | None = None) -> None:
        try:
            from Xlib import display  # lazy: python-xlib (Linux only)
            from Xlib.ext import record, xinput  # lazy: python-xlib (Linux only)
        except ImportError as exc:
            raise OSError(f"python-xlib is missing: {exc}") from exc
        try:
            self._control = display.Display(display_name)
            if not self._control.has_extension("RECORD"):
                self._control.close()
                raise OSError("the X server has no RECORD extension")
            self._recorder = display.Display(display_name)
        except OSError:
            raise
        except Exception as exc:  # python-xlib raises several unrelated types for a missing display
            raise OSError(f"the X display cannot be opened: {exc}") from exc
        self._mask = int(self._control.display.info.resource_id_mask)
        self._devices: dict[int, str] = {}
        xi = self._control.query_extension("XInputExtension")
        self._xi_major = int(xi.major_opcode) if xi is not None and xi.present else -1
        if self._xi_major >= 0:
            for device in self._control.xinput_query_device(xinput.AllMasterDevices).devices:
                if device.use in (xinput.MasterPointer, xinput.MasterKeyboard):
                    self._devices[int(device.deviceid)] = "pointer" if device.use == xinput.MasterPointer \
                        else "keyboard"
        self.own_grab = False
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[bool, str, int]] = {}  # client -> (XInput 2, device, window) asked
        self._owners: dict[str, tuple[int, int]] = {}  # device -> (client, grab window)
        core = {"core_requests": (_GRAB_POINTER, _UNGRAB_KEYBOARD), "core_replies": (_GRAB_POINTER, _GRAB_POINTER),
                "ext_requests": (max(self._xi_major, 0), max(self._xi_major, 0), _XI_GRAB_DEVICE, _XI_UNGRAB_DEVICE),
                "ext_replies": (max(self._xi_major, 0), max(self._xi_major, 0), _XI_GRAB_DEVICE, _XI_GRAB_DEVICE),
                "delivered_events": (0, 0), "device_events": (0, 0), "errors": (0, 0),
                "client_started": False, "client_died": True}
        keyboard_reply = {**core, "core_requests": (0, 0), "core_replies": (_GRAB_KEYBOARD, _GRAB_KEYBOARD),
                          "ext_requests": (0, 0, 0, 0), "ext_replies": (0, 0, 0, 0), "client_died": False}
        self._context = self._control.record_create_context(0, [record.AllClients], [core, keyboard_reply])
        self._control.sync()
        self._thread = threading.Thread(target=self._record, name="holodesk-grab-watcher", daemon=True)
        self._thread.start()

    def _record(self) -> None:
        try:
            self._recorder.record_enable_context(self._context, self._on_data)
        except Exception as exc:  # the display went away: owners stay unknown
            log.warning("the input-grab watcher stopped: %s", exc)
        with self._lock:
            self._owners.clear()
            self._context = None

    def _on_data(self, reply: Any) -> None:
        """One RECORD reply: requests from a client, replies to it, or its end."""
        from Xlib.ext import record  # lazy: python-xlib (Linux only)

        client = int(reply.id_base)
        with self._lock:
            if reply.category == record.ClientDied:
                self._pending.pop(client, None)
                self._owners = {k: v for k, v in self._owners.items() if v[0] != client}
            elif reply.category in (record.FromClient, record.FromServer):
                order = ">" if reply.client_swapped else "<"
                data = bytes(reply.data)
                if reply.category == record.FromClient:
                    self._requests(client, data, order)
                else:
                    self._replies(client, data, order)

    def _requests(self, client: int, data: bytes, order: str) -> None:
        at = 0
        while at + 4 <= len(data):
            opcode, minor = data[at], data[at + 1]
            length = struct.unpack_from(order + "H", data, at + 2)[0] * 4
            if length == 0:  # a BIG-REQUESTS request: no grab request is one
                return
            body = data[at:at + length]
            if opcode in (_GRAB_POINTER, _GRAB_KEYBOARD) and len(body) >= 8:
                device = "pointer" if opcode == _GRAB_POINTER else "keyboard"
                self._pending[client] = (False, device, struct.unpack_from(order + "I", body, 4)[0])
            elif opcode in (_UNGRAB_POINTER, _UNGRAB_KEYBOARD):
                self._released(client, "pointer" if opcode == _UNGRAB_POINTER else "keyboard")
            elif opcode == self._xi_major and minor == _XI_GRAB_DEVICE and len(body) >= 18:
                master = self._devices.get(struct.unpack_from(order + "H", body, 16)[0])
                if master is not None:
                    self._pending[client] = (True, master, struct.unpack_from(order + "I", body, 4)[0])
            elif opcode == self._xi_major and minor == _XI_UNGRAB_DEVICE and len(body) >= 10:
                master = self._devices.get(struct.unpack_from(order + "H", body, 8)[0])
                if master is not None:
                    self._released(client, master)
            at += length

    def _replies(self, client: int, data: bytes, order: str) -> None:
        at = 0
        while at + 32 <= len(data):
            length = 32 + struct.unpack_from(order + "I", data, at + 4)[0] * 4
            pending = self._pending.pop(client, None)
            if data[at] == 1 and pending is not None:
                xi2, device, window = pending
                status = data[at + 8] if xi2 else data[at + 1]
                if status == 0:  # GrabSuccess
                    self._owners[device] = (client, window)
            at += length

    def _released(self, client: int, device: str) -> None:
        if self._owners.get(device, (None,))[0] == client:
            del self._owners[device]

    @property
    def watching(self) -> bool:
        """True while the recording runs (it ends with the display)."""
        return self._thread.is_alive()

    def owner(self, device: str) -> int | None:
        """The resource-id base of the client that holds the ``device`` grab ("keyboard" or "pointer") by
        what was watched, or None when it is not known (module docstring)."""
        try:
            return self._owner(device)
        except Exception:  # the window is gone (its grab ended with it), the display went away
            return None

    def _owner(self, device: str) -> int | None:
        """:meth:`owner`, raising the X error (:func:`~holodesk.control.window.vanished_errors`) when the grab
        window was destroyed; the grab watched on it is then forgotten (the X server ended it with the window)."""
        from Xlib import X  # lazy: python-xlib (Linux only)

        with self._lock:
            found = self._owners.get(device)
        if found is None:
            return None
        client, window = found
        try:
            viewable = self._control.create_resource_object("window", window).get_attributes().map_state \
                == X.IsViewable
        except vanished_errors():
            with self._lock:
                if self._owners.get(device) == found:
                    del self._owners[device]
            raise
        return client if viewable else None

    def client_of(self, window: int) -> int:
        """The resource-id base of the client that created ``window`` (an XID)."""
        return window & ~self._mask

    def __call__(self, windows: Sequence[int | None] = ()) -> str | None:
        """Why keys or clicks would not go where the approval says, or None: as :func:`input_grab_problem`,
        but a grab whose owner is known and is the client of the window keys go to and of every one of
        ``windows`` (the client windows under the action's points; None where none is known) is that
        program's own (its open menu) and is not a reason; :attr:`own_grab` then says True until the next
        call."""
        self.own_grab = False
        try:
            return read_while_windows_vanish(lambda: self._problem(windows), "tell who holds an input grab")
        except Exception as exc:  # python-xlib raises several unrelated types for a display that went away
            return f"the X server cannot be asked whether another program holds an input grab: {exc}"

    def _problem(self, windows: Sequence[int | None]) -> str | None:
        """One read of :meth:`__call__`. A grab whose watched window was destroyed since the grabs were tried
        raises its X error (:meth:`_owner`): that grab ended with its window, so the grabs are tried again
        (:func:`~holodesk.control.window.read_while_windows_vanish`) rather than reported as another program's."""
        from Xlib import X  # lazy: python-xlib (Linux only)

        grabbed = _grabbed(self._control)
        if not grabbed:
            return None
        focus = self._control.get_input_focus().focus
        focus_id = None if focus in (None, X.NONE, X.PointerRoot) or isinstance(focus, int) else int(focus.id)
        for device, reason in grabbed:
            owner = self._owner(device)
            targets = [focus_id, *windows]
            if owner is None or any(w is None or self.client_of(w) != owner for w in targets):
                return reason if owner is None else f"{reason} (not the program the step acts in)"
        self.own_grab = True
        return None

    def close(self) -> None:
        """Stop watching (the recording connection ends)."""
        with self._lock:
            context = self._context
        if context is not None:
            try:
                self._control.record_disable_context(context)
                self._control.sync()
                self._thread.join(2.0)
                self._control.record_free_context(context)
            except Exception as exc:  # the display went away
                log.debug("closing the grab watcher: %s", exc)
        self._control.close()


_WATCHERS: dict[str, GrabWatcher] = {}
_WATCHERS_LOCK = threading.Lock()


def grab_watcher() -> GrabWatcher:
    """This process's :class:`GrabWatcher` of the display ``DISPLAY`` names, started on first use and kept while
    that display is there (a grab's owner is known only from when the watcher started, so it outlives tasks).

    Raises:
        OSError: see :class:`GrabWatcher`.
    """
    name = os.environ.get("DISPLAY", "")
    with _WATCHERS_LOCK:
        watcher = _WATCHERS.get(name)
        if watcher is None or not watcher.watching:
            watcher = _WATCHERS[name] = GrabWatcher(name or None)
        return watcher
