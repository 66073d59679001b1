"""``holodesk eval grounding``: click-in-box accuracy through the model's published element-localization prompt.

    holodesk eval grounding DATASET --model PATH [--precision P] [--limit N] [--out report.json]
    holodesk eval grounding DATASET --endpoint URL --model NAME [--limit N] [--out report.json]
    holodesk eval grounding DATASET --policy oracle          (scores each box's centre: proves the reader)
    holodesk eval grounding --generate FOLDER                (writes the suite set, see below)

DATASET is a folder in one of two layouts (:func:`read_dataset` tells them apart):

* ScreenSpot-v2 (``OS-Copilot/ScreenSpot-v2``): ``screenspot_{desktop,mobile,web}_v2.json`` files beside a
  ``screenspotv2_image/`` folder; each entry ``{"img_filename", "bbox": [x, y, width, height] (pixels),
  "instruction", "data_type", "data_source"}``.
* ScreenSpot-Pro (``likaixin/ScreenSpot-Pro``): ``annotations/*.json`` and ``images/``; each entry
  ``{"img_filename" (relative to images/), "bbox": [x1, y1, x2, y2] (pixels), "instruction", "ui_type",
  "group", "application", ...}``.

``--generate`` writes the suite's own set in the ScreenSpot-v2 layout, so both read the same way
(:func:`generate_suite_set`): screenshots of the suite's settings form (real GTK 3 on the harness's Xvfb; boxes
from GTK's own geometry, the form's layout report), mousepad and a zenity dialog (boxes from their
accessibility tree).

A sample passes when the point the model answers (``{"x", "y"}`` in [0, 1000] of the image, parsed by the
protocol's ``parse_localization``) lands inside the box. Local and remote models take one path: the sample's
image and target go to a :class:`~holodesk.policy.base.Localizer`'s ``localize`` (:func:`model_locator`):
the policy's own (the one "Click more precisely" asks), local or remote
(:class:`~holodesk.policy.remote.RemotePolicy` for a server), built by the policy factory. Both send one user
turn: the image, then the protocol's ``localization_prompt`` (H Company's wording), greedy,
the reply constrained to the localization schema.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import mss
import numpy as np
from PIL import Image

from holodesk.control.accessibility import AccessibilityProbe
from holodesk.core.element import ACTIVATING_ROLES, TEXT_ROLES
from holodesk.errors import HolodeskError, PolicyOutputError
from holodesk.eval.desktop import EvalDesktop, wait_for
from holodesk.eval.tasks import APPS_DIR, SYSTEM_PYTHON
from holodesk.policy.base import Localizer
from holodesk.session.factory import build_policy
from holodesk.settings import load_settings

V2_IMAGES = "screenspotv2_image"
V2_FILES = "screenspot_*_v2.json"
"""ScreenSpot-v2's annotation files: ``screenspot_desktop_v2.json``, ``screenspot_mobile_v2.json``,
``screenspot_web_v2.json``."""
SUITE_SET_FILE = "screenspot_desktop_v2.json"
"""The suite set's annotation file: desktop screenshots, so ScreenSpot-v2's desktop file."""
Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Sample:
    """One grounding sample.

    Attributes:
        image: the screenshot file. target: the instruction in words.
        box: (x1, y1, x2, y2) in the image's pixels. group: a label to break results down by
        (ScreenSpot-v2: data_source/data_type; Pro: group/ui_type; suite: "suite/<widget kind>").
    """

    image: Path
    target: str
    box: Box
    group: str


def _load_json(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HolodeskError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, list):
        raise HolodeskError(f"{path}: expected a JSON list of samples")
    return data


def read_dataset(folder: Path) -> list[Sample]:
    """The samples of a ScreenSpot-v2 or ScreenSpot-Pro folder (layouts in the module docstring).

    Raises:
        HolodeskError: neither layout, an unreadable file, or an entry without img_filename/bbox/instruction.
    """
    samples: list[Sample] = []
    if (folder / "annotations").is_dir() and (folder / "images").is_dir():
        files, images, xywh = sorted((folder / "annotations").glob("*.json")), folder / "images", False
    elif (folder / V2_IMAGES).is_dir():
        files, images, xywh = sorted(folder.glob(V2_FILES)), folder / V2_IMAGES, True
    else:
        raise HolodeskError(f"{folder} is neither a ScreenSpot-v2 folder ({V2_IMAGES}/ and *.json) nor a "
                            "ScreenSpot-Pro folder (annotations/ and images/)",
                            hint="Point at the folder you downloaded (docs/evaluation.md, 'Click accuracy').")
    for file in files:
        for number, entry in enumerate(_load_json(file), 1):
            try:
                x1, y1, a, b = (float(v) for v in entry["bbox"])
                box = (x1, y1, x1 + a, y1 + b) if xywh else (x1, y1, a, b)
                group = "/".join(str(entry[k]) for k in (("data_source", "data_type") if xywh else ("group", "ui_type"))
                                 if k in entry)
                samples.append(Sample(images / entry["img_filename"], str(entry["instruction"]), box,
                                      group or file.stem))
            except (KeyError, TypeError, ValueError) as exc:
                raise HolodeskError(f"{file} entry {number}: {type(exc).__name__}: {exc}",
                                    hint="Each entry needs img_filename, bbox (4 numbers) and instruction.") from exc
    if not samples:
        raise HolodeskError(f"no samples in {folder}")
    return samples


# -- the suite's own set -------------------------------------------------------------------------------------
_WIDGET_WORDS = {"name": "the Name text field", "dark": "the Dark theme check box", "save": "the Save button",
                 "volume_knob": "the knob of the Volume slider"}


_ROLE_WORDS = {"push button": "button", "toggle button": "button", "text": "text field", "entry": "text field"}
GRID_STEP = 12
"""Spacing in pixels of the points at which a program's accessibility tree is asked for its element."""


