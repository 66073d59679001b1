"""A settings-like GTK 3 form for the evaluation suite, run with the system Python (python3-gi).

    /usr/bin/python3 settings_form.py --state STATE.json --layout LAYOUT.json [--x 40 --y 40]

Widgets: an entry "name", a check button "dark" (Dark theme), a horizontal scale "volume" (0..100,
starts at 20), a scrolled list "country" of 30 countries (about 5 rows visible) and a button "save".

* ``--layout`` is rewritten (atomic rename) every 0.1 s while it changes: ``{"window": [x, y, w, h],
  "rects": {name: [x, y, w, h], ...}}`` in root-window pixels, read from GTK itself: "name", "dark",
  "volume_trough", "volume_knob", "save", and "row:<country>" for each row wholly visible in the list.
* "save" writes ``{"name": str, "dark": bool, "volume": int, "country": str | null}`` to ``--state``
  (atomic rename) and exits 0. Closing the window exits 1 without writing.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings

import gi

gi.require_version("Gtk", "3.0")
warnings.filterwarnings("ignore", category=DeprecationWarning)  # Gtk.Window.set_wmclass
from gi.repository import GLib, Gtk  # noqa: E402

COUNTRIES = ["Argentina", "Australia", "Austria", "Belgium", "Brazil", "Canada", "Chile", "Denmark", "Egypt",
             "Finland", "France", "Germany", "Greece", "India", "Italy", "Japan", "Kenya", "Mexico", "Nepal",
             "Norway", "Peru", "Poland", "Portugal", "Spain", "Sweden", "Thailand", "Turkey", "Uruguay",
             "Vietnam", "Zambia"]


def write_atomic(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False)
    os.replace(tmp, path)


class SettingsForm:
    def __init__(self, state: str, layout: str, x: int, y: int) -> None:
        self.state_path, self.layout_path, self.last = state, layout, ""
        self.win = Gtk.Window(title="Holodesk settings form")
        self.win.set_wmclass("holodesk-settings-form", "HolodeskSettingsForm")
        self.win.move(x, y)
        self.win.connect("delete-event", lambda *_: Gtk.main_quit() or os._exit(1))
        grid = Gtk.Grid(row_spacing=10, column_spacing=12, margin=16)
        self.win.add(grid)
        grid.attach(Gtk.Label(label="Name:", xalign=0), 0, 0, 1, 1)
        self.name = Gtk.Entry(width_chars=24)
        grid.attach(self.name, 1, 0, 1, 1)
        self.dark = Gtk.CheckButton(label="Dark theme")
        grid.attach(self.dark, 1, 1, 1, 1)
        grid.attach(Gtk.Label(label="Volume:", xalign=0), 0, 2, 1, 1)
        self.volume = Gtk.Scale.new_with_range(Gtk.Orientation.HORIZONTAL, 0, 100, 1)
        self.volume.set_value(20)
        self.volume.set_digits(0)
        self.volume.set_size_request(260, -1)
        grid.attach(self.volume, 1, 2, 1, 1)
        grid.attach(Gtk.Label(label="Country:", xalign=0), 0, 3, 1, 1)
        self.list = Gtk.ListBox()
        self.rows: dict[str, Gtk.ListBoxRow] = {}
        for country in COUNTRIES:
            row = Gtk.ListBoxRow()
            row.add(Gtk.Label(label=country, xalign=0, margin=4))
            self.rows[country] = row
            self.list.add(row)
        self.scroller = Gtk.ScrolledWindow()
        self.scroller.set_size_request(260, 150)
        self.scroller.set_policy(Gtk.PolicyType.NEVER, Gtk.PolicyType.ALWAYS)
        self.scroller.add(self.list)
        grid.attach(self.scroller, 1, 3, 1, 1)
        self.save = Gtk.Button(label="Save")
        self.save.connect("clicked", self.on_save)
        grid.attach(self.save, 1, 4, 1, 1)
        self.win.show_all()
        GLib.timeout_add(100, self.report)

    def rect(self, widget: Gtk.Widget, x: int = 0, y: int = 0, w: int | None = None, h: int | None = None) -> list[int]:
        gdk_window = self.win.get_window()
        ox, oy = gdk_window.get_origin()[1:] if gdk_window is not None else (0, 0)
        tx, ty = widget.translate_coordinates(self.win, x, y) or (0, 0)
        alloc = widget.get_allocation()
        return [ox + tx, oy + ty, alloc.width if w is None else w, alloc.height if h is None else h]

    def report(self) -> bool:
        rects = {"name": self.rect(self.name), "dark": self.rect(self.dark), "save": self.rect(self.save)}
        trough = self.volume.get_range_rect()
        rects["volume_trough"] = self.rect(self.volume, trough.x, trough.y, trough.width, trough.height)
        start, end = self.volume.get_slider_range()
        rects["volume_knob"] = self.rect(self.volume, start, trough.y, end - start, trough.height)
        view = self.scroller.get_allocation()
        top = self.scroller.get_vadjustment().get_value()
        for country, row in self.rows.items():
            a = row.get_allocation()
            if a.y >= top and a.y + a.height <= top + view.height:
                rects[f"row:{country}"] = self.rect(self.scroller, 0, int(a.y - top), a.width, a.height)
        gdk_window = self.win.get_window()
        frame = [*gdk_window.get_origin()[1:], self.win.get_allocated_width(), self.win.get_allocated_height()]
        text = json.dumps({"window": frame, "rects": rects})
        if text != self.last:
            write_atomic(self.layout_path, {"window": frame, "rects": rects})
            self.last = text
        return True

    def on_save(self, _button: Gtk.Button) -> None:
        row = self.list.get_selected_row()
        country = next((c for c, r in self.rows.items() if r is row), None)
        write_atomic(self.state_path, {"name": self.name.get_text(), "dark": self.dark.get_active(),
                                       "volume": int(self.volume.get_value()), "country": country})
        os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", required=True)
    parser.add_argument("--layout", required=True)
    parser.add_argument("--x", type=int, default=40)
    parser.add_argument("--y", type=int, default=40)
    args = parser.parse_args()
    SettingsForm(args.state, args.layout, args.x, args.y)
    Gtk.main()


if __name__ == "__main__":
    main()
