"""A GTK 4 window with a text field and a "Delete all files" button (issue 31), run on X11 as its own process
with the system Python (PyGObject: python3-gi, gir1.2-gtk-4.0) and its accessibility on.

    GDK_BACKEND=x11 GSK_RENDERER=cairo /usr/bin/python3 tests/apps/gtk4_escapes.py --layout LAYOUT.json

``--layout`` is rewritten (atomic rename) every 200 ms: ``{"pid": int, "rects": {"notes": [x, y, w, h],
"delete": [...]}, "notes": str, "deletes": int}``; the rectangles are relative to the window's client
area (GTK 4 on X11 knows no screen coordinates).

This file must not import anything from holodesk or tests (it runs outside the project's venv).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import gi

gi.require_version("Gtk", "4.0")
from gi.repository import GLib, Gtk  # noqa: E402


class Escapes4:
    def __init__(self, app: Gtk.Application, layout: str) -> None:
        self.layout = layout
        self.deletes = 0
        self.window = Gtk.ApplicationWindow(application=app, title="Holodesk GTK 4 escapes")
        box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=8)
        box.set_margin_start(12)
        box.set_margin_end(12)
        box.set_margin_top(12)
        box.set_margin_bottom(12)
        self.notes = Gtk.Entry()
        self.notes.set_text("keep me")
        self.delete = Gtk.Button(label="Delete all files")
        self.delete.connect("clicked", self._on_delete)
        box.append(self.notes)
        box.append(self.delete)
        self.window.set_child(box)
        self.window.present()
        GLib.timeout_add(200, self._write)

    def _on_delete(self, *_: Any) -> None:
        self.deletes += 1

    def _write(self) -> bool:
        rects = {}
        for name, widget in (("notes", self.notes), ("delete", self.delete)):
            ok, bounds = widget.compute_bounds(self.window)
            if not ok:
                return True
            rects[name] = [int(bounds.get_x()), int(bounds.get_y()), int(bounds.get_width()),
                           int(bounds.get_height())]
        state = {"pid": os.getpid(), "rects": rects, "notes": self.notes.get_text(), "deletes": self.deletes}
        tmp = self.layout + ".tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(state, out)
        os.replace(tmp, self.layout)
        return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layout", required=True)
    args = parser.parse_args()
    app = Gtk.Application(application_id="org.holodesk.Gtk4Escapes")
    app.connect("activate", lambda a: Escapes4(a, args.layout))
    app.run([])


if __name__ == "__main__":
    main()