def generate_suite_set(folder: Path) -> int:
    """Write the suite's grounding set into ``folder`` in the ScreenSpot-v2 layout, from the harness's desktop:
    a screenshot of the settings form with one entry per widget (boxes from GTK's geometry, the form's layout
    report), and one screenshot each of mousepad and a zenity entry dialog with one entry per named element
    that their accessibility tree reports (:func:`accessible_entries`). Each entry's ``data_source`` is the
    program; ``data_type`` is, for the form, ScreenSpot's "text" (the element shows its own words: the Name
    field, the check box and its label, the button, the list rows) or "icon" (no words: the slider's knob),
    and the AT-SPI role for the others. The file is ``screenspot_desktop_v2.json`` (:data:`SUITE_SET_FILE`).
    The pointer is moved to the screen's bottom-right corner before each screenshot (:func:`_grab`), so no
    element is drawn hovered. Returns the number of samples.

    Raises:
        EvalDesktopError: a program is missing, did not come up, or published no accessibility tree.
    """
    (folder / V2_IMAGES).mkdir(parents=True, exist_ok=True)
    scratch = folder / ".desktop"
    desktop = EvalDesktop.start(directory=scratch)
    try:
        entries = _settings_form_entries(desktop, folder)
        desktop.reset()
        (scratch / "notes.txt").write_text("Shopping list\n", encoding="utf-8")
        entries += accessible_entries(desktop, folder, "mousepad", ["mousepad", "--disable-server",
                                                                    str(scratch / "notes.txt")],
                                      "[Mm]ousepad", (200, 100, 760, 520))
        desktop.reset()
        entries += accessible_entries(desktop, folder, "zenity", ["zenity", "--entry", "--title", "Trip", "--text",
                                                                  "Which city?"], "[Zz]enity", (400, 250))
    finally:
        desktop.stop()
    (folder / SUITE_SET_FILE).write_text(json.dumps(entries, indent=1, ensure_ascii=False), encoding="utf-8")
    return len(entries)


