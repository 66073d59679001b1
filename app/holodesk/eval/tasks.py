"""Evaluation tasks as declarative data: the suite files, their setup, and their checkers.

A suite is a folder of TOML files (the shipped one: ``app/holodesk/eval/suite/``); each file holds
``[[task]]`` tables::

    [[task]]
    id = "mousepad-type-save"          # unique in the suite
    program = "mousepad"               # the program the task is about (the suite's program count)
    skills = ["typing"]                # click, typing, non-latin, menu, dialog, drag, scroll, multi-program, ask
    instruction = "Type Hello and save the file."
    max_steps = 4                      # the step budget
    files = { "note.txt" = "" }        # created in the task's folder before anything starts
    images = { "a.png" = "CAT" }       # optional: 480x320 PNGs showing that word in large letters
    [[task.launch]]                    # programs, started in order; the last one gets the focus
    argv = ["mousepad", "--disable-server", "{dir}/note.txt"]
    window_class = "Mousepad"          # or window_name = "regex"; neither: found by its process id
    geometry = [20, 20, 900, 600]      # optional: x, y, width, height through the window manager
    layout = "layout.json"             # optional: the program reports widget rectangles there (settings form)
    [task.check]
    kind = "file_text"                 # see CHECKS
    path = "note.txt"
    equals = "Hello"
    # the oracle's replies and a sabotaged variant, JSON Lines in the agent-loop-v1 contract:
    oracle = '''{"note": null, "thought": "...", "tool_call": {"tool_name": "write_desktop", "content": "Hello"}}'''
    sabotage = '''...'''

Strings in ``argv`` and ``files`` may name ``{dir}`` (the task's folder), ``{python}`` (the system Python
with PyGObject) and ``{apps}`` (the folder of the suite's own programs). In oracle replies a coordinate may
be ``"@NAME"`` (the centre of rectangle NAME, taken at the moment of the step), ``"@NAME:left"``/``":right"``
(x: 4 pixels inside that edge), ``":top"``/``":bottom"`` (y), or ``"@NAME+N"`` (N pixels right of / below
the rectangle's left / top edge: a fixed place inside a window placed at a fixed size); rectangles come from
a ``layout`` file
and ``"win0"``, ``"win1"``... are the launched programs' windows. They are turned into the contract's
[0, 1000] coordinates of the screen before the reply is parsed.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from holodesk.errors import HolodeskError

SUITE_DIR = Path(__file__).resolve().parent / "suite"
"""The shipped suite."""
APPS_DIR = Path(__file__).resolve().parent / "apps"
"""The suite's own programs (the settings form)."""
SYSTEM_PYTHON = "/usr/bin/python3"
"""The Python that has PyGObject (python3-gi) for the settings form."""
GNUMERIC_NS = "http://www.gnumeric.org/v10.dtd"
"""The XML namespace of Gnumeric's workbook format."""
SKILLS = ("click", "typing", "non-latin", "menu", "dialog", "drag", "scroll", "multi-program", "ask", "keys")


class SuiteError(HolodeskError):
    """A suite file is malformed (the message names the file and the task)."""


@dataclass(frozen=True)
class Launch:
    """One program a task starts."""

    argv: list[str]
    window_class: str | None = None
    window_name: str | None = None
    geometry: tuple[int, int, int, int] | None = None
    layout: str | None = None


@dataclass(frozen=True)
class Task:
    """One evaluation task (fields as in the module docstring)."""

    id: str
    program: str
    instruction: str
    max_steps: int
    check: dict[str, Any]
    oracle: list[str]
    sabotage: list[str]
    skills: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    launch: tuple[Launch, ...] = ()
    images: dict[str, str] = field(default_factory=dict)
    source: str = ""


def _replies(text: Any, where: str) -> list[str]:
    if not isinstance(text, str) or not text.strip():
        raise SuiteError(f"{where}: needs replies (JSON Lines in the agent-loop-v1 contract)")
    lines = [line.strip() for line in text.split("\n") if line.strip() and not line.strip().startswith("#")]
    for number, line in enumerate(lines, 1):
        try:
            json.loads(line)
        except ValueError as exc:
            raise SuiteError(f"{where}: reply {number} is not JSON: {exc}") from exc
    return lines


