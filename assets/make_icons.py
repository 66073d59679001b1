"""Write the tray status icons as PNG files into assets/icons/ (for packaging and the docs).

    .venv/bin/python assets/make_icons.py [--size 64]

The icons are drawn by :mod:`holodesk.ui.icons` (the app draws the same pictures at run time, so the
installed package needs no data files). Runs without a display (Qt's offscreen platform).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64, help="edge length in pixels")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "icons")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    from holodesk.ui.icons import export_pngs

    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])
    for path in export_pngs(args.out, args.size):
        print(path)
    del app
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
