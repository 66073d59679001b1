"""The real-desktop fixtures themselves (tests/helpers/desktop.py): a window manager really runs, and the
third-party programs and our Tk/GTK forms answer input from xdotool (no Holodesk involved), so a failure
in the Holodesk e2e tests points at Holodesk, not at the desktop."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.desktop import ALL_WINDOW_MANAGERS, Desktop, FormApp, compositor_running, wait_until

pytestmark = [pytest.mark.gui, pytest.mark.slow]


@pytest.mark.parametrize("desktop", ALL_WINDOW_MANAGERS, indirect=True)
def test_window_manager_frames_and_focuses_windows(desktop: Desktop) -> None:
    form = desktop.tk_form(x=400, y=300)
    assert "Tk form" in desktop.xdotool("getwindowname", str(form.window))
    # a reparenting window manager puts a frame around the client: its parent is not the root window
    tree = desktop.run("xwininfo", "-children", "-id", str(form.window))
    root = desktop.run("xwininfo", "-root").split("Window id: ")[1].split()[0]
    parent = tree.split("Parent window id: ")[1].split()[0]
    assert parent != root, tree
    # the compositing setups really composite: a compositing manager owns _NET_WM_CM_S0
    assert compositor_running(desktop.env()) is (desktop.wm.name in ("xfwm4", "openbox+picom"))
    form.activate()
    assert desktop.xdotool("getactivewindow").strip() == str(form.window)


@pytest.mark.parametrize("kind", ["tk", "gtk"])
def test_forms_report_layout_and_print_their_state(desktop: Desktop, kind: str) -> None:
    form: FormApp = desktop.tk_form(300, 200) if kind == "tk" else desktop.gtk_form(300, 200)
    form.activate()
    x, y = form.center("name")
    desktop.click(x, y)
    form.wait_layout(lambda lay: lay.get("focus") == "name")
    desktop.xdotool("type", "--delay", "20", "hello")
    wait_until(lambda: form.layout().get("name") == "hello", 30, "the typed text in the form")
    for widget in ("agree", "Count", "Count", "Submit"):
        x, y = form.center(widget)
        desktop.click(x, y)
        if widget != "Submit":
            want = {"agree": lambda lay: lay["agree"], "Count": lambda lay: lay["count"] >= 1}[widget]
            form.wait_layout(want)
    assert form.result() == {"name": "hello", "agree": True, "count": 2, "submitted": True}


def test_zenity_entry_prints_what_was_typed(desktop: Desktop) -> None:
    dialog = desktop.launch(["zenity", "--entry", "--title", "Holodesk zenity", "--text", "Your name"],
                            name="Holodesk zenity")
    dialog.activate()
    desktop.xdotool("type", "--delay", "20", "Ada")
    desktop.xdotool("key", "Return")
    assert dialog.wait_exit() == 0
    assert dialog.stdout() == "Ada\n"


def test_mousepad_saves_typed_text(desktop: Desktop, tmp_path: Path) -> None:
    path = tmp_path / "note.txt"
    path.write_text("", encoding="utf-8")
    editor = desktop.launch(["mousepad", "--disable-server", str(path)], wm_class="mousepad")
    editor.activate()
    desktop.xdotool("type", "--delay", "20", "saved by xdotool")
    desktop.xdotool("key", "ctrl+s")
    wait_until(lambda: path.read_text(encoding="utf-8") == "saved by xdotool", 30, "mousepad to save the file")