def _task(raw: dict[str, Any], source: Path) -> Task:
    where = f"{source.name}: task {raw.get('id', '?')!r}"
    try:
        launches = tuple(Launch(list(item["argv"]), item.get("window_class"), item.get("window_name"),
                                tuple(item["geometry"]) if "geometry" in item else None, item.get("layout"))
                         for item in raw.get("launch", []))
        task = Task(id=str(raw["id"]), program=str(raw["program"]), instruction=str(raw["instruction"]),
                    max_steps=int(raw["max_steps"]), check=dict(raw["check"]),
                    oracle=_replies(raw.get("oracle"), f"{where} oracle"),
                    sabotage=_replies(raw.get("sabotage"), f"{where} sabotage"),
                    skills=tuple(raw.get("skills", ())), files=dict(raw.get("files", {})), launch=launches,
                    images=dict(raw.get("images", {})),
                    source=source.name)
    except (KeyError, TypeError, ValueError) as exc:
        raise SuiteError(f"{where}: {type(exc).__name__}: {exc}",
                         hint="See docs/evaluation.md, 'Adding a task', for the fields.") from exc
    unknown = [s for s in task.skills if s not in SKILLS]
    if unknown:
        raise SuiteError(f"{where}: unknown skills {unknown}; use {', '.join(SKILLS)}")
    if task.check.get("kind") not in CHECKS:
        raise SuiteError(f"{where}: unknown check kind {task.check.get('kind')!r}; use {', '.join(CHECKS)}")
    return task


def load_suite(path: Path | None = None, only: list[str] | None = None) -> list[Task]:
    """The tasks of the suite folder (or one TOML file) ``path`` (default :data:`SUITE_DIR`), in file and
    declaration order; with ``only``, just the tasks whose id matches one of those regular expressions.

    Raises:
        SuiteError: unreadable or malformed file, duplicate id, or no task selected.
    """
    root = path or SUITE_DIR
    files = sorted(root.glob("*.toml")) if root.is_dir() else [root]
    if not files:
        raise SuiteError(f"no suite files (*.toml) in {root}")
    tasks: list[Task] = []
    for file in files:
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SuiteError(f"cannot read suite file {file}: {exc}") from exc
        tasks += [_task(raw, file) for raw in data.get("task", [])]
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise SuiteError(f"task id {task.id!r} is declared twice")
        seen.add(task.id)
    if only:
        tasks = [t for t in tasks if any(re.search(pattern, t.id) for pattern in only)]
        if not tasks:
            raise SuiteError(f"no task id matches {only}")
    return tasks


def expand(text: str, folder: Path) -> str:
    """``text`` with ``{dir}``, ``{python}`` and ``{apps}`` replaced."""
    return text.replace("{dir}", str(folder)).replace("{python}", SYSTEM_PYTHON).replace("{apps}", str(APPS_DIR))


# -- oracle coordinates -----------------------------------------------------------------------------------
Rect = tuple[int, int, int, int]
_REF = re.compile(r"@([\w:. ]+?)(?::(left|right|top|bottom)|([+-]\d+))?")


def to_model_units(pixel: int, size: int) -> int:
    """The contract coordinate (0..1000) that lands on screen pixel ``pixel`` of an axis of ``size`` pixels
    (the frame maps x to pixel ``floor(x / 1000 * size)``)."""
    return max(0, min(1000, round((pixel + 0.5) * 1000 / size)))


