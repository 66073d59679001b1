"""Exact Unicode typing on X11: a keysym-remapping typer (XTest), and the report every typer returns (the
clipboard path is :mod:`holodesk.control.paste`).

X11 keysym typer
    For each character we need a keycode whose keysym is that character. Characters already on the
    keyboard map (e.g. ASCII on a US layout) are pressed directly (with Shift for level 2). For any
    other character a spare keycode (one with no keysyms) is temporarily bound to the character's
    keysym, pressed and released through XTest, and the keyboard map is restored afterwards. This is
    the technique xdotool uses for ``xdotool type`` (scratch keycode + XChangeKeyboardMapping); the
    keysym of a character is its code point for Latin-1 and ``0x01000000 + code point`` otherwise
    (X11 protocol, "Keysym Encoding", Unicode keysyms). Tab and newline are typed as the Tab and
    Return keys.

    Keyboard groups (several layouts, e.g. ``setxkbmap -layout us,ru``): the server applies the active
    XKB group to synthetic keys too, so with the second group active the key of "h" types "р". The
    typer reads the active group (:func:`active_group`) and counts as direct only the keysyms of that
    group's columns of the core map (:func:`direct_keysyms`); everything else goes through a spare
    keycode (a key with one group types it in every group). The group itself is never changed.

    Spare keycodes are few (19 on Xvfb's US map). A text needing more distinct characters is typed in
    segments (:func:`plan_segments`), each needing at most as many as there are spare keycodes; before
    a segment, keycodes bound for earlier characters that the segment does not use are re-bound
    (recycled) after the same wait as a restore (below), so a text of any length types completely.

    Synchronising with the focused client and the window manager: every keyboard-map change sends each
    client a MappingNotify event. A client translates a key event with the map it holds when it
    translates that event (Xlib with XKB updates its map when it reads the notify from the socket, and Tk
    translates when a binding runs), so changing the map again before a busy client has translated the
    keys loses characters (F14). The window manager reloads its key bindings on every MappingNotify
    (openbox logs "Keyboard map changed. Reloading keyboard bindings." with ``--debug``). A click that
    arrived while openbox was still reloading reached the GTK 3 form with a LeaveNotify between
    ButtonPress and ButtonRelease (seen with a GDK event log), and GtkButton / GtkCheckButton then ignore
    the click (``in_button`` is cleared on leave). Under openbox 10 of 10 clicks on a GTK check box right
    after typing "Grüße 日本語" were lost that way without this synchronisation
    (tests/field_cases/test_real_desktop.py, F22). The X server delivers each client's events in order and
    both process them in order, so an answer to a request sent after the change proves the change was
    handled: after a change, :class:`ClientSync` makes those round trips (``_NET_REQUEST_FRAME_EXTENTS``
    to the window manager, ``_NET_WM_PING`` to the focused client; EWMH 1.5), each bounded by
    ``sync_timeout_s``, before any key is sent. A side that does not answer gets the fixed ``settle_s``
    instead (logged).

    Bindings are held, not restored after each text: a character bound to a spare keycode keeps it until
    :meth:`X11KeysymTyper.release` (the executor calls it when the episode ends), so later texts reuse it
    without a map change, and the map never changes while keys typed earlier in the episode may still be
    waiting in a client's queue. Only a spare keycode (one with no keysym) is ever bound, so no key of
    the user's keyboard changes meaning. Restoring waits for the focused client's ping answer first; a
    client that does not answer (xterm and Tk do not list ``_NET_WM_PING``; the Qt 6 test window lists it
    but did not answer on Xvfb without a window manager) gets a fixed ``restore_delay_s`` (0.5 s) instead,
    on top of the rest of the episode: a timing allowance, not a proof; nothing such a client does can be
    observed from outside. The same wait precedes re-binding held keycodes when a text needs more new
    characters than there are free spare keycodes. A binding that someone else overwrote (a layout
    switch) is forgotten, not restored.

    Keys that follow a click must go to the clicked window: the executor waits for it to take the focus
    first (:meth:`holodesk.control.pyautogui_executor.PyAutoGUIExecutor._await_click_focus`, proven by
    a FocusIn event), since a busy client takes the focus only when it handles the click.

    Lock keys (F26): the server applies locked modifiers to synthetic keys too, so with Caps Lock on
    "abc" would arrive as "ABC" and "ß" as "ẞ". Before typing, every active lock that changes which
    keysym a key produces (Caps Lock, Shift Lock, Num Lock, ISO Level3/Level5 Lock) is turned off by
    pressing its key, and afterwards turned back on, so the lock state is as the user left it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from holodesk.control.window import read_while_windows_vanish
from holodesk.errors import ActionError, DisplayError

log = logging.getLogger(__name__)

XK_TAB = 0xFF09
XK_RETURN = 0xFF0D
XK_SHIFT_L = 0xFFE1
UNICODE_KEYSYM_OFFSET = 0x01000000
#: Lock keysyms whose locked modifier changes the keysym a key produces (name for reports).
LOCK_KEYSYMS: dict[int, str] = {0xFFE5: "Caps_Lock", 0xFFE6: "Shift_Lock", 0xFF7F: "Num_Lock",
                                0xFE04: "ISO_Level3_Lock", 0xFE0C: "ISO_Level5_Lock"}
LOCK_TOGGLE_TIMEOUT_S = 2.0


def char_to_keysym(ch: str) -> int:
    """X11 keysym for one character.

    Tab -> Tab key, newline / carriage return -> Return key, Latin-1 printable -> its code point,
    anything else printable -> ``0x01000000 + code point`` (Unicode keysym).

    Raises:
        ActionError: for other control characters (they cannot be typed).
    """
    if len(ch) != 1:
        raise ActionError(f"expected one character, got {ch!r}", field="text")
    if ch == "\t":
        return XK_TAB
    if ch in "\n\r":
        return XK_RETURN
    cp = ord(ch)
    if cp < 0x20 or 0x7F <= cp < 0xA0:
        raise ActionError(f"control character U+{cp:04X} cannot be typed", field="text")
    if cp <= 0xFF:
        return cp
    return UNICODE_KEYSYM_OFFSET + cp


def text_to_keysyms(text: str) -> list[int]:
    """Keysyms to press for ``text``; a ``"\\r\\n"`` pair is one Return.

    Raises:
        ActionError: text contains an untypeable control character.
    """
    return [char_to_keysym(ch) for ch in text.replace("\r\n", "\n")]


def plan_segments(keysyms: Sequence[int], direct: set[int], spare_count: int) -> list[tuple[int, int]]:
    """Split ``keysyms`` into consecutive ``(start, end)`` slices whose keysyms that are not in
    ``direct`` number at most ``spare_count`` distinct values, so each slice needs one remap.

    Raises:
        ActionError: ``spare_count`` < 1 while some keysym needs a remap.
    """
    segments: list[tuple[int, int]] = []
    start = 0
    needed: set[int] = set()
    for i, ks in enumerate(keysyms):
        if ks in direct or ks in needed:
            continue
        if spare_count < 1:
            raise ActionError("the keyboard map has no spare keycode to bind characters to")
        if len(needed) == spare_count:
            segments.append((start, i))
            start, needed = i, set()
        needed.add(ks)
    if start < len(keysyms):
        segments.append((start, len(keysyms)))
    return segments


def keycode_runs(rows: dict[int, list[int]]) -> list[tuple[int, list[list[int]]]]:
    """Group keycode -> keysym-row assignments into runs of consecutive keycodes, in keycode order:
    ``{253: a, 254: b, 200: c}`` -> ``[(200, [c]), (253, [a, b])]`` (one ChangeKeyboardMapping each)."""
    runs: list[tuple[int, list[list[int]]]] = []
    for kc in sorted(rows):
        if runs and runs[-1][0] + len(runs[-1][1]) == kc:
            runs[-1][1].append(rows[kc])
        else:
            runs.append((kc, [rows[kc]]))
    return runs


def active_group(state: int) -> int:
    """The effective XKB keyboard group (0 = first layout) in a core event / QueryPointer state mask:
    bits 13-14 (XKB protocol, "Core Protocol Keyboard State": ``XkbBuildCoreState``)."""
    return (state >> 13) & 0x3


def direct_keysyms(rows: Sequence[Sequence[int]], min_keycode: int, group: int,
                   held: set[int]) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """What the keyboard types directly in keyboard group ``group``, and which keycodes are spare.

    ``rows`` is the core keyboard mapping from ``min_keycode`` on. The core map shows group 1 in columns
    0-1 and group 2 in columns 2-3 (level 1, level 2 = Shift); a key with one group repeats it in
    columns 2-3 (XKB protocol, "Core Keyboard Mapping"). Where groups 3 and 4 sit in the core map is not
    fixed, so in those groups nothing counts as direct and every character goes through a spare keycode.

    Args:
        rows: keysyms per keycode.
        min_keycode: keycode of ``rows[0]``.
        group: the active group, 0-based (:func:`active_group`).
        held: keycodes bound by the typer itself (they count as spare, not as keys of the keyboard).
    Returns:
        (keysym -> (keycode, level 0 or 1) for the first key that types it in ``group``,
        spare keycodes (no keysym, or in ``held``), highest first: the farthest from real keys).
    """
    direct: dict[int, tuple[int, int]] = {}
    spare: list[int] = []
    columns = (2 * group, 2 * group + 1) if group < 2 else ()
    for offset, row in enumerate(rows):
        kc = min_keycode + offset
        syms = list(row)
        if kc in held or not any(syms):
            spare.append(kc)
            continue
        for level, column in enumerate(columns):
            if column < len(syms) and syms[column] and syms[column] not in direct:
                direct[syms[column]] = (kc, level)
    spare.reverse()
    return direct, spare


@dataclass
class TypingReport:
    """What a typer did (goes into :attr:`ActionResult.details`).

    Attributes:
        method: "xtest_keysym" or "clipboard".
        characters: characters typed / pasted.
        remapped: distinct characters that needed a temporary keycode (xtest) else 0.
        verified: True only when the typed result could be checked (never for these paths).
        extra: method-specific details (paste chord, clipboard restored, ...).
    """

    method: str
    characters: int
    remapped: int = 0
    verified: bool = False
    extra: dict[str, Any] | None = None

    def to_details(self) -> dict[str, Any]:
        out: dict[str, Any] = {"typing_method": self.method, "characters": self.characters,
                               "remapped_characters": self.remapped, "verified": self.verified}
        out.update(self.extra or {})
        return out


class X11KeysymTyper:
    """Types any Unicode text on an X server through XTest, remapping spare keycodes as needed.

    Args:
        display_name: X display (default ``$DISPLAY``).
        settle_s: seconds to wait after a keyboard-map change (binding or restoring) for a window
            manager / focused window that cannot be synchronised with (:class:`ClientSync`); xdotool
            sleeps after remapping for the same reason.
        restore_delay_s: seconds to wait before restoring held bindings (:meth:`release`) where the
            focused client does not answer ``_NET_WM_PING``, so it has translated the keys sent with them
            (default 0.5; a timing allowance, see the module docstring).
        sync_timeout_s: longest wait for one round trip with the focused window / window manager, in
            seconds; a side that does not answer in time gets the fixed delays for the rest of the text
            (logged).
        key_delay_s: seconds between key events (0 = as fast as the server takes them).
    """

    def __init__(self, display_name: str | None = None, *, settle_s: float = 0.05,
                 restore_delay_s: float = 0.5, sync_timeout_s: float = 2.0, key_delay_s: float = 0.0) -> None:
        self.display_name = display_name
        self.settle_s = settle_s
        self.restore_delay_s = restore_delay_s
        self.sync_timeout_s = sync_timeout_s
        self.key_delay_s = key_delay_s
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}  # keysym -> spare keycode bound to it by us, until release()
        self._held_rows: dict[int, tuple[int, ...]] = {}  # keycode -> its keysyms as read back after binding
        self._held_display: str | None = None  # the X display the bindings were made on

    def _open(self, display_name: str | None = None) -> Any:
        try:
            from Xlib import display as xdisplay  # lazy: python-xlib (Linux only)
        except ImportError as exc:
            raise DisplayError("python-xlib is not installed, so text cannot be typed on X11",
                               hint="pip install python-xlib") from exc
        try:
            conn = xdisplay.Display(display_name or self.display_name)
        except Exception as exc:
            raise DisplayError(f"cannot connect to the X display for typing ({exc})",
                               hint="Check DISPLAY and XAUTHORITY.") from exc
        if not conn.has_extension("XTEST"):
            conn.close()
            raise DisplayError("the X server lacks the XTEST extension needed to type",
                               hint="Use the clipboard typing method instead (typing = \"clipboard\").")
        return conn

    def type_text(self, text: str) -> TypingReport:
        """Type ``text`` exactly into the focused window, whatever the lock keys' state.

        Returns:
            A report whose extras name the locks turned off for typing (``locks_cleared``) and whether
            they were turned back on (``locks_restored``).
        Raises:
            ActionError: untypeable control characters, no spare keycode for a needed remap, or a lock
                that could not be turned off (nothing typed).
            DisplayError: no X connection / no XTEST.
        The locks are restored even when typing fails half-way; characters bound to spare keycodes stay
        bound until :meth:`release`.
        """
        keysyms = text_to_keysyms(text)
        with self._lock:
            conn = self._open()
            try:
                cleared = self._clear_locks(conn)
                try:
                    report = self._type(conn, keysyms)
                finally:
                    restored = self._restore_locks(conn, cleared)
                report.extra = {**(report.extra or {}), "locks_cleared": [name for name, _kc, _m in cleared],
                                "locks_restored": restored}
                return report
            finally:
                conn.close()

    @staticmethod
    def _modifier_state(conn: Any) -> int:
        return int(conn.screen().root.query_pointer().mask)

    def _tap_lock(self, conn: Any, keycode: int, mask: int, want_on: bool) -> bool:
        """Press and release a lock key, then wait (bounded) until its modifier is ``want_on``."""
        from Xlib import X  # lazy: python-xlib (Linux only)
        from Xlib.ext import xtest  # lazy: python-xlib (Linux only)

        xtest.fake_input(conn, X.KeyPress, keycode)
        xtest.fake_input(conn, X.KeyRelease, keycode)
        conn.sync()
        deadline = time.monotonic() + LOCK_TOGGLE_TIMEOUT_S
        while bool(self._modifier_state(conn) & mask) != want_on:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _clear_locks(self, conn: Any) -> list[tuple[str, int, int]]:
        """Turn off every active lock of :data:`LOCK_KEYSYMS`; return ``(name, keycode, modifier mask)``
        of those turned off.

        Raises:
            ActionError: a lock stayed on (the ones already turned off are turned back on first).
        """
        state = self._modifier_state(conn)
        modmap = conn.get_modifier_mapping()
        cleared: list[tuple[str, int, int]] = []
        seen_masks: set[int] = set()
        for keysym, name in LOCK_KEYSYMS.items():
            keycode = conn.keysym_to_keycode(keysym)
            if not keycode:
                continue
            for index, keycodes in enumerate(modmap):
                mask = 1 << index
                if keycode in keycodes and state & mask and mask not in seen_masks:
                    seen_masks.add(mask)
                    if not self._tap_lock(conn, keycode, mask, want_on=False):
                        self._restore_locks(conn, cleared)
                        raise ActionError(f"{name} is on and could not be turned off for typing; nothing was "
                                          "typed", hint=f"Turn {name.replace('_', ' ')} off and try again.")
                    cleared.append((name, keycode, mask))
        if cleared:
            log.info("turned off %s for typing", ", ".join(n for n, _k, _m in cleared))
        return cleared

    def _restore_locks(self, conn: Any, cleared: list[tuple[str, int, int]]) -> bool:
        """Turn the locks in ``cleared`` back on; False (and an error in the log) if one stayed off."""
        ok = True
        for name, keycode, mask in reversed(cleared):
            if not self._tap_lock(conn, keycode, mask, want_on=True):
                log.error("could not turn %s back on after typing", name)
                ok = False
        return ok

    def _type(self, conn: Any, keysyms: list[int]) -> TypingReport:
        from Xlib import X  # lazy: python-xlib (Linux only)
        from Xlib.ext import xtest  # lazy: python-xlib (Linux only)

        info = conn.display.info
        min_kc, max_kc = int(info.min_keycode), int(info.max_keycode)
        rows = conn.get_keyboard_mapping(min_kc, max_kc - min_kc + 1)
        width = len(rows[0]) if rows else 2
        group = active_group(self._modifier_state(conn))
        self._forget_stale(rows, min_kc)
        direct, spare = direct_keysyms(rows, min_kc, group, set(self._held.values()))
        shift_kc = conn.keysym_to_keycode(XK_SHIFT_L)
        # A level-2 keysym without a Shift key is not directly typable.
        typable = {ks for ks, (_kc, lvl) in direct.items() if lvl == 0 or shift_kc}
        segments = plan_segments(keysyms, typable, len(spare))

        def tap(kc: int, shifted: bool) -> None:
            if shifted:
                xtest.fake_input(conn, X.KeyPress, shift_kc)
            xtest.fake_input(conn, X.KeyPress, kc)
            xtest.fake_input(conn, X.KeyRelease, kc)
            if shifted:
                xtest.fake_input(conn, X.KeyRelease, shift_kc)
            if self.key_delay_s:
                conn.sync()
                time.sleep(self.key_delay_s)

        sync: ClientSync | None = None
        method: dict[str, str] = {}
        recycled = 0
        try:
            for start, end in segments:
                wanted = [ks for ks in dict.fromkeys(keysyms[start:end]) if ks not in typable]
                needed = [ks for ks in wanted if ks not in self._held]
                if needed:
                    sync = sync or ClientSync(conn, self.sync_timeout_s)
                    recycled += self._bind(conn, sync, needed, set(wanted), spare, width)
                for ks in keysyms[start:end]:
                    if ks in typable:
                        kc, level = direct[ks]
                        tap(kc, level == 1)
                    else:
                        tap(self._held[ks], False)
                conn.sync()
        finally:
            if sync is not None:
                method = sync.method  # read before close() drops the probe window
                sync.close()
        extra: dict[str, Any] = {"held_bindings": len(self._held), "keyboard_group": group + 1,
                                 "spare_keycodes": len(spare), "recycled_keycodes": recycled}
        if method:
            extra["client_sync"] = method  # only when the map changed
        return TypingReport(method="xtest_keysym", characters=len(keysyms),
                            remapped=len({ks for ks in keysyms if ks not in typable}), extra=extra)

    def _forget_stale(self, rows: Sequence[Sequence[int]], min_kc: int) -> None:
        """Drop held bindings whose keycode no longer carries our keysym (someone else changed the map,
        e.g. a layout switch): those keycodes are not ours to restore any more."""
        for ks, kc in list(self._held.items()):
            offset = kc - min_kc
            if not 0 <= offset < len(rows) or tuple(rows[offset]) != self._held_rows.get(kc):
                log.info("keycode %d no longer holds our binding (the keyboard map was changed); forgetting it", kc)
                del self._held[ks]
                self._held_rows.pop(kc, None)

    def _bind(self, conn: Any, sync: ClientSync, needed: list[int], keep: set[int], spare: list[int],
              width: int) -> int:
        """Bind each keysym of ``needed`` to a spare keycode with one map change, then wait until the
        focused client and the window manager have handled it (:meth:`ClientSync.wait`).

        Free spare keycodes are taken first. When too few are free, held bindings whose keysym is not in
        ``keep`` (the keysyms the text segment about to be typed uses) are recycled, oldest first: before
        their keycodes get new keysyms, the focused client must have translated the keys already sent
        with them (a ping round trip, or the ``restore_delay_s`` allowance; see the module docstring).
        ``spare`` must hold at least ``len(keep)`` keycodes (:func:`plan_segments` guarantees it).

        Returns:
            How many held keycodes were recycled.
        """
        held = set(self._held.values())
        free = [kc for kc in spare if kc not in held]
        recycled: list[int] = []
        if len(free) < len(needed):
            evict = [ks for ks in self._held if ks not in keep][:len(needed) - len(free)]
            sync.wait(self.restore_delay_s)
            for ks in evict:
                kc = self._held.pop(ks)
                self._held_rows.pop(kc, None)
                recycled.append(kc)
            log.info("recycled %d spare keycodes for %d more characters", len(recycled), len(needed))
        new = dict(zip(needed, free + recycled, strict=False))
        self._change_map(conn, {kc: [ks, ks] for ks, kc in new.items()}, width)
        self._held.update(new)
        self._held_display = conn.get_display_name()  # release() restores on this server, whatever $DISPLAY is then
        # what the server reports for them now (XKB may fill more levels than the two we set)
        self._held_rows.update({kc: tuple(conn.get_keyboard_mapping(kc, 1)[0]) for kc in new.values()})
        sync.wait(self.settle_s)
        return len(recycled)

    def _release_held(self, conn: Any, sync: ClientSync, width: int) -> None:
        """Restore the keycodes of every held binding to empty. First the clients must have translated
        the keys sent with them: proven by a ping round trip, or the ``restore_delay_s`` allowance where
        the focused client does not answer (see the module docstring); afterwards the window manager and
        the client have handled the change before anything else is sent."""
        if not self._held:
            return
        sync.wait(self.restore_delay_s)
        info = conn.display.info
        min_kc = int(info.min_keycode)
        self._forget_stale(conn.get_keyboard_mapping(min_kc, int(info.max_keycode) - min_kc + 1), min_kc)
        self._restore(conn, {kc: ks for ks, kc in self._held.items()}, width)
        self._held.clear()
        self._held_rows.clear()
        sync.wait(self.settle_s)

    def release(self) -> None:
        """Give back every keycode this typer bound (the keyboard map is then as before the first
        :meth:`type_text`). Call at the end of an episode; never raises (a failure is logged: the
        bound keycodes are spare ones, so no key the user has changes meaning)."""
        with self._lock:
            if not self._held:
                return
            try:
                conn = self._open(self._held_display)
            except DisplayError as exc:
                log.warning("could not restore the keyboard map after typing: %s", exc)
                return
            sync: ClientSync | None = None
            try:
                rows = conn.get_keyboard_mapping(int(conn.display.info.min_keycode), 1)
                sync = ClientSync(conn, self.sync_timeout_s)
                self._release_held(conn, sync, len(rows[0]) if rows else 2)
            except Exception as exc:
                log.warning("could not restore the keyboard map after typing: %s", exc)
            finally:
                if sync is not None:
                    sync.close()
                conn.close()

    @staticmethod
    def _change_map(conn: Any, rows: dict[int, list[int]], width: int) -> None:
        """Set the keysyms of several keycodes with one request per run of consecutive keycodes
        (:func:`keycode_runs`): every change makes each client and the window manager reload their
        keymaps (see the module docstring), so the fewer changes the better."""
        per_row = max(width, 2)
        for first, block in keycode_runs(rows):
            conn.change_keyboard_mapping(first, [(row + [0] * per_row)[:per_row] for row in block])
        conn.sync()

    @classmethod
    def _restore(cls, conn: Any, bound: dict[int, int], width: int) -> None:
        """Empty the keycodes of ``bound`` (keycode -> keysym)."""
        cls._change_map(conn, {kc: [] for kc in bound}, width)


class ClientSync:
    """Round trips with the focused client and the window manager, so that both have processed every
    event the X server queued for them before the round trip started (the server delivers a client's
    events in order, and both process them in order).

    * Focused client: EWMH ``_NET_WM_PING`` (EWMH 1.5, "_NET_WM_PING"): a ``WM_PROTOCOLS`` ClientMessage
      ``[_NET_WM_PING, timestamp, window]`` sent to the top-level window, which the client sends back to
      the root window. The window is the input-focus window or its nearest ancestor whose
      ``WM_PROTOCOLS`` lists ``_NET_WM_PING`` (GTK puts the focus on a child of its top-level).
    * Window manager: EWMH ``_NET_REQUEST_FRAME_EXTENTS`` (EWMH 1.5) for an unmapped window of our own;
      the window manager answers by setting ``_NET_FRAME_EXTENTS`` on it (a PropertyNotify for us).

    Each side that does not answer within ``timeout_s`` (no such protocol: xterm and Tk do not answer
    pings; no window manager) is not asked again for this text and its wait is replaced by the fixed
    ``fallback_s`` of :meth:`wait` (logged).

    Args:
        conn: an open python-xlib Display (owned by the caller).
        timeout_s: longest wait for one round trip, seconds.

    Attributes:
        method: ``{"client": "net_wm_ping" | "fixed_delay", "window_manager": "frame_extents" |
            "fixed_delay" | "none"}`` ("none": no EWMH window manager announces itself on the root).
    """

    def __init__(self, conn: Any, timeout_s: float) -> None:
        from Xlib import X  # lazy: python-xlib (Linux only)

        self.conn = conn
        self.timeout_s = timeout_s
        self._root = conn.screen().root
        self._ping_atom = conn.intern_atom("_NET_WM_PING")
        self._protocols_atom = conn.intern_atom("WM_PROTOCOLS")
        self._request_extents_atom = conn.intern_atom("_NET_REQUEST_FRAME_EXTENTS")
        self._extents_atom = conn.intern_atom("_NET_FRAME_EXTENTS")
        self._serial = 0
        self.client = self._ping_window()
        if self.client is None:
            log.info("the focused window does not answer _NET_WM_PING; typing waits fixed delays for it")
        self._probe: Any = None
        self._wm_present = self._wm_running()
        if self._wm_present:
            self._probe = self._root.create_window(-10, -10, 1, 1, 0, 0, X.InputOnly, X.CopyFromParent,
                                                   event_mask=X.PropertyChangeMask)
        else:
            log.info("no EWMH window manager runs; typing does not wait for one")
        self._root.change_attributes(event_mask=X.SubstructureNotifyMask)  # the pings come back here
        conn.sync()

    def _wm_running(self) -> bool:
        """An EWMH window manager runs: the root's ``_NET_SUPPORTING_WM_CHECK`` names a window that exists
        and names itself the same way (EWMH 1.5; a crashed or killed manager leaves the root's property
        behind, naming a window that is gone)."""
        from Xlib import X  # lazy: python-xlib (Linux only)

        atom = self.conn.intern_atom("_NET_SUPPORTING_WM_CHECK")
        prop = self._root.get_full_property(atom, X.AnyPropertyType)
        if prop is None or not len(prop.value):
            return False
        try:
            check = self.conn.create_resource_object("window", int(prop.value[0]))
            own = check.get_full_property(atom, X.AnyPropertyType)
        except Exception as exc:  # BadWindow: the manager that set the property is gone
            log.debug("stale _NET_SUPPORTING_WM_CHECK: %s", exc)
            return False
        return own is not None and len(own.value) > 0 and int(own.value[0]) == int(prop.value[0])

    @property
    def method(self) -> dict[str, str]:
        return {"client": "net_wm_ping" if self.client is not None else "fixed_delay",
                "window_manager": ("frame_extents" if self._probe is not None
                                   else "fixed_delay" if self._wm_present else "none")}

    def _ping_window(self) -> Any:
        """The focused window or its nearest ancestor that lists ``_NET_WM_PING``; None if none does. A focused
        window destroyed while it is read is passed over: the focus is read again (X has moved it on, to the
        window's parent for a ``RevertToParent`` focus), not taken for a window that cannot be pinged."""
        try:
            return read_while_windows_vanish(self._read_ping_window, "find the focused window to ping")
        except Exception as exc:  # windows destroyed under every read (BadWindow), a connection error
            log.debug("no window to ping: %s", exc)
        return None

    def _read_ping_window(self) -> Any:
        window = self.conn.get_input_focus().focus
        root_id = self._root.id
        while window and not isinstance(window, int) and window.id != root_id:
            protocols = window.get_full_property(self._protocols_atom, 0)  # ATOM list or None
            if protocols is not None and self._ping_atom in list(protocols.value):
                return window
            window = window.query_tree().parent
        return None

    def wait(self, fallback_s: float) -> None:
        """Return once the focused client and the window manager have answered round trips started now
        (each at most ``timeout_s``); a side that cannot answer is waited for ``fallback_s`` instead."""
        from Xlib import X  # lazy: python-xlib (Linux only)
        from Xlib.protocol import event as xevent  # lazy: python-xlib (Linux only)

        self._serial += 1
        stamp = self._serial
        client_done = self.client is None
        wm_done = self._probe is None
        if self.client is not None:
            ping = xevent.ClientMessage(window=self.client, client_type=self._protocols_atom,
                                        data=(32, [self._ping_atom, stamp, self.client.id, 0, 0]))
            self.client.send_event(ping, event_mask=X.NoEventMask)
        if self._probe is not None:
            request = xevent.ClientMessage(window=self._probe, client_type=self._request_extents_atom,
                                           data=(32, [0, 0, 0, 0, 0]))
            self._root.send_event(request, event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)
        self.conn.flush()
        deadline = time.monotonic() + self.timeout_s
        while not (client_done and wm_done) and time.monotonic() < deadline:
            while self.conn.pending_events():
                ev = self.conn.next_event()
                if (ev.type == X.ClientMessage and ev.client_type == self._protocols_atom
                        and list(ev.data[1])[:2] == [self._ping_atom, stamp]):
                    client_done = True
                elif ev.type == X.PropertyNotify and ev.atom == self._extents_atom and self._probe is not None \
                        and ev.window.id == self._probe.id:
                    wm_done = True
            if not (client_done and wm_done):
                time.sleep(0.002)
        if not client_done:
            log.warning("the focused window did not answer _NET_WM_PING within %.1f s; typing waits fixed "
                        "delays for it", self.timeout_s)
            self.client = None
        if not wm_done:
            log.warning("the window manager did not answer _NET_REQUEST_FRAME_EXTENTS within %.1f s; "
                        "typing waits fixed delays for it", self.timeout_s)
            self._destroy_probe()
        if not (client_done and wm_done):
            time.sleep(fallback_s)

    def _destroy_probe(self) -> None:
        if self._probe is not None:
            probe, self._probe = self._probe, None
            try:
                probe.destroy()
            except Exception as exc:
                log.debug("could not destroy the probe window: %s", exc)

    def close(self) -> None:
        """Destroy the probe window and stop listening on the root window (the connection stays open)."""
        self._destroy_probe()
        try:
            self._root.change_attributes(event_mask=0)
            self.conn.sync()
        except Exception as exc:
            log.debug("could not stop listening on the root window: %s", exc)
