"""``holodesk eval grounding``: the ScreenSpot-v2 / ScreenSpot-Pro reader (a small fixture in each layout, made
here), the suite set generated from the settings form's GTK geometry and from mousepad's and zenity's accessibility
trees, scoring through the localization prompt
against a loopback OpenAI-compatible stand-in (a named fake for a served model), and the local path through the
tiny random checkpoint's own localizer on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from PIL import Image

from holodesk.errors import HolodeskError
from holodesk.eval.grounding import (
    generate_suite_set,
    model_locator,
    open_localizer,
    oracle_locator,
    read_dataset,
    score,
)


def _image(path: Path, size: tuple[int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (200, 200, 200)).save(path)


def make_v2(folder: Path) -> Path:
    """A ScreenSpot-v2 folder: screenspot_*_v2.json beside screenspotv2_image/, bbox [x, y, w, h]."""
    _image(folder / "screenspotv2_image" / "pc_1.png", (1000, 500))
    entries = [{"img_filename": "pc_1.png", "bbox": [100, 50, 200, 40], "instruction": "open the file menu",
                "data_type": "text", "data_source": "windows"},
               {"img_filename": "pc_1.png", "bbox": [700, 400, 20, 20], "instruction": "close the window",
                "data_type": "icon", "data_source": "windows"}]
    (folder / "screenspot_desktop_v2.json").write_text(json.dumps(entries), encoding="utf-8")
    return folder


def make_pro(folder: Path) -> Path:
    """A ScreenSpot-Pro folder: annotations/*.json and images/<app>/, bbox [x1, y1, x2, y2]."""
    _image(folder / "images" / "gimp_linux" / "shot.png", (2000, 1000))
    entries = [{"img_filename": "gimp_linux/shot.png", "bbox": [1500, 100, 1600, 140], "instruction": "undo",
                "ui_type": "icon", "group": "Creative", "application": "gimp", "img_size": [2000, 1000]}]
    (folder / "annotations").mkdir(parents=True)
    (folder / "annotations" / "gimp_linux.json").write_text(json.dumps(entries), encoding="utf-8")
    return folder


def test_reader_reads_both_layouts_into_pixel_boxes(tmp_path: Path) -> None:
    v2 = read_dataset(make_v2(tmp_path / "v2"))
    assert [(s.target, s.box, s.group) for s in v2] == [
        ("open the file menu", (100, 50, 300, 90), "windows/text"), ("close the window", (700, 400, 720, 420),
                                                                       "windows/icon")]
    assert v2[0].image == tmp_path / "v2" / "screenspotv2_image" / "pc_1.png"
    pro = read_dataset(make_pro(tmp_path / "pro"))
    assert [(s.box, s.group, s.image.name) for s in pro] == [((1500, 100, 1600, 140), "Creative/icon", "shot.png")]
    with pytest.raises(HolodeskError, match="neither a ScreenSpot-v2 folder"):
        read_dataset(tmp_path)


def test_a_bad_entry_is_named(tmp_path: Path) -> None:
    folder = make_v2(tmp_path / "v2")
    (folder / "screenspot_web_v2.json").write_text(json.dumps([{"img_filename": "x.png"}]), encoding="utf-8")
    with pytest.raises(HolodeskError, match=r"screenspot_web_v2\.json entry 1: KeyError"):
        read_dataset(folder)


class _FakeServer(BaseHTTPRequestHandler):
    """A loopback stand-in for an OpenAI-compatible server: answers each localization request with the point
    the test put under the target's words (in [0, 1000] of the image), and keeps the requests."""

    answers: ClassVar[dict[str, str]] = {}
    requests: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        prompt = body["messages"][0]["content"][1]["text"]
        target = prompt.rsplit("\n", 1)[-1]
        reply = {"choices": [{"message": {"content": self.answers[target]}}], "usage": {"completion_tokens": 9}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_server() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _FakeServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_remote_scoring_sends_the_localization_prompt_and_counts_clicks_in_the_box(
        tmp_path: Path, fake_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLODESK_API_KEY", "")
    samples = read_dataset(make_v2(tmp_path / "v2"))
    # (150, 140) of 1000 on a 1000x500 image is pixel (150, 70): inside the menu's box; the second misses
    _FakeServer.answers = {"open the file menu": '{"x": 150, "y": 140}', "close the window": '{"x": 10, "y": 10}'}
    _FakeServer.requests = []
    localizer, _name = open_localizer(model="Hcompany/Holotron-12B", endpoint=fake_server)
    try:
        result = score(samples, model_locator(localizer))
    finally:
        localizer.close()
    assert (result["hits"], result["samples"], result["unparsed"]) == (1, 2, 0)
    assert [r["hit"] for r in result["results"]] == [True, False]
    text = _FakeServer.requests[0]["messages"][0]["content"][1]["text"]
    assert text.startswith("Localize an element on the GUI image") and text.endswith("open the file menu")
    assert _FakeServer.requests[0]["temperature"] == 0.0 and localizer.localization_reply_tokens == [9, 9]
    _FakeServer.answers["close the window"] = "I think it is the red button"
    result = score(samples, model_locator(open_localizer(model="Hcompany/Holotron-12B", endpoint=fake_server)[0]))
    assert result["unparsed"] == 1 and result["hits"] == 1


@pytest.mark.gui
def test_suite_set_boxes_come_from_gtk_and_the_accessibility_tree_and_the_centres_hit(tmp_path: Path) -> None:
    missing = [p for p in ("Xvfb", "openbox", "xdotool", "mousepad", "zenity") if shutil.which(p) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"not installed: {missing}")
        pytest.skip(f"not installed: {missing}")
    assert generate_suite_set(tmp_path) >= 8
    assert [p.name for p in tmp_path.glob("*.json")] == ["screenspot_desktop_v2.json"]  # ScreenSpot-v2's name
    samples = read_dataset(tmp_path)
    targets = {s.target for s in samples}
    assert {"the Save button", "the Name text field", "the Argentina row of the Country list"} <= targets
    image = Image.open(samples[0].image)
    assert image.size == (1280, 800)
    save = next(s for s in samples if s.target == "the Save button")
    x1, y1, _, y2 = save.box
    # the Save button's box holds the button's light face, not the black root window around the form
    assert image.convert("L").getpixel((int(x1) + 8, int((y1 + y2) / 2))) > 180
    # mousepad's and zenity's boxes come from their accessibility tree: the menu bar's menus left to right in
    # one row, zenity's two buttons side by side, each box on the program's light face in its own screenshot
    by_target = {(s.image.name, s.target): s for s in samples}
    menus = [by_target["mousepad.png", f"the \u2018{m}\u2019 menu"].box for m in ("File", "Edit", "Search", "Help")]
    assert [b[0] for b in menus] == sorted(b[0] for b in menus) and len({b[1] for b in menus}) == 1
    cancel, ok = (by_target["zenity.png", f"the \u2018{b}\u2019 button"] for b in ("Cancel", "OK"))
    assert cancel.box[2] < ok.box[0] and cancel.box[1] == ok.box[1]
    for sample in (*(by_target["mousepad.png", f"the \u2018{m}\u2019 menu"] for m in ("File", "Help")), cancel, ok):
        x1, y1, _, y2 = sample.box
        assert Image.open(sample.image).convert("L").getpixel((int(x1) + 3, int((y1 + y2) / 2))) > 180, sample
    assert {s.group for s in samples} >= {"suite/text", "mousepad/menu", "zenity/push button"}
    # ScreenSpot's data types: text where the element shows its words (the check box with its label), icon else
    groups = {s.target: s.group for s in samples}
    assert groups["the Dark theme check box"] == "suite/text"
    assert groups["the knob of the Volume slider"] == "suite/icon"
    # the pointer was out of the way: no row of the Country list is drawn hovered (every row's face alike)
    form = Image.open(by_target["settings-form.png", "the Save button"].image).convert("RGB")
    rows = [s.box for s in samples if s.target.endswith("row of the Country list")]
    faces = {form.getpixel((int(x2) - 3, int((y1 + y2) / 2))) for x1, y1, x2, y2 in rows}
    assert len(rows) >= 3 and len(faces) == 1, faces
    assert score(samples, oracle_locator)["accuracy"] == 1.0


@pytest.mark.slow
def test_a_local_checkpoint_is_scored_through_its_policys_localizer(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``--model PATH`` loads the local policy and scores each sample through its own ``localize`` (the tiny
    random Holotron checkpoint on the CPU: its points say nothing of accuracy, they prove the path runs)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint
    from holodesk.eval.grounding import main
    from holodesk.policy.holotron import HolotronPolicy

    checkpoint = write_tiny_checkpoint(tmp_path / "tiny", seed=0, shards=1)
    dataset = make_v2(tmp_path / "v2")
    asked: list[tuple[tuple[int, ...], str]] = []
    localize = HolotronPolicy.localize

    def spy(self: HolotronPolicy, image: Any, target: str) -> Any:
        asked.append((image.shape, target))
        return localize(self, image, target)

    monkeypatch.setattr(HolotronPolicy, "localize", spy)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the CPU is shared; OpenMP spinning on busy cores makes the tiny model far slower
    try:
        assert main([str(dataset), "--model", str(checkpoint), "--out", str(tmp_path / "g.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    assert asked == [((500, 1000, 3), "open the file menu"), ((500, 1000, 3), "close the window")]
    result = json.loads((tmp_path / "g.json").read_text(encoding="utf-8"))
    assert result["locator"] == f"{checkpoint} (local)"
    assert (result["samples"], result["unparsed"]) == (2, 0)
    assert result["hits"] == sum(r["hit"] for r in result["results"])
    for r in result["results"]:  # a point in the image's pixels, scored against the sample's box
        x, y = r["point"]
        assert 0 <= x <= 1000 and 0 <= y <= 500
        x1, y1, x2, y2 = r["box"]
        assert r["hit"] == (x1 <= x <= x2 and y1 <= y <= y2)


def test_grounding_without_a_model_says_what_to_pass(tmp_path: Path) -> None:
    from holodesk.eval.grounding import main

    dataset = make_v2(tmp_path / "v2")
    for argv in ([str(dataset)], [str(dataset), "--policy", "remote", "--model", "m"],
                 [str(dataset), "--policy", "local", "--endpoint", "http://127.0.0.1:9/v1", "--model", "m"]):
        with pytest.raises(HolodeskError, match="no model chosen"):
            main(argv)
