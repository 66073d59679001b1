"""A small GTK 3 form, run as its own process with the system Python (PyGObject: python3-gi,
gir1.2-gtk-3.0), so Holodesk drives a toolkit and an interpreter that are not its own.

    /usr/bin/python3 tests/apps/gtk_form.py --layout LAYOUT.json [--x 300 --y 200] [--title "GTK form"]

Widgets: a Gtk.Entry "name", a Gtk.CheckButton "agree", a Gtk.Button "Count" (counts its clicks) and a
Gtk.Button "Submit". A click on Submit, or Return in the name field, submits.

* ``--layout``: rewritten (atomic rename) whenever the window is mapped, moved or resized, the focus
  moves or a value changes, with every
  widget's rectangle in root-window (input-space) pixels, as GDK reports them:
  ``{"pid": int, "window": [x, y, w, h], "rects": {"name": [x, y, w, h], "agree": [...], "Count": [...],
  "Submit": [...]}, "focus": "name" | ... | null, "count": int,
  "toggles": int}``; ``focus`` is null while another window has the keyboard focus; ``toggles`` counts
  the check box's state changes.
* On Submit the final state is printed as one JSON line on stdout and the program exits 0:
  ``{"name": str, "agree": bool, "count": int, "submitted": true}``.
* Closing the window prints ``{"submitted": false, ...}`` and exits 1.

This file must not import anything from holodesk or tests (it runs outside the project's venv).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import gi

gi.require_version("Gtk", "3.0")
from gi.repository import GLib, Gtk  # noqa: E402


class GtkForm:
    def __init__(self, layout: str, x: int, y: int, title: str) -> None:
        self.layout = layout
        self.count = 0
        self.toggles = 0
        self.exit_code = 1
        self.window = Gtk.Window(title=title)
        self.window.set_wmclass("holodesk-gtk-form", "HolodeskGtkForm")
        self.window.move(x, y)
        grid = Gtk.Grid(row_spacing=8, column_spacing=8, margin=20)
        self.window.add(grid)
        grid.attach(Gtk.Label(label="Name:"), 0, 0, 1, 1)
        self.entry = Gtk.Entry(width_chars=30)
        self.entry.connect("activate", self.on_submit)
        grid.attach(self.entry, 1, 0, 1, 1)
        self.check = Gtk.CheckButton(label="I agree")
        grid.attach(self.check, 1, 1, 1, 1)
        self.counter = Gtk.Button(label="Count")
        self.counter.connect("clicked", self.on_count)
        grid.attach(self.counter, 0, 2, 1, 1)
        self.submit = Gtk.Button(label="Submit")
        self.submit.connect("clicked", self.on_submit)
        grid.attach(self.submit, 1, 2, 1, 1)
        self.widgets: dict[str, Gtk.Widget] = {"name": self.entry, "agree": self.check, "Count": self.counter,
                                               "Submit": self.submit}
        self.window.connect("delete-event", self.on_close)
        self.window.connect("configure-event", self.on_configure)
        self.window.connect("map-event", self.on_configure)
        self.window.connect("set-focus", self.on_configure)
        self.window.connect("focus-in-event", self.on_configure)
        self.window.connect("focus-out-event", self.on_configure)
        self.entry.connect("changed", self.on_configure)
        self.check.connect("toggled", self.on_toggled)

    def state(self) -> dict[str, Any]:
        return {"name": self.entry.get_text(), "agree": bool(self.check.get_active()), "count": self.count}

    def rect(self, widget: Gtk.Widget) -> list[int]:
        gdk_window = self.window.get_window()
        _ok, ox, oy = gdk_window.get_origin()
        if widget is self.window:
            return [ox, oy, self.window.get_allocated_width(), self.window.get_allocated_height()]
        wx, wy = widget.translate_coordinates(self.window, 0, 0)
        return [ox + wx, oy + wy, widget.get_allocated_width(), widget.get_allocated_height()]

    def on_configure(self, *_args: Any) -> bool:
        GLib.idle_add(self.write_layout)
        return False

    def write_layout(self) -> bool:
        if self.window.get_window() is None or not self.window.get_mapped():
            return False
        focus = self.window.get_focus() if self.window.is_active() else None
        focused = next((n for n, w in self.widgets.items() if w is focus), None)
        data = {"pid": os.getpid(), "window": self.rect(self.window),
                "rects": {n: self.rect(w) for n, w in self.widgets.items()}, "focus": focused,
                "toggles": self.toggles, **self.state()}
        tmp = f"{self.layout}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.layout)
        return False

    def on_toggled(self, _check: Gtk.CheckButton) -> None:
        self.toggles += 1
        self.write_layout()

    def on_count(self, _button: Gtk.Button) -> None:
        self.count += 1
        self.write_layout()

    def finish(self, submitted: bool) -> None:
        print(json.dumps({**self.state(), "submitted": submitted}, ensure_ascii=False), flush=True)
        self.exit_code = 0 if submitted else 1
        Gtk.main_quit()

    def on_submit(self, _widget: Gtk.Widget) -> None:
        self.finish(True)

    def on_close(self, *_args: Any) -> bool:
        self.finish(False)
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layout", required=True, help="JSON file with the widget rectangles")
    parser.add_argument("--x", type=int, default=300)
    parser.add_argument("--y", type=int, default=200)
    parser.add_argument("--title", default="Holodesk GTK form")
    args = parser.parse_args(argv)
    form = GtkForm(args.layout, args.x, args.y, args.title)
    form.window.show_all()
    Gtk.main()
    return form.exit_code


if __name__ == "__main__":
    sys.exit(main())
