"""A real Qt window with a multi-line text field, for typing tests that need tabs and newlines read
back (a QLineEdit turns Tab into a focus change and Return into a submit).

    python tests/field_cases/apps/text_window.py --out STATE.json --x 300 --y 200

State file (rewritten atomically on every change):
    {"ready": bool, "window": [x, y, w, h], "rects": {"notes": [x, y, w, h]}, "notes": str,
     "focus": "notes" | null}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QPlainTextEdit, QWidget


class TextWindow(QWidget):
    def __init__(self, out: str, x: int, y: int) -> None:
        super().__init__(None, Qt.WindowType.FramelessWindowHint | Qt.WindowType.WindowStaysOnTopHint)
        self.out = out
        self.state: dict[str, Any] = {"ready": False, "notes": "", "focus": None}
        self.setFixedSize(480, 240)
        self.move(x, y)
        self.notes = QPlainTextEdit(self)
        self.notes.setObjectName("notes")
        self.notes.setGeometry(20, 20, 440, 200)
        self.notes.setTabChangesFocus(False)  # Tab inserts "\t"
        self.notes.textChanged.connect(self.on_text)
        QApplication.instance().focusChanged.connect(self.on_focus)  # type: ignore[union-attr]

    def on_text(self) -> None:
        self.state["notes"] = self.notes.toPlainText()
        self.write()

    def on_focus(self, _old: QWidget | None, new: QWidget | None) -> None:
        self.state["focus"] = new.objectName() if new is not None else None
        self.write()

    def check_ready(self) -> None:
        handle = self.windowHandle()
        if handle is None or not handle.isExposed():
            QTimer.singleShot(20, self.check_ready)
            return
        top_left = self.mapToGlobal(self.rect().topLeft())
        self.state["window"] = [top_left.x(), top_left.y(), self.width(), self.height()]
        n = self.notes.mapToGlobal(self.notes.rect().topLeft())
        self.state["rects"] = {"notes": [n.x(), n.y(), self.notes.width(), self.notes.height()]}
        self.state["ready"] = True
        self.write()

    def write(self) -> None:
        tmp = f"{self.out}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.state, fh, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--x", type=int, default=300)
    parser.add_argument("--y", type=int, default=200)
    args = parser.parse_args()
    app = QApplication(sys.argv[:1])
    window = TextWindow(args.out, args.x, args.y)
    window.write()
    window.show()
    window.raise_()
    window.activateWindow()
    QTimer.singleShot(0, window.check_ready)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main())