def resolve_reply(reply: str, rects: dict[str, Rect], screen: tuple[int, int]) -> str:
    """Replace ``"@NAME[:edge]"`` coordinates in a reply's ``tool_call`` with contract coordinates.

    Raises:
        SuiteError: a named rectangle is not known (not on screen at this step).
    """
    data = json.loads(reply)
    call = data.get("tool_call") if isinstance(data, dict) else None
    if not isinstance(call, dict):
        return reply
    for axis in ("x", "y"):
        value = call.get(axis)
        if not isinstance(value, str):
            continue
        match = _REF.fullmatch(value)
        if match is None:
            continue
        name, edge, offset = match.group(1), match.group(2), match.group(3)
        if name not in rects:
            raise SuiteError(f"the oracle names {name!r}, which is not on the screen now (known: {sorted(rects)})")
        x, y, w, h = rects[name]
        if offset is not None:
            pixel = (x if axis == "x" else y) + int(offset)
            call[axis] = to_model_units(pixel, screen[0] if axis == "x" else screen[1])
        elif axis == "x":
            pixel = x + 4 if edge == "left" else x + w - 5 if edge == "right" else x + w // 2
            call[axis] = to_model_units(pixel, screen[0])
        else:
            pixel = y + 4 if edge == "top" else y + h - 5 if edge == "bottom" else y + h // 2
            call[axis] = to_model_units(pixel, screen[1])
    return json.dumps(data, ensure_ascii=False)


# -- checkers -----------------------------------------------------------------------------------------------
@dataclass
class CheckContext:
    """What a checker may read: the task's folder, the programs' output and windows, and the run's answer.

    Attributes:
        folder: the task's folder (``{dir}``).
        stdout: program index -> callable returning what it printed (waits for it to exit, bounded).
        exit_code: program index -> callable returning its exit status (None: still running).
        title: program index -> callable returning its window's current title.
        running: program index -> callable returning None while it runs, else its exit status (no wait).
        answer: the text of the run's ``answer`` action, None when it did not answer.
        original: the task's ``files`` (relative path -> content) as set up.
    """

    folder: Path
    stdout: Any
    exit_code: Any
    title: Any
    running: Any
    answer: str | None
    original: dict[str, str]


def _norm(text: str) -> str:
    return text.replace("\r\n", "\n").rstrip("\n")


