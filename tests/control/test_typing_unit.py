"""Pure parts of the typers: keysyms, segment planning, paste chords, clipboard restore (fakes)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from holodesk.control.paste import ClipboardPaster, default_paste_chord
from holodesk.control.typing import (
    XK_RETURN,
    XK_TAB,
    active_group,
    char_to_keysym,
    direct_keysyms,
    plan_segments,
    text_to_keysyms,
)
from holodesk.errors import ActionError


def test_keysyms_latin1_unicode_tab_newline() -> None:
    assert char_to_keysym("a") == 0x61
    assert char_to_keysym("ü") == 0xFC  # Latin-1 keysym = code point
    assert char_to_keysym("ż") == 0x0100017C  # Unicode keysym
    assert char_to_keysym("日") == 0x01000000 + 0x65E5
    assert char_to_keysym("😀") == 0x01000000 + 0x1F600
    assert char_to_keysym("\t") == XK_TAB
    assert char_to_keysym("\n") == XK_RETURN
    assert text_to_keysyms("a\r\nb") == [0x61, XK_RETURN, 0x62]
    with pytest.raises(ActionError, match="U\\+0007"):
        char_to_keysym("\a")


def test_plan_segments_respects_spare_keycodes() -> None:
    direct = {1, 2}
    assert plan_segments([1, 10, 11, 10, 2], direct, 2) == [(0, 5)]
    assert plan_segments([10, 11, 12, 10], direct, 2) == [(0, 2), (2, 4)]
    assert plan_segments([1, 2], direct, 0) == [(0, 2)]
    with pytest.raises(ActionError, match="no spare keycode"):
        plan_segments([1, 9], direct, 0)


def test_paste_chords() -> None:
    assert default_paste_chord("darwin") == ("cmd", "v")
    assert default_paste_chord("linux") == ("ctrl", "v")
    assert default_paste_chord("linux", "gnome-terminal-server Gnome-terminal") == ("ctrl", "shift", "v")
    assert default_paste_chord("linux", "xterm XTerm") == ("ctrl", "shift", "v")
    assert default_paste_chord("win32", "notepad Notepad") == ("ctrl", "v")


class FakeClipboard:
    """A fake clipboard with pyperclip's copy/paste interface."""

    def __init__(self, value: str) -> None:
        self.value = value
        self.history: list[str] = []

    def copy(self, text: str) -> None:
        self.history.append(text)
        self.value = text

    def paste(self) -> str:
        return self.value


def test_clipboard_restored_even_when_the_chord_fails() -> None:
    cb = FakeClipboard("user's precious text")

    def broken_chord(keys: Sequence[str]) -> None:
        assert cb.value == "new text"  # the text is on the clipboard when the chord runs
        raise RuntimeError("keyboard went away")

    paster = ClipboardPaster(broken_chord, clipboard=cb, restore_delay_s=0)
    with pytest.raises(RuntimeError, match="keyboard went away"):
        paster.paste_text("new text")
    assert cb.value == "user's precious text"


def test_clipboard_report_is_unverified_and_names_chord() -> None:
    cb = FakeClipboard("before")
    chords: list[tuple[str, ...]] = []
    paster = ClipboardPaster(lambda k: chords.append(tuple(k)), clipboard=cb, restore_delay_s=0,
                             target_class=lambda: "kitty kitty")
    report = paster.paste_text("héllo")
    assert chords == [("ctrl", "shift", "v")]
    assert cb.value == "before" and cb.history == ["héllo", "before"]
    details = report.to_details()
    assert details["typing_method"] == "clipboard"
    assert details["verified"] is False
    assert details["paste_chord"] == "ctrl+shift+v"
    assert details["clipboard_restored"] is True


def test_clipboard_copied_to_during_the_paste_is_kept_not_restored() -> None:
    """The user copies while the paste runs (a fake clipboard: the one that stands for macOS / Windows
    here): the restore would overwrite that copy with the older clipboard, so it is skipped."""
    cb = FakeClipboard("before")

    def user_copies(keys: Sequence[str]) -> None:
        cb.copy("the user's newer copy")

    report = ClipboardPaster(user_copies, clipboard=cb, restore_delay_s=0).paste_text("pasted")
    assert cb.value == "the user's newer copy"
    assert cb.history == ["pasted", "the user's newer copy"]
    details = report.to_details()
    assert details["clipboard_restored"] is False
    assert details["clipboard_taken_by_another"] is True


def test_clipboard_that_does_not_take_the_text_fails_before_pasting() -> None:
    class StuckClipboard(FakeClipboard):
        def copy(self, text: str) -> None:
            self.history.append(text)

    cb = StuckClipboard("old")
    chords: list[Sequence[str]] = []
    with pytest.raises(ActionError, match="did not take the text"):
        ClipboardPaster(chords.append, clipboard=cb, restore_delay_s=0).paste_text("x")
    assert chords == []
    assert cb.value == "old"


def test_keycode_runs_group_consecutive_keycodes_into_one_change() -> None:
    from holodesk.control.typing import keycode_runs

    assert keycode_runs({253: [1, 1], 254: [2, 2], 200: [3, 3], 255: [4, 4]}) == [
        (200, [[3, 3]]), (253, [[1, 1], [2, 2], [4, 4]])]
    assert keycode_runs({}) == []


def test_active_group_is_read_from_bits_13_and_14_of_the_core_state() -> None:
    assert active_group(0x0) == 0
    assert active_group(0x2000) == 1  # second layout
    assert active_group(0x6000 | 0x1 | 0x100) == 3  # Shift and Button1 do not count


def test_direct_keysyms_follow_the_active_group() -> None:
    a, A, ef, EF, space, ret = 0x61, 0x41, 0x6C6, 0x6E6, 0x20, 0xFF0D
    rows = [[], [a, A, ef, EF], [space, 0, space, 0], [ret, 0, ret], [], [0x31, 0x21, 0x31, 0x21]]
    direct, spare = direct_keysyms(rows, 8, 0, held=set())
    assert direct == {a: (9, 0), A: (9, 1), space: (10, 0), ret: (11, 0), 0x31: (13, 0), 0x21: (13, 1)}
    assert spare == [12, 8]  # highest first
    direct, spare = direct_keysyms(rows, 8, 1, held={13})
    assert direct == {ef: (9, 0), EF: (9, 1), space: (10, 0), ret: (11, 0)}
    assert spare == [13, 12, 8]  # a keycode the typer bound counts as spare
    direct, _spare = direct_keysyms(rows, 8, 2, held=set())
    assert direct == {}  # groups 3 and 4: every character through a spare keycode
