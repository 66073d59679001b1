"""The Wayland clipboard as a user lives with it, on a real headless GNOME session and the GTK4 target:
Holodesk's paste puts the clipboard back only while it still holds what Holodesk put there (a copy the
user made since is kept), and ``write_desktop`` with ``press_enter`` and non-ASCII text presses Enter after
the paste. Asserted from the app's own state: its entry text, its Enter count and the clipboard as it reads it.
"""

from __future__ import annotations

import pytest

from holodesk.core.actions import Action, Click, Key
from holodesk.core.geometry import Frame, frame_pixel_to_point, place
from holodesk.policy.contract import ToolContext, WriteDesktop
from tests.helpers.mutter import TargetApp
from tests.wayland.conftest import GnomeDesktop

pytestmark = [pytest.mark.wayland]


def perform(gnome: GnomeDesktop, frame: Frame, action: Action) -> None:
    result = gnome.executor.execute(place(action, frame))
    assert result.ok, result


def click(gnome: GnomeDesktop, frame: Frame, app: TargetApp, widget: str) -> None:
    perform(gnome, frame, Click(frame_pixel_to_point(frame, *app.center(widget))))


def caret_at_the_entry_end(gnome: GnomeDesktop, frame: Frame, app: TargetApp) -> None:
    """Click into the entry and move the caret to its end (a click may bring back the entry's selection)."""
    click(gnome, frame, app, "entry")
    app.wait_state(lambda s: s["entry_focused"])
    perform(gnome, frame, Key(("end",)))


def clipboard_as_the_app_reads_it(gnome: GnomeDesktop, frame: Frame, app: TargetApp) -> str:
    """Click the app's button (after its first click it only reads the clipboard) and return what it read."""
    reads = app.state().get("clipboard_reads", 0)
    click(gnome, frame, app, "button")
    return str(app.wait_state(lambda s: s.get("clipboard_reads", 0) > reads)["clipboard"])


def user_copies_the_entry(gnome: GnomeDesktop, frame: Frame, app: TargetApp) -> None:
    """The user selects the entry's text and copies it (Ctrl+A, Ctrl+C: the GTK app owns the clipboard)."""
    perform(gnome, frame, Key(("ctrl", "a")))
    perform(gnome, frame, Key(("ctrl", "c")))
    perform(gnome, frame, Key(("end",)))


def test_a_copy_the_user_made_after_a_paste_is_kept(gnome: GnomeDesktop, gtk_app: TargetApp) -> None:
    frame = gnome.capture.grab(1)
    clipboard_as_the_app_reads_it(gnome, frame, gtk_app)  # the first click: the app owns the clipboard
    caret_at_the_entry_end(gnome, frame, gtk_app)
    perform(gnome, frame, WriteDesktop(tool_name="write_desktop", content="mine").to_action(ToolContext()))
    user_copies_the_entry(gnome, frame, gtk_app)
    assert clipboard_as_the_app_reads_it(gnome, frame, gtk_app) == "mine"
    caret_at_the_entry_end(gnome, frame, gtk_app)
    perform(gnome, frame, WriteDesktop(tool_name="write_desktop", content=" Grüße").to_action(ToolContext()))
    gtk_app.wait_state(lambda s: s["text"] == "mine Grüße")
    assert clipboard_as_the_app_reads_it(gnome, frame, gtk_app) == "mine"  # put back after the paste
    caret_at_the_entry_end(gnome, frame, gtk_app)
    user_copies_the_entry(gnome, frame, gtk_app)  # the user's new copy, made after Holodesk's paste
    assert clipboard_as_the_app_reads_it(gnome, frame, gtk_app) == "mine Grüße"
    caret_at_the_entry_end(gnome, frame, gtk_app)
    perform(gnome, frame, WriteDesktop(tool_name="write_desktop", content=" 日本").to_action(ToolContext()))
    gtk_app.wait_state(lambda s: s["text"] == "mine Grüße 日本")
    # The clipboard holds the user's latest copy, not the text Holodesk had put back before it.
    assert clipboard_as_the_app_reads_it(gnome, frame, gtk_app) == "mine Grüße"


def test_press_enter_after_non_ascii_text_presses_enter(gnome: GnomeDesktop, gtk_app: TargetApp) -> None:
    frame = gnome.capture.grab(1)
    click(gnome, frame, gtk_app, "entry")
    gtk_app.wait_state(lambda s: s["entry_focused"])
    action = WriteDesktop(tool_name="write_desktop", content="Grüße 日本", press_enter=True).to_action(ToolContext())
    perform(gnome, frame, action)
    state = gtk_app.wait_state(lambda s: s.get("activations", 0) >= 1 and s["text"] == "Grüße 日本")
    assert state["activations"] == 1 and state["text"] == "Grüße 日本"
