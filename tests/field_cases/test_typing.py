"""Field cases F14-F15: typing, for real on Xvfb (the real Session and pyautogui executor typing into a
real QLineEdit and a real QPlainTextEdit, read back from the windows' own state), plus the paste-chord
rules for platforms we do not have (macOS, Windows) through :func:`default_paste_chord`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.paste import default_paste_chord
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.control.window import focused_window_class
from holodesk.core.actions import Key, Type
from holodesk.core.geometry import frame_pixel_to_point, place
from holodesk.session.state import State
from tests.conftest import XvfbServer
from tests.field_cases.fakes import FakeFocusProbe, make_run, reply
from tests.helpers.desktop import App, Desktop, wait_until
from tests.helpers.target import TargetWindow

F14_TEXT = "Grüße, żółw, Ελληνικά, 日本語"
F14_MULTILINE = "Grüße, żółw,\tΕλληνικά\n日本語\tend"
PREVIOUS_CLIPBOARD = "the user's own clipboard ✓ (kept)"


@pytest.mark.parametrize("method", ["xtest", "clipboard"])
def test_F14_non_ascii_text_with_tab_and_newline_is_typed_exactly(method: str, xvfb: XvfbServer,
                                                                   tmp_path: Path) -> None:
    import pyperclip

    pyperclip.copy(PREVIOUS_CLIPBOARD)
    executor = PyAutoGUIExecutor(typing=method)  # type: ignore[arg-type]
    with TargetWindow.start(tmp_path / "line", x=200, y=150) as line_win, \
            TargetWindow.start(tmp_path / "multi", x=800, y=150, notes=True) as text_win, MssCapture() as cap:
        frame = cap.grab(1)
        field = frame_pixel_to_point(frame, *line_win.center("field"))
        notes = frame_pixel_to_point(frame, *text_win.center("notes"))
        run = make_run([
            reply({"tool_name": "click", "x": field.x, "y": field.y}),
            reply({"tool_name": "type", "text": F14_TEXT}),
            reply({"tool_name": "click", "x": notes.x, "y": notes.y}),
            reply({"tool_name": "type", "text": F14_MULTILINE}),
            reply(None, "typed both"),
        ], cap, executor, focus_probe=focused_window_class)
        result = run.session.run("type the greetings")
        assert result.status is State.FINISHED, result
        line_state = line_win.wait_for(lambda s: s["text"] == F14_TEXT, timeout=10)
        text_state = text_win.wait_for(lambda s: s["notes"] == F14_MULTILINE, timeout=10)
    assert line_state["text"] == F14_TEXT and line_state["submits"] == 0
    assert text_state["notes"] == F14_MULTILINE
    results = [e.data["result"] for e in run.kinds("result")]
    assert all(r.ok for r in results), results
    assert pyperclip.paste() == PREVIOUS_CLIPBOARD  # the user's clipboard is back
    if method == "clipboard":
        assert [r.details["clipboard_restored"] for r in results if r.details.get("typing_method")] == [True, True]


@pytest.mark.parametrize(
    ("platform", "wm_class", "chord"),
    [
        ("darwin", None, ("cmd", "v")),
        ("darwin", "Terminal com.apple.Terminal", ("cmd", "v")),  # macOS terminals paste with Cmd+V too
        ("win32", None, ("ctrl", "v")),
        ("linux", "target_window.py Target_window.py", ("ctrl", "v")),
        ("linux", "firefox Firefox", ("ctrl", "v")),
        ("linux", "xterm XTerm", ("ctrl", "shift", "v")),
        ("linux", "gnome-terminal-server Gnome-terminal", ("ctrl", "shift", "v")),
        ("linux", "kitty kitty", ("ctrl", "shift", "v")),
    ],
)
def test_F15_paste_chord_depends_on_platform_and_target(platform: str, wm_class: str | None,
                                                        chord: tuple[str, ...]) -> None:
    assert default_paste_chord(platform, wm_class) == chord


def test_F15_paste_chord_follows_the_real_focused_window(xvfb: XvfbServer, tmp_path: Path) -> None:
    executor = PyAutoGUIExecutor(typing="clipboard")
    with TargetWindow.start(tmp_path, x=200, y=150) as win, MssCapture() as cap:
        field = frame_pixel_to_point(cap.grab(1), *win.center("field"))
        run = make_run([reply({"tool_name": "click", "x": field.x, "y": field.y}),
                        reply({"tool_name": "type", "text": "pasted"}), reply(None, "ok")], cap, executor)
        run.session.run("paste")
        win.wait_for(lambda s: s["text"] == "pasted", timeout=10)
    pasted = run.kinds("result")[1].data["result"]
    assert pasted.details["paste_chord"] == "ctrl+v"
    assert "target_window" in (pasted.details["target_class"] or "").lower()


def test_F15_unverifiable_paste_is_reported_not_assumed(xvfb: XvfbServer, tmp_path: Path) -> None:
    """The focused window is taken for a terminal (fake focus: a WM_CLASS of xterm), so the paste chord
    is Ctrl+Shift+V, which the real QLineEdit ignores: nothing arrives. Holodesk cannot see that; it
    must say so to the user and to the model instead of reporting success."""
    import pyperclip

    pyperclip.copy(PREVIOUS_CLIPBOARD)
    executor = PyAutoGUIExecutor(typing="clipboard", target_class=FakeFocusProbe("xterm XTerm"))
    with TargetWindow.start(tmp_path, x=200, y=150) as win, MssCapture() as cap:
        field = frame_pixel_to_point(cap.grab(1), *win.center("field"))
        run = make_run([reply({"tool_name": "click", "x": field.x, "y": field.y}),
                        reply({"tool_name": "type", "text": "lost text"}), reply(None, "ok")], cap, executor)
        result = run.session.run("paste")
        assert win.state()["text"] == ""  # the paste did not arrive
    assert result.status is State.FINISHED
    pasted = run.kinds("result")[1].data["result"]
    assert (pasted.ok, pasted.verified) == (True, False)
    assert pasted.details["paste_chord"] == "ctrl+shift+v"
    assert "could not be verified" in pasted.message
    (warning,) = [w for w in run.kinds("warning") if w.step == 1]
    assert warning.message.startswith("Could not verify that the action worked")
    # The model is told the truth on the next step.
    last_history = run.policy.observations[2].history[-1]
    assert last_history.outcome.startswith("sent but not verified")
    assert pyperclip.paste() == PREVIOUS_CLIPBOARD


def test_F15_paste_waits_for_a_slow_target_before_restoring_the_clipboard(xvfb: XvfbServer, tmp_path: Path
                                                                          ) -> None:
    """X11 pastes are fetched when the target gets round to it. The target window is frozen (SIGSTOP)
    while the paste chord is pressed and thawed a second later, far past any fixed restore delay: the
    paste still brings the model's text (not the user's previous clipboard), and the user's clipboard is
    restored afterwards. This is the loaded-machine race behind the F10 clipboard flake, made certain."""
    import os
    import signal
    import threading

    import pyperclip

    from holodesk.core.actions import Click, Point, Type

    pyperclip.copy(PREVIOUS_CLIPBOARD)
    text = "pasted while the target was frozen ✓"
    executor = PyAutoGUIExecutor(typing="clipboard")
    with TargetWindow.start(tmp_path, x=200, y=150) as win, MssCapture() as cap:
        frame = cap.grab(1)
        field = frame_pixel_to_point(frame, *win.center("field"))
        assert executor.execute(place(Click(Point(field.x, field.y)), frame)).ok
        win.wait_for(lambda s: s["focus"] == "field", timeout=10)
        os.kill(win.process.pid, signal.SIGSTOP)
        thaw = threading.Timer(1.0, os.kill, (win.process.pid, signal.SIGCONT))
        thaw.start()
        try:
            result = executor.execute(place(Type(text), frame))
        finally:
            thaw.join()
            os.kill(win.process.pid, signal.SIGCONT)
        state = win.wait_for(lambda s: s["text"] != "", timeout=10)
    assert state["text"] == text
    assert result.ok and result.details["target_fetched"] is True, result
    assert result.details["clipboard_restored"] is True
    assert pyperclip.paste() == PREVIOUS_CLIPBOARD


def test_I30_a_copy_made_during_the_paste_is_kept(xvfb: XvfbServer, tmp_path: Path) -> None:
    """The user copies text with another program (xclip) while Holodesk's paste is under way (the target
    is frozen, so its fetch waits): the clipboard afterwards holds the user's new copy, read back with
    xclip, not the clipboard from before the paste."""
    import os
    import signal
    import subprocess
    import threading

    import pyperclip
    from Xlib import display as xdisplay

    from holodesk.core.actions import Click, Point, Type

    previous = f"{PREVIOUS_CLIPBOARD} {tmp_path.name}"  # no other test's clipboard tool serves this text
    pyperclip.copy(previous)
    conn = xdisplay.Display()
    clipboard = conn.intern_atom("CLIPBOARD")

    def owner() -> int:
        found = conn.get_selection_owner(clipboard)
        return found if isinstance(found, int) else int(found.id)

    wait_until(lambda: pyperclip.paste() == previous, 10, "xclip to serve the previous clipboard")
    first_owner = owner()  # that xclip, until someone else copies
    user_copy = "the user's newer copy ✓"
    executor = PyAutoGUIExecutor(typing="clipboard")
    with TargetWindow.start(tmp_path, x=200, y=150) as win, MssCapture() as cap:
        frame = cap.grab(1)
        field = frame_pixel_to_point(frame, *win.center("field"))
        assert executor.execute(place(Click(Point(field.x, field.y)), frame)).ok
        win.wait_for(lambda s: s["focus"] == "field", timeout=10)
        os.kill(win.process.pid, signal.SIGSTOP)
        copier: subprocess.Popen[bytes] | None = None

        def copy_once_holodesk_owns_it() -> None:
            nonlocal copier
            wait_until(lambda: owner() not in (0, first_owner), 10, "Holodesk to own the clipboard")
            copier = subprocess.Popen(["xclip", "-selection", "clipboard", "-i"], stdin=subprocess.PIPE)
            assert copier.stdin is not None
            copier.stdin.write(user_copy.encode())
            copier.stdin.close()

        user = threading.Thread(target=copy_once_holodesk_owns_it)
        user.start()
        try:
            result = executor.execute(place(Type("model text"), frame))
        finally:
            user.join()
            os.kill(win.process.pid, signal.SIGCONT)
            if copier is not None:
                copier.wait(timeout=10)  # xclip's parent; its forked child serves the copy
    conn.close()
    assert subprocess.run(["xclip", "-selection", "clipboard", "-o"], capture_output=True, timeout=10,
                          check=True).stdout.decode() == user_copy
    assert result.ok, result
    assert result.details["clipboard_taken_by_another"] is True
    assert result.details["clipboard_restored"] is False
    assert "kept (not restored)" in result.message


def test_I30_x11_paste_whose_chord_fails_still_restores_the_clipboard(xvfb: XvfbServer, tmp_path: Path) -> None:
    """The paste chord fails after Holodesk took the X11 clipboard (nobody else copied): the user's
    previous clipboard is put back, read with xclip."""
    import subprocess

    import pyperclip

    from holodesk.control.paste import ClipboardPaster

    previous = f"{PREVIOUS_CLIPBOARD} {tmp_path.name}"
    pyperclip.copy(previous)
    wait_until(lambda: pyperclip.paste() == previous, 10, "xclip to serve the previous clipboard")

    def broken_chord(keys: object) -> None:
        raise RuntimeError("keyboard went away")

    with pytest.raises(RuntimeError, match="keyboard went away"):
        ClipboardPaster(broken_chord, fetch_timeout_s=1.0).paste_text("never pasted")
    assert subprocess.run(["xclip", "-selection", "clipboard", "-o"], capture_output=True, timeout=10,
                          check=True).stdout.decode() == previous


# -- Issue 30: typing on real keyboards (X11) ------------------------------------------------------------
RUSSIAN_SENTENCE = "Съешь же ещё этих мягких французских булок, да выпей чаю. Эх, жизнь!"
CJK_TEXT = "春眠不覺曉處處聞啼鳥夜來風雨聲花落知多少床前明月光疑是地上霜舉頭望明月低頭思故鄉春眠不覺曉"


def keyboard_group(desktop: Desktop) -> int:
    """The X server's effective keyboard group (0 = first layout), from a QueryPointer state mask
    (XKB core state: group in bits 13-14) on a connection of the test's own."""
    from Xlib import display as xdisplay

    conn = xdisplay.Display(desktop.display)
    try:
        return (int(conn.screen().root.query_pointer().mask) >> 13) & 0x3
    finally:
        conn.close()


