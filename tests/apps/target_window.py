"""A small real Qt window for GUI tests, run as its own process.

    python tests/apps/target_window.py --out STATE.json --x 100 --y 200 [--color "#3366cc"] [--notes]

A frameless window of fixed size at screen position (x, y) with three buttons ("OK", "Cancel",
"Apply") and a QLineEdit ("field") at fixed offsets. On every change the state is written to
``--out`` as JSON (temporary file, flush, fsync, atomic rename), so a reader never sees half a file:

    {"ready": bool, "pid": int, "window": [x, y, w, h], "rects": {"OK": [x, y, w, h], ..., "field": [...]},
     "clicks": ["OK", ...], "text": str, "submits": int, "focus": "field" | "OK" | ... | null,
     "background": "#rrggbb"}

With ``--notes`` the window is taller and also holds a QPlainTextEdit ("notes", state key ``"notes"``
with its text), for typing tests that read tabs and newlines back (a QLineEdit turns Tab into a focus
change and Return into a submit).

Rectangles are in screen (input-space) pixels, read back from Qt after the window is exposed.
Without a window manager (bare Xvfb) the requested position is exact.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication, QLineEdit, QPlainTextEdit, QPushButton, QWidget

WINDOW_SIZE = (420, 160)
BUTTONS = {"OK": (20, 20, 110, 40), "Cancel": (150, 20, 110, 40), "Apply": (280, 20, 110, 40)}
FIELD = (20, 90, 380, 40)
NOTES = (20, 150, 380, 120)
NOTES_WINDOW_SIZE = (420, 290)


class TargetWindow(QWidget):
    def __init__(self, out: str, x: int, y: int, color: str, notes: bool = False) -> None:
        super().__init__(None, Qt.WindowType.FramelessWindowHint | Qt.WindowType.WindowStaysOnTopHint)
        self.out = out
        self.color = QColor(color)
        self.state: dict[str, Any] = {"ready": False, "pid": os.getpid(), "clicks": [], "text": "",
                                      "submits": 0, "focus": None, "background": self.color.name()}
        self.setWindowTitle("Holodesk test target")
        self.setFixedSize(*(NOTES_WINDOW_SIZE if notes else WINDOW_SIZE))
        self.move(x, y)
        pal = self.palette()
        pal.setColor(QPalette.ColorRole.Window, self.color)
        self.setPalette(pal)
        self.setAutoFillBackground(True)
        self.buttons: dict[str, QPushButton] = {}
        for name, rect in BUTTONS.items():
            button = QPushButton(name, self)
            button.setObjectName(name)
            button.setGeometry(*rect)
            button.clicked.connect(lambda _checked=False, n=name: self.on_click(n))
            self.buttons[name] = button
        self.field = QLineEdit(self)
        self.field.setObjectName("field")
        self.field.setGeometry(*FIELD)
        self.field.textChanged.connect(self.on_text)
        self.field.returnPressed.connect(self.on_submit)
        self.notes: QPlainTextEdit | None = None
        if notes:
            self.notes = QPlainTextEdit(self)
            self.notes.setObjectName("notes")
            self.notes.setGeometry(*NOTES)
            self.notes.setTabChangesFocus(False)  # Tab inserts "\t"
            self.notes.textChanged.connect(self.on_notes)
            self.state["notes"] = ""
        QApplication.instance().focusChanged.connect(self.on_focus)  # type: ignore[union-attr]

    def rect_of(self, widget: QWidget) -> list[int]:
        top_left = widget.mapToGlobal(widget.rect().topLeft())
        return [top_left.x(), top_left.y(), widget.width(), widget.height()]

    def on_click(self, name: str) -> None:
        self.state["clicks"].append(name)
        self.write()

    def on_text(self, text: str) -> None:
        self.state["text"] = text
        self.write()

    def on_notes(self) -> None:
        assert self.notes is not None
        self.state["notes"] = self.notes.toPlainText()
        self.write()

    def on_submit(self) -> None:
        self.state["submits"] += 1
        self.write()

    def on_focus(self, _old: QWidget | None, new: QWidget | None) -> None:
        self.state["focus"] = new.objectName() if new is not None else None
        self.write()

    def check_ready(self) -> None:
        handle = self.windowHandle()
        if handle is None or not handle.isExposed():
            QTimer.singleShot(20, self.check_ready)
            return
        self.state["window"] = self.rect_of(self)
        self.state["rects"] = {name: self.rect_of(b) for name, b in self.buttons.items()}
        self.state["rects"]["field"] = self.rect_of(self.field)
        if self.notes is not None:
            self.state["rects"]["notes"] = self.rect_of(self.notes)
        self.state["ready"] = True
        self.state["ready_at"] = time.time()
        self.write()

    def write(self) -> None:
        tmp = f"{self.out}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.state, fh, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="JSON state file")
    parser.add_argument("--x", type=int, default=100)
    parser.add_argument("--y", type=int, default=100)
    parser.add_argument("--color", default="#3366cc", help="window background colour #rrggbb")
    parser.add_argument("--notes", action="store_true", help="add the multi-line text field")
    args = parser.parse_args(argv)
    app = QApplication(sys.argv[:1])
    window = TargetWindow(args.out, args.x, args.y, args.color, notes=args.notes)
    window.write()
    window.show()
    window.raise_()
    window.activateWindow()
    QTimer.singleShot(0, window.check_ready)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
