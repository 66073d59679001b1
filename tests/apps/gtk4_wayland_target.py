"""A native GTK4 Wayland app for the Wayland tests: ``/usr/bin/python3 gtk4_wayland_target.py STATE.json``.

Run with the system python3 (python3-gi, gir1.2-gtk-4.0) and ``GDK_BACKEND=wayland``. The window is
fullscreen, so window coordinates are screen coordinates. Layout, top to bottom:

* an area (the upper part of the screen) of ``COLUMNS`` equal vertical stripes in known colours (CSS);
  each press on it is recorded and flips the stripes to their inverted colours (so a test can tell a
  fresh frame from a stale one);
* a button labelled "Press me" (clicks are counted; the first click puts ``OWN_CLIPBOARD`` into the
  clipboard, every click reads the clipboard back into the state);
* an entry (its text is recorded on every change).

The state file is rewritten atomically (temp file + rename) on each event, as JSON:
``{"ready", "clicks", "presses", "text", "inverted", "entry_focused", "area", "button", "entry"
(each ``[x, y, width, height]`` on the screen, logical pixels, updated when the scale changes),
"scale_factor", "pointer" (``[x, y]`` of the latest pointer motion over the stripes), "clipboard",
"clipboard_reads", "activations" (Enter pressed in the entry)}``.
"""

from __future__ import annotations

import json
import os
import sys

import gi

gi.require_version("Gtk", "4.0")
gi.require_version("Gdk", "4.0")
from gi.repository import Gdk, Gio, GLib, Gtk  # noqa: E402

OWN_CLIPBOARD = "the user's own clipboard ✓"
COLUMNS = [(0xE0, 0x20, 0x20), (0x20, 0xC0, 0x20), (0x20, 0x40, 0xE0), (0xF0, 0xD0, 0x10),
           (0x10, 0xD0, 0xD0), (0xC0, 0x20, 0xC0), (0x80, 0x80, 0x80), (0x30, 0x30, 0x30)]