def next_group(desktop: Desktop) -> None:
    """Press the key that carries ISO_Next_Group (setxkbmap's grp:caps_toggle option) like a user would,
    through XTest on a connection of the test's own, and wait until the server's group has changed."""
    from Xlib import X
    from Xlib import display as xdisplay
    from Xlib.ext import xtest

    before = keyboard_group(desktop)
    conn = xdisplay.Display(desktop.display)
    try:
        keycode = conn.keysym_to_keycode(0xFE08)  # ISO_Next_Group
        assert keycode, "no key carries ISO_Next_Group"
        xtest.fake_input(conn, X.KeyPress, keycode)
        xtest.fake_input(conn, X.KeyRelease, keycode)
        conn.sync()
    finally:
        conn.close()
    wait_until(lambda: keyboard_group(desktop) != before, 10, "the keyboard group to change")


@pytest.fixture
def keymap_restored(desktop: Desktop, tmp_path: Path) -> Iterator[None]:
    """The session's X server is shared: its keyboard map goes back as it was (an xkbcomp dump), in
    the first group, whatever the test did."""
    saved = tmp_path / "keymap.xkb"
    desktop.run("xkbcomp", desktop.display, str(saved))
    yield
    while keyboard_group(desktop) != 0:
        next_group(desktop)
    desktop.run("xkbcomp", str(saved), desktop.display)


