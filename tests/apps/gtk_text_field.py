"""One GTK text field in a window, GTK 3 or GTK 4, run with the system Python (python3-gi,
gir1.2-gtk-3.0 / gir1.2-gtk-4.0) so that Holodesk drives a toolkit that is not its own:

    /usr/bin/python3 tests/apps/gtk_text_field.py --gtk 4 --state STATE.json [--blink-ms 1200]

The window is titled "GTK<version> text field"; the Gtk.Entry has the keyboard focus from the start and
keeps GTK's own caret drawing (GTK 3 toggles the caret on and off, GTK 4 fades it in and out).
``--blink-ms`` sets GtkSettings ``gtk-cursor-blink-time`` (one full on-off cycle, milliseconds; GTK's
default is 1200), as a user's desktop settings can.

``--state`` is rewritten (atomic rename) whenever the text changes: ``{"gtk": 3 | 4, "text": str}``.

This file must not import anything from holodesk or tests (it runs outside the project's venv).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import gi


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gtk", type=int, choices=(3, 4), required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--blink-ms", type=int, default=0)
    args = parser.parse_args()
    gi.require_version("Gtk", f"{args.gtk}.0")
    from gi.repository import Gtk

    def write(text: str) -> None:
        tmp = args.state + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"gtk": args.gtk, "text": text}, f)
        os.replace(tmp, args.state)

    def build(window: Any) -> None:
        if args.blink_ms:
            Gtk.Settings.get_default().set_property("gtk-cursor-blink-time", args.blink_ms)
        window.set_title(f"GTK{args.gtk} text field")
        window.set_default_size(420, 120)
        entry = Gtk.Entry()
        entry.connect("changed", lambda e: write(e.get_text()))
        if args.gtk == 4:
            window.set_child(entry)
        else:
            window.add(entry)
        write("")
        entry.grab_focus()

    if args.gtk == 4:
        app = Gtk.Application(application_id=None)

        def activate(application: Any) -> None:
            window = Gtk.ApplicationWindow(application=application)
            build(window)
            window.present()

        app.connect("activate", activate)
        app.run([])
    else:
        window = Gtk.Window()
        window.connect("destroy", Gtk.main_quit)
        build(window)
        window.show_all()
        Gtk.main()


if __name__ == "__main__":
    main()
