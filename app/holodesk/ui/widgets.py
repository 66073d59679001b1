"""The small widgets every Holodesk window builds the same way: plain-text labels and named buttons.

Labels show text as data, never as markup (field case F10: a model's or a window's text may hold
``<b>`` or ``<a href>``); object names are what the tests find widgets by.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton, QWidget

SESSION_KEY_TEXT = "Keep the key for this session only"
"""The button offered when the keychain cannot store an API key (wizard and Settings)."""


def name_window(window: QWidget, title: str, name: str) -> None:
    """Give a top-level window its title (what the window manager shows) and its object name (what the
    tests and the refusal of Holodesk's own windows find it by, e.g. ``holodeskSettings``)."""
    window.setWindowTitle(title)
    window.setObjectName(name)


def bring_to_front(window: QWidget) -> None:
    """Show ``window`` (when hidden), raise it above the others and give it the keyboard focus."""
    window.show()
    window.raise_()
    window.activateWindow()


def plain_label(text: str = "", name: str = "", *, wrap: bool = True, selectable: bool = False,
                style: str = "", hidden: bool = False) -> QLabel:
    """A label that shows ``text`` as plain text.

    Args:
        text: the text shown.
        name: the object name ("" leaves it unnamed).
        wrap: wrap long lines at word boundaries.
        selectable: the user may select the text with the mouse.
        style: a style sheet from :mod:`holodesk.ui.theme` ("" keeps the window's look).
        hidden: start hidden (a message line shown when there is something to say).
    """
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    if selectable:
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setWordWrap(wrap)
    label.setText(text)
    if name:
        label.setObjectName(name)
    if style:
        label.setStyleSheet(style)
    if hidden:
        label.hide()
    return label


def push_button(text: str, name: str = "", clicked: Callable[..., object] | None = None, *,
                hidden: bool = False) -> QPushButton:
    """A button labelled ``text``, named ``name`` ("" leaves it unnamed), calling ``clicked`` when pressed
    (Qt passes the ``checked`` flag only to a callable that takes it); ``hidden``: start hidden."""
    button = QPushButton(text)
    if name:
        button.setObjectName(name)
    if clicked is not None:
        button.clicked.connect(clicked)
    if hidden:
        button.hide()
    return button