def zenity_entry(desktop: Desktop, title: str) -> App:
    """A zenity entry dialog with the keyboard focus in its text field."""
    dialog = desktop.launch(["zenity", "--entry", "--title", title, "--text", "Text:"], name=f"^{title}$")
    dialog.activate()
    return dialog


def type_and_submit(desktop: Desktop, title: str, text: str) -> tuple[str, Any]:
    """Type ``text`` into a fresh zenity entry with the real executor, press Enter (the executor too),
    and return what zenity printed (the entry's own text) and the typing result."""
    dialog = zenity_entry(desktop, title)
    executor = PyAutoGUIExecutor(typing="xtest")
    with MssCapture() as cap:
        frame = cap.grab(1)
    typed = executor.execute(place(Type(text), frame))
    assert typed.ok, typed
    assert executor.execute(place(Key(("enter",)), frame)).ok
    assert dialog.wait_exit() == 0, dialog.stderr()
    executor.end_episode()
    return dialog.stdout(), typed


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_I30_text_arrives_as_typed_with_the_second_layout_active(desktop: Desktop, keymap_restored: None) -> None:
    """Two layouts (us,ru) with the Russian one active: each key of the US layout types a Cyrillic
    letter in that group, so "Hello world 123" must not be typed with the US layout's keys."""
    desktop.run("setxkbmap", "-layout", "us,ru", "-option", "", "-option", "grp:caps_toggle")
    next_group(desktop)
    assert keyboard_group(desktop) == 1
    out, typed = type_and_submit(desktop, "I30 group", "Hello world 123 Привет")
    assert out == "Hello world 123 Привет\n"
    assert typed.details["keyboard_group"] == 2
    assert keyboard_group(desktop) == 1  # the user's layout is still the active one


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
@pytest.mark.parametrize("text", [RUSSIAN_SENTENCE, CJK_TEXT], ids=["russian", "cjk"])
def test_I30_text_with_more_distinct_characters_than_spare_keycodes_types_completely(
        desktop: Desktop, text: str, keymap_restored: None) -> None:
    """The US layout leaves fewer spare keycodes (19 on Xvfb) than the distinct characters of these
    texts need (26+ Cyrillic, 40 CJK): the typer must recycle the keycodes it bound, not stop half-way."""
    desktop.run("setxkbmap", "-layout", "us", "-option", "")
    out, typed = type_and_submit(desktop, "I30 long", text)
    assert out == text + "\n"
    assert typed.details["recycled_keycodes"] > 0
    assert typed.details["remapped_characters"] > typed.details["spare_keycodes"]
