"""A GTK 3 window with the controls an autopilot escape goes through (issue 31), run as its own process with
the system Python (PyGObject: python3-gi, gir1.2-gtk-3.0) and its accessibility bridge on.

    /usr/bin/python3 tests/apps/gtk_escapes.py --layout LAYOUT.json [--x 300 --y 200] [--pty-child] [--fullscreen]

Widgets: a menu bar with a "Tools" menu ("Refresh", then "Run cleanup (deletes old files)"; both count their
activations), a Gtk.Entry "notes" holding "keep me", a Gtk.Button "Delete all files" (counts its presses), a
Gtk.ComboBoxText "mode" ("Keep old files" active, then "Delete old files").

``--layout`` is rewritten (atomic rename) whenever the window is mapped, moved or resized, the focus moves
or a value changes: ``{"pid": int, "rects": {"tools": [x, y, w, h], "notes": [...], "delete": [...],
"mode": [...]}, "focus": "notes" | "delete" | "mode" | null, "notes": str, "deletes": int, "mode": str,
"cleanups": int, "refreshes": int, "menu": {"refresh": [x, y, w, h], "cleanup": [...]} while the menu is
open, else {}}``, rectangles in root-window pixels as GDK reports them.

``--fullscreen`` shows the window fullscreen (on Wayland, where GDK reports window coordinates, they are then
screen coordinates).

``--pty-child`` starts a child process that holds a pseudo-terminal master until this process ends, as an
IDE's terminal panel does (its pid is ``"pty_child"`` in the layout).

This file must not import anything from holodesk or tests (it runs outside the project's venv).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

import gi

gi.require_version("Gtk", "3.0")
from gi.repository import GLib, Gtk  # noqa: E402

PTY_CHILD = ("import os, sys, time\nmaster, slave = os.openpty()\n"
             "while os.getppid() == int(sys.argv[1]):\n    time.sleep(0.2)\n")
"""The child of ``--pty-child``: opens a pty (``/dev/ptmx``) and lives as long as its parent."""


class EscapesWindow:
    def __init__(self, layout: str, x: int, y: int, pty_child: bool, fullscreen: bool = False) -> None:
        self.layout = layout
        self.deletes = 0
        self.cleanups = 0
        self.pty_child = subprocess.Popen([sys.executable, "-c", PTY_CHILD, str(os.getpid())]) if pty_child else None
        self.window = Gtk.Window(title="Holodesk escapes")
        self.window.set_wmclass("holodesk-gtk-escapes", "HolodeskGtkEscapes")
        self.window.move(x, y)
        menubar = Gtk.MenuBar()
        self.tools = Gtk.MenuItem(label="Tools")
        menu = Gtk.Menu()
        self.menu_items: dict[str, Gtk.MenuItem] = {}
        for name, label in (("refresh", "Refresh"), ("cleanup", "Run cleanup (deletes old files)")):
            item = Gtk.MenuItem(label=label)
            item.connect("activate", self._on_cleanup if name == "cleanup" else self._on_refresh)
            menu.append(item)
            self.menu_items[name] = item
        self.refreshes = 0
        self.tools.set_submenu(menu)
        menubar.append(self.tools)
        grid = Gtk.Grid(row_spacing=8, column_spacing=8, margin=12)
        self.notes = Gtk.Entry(text="keep me", width_chars=24)
        self.delete = Gtk.Button(label="Delete all files")
        self.mode = Gtk.ComboBoxText()
        for text in ("Keep old files", "Delete old files"):
            self.mode.append_text(text)
        self.mode.set_active(0)
        grid.attach(self.notes, 0, 0, 1, 1)
        grid.attach(self.delete, 0, 1, 1, 1)
        grid.attach(self.mode, 0, 2, 1, 1)
        outer = Gtk.Box(orientation=Gtk.Orientation.VERTICAL)
        outer.pack_start(menubar, False, False, 0)
        outer.pack_start(grid, True, True, 0)
        self.window.add(outer)
        self.widgets = {"tools": self.tools, "notes": self.notes, "delete": self.delete, "mode": self.mode}
        self.delete.connect("clicked", self._on_delete)
        self.notes.connect("changed", self._write)
        self.mode.connect("changed", self._write)
        self.window.connect("configure-event", self._write)
        self.window.connect("set-focus", self._write)
        self.window.connect("notify::is-active", self._write)
        self.window.connect("destroy", Gtk.main_quit)
        if fullscreen:
            self.window.fullscreen()
        self.window.show_all()
        self.notes.grab_focus()
        GLib.timeout_add(200, self._tick)

    def _on_delete(self, *_: Any) -> None:
        self.deletes += 1
        self._write()

    def _on_refresh(self, *_: Any) -> None:
        self.refreshes += 1
        self._write()

    def _on_cleanup(self, *_: Any) -> None:
        self.cleanups += 1
        self._write()

    def _tick(self) -> bool:
        self._write()
        return True

    def _write(self, *_: Any) -> bool:
        gdk_window = self.window.get_window()
        if gdk_window is None:
            return False
        rects = {}
        for name, widget in self.widgets.items():
            alloc = widget.get_allocation()
            origin = widget.get_window().get_origin()
            rects[name] = [origin.x + alloc.x, origin.y + alloc.y, alloc.width, alloc.height]
        menu = {}
        for name, item in self.menu_items.items():
            if item.get_mapped():
                alloc = item.get_allocation()
                origin = item.get_window().get_origin()
                menu[name] = [origin.x + alloc.x, origin.y + alloc.y, alloc.width, alloc.height]
        focus = self.window.get_focus() if self.window.is_active() else None
        state = {"pid": os.getpid(), "pty_child": self.pty_child.pid if self.pty_child else None, "rects": rects,
                 "focus": next((n for n, w in self.widgets.items() if w is focus), None),
                 "notes": self.notes.get_text(), "deletes": self.deletes, "mode": self.mode.get_active_text(),
                 "cleanups": self.cleanups, "refreshes": self.refreshes, "menu": menu}
        tmp = self.layout + ".tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            json.dump(state, out)
        os.replace(tmp, self.layout)
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layout", required=True)
    parser.add_argument("--x", type=int, default=300)
    parser.add_argument("--y", type=int, default=200)
    parser.add_argument("--pty-child", action="store_true")
    parser.add_argument("--fullscreen", action="store_true")
    args = parser.parse_args()
    EscapesWindow(args.layout, args.x, args.y, args.pty_child, args.fullscreen)
    Gtk.main()


if __name__ == "__main__":
    main()
