"""Issue 31: the autopilot judges what is really at the action's point, through the accessibility tree.

A real GTK 3 program (tests/apps/gtk_escapes.py, its accessibility bridge on) under openbox, the real
accessibility bus (started by D-Bus activation on the desktop's private session bus), the real Session,
risk rules, capture and pyautogui executor. The model is a list of proposals (no model runs here: named
:class:`ListPolicy`); the user at the approval prompt is a spy that skips whatever it is asked. Each escape
of the issue must ask, while harmless control steps in the same program are still approved by the
autopilot; the program's own state (its text, its press counter, its combo box) shows what happened.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from holodesk.capture.mss_backend import MssCapture
from holodesk.control.accessibility import STATE_NAMES, AccessibilityProbe, states_from_bits
from holodesk.control.grabs import GrabWatcher, input_grab_problem
from holodesk.control.pyautogui_executor import PyAutoGUIExecutor
from holodesk.control.window import TERMINAL_MARK, focused_window_class, window_at
from holodesk.core.actions import Action, Click, Done, Key, Point, Scroll, Type
from holodesk.core.geometry import frame_pixel_to_point
from holodesk.core.risk import Risk
from holodesk.policy.base import Observation, Proposal
from holodesk.session.approval import ApprovalPolicy, ApprovalRequest, ApprovalResponse, Decision
from holodesk.session.loop import SCREEN_SETTLE_S, Session
from holodesk.session.state import SessionEvent, SessionLimits, State
from tests.field_cases.fakes import SpyApprover
from tests.helpers.desktop import ACCESSIBLE, APPS, SYSTEM_PYTHON, App, Desktop, wait_until
from tests.helpers.target import TargetWindow


class ListPolicy:
    """A fake model (none runs here): proposes ``actions`` in order, then ``done``."""

    def __init__(self, actions: list[Action]) -> None:
        self.actions = list(actions)

    def propose(self, observation: Observation) -> Proposal:
        action = self.actions.pop(0) if self.actions else Done("finished")
        return Proposal(action, thought=action.kind, raw_text=json.dumps(action.to_dict()))

    def close(self) -> None:
        pass


class EscapesApp:
    """tests/apps/gtk_escapes.py on ``desktop``, with its layout report."""

    def __init__(self, desktop: Desktop, directory: Path, *extra: str) -> None:
        self.layout_path = directory / "escapes.json"
        self.app: App = desktop.launch([SYSTEM_PYTHON, str(APPS / "gtk_escapes.py"), "--layout",
                                        str(self.layout_path), "--x", "200", "--y", "150", *extra],
                                       wm_class="HolodeskGtkEscapes", env=ACCESSIBLE)
        self.wait(lambda s: s.get("focus") == "notes", "the notes field to have the focus")

    def state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.layout_path.read_text(encoding="utf-8")))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def wait(self, predicate: Any, what: str, timeout: float = 20.0) -> dict[str, Any]:
        return dict(wait_until(lambda: (s := self.state()) and predicate(s) and s, timeout, what))

    def center(self, name: str) -> tuple[int, int]:
        x, y, w, h = self.state()["rects"][name]
        return x + w // 2, y + h // 2


@pytest.fixture
def escapes(desktop: Desktop, tmp_path: Path) -> Iterator[tuple[Desktop, EscapesApp]]:
    yield desktop, EscapesApp(desktop, tmp_path)


def _session(actions: list[Action], spy: SpyApprover, probe: AccessibilityProbe | None, episodes: Path
             ) -> Session:
    return Session(ListPolicy(actions), MssCapture(), PyAutoGUIExecutor(), ApprovalPolicy("auto", spy),
                   SessionLimits(max_steps=len(actions) + 2), episodes_dir=episodes, focus_probe=focused_window_class,
                   window_probe=window_at, element_probe=probe, settle_s=SCREEN_SETTLE_S)


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_each_escape_asks_while_harmless_steps_in_the_same_gtk_program_are_approved(
        escapes: tuple[Desktop, EscapesApp], tmp_path: Path) -> None:
    desktop, app = escapes
    probe = AccessibilityProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"])
    with MssCapture() as cap:
        frame = cap.grab(1)

        def at(name: str) -> Point:
            return frame_pixel_to_point(frame, *app.center(name))

    actions: list[Action] = [
        Click(at("notes"), element="notes field"),  # control: approved
        Key(("end",)),  # control: approved
        Type(" too"),  # control: approved, lands in the field
        Key(("ctrl", "a")),  # approved: selects all
        Type("x"),  # escape: replaces the whole text
        Key(("tab",)),  # approved: the focus moves to the Delete button
        Type(" "),  # escape: a space presses the focused button
        Click(at("delete"), element="Keep button"),  # escape: the model's words are not what is there
        Scroll("down", 1, at("mode")),  # escape: a scroll steps the combo box to "Delete old files"
    ]
    spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
    result = _session(actions, spy, probe, tmp_path / "episodes").run("tidy up")
    assert result.status is State.FINISHED, result
    asked = [(r.action.kind, r.risk.level) for r in spy.requests]
    assert asked == [("type", Risk.HIGH), ("type", Risk.HIGH), ("click", Risk.HIGH), ("scroll", Risk.HIGH)], \
        [(r.action, r.risk.reason) for r in spy.requests]
    reasons = [r.risk.reason for r in spy.requests]
    assert "replaces the selected text" in reasons[0]
    assert "push button \u2018Delete all files\u2019" in reasons[1]
    assert reasons[2].startswith("the model says \u2018Keep button\u2019; the push button \u2018Delete all files\u2019")
    assert "combo box" in reasons[3]
    state = app.wait(lambda s: s["notes"] == "keep me too", "the approved text in the notes field")
    assert state["deletes"] == 0 and state["mode"] == "Keep old files"
    # the card names the real element beside the model's words
    assert spy.requests[1].details[-1] == "Has the keyboard focus: push button \u2018Delete all files\u2019"
    assert spy.requests[2].details[-1] == "Really there: push button \u2018Delete all files\u2019"
    # the record keeps each step's element
    assert result.episode_path is not None
    steps = [json.loads(line) for line in (result.episode_path / "episode.jsonl").read_text().splitlines()]
    found = {(s["step"], s["action"]["kind"]): s["elements"] for s in steps if "elements" in s}
    assert found[(0, "click")]["at_points"][0]["role"] == "text"
    assert found[(7, "click")]["at_points"][0]["name"] == "Delete all files"
    assert found[(7, "click")]["at_points"][0]["bounds"] == app.state()["rects"]["delete"]
    assert found[(2, "type")]["focused"]["role"] == "text" and found[(2, "type")]["lookup_ms"] >= 0

@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_the_lookup_reads_role_name_states_and_bounds_of_real_widgets(escapes: tuple[Desktop, EscapesApp]) -> None:
    desktop, app = escapes
    probe = AccessibilityProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"])
    button = probe.element_at(*app.center("delete"))
    assert button is not None, probe.last_problem
    assert (button.role, button.name) == ("push button", "Delete all files")
    assert {"sensitive", "enabled", "showing"} <= button.states and button.bounds is not None
    assert [abs(a - b) <= 2 for a, b in zip(button.bounds, app.state()["rects"]["delete"], strict=True)] == [True] * 4
    focused = probe.focused()
    assert focused is not None and focused.editable_text and "focused" in focused.states, (focused, probe.last_problem)
    assert probe.element_at(5, 5) is None  # the root window: no accessible window there
    assert states_from_bits([1 << STATE_NAMES.index("editable"), 1 << (STATE_NAMES.index("read only") - 32)]) \
        == {"editable", "read only"}


class CountingProbe(AccessibilityProbe):
    """The real probe, counting its lookups (each one a conversation with the accessibility bus)."""

    def __init__(self, bus: str) -> None:
        super().__init__(bus)
        self.lookups: list[str] = []

    def element_at(self, x: int, y: int, window_rect: tuple[int, int, int, int] | None = None) -> Any:
        self.lookups.append("at")
        return super().element_at(x, y, window_rect)

    def focused(self) -> Any:
        self.lookups.append("focused")
        return super().focused()


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_one_step_looks_the_element_up_once_for_its_judgement_and_once_at_the_moment_of_input(
        escapes: tuple[Desktop, EscapesApp], tmp_path: Path) -> None:
    """The autopilot's judgement, its second look after the countdown, the card and the record share one lookup
    per frame and point; the re-check just before the input asks again."""
    desktop, app = escapes
    with MssCapture() as cap:
        notes = frame_pixel_to_point(cap.grab(1), *app.center("notes"))
    probe = CountingProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"])
    spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
    session = _session([Click(notes, element="notes field"), Type(" too")], spy, probe, tmp_path / "episodes")
    counts: list[list[str]] = []
    session.subscribe(lambda e: counts.append(list(probe.lookups)) if e.kind == "result" else None)
    result = session.run("add a word")
    assert result.status is State.FINISHED and spy.requests == [], [(r.action, r.risk.reason) for r in spy.requests]
    assert counts == [["at", "at"], ["at", "at", "focused", "focused"]], counts
    app.wait(lambda s: s["notes"] == "keep me too", "the approved text in the notes field")


class StartsAWindowWhileApproving(SpyApprover):
    """The user approves the click; while the card is up, another program's window appears where the click
    will land (a second copy of the escapes window, its own "Delete all files" button under the point)."""

    def __init__(self, desktop: Desktop, tmp_path: Path, point: tuple[int, int]) -> None:
        super().__init__()
        self.desktop, self.tmp_path, self.point = desktop, tmp_path, point
        self.other: EscapesApp | None = None

    def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        self.other = EscapesApp(self.desktop, self.tmp_path / "other")
        x, y, w, h = self.other.wait(lambda s: "delete" in s.get("rects", {}), "the other window's layout")["rects"][
            "delete"]
        assert x <= self.point[0] < x + w and y <= self.point[1] < y + h, "the other window must cover the point"
        return super().__call__(request)


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_a_window_that_appears_under_the_pointer_after_approval_does_not_get_the_click(
        escapes: tuple[Desktop, EscapesApp], tmp_path: Path) -> None:
    desktop, app = escapes
    point = app.center("delete")
    (tmp_path / "other").mkdir()
    spy = StartsAWindowWhileApproving(desktop, tmp_path, point)
    with MssCapture() as cap:
        target = frame_pixel_to_point(cap.grab(1), *point)
    probe = AccessibilityProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"])
    session = Session(ListPolicy([Click(target, element="Delete all files")]), MssCapture(), PyAutoGUIExecutor(),
                      ApprovalPolicy("step", spy), SessionLimits(max_steps=3), focus_probe=focused_window_class,
                      window_probe=window_at, element_probe=probe, grab_probe=input_grab_problem,
                      settle_s=SCREEN_SETTLE_S)
    events: list[SessionEvent] = []
    session.subscribe(events.append)
    session.run("delete the files")
    assert spy.other is not None
    (changed,) = [e.message for e in events if e.kind == "warning" and "Not performed" in e.message]
    assert "window under the pointer changed since approval" in changed
    assert spy.other.state()["deletes"] == 0 and app.state()["deletes"] == 0


class KeyboardGrabber:
    """Another X client (its own connection) that holds the keyboard grab on a 1x1 window and counts the key
    presses it receives."""

    def __init__(self, display_name: str) -> None:
        from Xlib import X, display

        self.X = X
        self.display = display.Display(display_name)
        self.window = self.display.screen().root.create_window(0, 0, 1, 1, 0, X.CopyFromParent,
                                                               override_redirect=True, event_mask=X.KeyPressMask)
        self.window.map()
        self.display.sync()
        wait_until(lambda: self.window.get_attributes().map_state == X.IsViewable, 10, "the grab window")

    def grab(self) -> None:
        X = self.X
        assert self.window.grab_keyboard(False, X.GrabModeAsync, X.GrabModeAsync, X.CurrentTime) == X.GrabSuccess
        self.display.sync()

    def key_presses(self) -> int:
        self.display.sync()
        keys = 0
        while self.display.pending_events():
            keys += self.display.next_event().type == self.X.KeyPress
        return keys

    def close(self) -> None:
        self.display.ungrab_keyboard(self.X.CurrentTime)
        self.display.close()


class GrabsWhileApproving(SpyApprover):
    """The user approves; while the card is up, another client takes the keyboard grab."""

    def __init__(self, grabber: KeyboardGrabber) -> None:
        super().__init__()
        self.grabber = grabber

    def __call__(self, request: ApprovalRequest) -> ApprovalResponse:
        self.grabber.grab()
        return super().__call__(request)


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
@pytest.mark.parametrize("when", ["before the step", "during approval"])
@pytest.mark.parametrize("watched", [False, True], ids=["grab-check", "grab-watcher"])
def test_typing_while_another_client_holds_the_keyboard_grab_asks_or_is_not_performed(
        escapes: tuple[Desktop, EscapesApp], tmp_path: Path, when: str, watched: bool) -> None:
    """With the grab watcher too: it saw the other client take the grab, which is not the program typed into."""
    desktop, app = escapes
    watcher = GrabWatcher(desktop.display) if watched else None
    grabber = KeyboardGrabber(desktop.display)
    try:
        probe = AccessibilityProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"])
        events: list[SessionEvent] = []
        if when == "before the step":
            grabber.grab()
            spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
            session = _session([Type("abc")], spy, probe, tmp_path / "episodes")
        else:
            spy = GrabsWhileApproving(grabber)
            session = _session([Type("abc")], spy, probe, tmp_path / "episodes")
            session.approval = ApprovalPolicy("step", spy)
        session.grab_probe = watcher if watcher is not None else input_grab_problem
        session.subscribe(events.append)
        session.run("type abc")
        (request,) = spy.requests
        if when == "before the step":  # the autopilot asks; the user skips
            assert request.risk.level is Risk.HIGH and "holds the keyboard grab" in request.risk.reason
        else:  # the user approved; the grab came after: not performed
            (changed,) = [e.message for e in events if e.kind == "warning" and "Not performed" in e.message]
            assert "holds the keyboard grab" in changed and "since approval" in changed
        assert grabber.key_presses() == 0  # nothing reached the client holding the grab
        assert app.state()["notes"] == "keep me"
        if watcher is not None:
            assert watcher.owner("keyboard") == watcher.client_of(grabber.window.id) != watcher.client_of(
                app.app.window)
    finally:
        grabber.close()
        if watcher is not None:
            watcher.close()


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_the_lookup_cost_per_step_on_a_busy_desktop(escapes: tuple[Desktop, EscapesApp], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """docs/benchmarks.md "Autopilot element lookup": the cost of one step's lookups (the element at a point,
    the focused element) with seven programs on the desktop, five of them publishing their tree."""
    desktop, app = escapes
    for index in range(3):
        desktop.launch([SYSTEM_PYTHON, str(APPS / "gtk_form.py"), "--layout", str(tmp_path / f"form{index}.json"),
                        "--x", str(700 + 40 * index), "--y", str(100 + 40 * index)], wm_class="HolodeskGtkForm",
                       env=ACCESSIBLE)
    desktop.launch(["mousepad", "--disable-server"], wm_class="[Mm]ousepad", env=ACCESSIBLE)
    desktop.launch(["xterm"], wm_class="XTerm")
    desktop.xdotool("windowactivate", "--sync", str(app.app.window))
    app.wait(lambda s: s.get("focus") == "notes", "the escapes window to have the focus again")
    probe = AccessibilityProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"])
    at_point, focused = [], []
    for _ in range(40):
        assert probe.element_at(*app.center("delete")) is not None, probe.last_problem
        at_point.append(probe.last_ms)
        assert probe.focused() is not None, probe.last_problem
        focused.append(probe.last_ms)

    def summary(ms: list[float]) -> str:
        ordered = sorted(ms)
        return f"median {statistics.median(ordered):.1f} ms, p95 {ordered[int(len(ordered) * 0.95) - 1]:.1f} ms"

    with capsys.disabled():
        print(f"\nelement at a point: {summary(at_point)}; focused element: {summary(focused)}")
    assert statistics.median(at_point) < probe.budget_s * 1000 and statistics.median(focused) < probe.budget_s * 1000


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_a_qt_program_a_space_on_its_focused_button_asks_and_a_line_into_its_field_is_approved(
        desktop: Desktop, tmp_path: Path) -> None:
    """The same rules with a Qt 6 program (tests/apps/target_window.py; Qt publishes its tree on the desktop's
    accessibility bus when asked to: ``QT_LINUX_ACCESSIBILITY_ALWAYS_ON``)."""
    env = {**desktop.env(), "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1"}
    with TargetWindow.start(tmp_path, x=200, y=150, env=env) as win, MssCapture() as cap:
        frame = cap.grab(1)
        field = frame_pixel_to_point(frame, *win.center("field"))
        ok = frame_pixel_to_point(frame, *win.center("OK"))
        probe = AccessibilityProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"])
        wait_until(lambda: probe.element_at(*win.center("OK")) is not None, 20, "Qt to publish its tree")
        actions: list[Action] = [
            Click(field, element="text field"),  # control: approved
            Type("hello"),  # control: approved, lands in the field
            Click(ok, element="Apply button"),  # escape: the button there is OK
            Key(("shift", "tab")),  # approved: the focus moves off the field to a button
            Type(" "),  # escape: a space presses the focused button
        ]
        spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
        result = _session(actions, spy, probe, tmp_path / "episodes").run("fill the form")
        assert result.status is State.FINISHED, result
        asked = [(r.action.kind, r.risk.level) for r in spy.requests]
        assert asked == [("click", Risk.HIGH), ("type", Risk.HIGH)], [(r.action, r.risk.reason) for r in spy.requests]
        assert "the model says \u2018Apply button\u2019; the push button \u2018OK\u2019 is there" in \
            spy.requests[0].risk.reason
        assert "push button" in spy.requests[1].risk.reason
        state = win.wait_for(lambda s: s["text"] == "hello", timeout=10)
        assert state["clicks"] == []


# -- terminals the window class does not name -----------------------------------------------------------------------
@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_a_program_whose_child_holds_a_pty_is_a_terminal_and_typing_there_asks(desktop: Desktop,
                                                                               tmp_path: Path) -> None:
    """An IDE whose terminal panel's pty is held by a helper process: the window's own process holds none."""
    app = EscapesApp(desktop, tmp_path, "--pty-child")
    assert app.state()["pty_child"]
    under = window_at(*app.center("notes"))
    assert under is not None and under.app == "HolodeskGtkEscapes" + TERMINAL_MARK
    spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
    _session([Type("ls")], spy, None, tmp_path / "episodes").run("type")
    (request,) = spy.requests
    assert request.risk.level is Risk.HIGH and "terminal" in request.risk.reason
    assert app.state()["notes"] == "keep me"


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_a_terminal_that_states_a_false_pid_and_another_host_is_still_a_terminal(desktop: Desktop) -> None:
    """A sandboxed terminal (another PID namespace: its ``_NET_WM_PID`` means nothing here) or one in a
    toolbox (``WM_CLIENT_MACHINE`` names another host): the X server still knows the real client process."""
    term = desktop.launch(["xterm", "-class", "Notes", "-geometry", "60x10+50+50", "-e", "bash", "--norc"],
                          wm_class="Notes")
    wid = str(term.window)
    desktop.run("xprop", "-id", wid, "-f", "_NET_WM_PID", "32c", "-set", "_NET_WM_PID", "1")
    desktop.run("xprop", "-id", wid, "-f", "WM_CLIENT_MACHINE", "8s", "-set", "WM_CLIENT_MACHINE", "toolbox-host")
    wait_until(lambda: "toolbox-host" in desktop.run("xprop", "-id", wid, "WM_CLIENT_MACHINE"), 10, "the property")
    x, y, w, h = desktop.wait_placed(term)
    under = window_at(x + w // 2, y + h // 2)
    assert under is not None and under.app == "Notes" + TERMINAL_MARK


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_a_gtk4_program_a_space_on_its_focused_button_and_a_mislabelled_click_ask(desktop: Desktop,
                                                                                   tmp_path: Path) -> None:
    """GTK 4 on X11 (no screen coordinates, no Collection interface): its window is matched by size and
    asked in window coordinates, and its focused element found by a walk."""
    layout = tmp_path / "gtk4.json"
    app = desktop.launch([SYSTEM_PYTHON, str(APPS / "gtk4_escapes.py"), "--layout", str(layout)],
                         name="Holodesk GTK 4 escapes", env={**ACCESSIBLE, "GSK_RENDERER": "cairo"})
    origin = desktop.wait_placed(app)

    def state() -> dict[str, Any]:
        try:
            return dict(json.loads(layout.read_text(encoding="utf-8")))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    rects = wait_until(lambda: state().get("rects"), 20, "the GTK 4 layout")

    def center(name: str) -> tuple[int, int]:
        x, y, w, h = rects[name]
        return origin[0] + x + w // 2, origin[1] + y + h // 2

    probe = AccessibilityProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"])
    client = window_at(*center("delete"))
    assert client is not None and client.client_rect is not None
    button = wait_until(lambda: probe.element_at(*center("delete"), client.client_rect), 20, "GTK 4's tree")
    assert (button.role, button.name) == ("button", "Delete all files")  # GTK 4 names its push buttons "button"
    with MssCapture() as cap:
        frame = cap.grab(1)
        notes, delete = (frame_pixel_to_point(frame, *center(n)) for n in ("notes", "delete"))
    actions: list[Action] = [
        Click(notes, element="text field"),  # control: approved
        Key(("end",)),  # control: approved
        Type(" too"),  # control: approved, lands in the field
        Key(("tab",)),  # approved: the focus moves to the button
        Type(" "),  # escape: a space presses the focused button
        Click(delete, element="Keep button"),  # escape: the button there is "Delete all files"
    ]
    spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
    result = _session(actions, spy, probe, tmp_path / "episodes").run("tidy up")
    assert result.status is State.FINISHED, result
    assert [(r.action.kind, r.risk.level) for r in spy.requests] == [("type", Risk.HIGH), ("click", Risk.HIGH)], \
        [(r.action, r.risk.reason) for r in spy.requests]
    assert "Delete all files" in spy.requests[0].risk.reason and "Delete all files" in spy.requests[1].risk.reason
    wait_until(lambda: state().get("notes") == "keep me too", 20, "the approved text in the GTK 4 field")
    assert state()["deletes"] == 0


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_doctor_lists_the_programs_that_publish_their_tree_and_the_languages_without_words(
        escapes: tuple[Desktop, EscapesApp], monkeypatch: pytest.MonkeyPatch) -> None:
    from holodesk.doctor import _accessibility

    desktop, _ = escapes
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", desktop.env()["DBUS_SESSION_BUS_ADDRESS"])
    monkeypatch.setenv("LANG", "fi_FI.UTF-8")
    monkeypatch.delenv("LANGUAGE", raising=False)
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_MESSAGES", raising=False)
    report = _accessibility()
    assert "gtk_escapes.py" in report["applications publishing it"], report
    assert report["input grabs"].startswith("watched (X RECORD extension)"), report
    assert report["languages without risky-word lists"].startswith("fi ")
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
    assert "cannot be read" in _accessibility()["error"]


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
@pytest.mark.parametrize("grab_check", [False, True], ids=["elements-only", "with-grab-check"])
def test_down_down_space_on_an_open_menu_asks(escapes: tuple[Desktop, EscapesApp], tmp_path: Path,
                                              grab_check: bool) -> None:
    """The issue's "Down, Down, space" on a menu item "Run cleanup (deletes old files)": opening the menu is
    approved. By the elements alone, the arrows are approved and the space asks (the focused element is the
    menu item); with the grab check (the open menu holds the keyboard grab) each key asks."""
    desktop, app = escapes
    with MssCapture() as cap:
        tools = frame_pixel_to_point(cap.grab(1), *app.center("tools"))
    actions: list[Action] = [Click(tools, element="Tools menu"), Key(("down",)), Key(("down",)), Type(" ")]
    spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
    session = _session(actions, spy, AccessibilityProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"]),
                       tmp_path / "episodes")
    session.grab_probe = input_grab_problem if grab_check else None
    session.run("clean up")
    asked = [(r.action.kind, r.risk.level, r.risk.reason) for r in spy.requests]
    if grab_check:
        assert [a[0] for a in asked] == ["key", "key", "type"], asked
        assert all(level is Risk.HIGH and "grab" in reason for _, level, reason in asked), asked
    else:
        assert [a[0] for a in asked] == ["type"], asked
        assert "menu item \u2018Run cleanup (deletes old files)\u2019" in asked[0][2]
    assert app.state()["cleanups"] == 0


@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_in_the_programs_own_open_menu_a_harmless_item_is_approved_and_a_risky_one_and_down_down_space_ask(
        escapes: tuple[Desktop, EscapesApp], tmp_path: Path) -> None:
    """The program's own open menu holds the keyboard and pointer grabs; the grab watcher saw the program take them,
    so its items are judged by their real role and name: "Refresh" is approved, "Run cleanup (deletes old files)"
    asks, and so does the space after Down, Down."""
    desktop, app = escapes
    watcher = GrabWatcher(desktop.display)
    try:
        desktop.xdotool("mousemove", *map(str, app.center("tools")), "click", "1")  # learn where the items are
        menu = app.wait(lambda s: len(s["menu"]) == 2, "the open menu")["menu"]
        assert watcher.owner("pointer") == watcher.owner("keyboard") == watcher.client_of(app.app.window)
        desktop.xdotool("key", "Escape")
        app.wait(lambda s: s["menu"] == {}, "the menu to close")
        with MssCapture() as cap:
            frame = cap.grab(1)

        def at(x: int, y: int, w: int, h: int) -> Point:
            return frame_pixel_to_point(frame, x + w // 2, y + h // 2)

        tools = at(*app.state()["rects"]["tools"])
        actions: list[Action] = [
            Click(tools, element="Tools menu"),  # control: approved, opens the menu
            Click(at(*menu["refresh"]), element="Refresh"),  # control: approved in the open menu
            Click(tools, element="Tools menu"),  # approved: opens the menu again
            Click(at(*menu["cleanup"]), element="Refresh"),  # escape: the item there is "Run cleanup ..."
            Key(("down",)), Key(("down",)),  # approved: the program's own menu holds the grab
            Type(" "),  # escape: a space activates the highlighted "Run cleanup (deletes old files)"
        ]
        spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
        session = _session(actions, spy, AccessibilityProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"]),
                           tmp_path / "episodes")
        session.grab_probe = watcher
        result = session.run("refresh, then clean up")
        assert result.status is State.FINISHED, result
        asked = [(r.action.kind, r.risk.level, r.risk.reason) for r in spy.requests]
        assert [a[:2] for a in asked] == [("click", Risk.HIGH), ("type", Risk.HIGH)], asked
        assert asked[0][2].startswith("the model says \u2018Refresh\u2019; the menu item \u2018Run cleanup (deletes "
                                      "old files)\u2019 is there"), asked
        assert "menu item \u2018Run cleanup (deletes old files)\u2019" in asked[1][2]
        state = app.wait(lambda s: s["refreshes"] == 1, "the approved menu item's activation")
        assert state["cleanups"] == 0
    finally:
        desktop.xdotool("key", "Escape")
        watcher.close()



@pytest.mark.parametrize("desktop", ["openbox"], indirect=True)
def test_mousepad_edit_menu_copy_is_approved_and_a_mislabelled_destructive_item_asks(desktop: Desktop,
                                                                                    tmp_path: Path) -> None:
    """mousepad's own Edit menu, the grab watcher on: a click on "Copy" is approved (the clipboard then holds the
    selected text: the X server's CLIPBOARD), a click on the delete item that the model calls "Copy" asks (the
    document keeps its text)."""
    path = tmp_path / "notes.txt"
    path.write_text("keep these words", encoding="utf-8")
    watcher = GrabWatcher(desktop.display)
    probe = AccessibilityProbe(desktop.env()["DBUS_SESSION_BUS_ADDRESS"])
    try:
        editor = desktop.launch(["mousepad", "--disable-server", str(path)], wm_class="[Mm]ousepad", env=ACCESSIBLE)
        desktop.place(editor, 200, 150, 700, 500)
        wait_until(lambda: (e := probe.focused()) is not None and e.editable_text, 20, "mousepad's text view")
        desktop.xdotool("key", "ctrl+a")
        # where the Edit menu is: the lookup along the menu bar; where its items are: the menu opened by its
        # mnemonic and walked with Down (the lookup names the highlighted item and its bounds)
        x, y, w, _ = desktop.wait_placed(editor)
        client = window_at(x + w // 2, y + 100)
        assert client is not None and client.client_rect is not None
        cx, cy, cw, _ = client.client_rect
        edit_item = next(e for px in range(cx + 5, cx + cw // 2, 10)
                         if (e := probe.element_at(px, cy + 12, client.client_rect)) is not None and e.name == "Edit")
        assert edit_item.role == "menu" and edit_item.bounds is not None
        desktop.xdotool("key", "alt+e")
        items: dict[str, tuple[int, int, int, int]] = {}
        while "Copy" not in items or not any("Delete" in name for name in items):
            assert len(items) < 12, items
            item = wait_until(lambda: (e := probe.focused()) is not None and e.role.startswith("menu") and
                              e.name.strip() not in items and e, 10, f"the item after {list(items)}")
            assert item.bounds is not None
            items[item.name.strip()] = item.bounds
            desktop.xdotool("key", "Down")
        desktop.xdotool("key", "Escape", "Escape")
        wait_until(lambda: (e := probe.focused()) is not None and e.editable_text, 20, "the menu to close")
        delete = next(name for name in items if "Delete" in name)
        with MssCapture() as cap:
            frame = cap.grab(1)

        def at(x: int, y: int, w: int, h: int) -> Point:
            return frame_pixel_to_point(frame, x + w // 2, y + h // 2)

        edit = at(*edit_item.bounds)
        actions: list[Action] = [
            Click(edit, element="Edit menu"),  # control: approved, opens the menu
            Click(at(*items["Copy"]), element="Copy"),  # control: approved in the open menu
            Click(edit, element="Edit menu"),  # approved: opens the menu again
            Click(at(*items[delete]), element="Copy"),  # escape: the item there deletes
        ]
        spy = SpyApprover(default=ApprovalResponse(Decision.SKIP))
        session = _session(actions, spy, probe, tmp_path / "episodes")
        session.grab_probe = watcher
        result = session.run("copy the text")
        assert result.status is State.FINISHED, result
        asked = [(r.action.kind, r.risk.reason) for r in spy.requests]
        assert len(asked) == 1 and asked[0][1].startswith("the model says \u2018Copy\u2019; the menu item "
                                                          f"\u2018{delete}"), (asked, items)
        assert wait_until(lambda: desktop.run("xclip", "-o", "-selection", "clipboard", check=False) ==
                          "keep these words", 10, "the copied text on the clipboard")
        title = desktop.xdotool("getwindowname", str(editor.window)).strip()
        assert not title.startswith("*"), title  # the document was not changed
    finally:
        desktop.xdotool("key", "Escape", check=False)
        watcher.close()
