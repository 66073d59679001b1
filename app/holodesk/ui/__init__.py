"""Desktop UI (PySide6). The only package that imports Qt."""