def _grab(desktop: EvalDesktop, path: Path) -> None:
    """A PNG of the desktop's screen with the pointer out of the way (the bottom-right corner, where no window
    of the set lies: nothing is drawn hovered), once two grabs 0.2 s apart are the same (the programs have
    drawn)."""
    desktop.run("xdotool", "mousemove", str(desktop.width - 1), str(desktop.height - 1))
    with mss.MSS(display=desktop.display) as grabber:
        shots = [grabber.grab(grabber.monitors[1])]

        def settled() -> Any:
            time.sleep(0.2)  # the interval between the two grabs compared, not a wait for a state
            shots.append(grabber.grab(grabber.monitors[1]))
            return shots[-1] if shots[-1].rgb == shots[-2].rgb else None

        shot = wait_for(settled, 15, "the screen to stop changing")
        mss.tools.to_png(shot.rgb, shot.size, output=str(path))


def _settings_form_entries(desktop: EvalDesktop, folder: Path) -> list[dict[str, Any]]:
    layout = folder / ".desktop" / "layout.json"
    form = desktop.launch([SYSTEM_PYTHON, str(APPS_DIR / "settings_form.py"), "--state",
                           str(folder / ".desktop" / "state.json"), "--layout", str(layout)],
                          window_class="HolodeskSettingsForm")
    desktop.place(form.window, 300, 150, 420, 420)

    def current() -> dict[str, Any] | None:
        try:
            data = json.loads(layout.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        x, y, _, _ = desktop.geometry(form.window)
        return data if data.get("window", [None, None])[:2] == [x, y] else None

    data = wait_for(current, 30, "the settings form's layout report")
    _grab(desktop, folder / V2_IMAGES / "settings-form.png")
    entries = []
    for name, (x, y, w, h) in data["rects"].items():
        if name == "volume_trough":
            continue
        words = _WIDGET_WORDS.get(name) or f"the {name.split(':', 1)[1]} row of the Country list"
        if name == "volume_knob":  # GTK reports the slider's range; the knob drawn is about 20 px wide
            x, w, y, h = x - 9, max(w, 20), y - 8, max(h, 20)
        entries.append({"img_filename": "settings-form.png", "bbox": [x, y, w, h], "instruction": words,
                        "data_type": "icon" if name == "volume_knob" else "text",  # ScreenSpot: words or not
                        "data_source": "suite"})
    return entries


def accessible_entries(desktop: EvalDesktop, folder: Path, name: str, argv: list[str], window_class: str,
                       where: tuple[int, ...]) -> list[dict[str, Any]]:
    """Start ``argv`` (its accessibility tree on: :data:`~holodesk.eval.desktop.ACCESSIBLE_ENV`), put its
    window at ``where`` (``(x, y)``, or ``(x, y, width, height)``), write a screenshot ``<name>.png``, and return
    one ScreenSpot-v2 entry per element the tree reports (the autopilot's lookup,
    :meth:`~holodesk.control.accessibility.AccessibilityProbe.element_at`, at every :data:`GRID_STEP` pixels of
    the window) that has a name, a role a user clicks or types into, a box of at least 4x4 pixels inside the
    window, and a (name, role) no other element there shares. Boxes are ``[x, y, width, height]`` in screen
    pixels, the same as the screenshot's.

    Raises:
        EvalDesktopError: the program did not come up, or its tree did not answer within 30 s.
    """
    program = desktop.launch(argv, window_class=window_class)
    x, y, w, h = where if len(where) == 4 else (*where, *desktop.geometry(program.window)[2:])
    desktop.place(program.window, x, y, w, h)
    desktop.activate(program.window)
    rect = desktop.geometry(program.window)
    probe = AccessibilityProbe(desktop.env["DBUS_SESSION_BUS_ADDRESS"], budget_s=2.0)
    try:
        wait_for(lambda: probe.element_at(rect[0] + rect[2] // 2, rect[1] + rect[3] // 2, rect), 30,
                 f"{name}'s accessibility tree")
        _grab(desktop, folder / V2_IMAGES / f"{name}.png")
        found: dict[tuple[str, str], set[tuple[int, int, int, int]]] = {}
        for py in range(rect[1] + GRID_STEP // 2, rect[1] + rect[3], GRID_STEP):
            for px in range(rect[0] + GRID_STEP // 2, rect[0] + rect[2], GRID_STEP):
                element = probe.element_at(px, py, rect)
                if element is not None and element.bounds is not None and element.name.strip():
                    found.setdefault((element.role, element.name.strip()), set()).add(element.bounds)
    finally:
        probe.close()
    roles = ACTIVATING_ROLES | TEXT_ROLES | {"menu", "combo box"}
    entries = []
    for (role, label), boxes in sorted(found.items()):
        (bx, by, bw, bh), *others = boxes
        inside = rect[0] <= bx and rect[1] <= by and bx + bw <= rect[0] + rect[2] and by + bh <= rect[1] + rect[3]
        if role in roles and not others and inside and bw >= 4 and bh >= 4:
            entries.append({"img_filename": f"{name}.png", "bbox": [bx, by, bw, bh],
                            "instruction": f"the \u2018{label}\u2019 {_ROLE_WORDS.get(role, role)}",
                            "data_type": role, "data_source": name})
    return entries


# -- locating ---------------------------------------------------------------------------------------------------
Locator = Callable[[Sample], tuple[float, float]]
"""A locator answers the pixel (x, y) of the image where it would click for ``sample.target``."""


def oracle_locator(sample: Sample) -> tuple[float, float]:
    """The box's centre (proves the reader and the scoring; a model's figure must come from a model)."""
    x1, y1, x2, y2 = sample.box
    return (x1 + x2) / 2, (y1 + y2) / 2


def model_locator(localizer: Localizer) -> Locator:
    """The locator of a model: each sample's image as an ``(H, W, 3)`` uint8 RGB array and its target go to
    ``localizer.localize`` (a local or a remote policy), whose point in [0, 1000] of the image
    is scaled to the image's pixels.

    Raises (from the returned locator):
        PolicyOutputError: the reply is not a point. PolicyError: no reply.
        HolodeskError: the image cannot be read.
    """
    def locate(sample: Sample) -> tuple[float, float]:
        try:
            with Image.open(sample.image) as image:
                pixels = np.array(image.convert("RGB"), dtype=np.uint8)
        except OSError as exc:
            raise HolodeskError(f"cannot read the image {sample.image}: {exc}") from exc
        height, width = pixels.shape[:2]
        point = localizer.localize(pixels, sample.target)
        return point.x / 1000 * width, point.y / 1000 * height

    return locate


class ModelLocalizer(Localizer, Protocol):
    """A :class:`~holodesk.policy.base.Localizer` that holds a model or a connection until ``close``."""

    def close(self) -> None: ...


def open_localizer(*, model: str, endpoint: str | None, precision: str | None = None) -> tuple[ModelLocalizer, str]:
    """The localizer of the chosen model and its name for the report: the policy that
    :func:`holodesk.session.factory.build_policy` makes with the settings' generation options: with ``endpoint``
    the remote policy of the served ``model`` (its API key as a step's: keychain or ``HOLODESK_API_KEY``; the same
    deadline, reply cap and retries), without it the local policy loaded from ``model`` (a checkpoint folder or
    repo id, ``precision`` as given), which localizes through its own runtime.

    Raises:
        HolodeskError: the local policy has no element localization. ModelLoadError / SettingsError: from the
        load.
    """
    settings = (load_settings(policy="remote", endpoint=endpoint, model=model) if endpoint
                else load_settings(policy="local", model=model, precision=precision))
    policy = build_policy(settings)
    if not isinstance(policy, Localizer):
        policy.close()
        raise HolodeskError(f"the local policy for {model} has no element localization",
                            hint="Serve the model and pass --endpoint URL --model NAME.")
    return policy, f"{model} at {endpoint}" if endpoint else f"{model} (local)"


def score(samples: Sequence[Sample], locate: Locator) -> dict[str, Any]:
    """Click-in-box accuracy of ``locate`` over ``samples``: ``{"samples", "hits", "accuracy", "unparsed",
    "by_group": {group: {"samples", "hits", "accuracy"}}, "results": [{"image", "target", "box", "point",
    "hit", "error"}]}``. A reply that does not parse counts as a miss (``error`` says why)."""
    results: list[dict[str, Any]] = []
    for sample in samples:
        try:
            x, y = locate(sample)
            x1, y1, x2, y2 = sample.box
            hit, error, point = x1 <= x <= x2 and y1 <= y <= y2, None, [round(x, 1), round(y, 1)]
        except PolicyOutputError as exc:
            hit, error, point = False, str(exc), None
        results.append({"image": str(sample.image), "target": sample.target, "box": list(sample.box),
                        "group": sample.group, "point": point, "hit": hit, "error": error})
    groups: dict[str, dict[str, Any]] = {}
    counts = Counter(r["group"] for r in results)
    for group, n in counts.items():
        hits = sum(r["hit"] for r in results if r["group"] == group)
        groups[group] = {"samples": n, "hits": hits, "accuracy": hits / n}
    hits = sum(r["hit"] for r in results)
    return {"samples": len(results), "hits": hits, "accuracy": hits / len(results) if results else 0.0,
            "unparsed": sum(r["error"] is not None for r in results), "by_group": groups, "results": results}


def main(argv: Sequence[str]) -> int:
    """``holodesk eval grounding``; returns the exit status (0 after a scored run or a generated set)."""
    parser = argparse.ArgumentParser(prog="holodesk eval grounding", description="click-in-box accuracy through "
                                     "the model's element-localization prompt")
    parser.add_argument("dataset", nargs="?", type=Path, help="a ScreenSpot-v2 or ScreenSpot-Pro folder")
    parser.add_argument("--generate", type=Path, metavar="FOLDER", help="write the suite's own set there and exit")
    parser.add_argument("--policy", choices=["oracle", "local", "remote"], help="oracle: box centres (a reader "
                        "check); default: local with --model, remote with --endpoint")
    parser.add_argument("--endpoint", help="OpenAI-compatible server URL, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--model", help="local checkpoint folder or repo id; with --endpoint the served model name")
    parser.add_argument("--precision", choices=["bf16", "8bit", "4bit"], help="local model weights")
    parser.add_argument("--limit", type=int, help="score only the first N samples")
    parser.add_argument("--out", type=Path, help="write the JSON result there")
    args = parser.parse_args(list(argv))
    if args.generate:
        print(f"wrote {generate_suite_set(args.generate)} samples to {args.generate}")
        return 0
    if args.dataset is None:
        parser.error("give a DATASET folder (or --generate FOLDER)")
    samples = read_dataset(args.dataset)[: args.limit] if args.limit else read_dataset(args.dataset)
    policy = args.policy or ("remote" if args.endpoint else "local" if args.model else None)
    if policy == "oracle":
        result, name = score(samples, oracle_locator), "oracle"
    elif policy is None or not args.model or (policy == "remote") != bool(args.endpoint):
        raise HolodeskError("no model chosen", hint="Pass --model PATH (a local checkpoint), --endpoint URL "
                            "--model NAME (a served model), or --policy oracle.")
    else:
        localizer, name = open_localizer(model=args.model, endpoint=args.endpoint, precision=args.precision)
        started = time.monotonic()
        try:
            result = score(samples, model_locator(localizer))
        finally:
            localizer.close()
        result["seconds_per_sample"] = (time.monotonic() - started) / len(samples)
        # a server's usage (RemotePolicy.localization_reply_tokens); a local policy does not count them
        tokens = getattr(localizer, "localization_reply_tokens", None)
        result["reply_tokens_mean"] = sum(tokens) / len(tokens) if tokens else None
    result = {"dataset": str(args.dataset), "locator": name, **result}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"{name}: {result['hits']}/{result['samples']} clicks in the box ({result['accuracy']:.1%}); "
          f"{result['unparsed']} replies not parsed")
    for group, g in sorted(result["by_group"].items()):
        print(f"  {group}: {g['hits']}/{g['samples']} ({g['accuracy']:.1%})")
    return 0