class Target:
    def __init__(self, app: Gtk.Application, state_path: str) -> None:
        self.state_path = state_path
        self.state: dict[str, object] = {"ready": False, "clicks": 0, "presses": [], "text": "", "inverted": False,
                                          "entry_focused": False}
        self.window = Gtk.ApplicationWindow(application=app, title="Holodesk Wayland target")
        box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=0)
        css = "".join(f".stripe{i} {{ background: rgb{c}; }} .inverted .stripe{i} "
                      f"{{ background: rgb{tuple(255 - v for v in c)}; }}" for i, c in enumerate(COLUMNS))
        provider = Gtk.CssProvider()
        provider.load_from_data(css.encode())
        Gtk.StyleContext.add_provider_for_display(self.window.get_display(), provider,
                                                  Gtk.STYLE_PROVIDER_PRIORITY_APPLICATION)
        self.area = Gtk.Box(orientation=Gtk.Orientation.HORIZONTAL, spacing=0, homogeneous=True)
        self.area.set_vexpand(True)
        for i in range(len(COLUMNS)):
            stripe = Gtk.Box()
            stripe.add_css_class(f"stripe{i}")
            stripe.set_hexpand(True)
            self.area.append(stripe)
        press = Gtk.GestureClick()
        press.connect("pressed", self.on_press)
        self.area.add_controller(press)
        motion = Gtk.EventControllerMotion()
        motion.connect("motion", lambda c, x, y: self.set_state(pointer=[x, y]))
        self.area.add_controller(motion)
        self.button = Gtk.Button(label="Press me")
        self.button.connect("clicked", self.on_click)
        self.button.set_size_request(-1, 120)
        self.entry = Gtk.Entry()
        self.entry.connect("changed", self.on_changed)
        self.entry.connect("activate", lambda e: self.set_state(activations=int(self.state.get("activations", 0)) + 1))
        focus = Gtk.EventControllerFocus()
        focus.connect("enter", lambda c: self.set_state(entry_focused=True))
        focus.connect("leave", lambda c: self.set_state(entry_focused=False))
        self.entry.add_controller(focus)
        self.entry.set_size_request(-1, 80)
        spacer = Gtk.Box()
        spacer.set_vexpand(True)
        for child in (self.area, self.button, self.entry, spacer):
            box.append(child)
        self.window.set_child(box)
        self.window.fullscreen()
        self.window.present()
        GLib.timeout_add(50, self.check_ready)

    def check_ready(self) -> bool:
        width = self.window.get_width()
        if self.window.is_fullscreen() and width > 0 and self.area.get_height() > 0:
            # One more frame after the fullscreen configure so the compositor shows the final layout.
            GLib.timeout_add(300, self.mark_ready)
            return False
        return True

    def mark_ready(self) -> bool:
        self.record_layout()
        self.state["ready"] = True
        self.save()
        GLib.timeout_add(100, self.record_layout)  # follows scale changes
        return False

    def record_layout(self) -> bool:
        """Save the widgets' bounds (window = screen coordinates, logical pixels) and the scale factor
        when they changed; keeps running (every 100 ms)."""
        layout: dict[str, object] = {"scale_factor": self.window.get_scale_factor()}
        for name in ("area", "button", "entry"):
            ok, rect = getattr(self, name).compute_bounds(self.window)
            layout[name] = [rect.get_x(), rect.get_y(), rect.get_width(), rect.get_height()] if ok else None
        if any(self.state.get(k) != v for k, v in layout.items()):
            self.state.update(layout)
            self.save()
        return True

    def on_press(self, gesture: Gtk.GestureClick, n_press: int, x: float, y: float) -> None:
        """Record the press and flip the stripes' colours; the state is saved once the frame with the new
        colours has been drawn and handed to the compositor (two frame-clock ticks later), so a test that
        sees the new state can expect the new colours on the screen."""
        inverted = not self.state["inverted"]
        if inverted:
            self.area.add_css_class("inverted")
        else:
            self.area.remove_css_class("inverted")
        ticks = [0]

        def tick(widget: Gtk.Widget, clock: object) -> bool:
            ticks[0] += 1
            if ticks[0] < 3:
                return GLib.SOURCE_CONTINUE
            self.state["presses"].append([x, y])  # type: ignore[union-attr]
            self.state["inverted"] = inverted
            self.save()
            return GLib.SOURCE_REMOVE

        self.area.add_tick_callback(tick)

    def on_click(self, button: Gtk.Button) -> None:
        """Count the click; the first click also puts OWN_CLIPBOARD into the clipboard (this app owns it,
        as the user's own clipboard), and every click reads the clipboard back into ``clipboard``."""
        self.state["clicks"] = int(self.state["clicks"]) + 1  # type: ignore[call-overload]
        clipboard = self.window.get_display().get_clipboard()
        if self.state["clicks"] == 1:
            data = GLib.Bytes.new(OWN_CLIPBOARD.encode("utf-8"))
            clipboard.set_content(Gdk.ContentProvider.new_for_bytes("text/plain;charset=utf-8", data))
        clipboard.read_text_async(None, self.on_clipboard_text)
        self.save()

    def on_clipboard_text(self, clipboard: Gdk.Clipboard, result: Gio.AsyncResult) -> None:
        try:
            text = clipboard.read_text_finish(result)
        except GLib.Error as exc:
            text = f"<error: {exc.message}>"
        self.set_state(clipboard=text, clipboard_reads=int(self.state.get("clipboard_reads", 0)) + 1)

    def on_changed(self, entry: Gtk.Entry) -> None:
        self.state["text"] = entry.get_text()
        self.save()

    def set_state(self, **values: object) -> None:
        self.state.update(values)
        self.save()

    def save(self) -> None:
        tmp = self.state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.state, fh, ensure_ascii=False)
        os.replace(tmp, self.state_path)


def main() -> None:
    state_path = sys.argv[1]
    app = Gtk.Application(application_id="org.holodesk.WaylandTarget", flags=Gio.ApplicationFlags.NON_UNIQUE)
    holder: list[Target] = []
    app.connect("activate", lambda a: holder.append(Target(a, state_path)))
    app.run([sys.argv[0]])


if __name__ == "__main__":
    main()