def _file_text(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    path = ctx.folder / spec["path"]
    if not path.is_file():
        return False, f"{spec['path']} does not exist"
    text = _norm(path.read_text(encoding="utf-8", errors="replace"))
    if "equals" in spec:
        ok = text == _norm(spec["equals"])
        return ok, f"{spec['path']} holds {text[:80]!r}" + ("" if ok else f", not {spec['equals']!r}")
    missing = [s for s in spec.get("contains", []) if s not in text]
    return not missing, f"{spec['path']} holds {text[:80]!r}" + (f", without {missing}" if missing else "")


def _path_state(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    path = ctx.folder / spec["path"]
    want = spec["kind"]
    ok = {"file_absent": not path.exists(), "dir_exists": path.is_dir(), "file_exists": path.is_file()}[want]
    return ok, f"{spec['path']}: {'a folder' if path.is_dir() else 'a file' if path.exists() else 'absent'}"


def _unchanged(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    changed = [name for name, text in ctx.original.items()
               if not (ctx.folder / name).is_file() or (ctx.folder / name).read_text(errors="replace") != text]
    return not changed, f"changed or removed: {changed}" if changed else "every file as set up"


def _stdout(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    out = _norm(ctx.stdout(int(spec.get("program", 0))))
    ok = out == _norm(spec["equals"])
    return ok, f"the program printed {out[:80]!r}" + ("" if ok else f", not {spec['equals']!r}")


def _exit_code(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    code = ctx.exit_code(int(spec.get("program", 0)))
    return code == int(spec["equals"]), f"exit status {code}, expected {spec['equals']}"


def _running(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    code = ctx.running(int(spec.get("program", 0)))
    return code is None, "still running" if code is None else f"exited with status {code}"


def _title(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    title = ctx.title(int(spec.get("program", 0)))
    return re.search(spec["matches"], title) is not None, f"window title {title!r} against /{spec['matches']}/"


def _json_file(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    path = ctx.folder / spec["path"]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return False, f"{spec['path']}: {exc}"
    wrong = {k: data.get(k) for k, v in spec["expect"].items() if data.get(k) != v}
    return not wrong, f"{spec['path']}: " + (f"wrong values {wrong}, expected {spec['expect']}" if wrong
                                             else f"as expected {spec['expect']}")


def _cell(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    """A spreadsheet cell's value, read by exporting the workbook with Gnumeric's ``ssconvert`` (``equals``);
    with ``formulas``, the cell must also hold one of those formulas (case, spaces and ``$`` ignored), read
    from the saved workbook (:func:`gnumeric_cell_content`): a typed constant with the right value fails."""
    path = ctx.folder / spec["path"]
    ssconvert = shutil.which("ssconvert")
    if ssconvert is None:
        return False, "ssconvert (gnumeric) is not installed"
    out = ctx.folder / ".check-export.csv"
    res = subprocess.run([ssconvert, str(path), str(out)], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        return False, f"ssconvert could not read {spec['path']}: {res.stderr.strip()[-200:]}"
    rows = list(csv.reader(io.StringIO(out.read_text(encoding="utf-8"))))
    out.unlink()
    match = re.fullmatch(r"([A-Z])(\d+)", spec["cell"])
    assert match is not None, spec["cell"]
    col, row = ord(match.group(1)) - ord("A"), int(match.group(2)) - 1
    value = rows[row][col] if row < len(rows) and col < len(rows[row]) else ""
    verdict = f"cell {spec['cell']} holds {value!r}, expected {spec['equals']!r}"
    if value != spec["equals"] or "formulas" not in spec:
        return value == spec["equals"], verdict
    content = gnumeric_cell_content(path, col, row)
    formula = re.sub(r"[\s$]", "", content or "").upper()
    accepted = [re.sub(r"[\s$]", "", f).upper() for f in spec["formulas"]]
    ok = formula in accepted
    return ok, f"{verdict}; its content is {content!r}" + ("" if ok else f", not a formula of {spec['formulas']}")


def gnumeric_cell_content(path: Path, col: int, row: int) -> str | None:
    """What cell (``col``, ``row``; 0-based) of the Gnumeric workbook ``path`` holds as saved, in its first
    sheet: a formula's text (``=sum(A1:A3)``) or a constant's; None for an empty cell. Read from the file
    itself (gzip-compressed or plain XML, Gnumeric's own format), since an export gives only values.

    Raises:
        OSError: the file cannot be read. ValueError: it is not a Gnumeric workbook.
    """
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError as exc:
        raise ValueError(f"{path.name} is not a Gnumeric workbook: {exc}") from exc
    sheet = root.find(f"{{{GNUMERIC_NS}}}Sheets/{{{GNUMERIC_NS}}}Sheet")
    if sheet is None:
        raise ValueError(f"{path.name} has no sheet")
    for cell in sheet.iter(f"{{{GNUMERIC_NS}}}Cell"):
        if cell.get("Col") == str(col) and cell.get("Row") == str(row):
            return cell.text
    return None


def _answered(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    """The run ended with an answer that names every word of ``contains`` and none of ``excludes`` (case
    ignored): an answer that lists every candidate does not pass for the one asked for."""
    if ctx.answer is None:
        return False, "the run did not end with an answer"
    missing = [word for word in spec.get("contains", []) if word.lower() not in ctx.answer.lower()]
    extra = [word for word in spec.get("excludes", []) if word.lower() in ctx.answer.lower()]
    return not missing and not extra, f"answered {ctx.answer[:80]!r}" + (
        f", without {missing}" if missing else "") + (f", naming {extra} too" if extra else "")


def _all(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    verdicts = [run_check(part, ctx) for part in spec["checks"]]
    return all(ok for ok, _ in verdicts), "; ".join(why for _, why in verdicts)


CHECKS = {"file_text": _file_text, "file_absent": _path_state, "file_exists": _path_state,
          "dir_exists": _path_state, "unchanged": _unchanged, "stdout": _stdout, "exit_code": _exit_code,
          "title": _title, "running": _running, "json_file": _json_file, "cell": _cell, "answered": _answered,
          "all": _all}
"""Checker kinds: each reads the program's or the file system's state (or the run's answer), never the log."""


def run_check(spec: dict[str, Any], ctx: CheckContext) -> tuple[bool, str]:
    """(passed, why in words) of checker ``spec`` (its ``kind`` picks one of :data:`CHECKS`)."""
    try:
        return CHECKS[spec["kind"]](spec, ctx)
    except (KeyError, ValueError, OSError) as exc:
        return False, f"the checker could not read the state: {type(exc).__name__}: {exc}"
