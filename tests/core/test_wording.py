"""step_words: the headline every approval surface leads with, and its details."""

from __future__ import annotations

import pytest

from holodesk.core.actions import (
    Answer,
    Click,
    Done,
    Drag,
    Key,
    Move,
    Plan,
    Point,
    Scroll,
    Type,
    Wait,
)
from holodesk.core.geometry import InputPoint
from holodesk.core.wording import StepWords, WindowInfo, key_words, plain, step_words

FORM = WindowInfo("Demo form", "Tk", (100, 120, 400, 300))


def test_headlines_say_what_the_step_does_to_what() -> None:
    click = Click(Point(812, 440), element="Cancel button")
    words = step_words(click, window=FORM, input_points=[InputPoint(1559, 475)], monitor_label="Monitor 1")
    assert words == StepWords("Click ‘Cancel button’ in Demo form",
                              ("Screen (1559, 475) on Monitor 1 · model point (812, 440) of 1000",
                               "Window: Demo form (Tk)"))
    assert step_words(Type("John Smith"), focus_element="Your name").headline == "Type ‘John Smith’ into ‘Your name’"
    assert step_words(Key(("ctrl", "s")), window=WindowInfo("", "Mousepad")).headline == "Press Ctrl+S in Mousepad"
    assert step_words(Key(("ctrl", "z"), repeat=3)).headline == "Press Ctrl+Z 3 times"  # the card says how often
    assert step_words(Type("Ada", replace=True)).headline == "Replace the text with ‘Ada’"
    scroll = Scroll("down", 3, Point(500, 500), element="File list")
    assert step_words(scroll, window=WindowInfo("Files")).headline == "Scroll down 3 over ‘File list’ in Files"
    assert step_words(Scroll("down", 3)).headline == "Scroll down 3"
    assert step_words(Click(Point(1, 1), element="report.pdf", count=2)).headline == "Double-click ‘report.pdf’"
    assert step_words(Click(Point(1, 1), element="Desktop", button="right")).headline == "Right-click ‘Desktop’"
    assert step_words(Move(Point(1, 1), element="Menu")).headline == "Move the pointer to ‘Menu’"
    drag = Drag(Point(10, 20), Point(30, 40), element="Trash")
    assert step_words(drag, input_points=[InputPoint(5, 6), InputPoint(7, 8)]).headline == "Drag from (5, 6) to ‘Trash’"
    assert step_words(Wait(2)).headline == "Wait 2 s"
    plan = Plan((("Open the form", "done"), ("Fill in the name", "running"), ("Submit", "todo")))
    assert step_words(plan) == StepWords("Update the plan: now ‘Fill in the name’",
                                         ("Done: Open the form", "Doing now: Fill in the name", "To do: Submit"))
    assert step_words(Plan((("Submit", "failed"),))).headline == "Update the plan"
    assert step_words(Answer("42")).headline == "Answer: 42"
    assert step_words(Done()).headline == "Finish the task"


def test_without_an_element_the_point_is_said_plainly() -> None:
    click = Click(Point(812, 440))
    assert step_words(click, window=FORM, input_points=[InputPoint(812, 440)]).headline == \
        "Click at (812, 440) in Demo form"
    # no screen mapping known: the model's own 0-1000 coordinates, said as such
    assert step_words(click).headline == "Click at (812, 440) of 1000"
    drag = Drag(Point(1, 2), Point(3, 4))
    assert step_words(drag, input_points=[InputPoint(5, 6), InputPoint(7, 8)]).headline == "Drag from (5, 6) to (7, 8)"


def test_model_text_is_data() -> None:
    evil = "OK\u202e\n\x1b[31mDelete all"
    headline = step_words(Click(Point(1, 1), element=evil), window=WindowInfo("Bank\u200b")).headline
    assert headline == "Click ‘OK\\u202e\\n\\x1b[31mDelete all’ in Bank\\u200b"
    assert all(ch.isprintable() for ch in headline)
    long = step_words(Type("x" * 300)).headline
    assert long.endswith("…’") and len(long) < 70
    assert step_words(Type("x" * 300)).details == ("300 characters, shortened above",)
    assert step_words(Type("a\nb")).details == ("3 characters on 2 lines",)
    assert plain("<b>bold</b>") == "<b>bold</b>"  # markup stays literal; surfaces render plain text


@pytest.mark.parametrize(("keys", "said"), [(("ctrl", "s"), "Ctrl+S"), (("alt", "f4"), "Alt+F4"),
                                            (("pagedown",), "Page Down"), (("ctrl", "+"), "Ctrl+Plus")])
def test_key_words(keys: tuple[str, ...], said: str) -> None:
    assert key_words(keys) == said


def test_window_records_round_trip() -> None:
    assert WindowInfo.from_dict(FORM.to_dict()) == FORM
    assert WindowInfo.from_dict(None) is None
    assert WindowInfo.from_dict({"title": "T", "rect": ["a", 1, 2, 3]}) == WindowInfo("T", "", None)


@pytest.mark.parametrize(("x", "y", "on_frame"), [
    (150, 110, True),   # title bar
    (295, 110, True),   # title bar, right end: where a close button sits
    (99, 300, True),    # left border
    (150, 200, False),  # client area
    (100, 130, False),  # client area, top-left pixel
    (50, 50, False),    # outside the window
    (300, 110, False),  # just right of the frame
])
def test_window_info_tells_a_point_on_the_frame_from_one_in_the_client_area(x: int, y: int,
                                                                              on_frame: bool) -> None:
    info = WindowInfo("Doc", "Mousepad", rect=(98, 100, 202, 302), client_rect=(100, 130, 198, 270))
    assert info.on_frame(x, y) is on_frame
    assert WindowInfo("Doc", "Mousepad", rect=(98, 100, 202, 302)).on_frame(x, y) is False  # client unknown
