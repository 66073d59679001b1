"""A small Tk form, run as its own process (a toolkit that is not ours, next to the Qt target window).

    python tests/apps/tk_form.py --layout LAYOUT.json [--x 300 --y 200] [--title "Tk form"] [--wm-class CLASS]

Widgets: an Entry "name", a Checkbutton "agree", a Button "Count" (counts its clicks) and a Button
"Submit". Pressing Return in the entry does nothing (only a click on Submit submits).

* ``--layout``: rewritten (atomic rename) whenever the window is mapped or moved, the focus moves or a
  value changes, with every widget's
  rectangle in root-window (input-space) pixels, as read from Tk itself:
  ``{"pid": int, "window": [x, y, w, h], "rects": {"name": [x, y, w, h], "agree": [...], "Count": [...],
  "Submit": [...]}, "focus": "name" | ... | null, "count": int}``; ``focus`` is null while another
  window has the keyboard focus.
* On Submit the final state is printed as one JSON line on stdout and the program exits 0:
  ``{"name": str, "agree": bool, "count": int, "submitted": true}``.
* Closing the window (WM close button) prints ``{"submitted": false, ...}`` and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tkinter as tk
from typing import Any


class TkForm:
    def __init__(self, layout: str, x: int, y: int, title: str, wm_class: str = "HolodeskTkForm") -> None:
        self.layout = layout
        self.root = tk.Tk(className=wm_class)
        self.root.title(title)
        self.root.geometry(f"+{x}+{y}")
        self.name = tk.StringVar(self.root, value="")
        self.agree = tk.BooleanVar(self.root, value=False)
        self.count = 0
        frame = tk.Frame(self.root, padx=20, pady=20)
        frame.pack()
        tk.Label(frame, text="Name:", font=("DejaVu Sans", 12)).grid(row=0, column=0, sticky="w")
        self.entry = tk.Entry(frame, textvariable=self.name, width=30, font=("DejaVu Sans", 12))
        self.entry.grid(row=0, column=1, pady=6)
        self.check = tk.Checkbutton(frame, text="I agree", variable=self.agree, font=("DejaVu Sans", 12))
        self.check.grid(row=1, column=1, sticky="w", pady=6)
        self.counter = tk.Button(frame, text="Count", width=10, command=self.on_count)
        self.counter.grid(row=2, column=0, pady=6)
        self.submit = tk.Button(frame, text="Submit", width=10, command=self.on_submit)
        self.submit.grid(row=2, column=1, sticky="e", pady=6)
        self.widgets: dict[str, tk.Widget] = {"name": self.entry, "agree": self.check, "Count": self.counter,
                                              "Submit": self.submit}
        self.root.protocol("WM_DELETE_WINDOW", self.on_close)
        self.root.bind("<Configure>", lambda _e: self.write_layout())
        self.root.bind("<Map>", lambda _e: self.write_layout())
        self.root.bind_all("<FocusIn>", lambda _e: self.write_layout())
        self.root.bind_all("<FocusOut>", lambda _e: self.write_layout())
        self.name.trace_add("write", lambda *_a: self.write_layout())
        self.agree.trace_add("write", lambda *_a: self.write_layout())

    def state(self) -> dict[str, Any]:
        return {"name": self.name.get(), "agree": bool(self.agree.get()), "count": self.count}

    def rect(self, widget: tk.Misc) -> list[int]:
        return [widget.winfo_rootx(), widget.winfo_rooty(), widget.winfo_width(), widget.winfo_height()]

    def write_layout(self) -> None:
        if not self.root.winfo_ismapped():
            return
        focus = self.root.focus_get()
        focused = next((n for n, w in self.widgets.items() if w is focus), None)
        data = {"pid": os.getpid(), "window": self.rect(self.root),
                "rects": {n: self.rect(w) for n, w in self.widgets.items()}, "focus": focused,
                **self.state()}
        tmp = f"{self.layout}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.layout)

    def on_count(self) -> None:
        self.count += 1
        self.write_layout()

    def finish(self, submitted: bool) -> None:
        print(json.dumps({**self.state(), "submitted": submitted}, ensure_ascii=False), flush=True)
        self.root.destroy()

    def on_submit(self) -> None:
        self.finish(True)

    def on_close(self) -> None:
        self.finish(False)
        sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layout", required=True, help="JSON file with the widget rectangles")
    parser.add_argument("--x", type=int, default=300)
    parser.add_argument("--y", type=int, default=200)
    parser.add_argument("--title", default="Holodesk Tk form")
    parser.add_argument("--wm-class", default="HolodeskTkForm", help="the class part of WM_CLASS")
    args = parser.parse_args(argv)
    form = TkForm(args.layout, args.x, args.y, args.title, args.wm_class)
    form.root.mainloop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
