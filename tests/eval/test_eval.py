"""``holodesk eval``: the shipped suite, its oracles and sabotaged variants run through the real agent loop on the
harness's own Xvfb + openbox desktop (real programs; the checkers read their state), the autopilot rules without
``--unattended``, the report and the comparison.

The two suite runs take about 1.5 (oracle) and 3 (sabotage: failing verdicts are read again for 2 s) minutes on
2 cores: every task starts its programs afresh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from holodesk.eval.report import compare, load_report
from holodesk.eval.tasks import SKILLS, SuiteError, load_suite, resolve_reply, to_model_units

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ("Xvfb", "openbox", "mousepad", "l3afpad", "xterm", "pcmanfm", "gnumeric", "ssconvert", "feh", "zenity",
            "yad", "xdotool")


def _require_programs() -> None:
    import shutil

    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        message = f"not installed: {missing} (installers/_setup.sh APT_TEST installs them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def _eval(out: Path, *args: str, timeout: float = 560, **extra_env: str) -> tuple[int, dict[str, Any], str]:
    """Run ``holodesk eval desktop ARGS --out OUT`` in its own process (it starts its own Xvfb and points its
    DISPLAY there); its exit status, report and output."""
    path = os.pathsep.join([str(ROOT / "app"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, **extra_env, "PYTHONPATH": path}
    env.pop("DISPLAY", None)  # the harness needs no display: it starts its own
    proc = subprocess.Popen([sys.executable, "-m", "holodesk", "eval", "desktop", *args, "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the harness stops its X server and programs on the way out
        output, _ = proc.communicate(timeout=60)
        pytest.fail(f"holodesk eval still running after {timeout:g} s: {output[-3000:]}")
    report = json.loads((out / "report.json").read_text(encoding="utf-8")) if (out / "report.json").exists() else {}
    return proc.returncode, report, output


def test_shipped_suite_covers_the_programs_and_skills() -> None:
    tasks = load_suite()
    assert len(tasks) >= 40
    programs = {t.program for t in tasks}
    assert len(programs) >= 8, programs
    assert {s for t in tasks for s in t.skills} == set(SKILLS)
    assert all(t.max_steps <= 8 for t in tasks)


def test_oracle_coordinates_resolve_against_the_rectangles_of_the_moment() -> None:
    reply = json.dumps({"note": None, "thought": "t", "tool_call": {"tool_name": "click_desktop", "element": "e",
                                                                   "x": "@save", "y": "@win0+30"}})
    data = json.loads(resolve_reply(reply, {"save": (100, 200, 50, 20), "win0": (10, 300, 400, 300)}, (1280, 800)))
    assert data["tool_call"]["x"] == to_model_units(125, 1280)
    assert data["tool_call"]["y"] == to_model_units(330, 800)
    assert int(data["tool_call"]["x"] / 1000 * 1280) == 125  # the frame maps it back onto that pixel
    with pytest.raises(SuiteError, match="not on the screen"):
        resolve_reply(reply, {"win0": (0, 0, 10, 10)}, (1280, 800))


def test_a_malformed_task_is_refused_with_its_name(tmp_path: Path) -> None:
    suite = tmp_path / "bad.toml"
    suite.write_text('[[task]]\nid = "x"\nprogram = "p"\ninstruction = "i"\nmax_steps = 2\noracle = "{}"\n'
                     'sabotage = "{}"\n[task.check]\nkind = "telepathy"\n', encoding="utf-8")
    with pytest.raises(SuiteError, match=r"bad\.toml: task 'x'.*telepathy"):
        load_suite(suite)


@pytest.mark.gui
@pytest.mark.e2e
@pytest.mark.slow
def test_every_oracle_passes(tmp_path: Path) -> None:
    _require_programs()
    code, report, output = _eval(tmp_path, "--policy", "oracle", "--unattended")
    failed = [a for a in report.get("attempts", []) if not a["passed"]]
    assert code == 0 and not failed, f"{output[-3000:]}\n{failed}"
    assert report["summary"]["tasks"] >= 40 and report["summary"]["programs"] >= 8
    episode = Path(report["attempts"][0]["episode"])
    start = json.loads((episode / "episode.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert start["eval"]["unattended"] is True and start["eval"]["display"] == report["display"]
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.count("<img ") >= report["summary"]["runs"] and 'class="mark"' in page


@pytest.mark.gui
@pytest.mark.e2e
@pytest.mark.slow
def test_every_sabotaged_oracle_fails(tmp_path: Path) -> None:
    _require_programs()
    code, report, output = _eval(tmp_path, "--policy", "oracle", "--sabotage", "--unattended")
    passed = [a["task"] for a in report.get("attempts", []) if a["passed"]]
    assert report.get("summary", {}).get("tasks", 0) >= 40, output[-3000:]
    assert code == 0 and not passed, f"{output[-3000:]}\nsabotaged runs that passed: {passed}"


@pytest.mark.gui
@pytest.mark.e2e
def test_each_step_reports_the_element_the_autopilot_found_on_the_harness_desktop(tmp_path: Path) -> None:
    """The autopilot's accessibility lookup asks the harness desktop's bus: the step that ticks the form's check
    box reports that check box, with the bounds the form itself reports for it (its layout.json), in the JSON
    and on the HTML page."""
    _require_programs()
    code, report, output = _eval(tmp_path, "--policy", "oracle", "--unattended", "--tasks", "^form-dark-theme$",
                                 timeout=240)
    assert code == 0, output[-3000:]
    (attempt,) = report["attempts"]
    first = attempt["step_records"][0]
    assert first["action"]["kind"] == "click", first
    (element,) = first["elements"]["at_points"]
    layout = json.loads((tmp_path / "tasks" / "form-dark-theme-0" / "layout.json").read_text(encoding="utf-8"))
    assert (element["role"], element["name"]) == ("check box", "Dark theme"), element
    assert element["bounds"] == layout["rects"]["dark"]
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "element: at the point: check box \u2018Dark theme\u2019" in page
    assert "None" not in page, [line for line in page.splitlines() if "None" in line]
    assert "desktop session ended" not in output, output[-2000:]


@pytest.mark.gui
@pytest.mark.e2e
def test_without_unattended_the_autopilot_rules_refuse_and_nothing_is_typed(tmp_path: Path) -> None:
    _require_programs()
    code, report, output = _eval(tmp_path, "--policy", "oracle", "--tasks", "^xterm-echo-to-file$", "--repeat", "2")
    assert code == 1, output[-2000:]
    assert [a["failure"] for a in report["attempts"]] == ["refused by the autopilot rules"] * 2
    assert "types text in a terminal" in report["attempts"][0]["reason"]
    assert not (tmp_path / "tasks" / "xterm-echo-to-file-0" / "hello.txt").exists()  # the terminal got nothing
    assert report["summary"]["pass@1"] == 0.0 and report["tasks"][0]["runs"] == 2
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "None" not in page, [line for line in page.splitlines() if "None" in line]


def _report(passes: dict[str, int], runs: int, policy: str) -> dict[str, Any]:
    tasks = [{"id": k, "program": "p", "skills": [], "passes": v, "runs": runs, "pass@1": v / runs,
              "pass^k": float(v == runs)} for k, v in passes.items()]
    return {"policy": policy, "model": None, "tasks": tasks,
            "summary": {"tasks": len(tasks), "pass@1": sum(t["pass@1"] for t in tasks) / len(tasks),
                        "pass^k": sum(t["pass^k"] for t in tasks) / len(tasks), "mean_steps": 3.0,
                        "mean_step_s": 1.0, "mean_reply_tokens": None}}


def test_compare_shows_two_reports_side_by_side(tmp_path: Path) -> None:
    a, b = _report({"t1": 2, "t2": 1}, 2, "local"), _report({"t1": 2, "t2": 2}, 2, "remote")
    (tmp_path / "a.json").write_text(json.dumps(a), encoding="utf-8")
    text = compare(load_report(tmp_path / "a.json"), b)
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert lines["pass@1"].split()[1:] == ["0.750", "1.000"]
    assert "differs" in lines["t2"] and "differs" not in lines["t1"]
    (tmp_path / "bad.json").write_text("{}", encoding="utf-8")
    with pytest.raises(Exception, match="not a holodesk eval report"):
        load_report(tmp_path / "bad.json")


def test_eval_takes_the_policy_options_of_run_from_one_declaration() -> None:
    """``holodesk eval`` has every policy option of ``holodesk run`` (``--think``, ``--greedy``, ``--seed`` ...) with
    the same choices and help: one declaration (holodesk.core.policy_options) serves both."""
    from holodesk.cli import _build_parser
    from holodesk.eval.cli import _parser

    def options(parser: Any) -> dict[str, tuple[Any, ...]]:
        return {a.option_strings[0]: (a.choices, a.help, a.default, a.type) for a in parser._actions
                if a.option_strings}

    run_parser = next(a for a in _build_parser()._actions if a.dest == "command").choices["run"]
    run_options, eval_options = options(run_parser), options(_parser())
    for flag in ("--script", "--model", "--endpoint", "--precision", "--think", "--greedy", "--seed"):
        assert flag in eval_options and eval_options[flag] == run_options[flag], flag
    args = _parser().parse_args(["desktop", "--model", "m", "--think", "on", "--greedy", "--seed", "7"])
    assert (args.think, args.greedy, args.seed) == ("on", True, 7)


def _attempt(task: str, *, passed: bool, records: list[dict[str, Any]], episode: str | None = None) -> Any:
    from holodesk.eval.runner import Attempt

    return Attempt(task, 0, passed, "the file holds the text" if passed else "setup failed: no window",
                   "finished" if passed else "failed", "done" if passed else "no window", None, len(records), 1.5,
                   None if passed else "error", episode, True, records)


def test_the_report_and_compare_show_words_never_none(tmp_path: Path) -> None:
    """Every value a person reads is words: an oracle run (no model, no tokens, no reasoning, steps without a
    decider or a result) and a failed run (set-up failed, no step) render with no Python None in the page or
    in ``eval compare``; a sampled local run shows its reasoning (escaped), sampling and seeds."""
    from holodesk.eval.report import write_report
    from holodesk.eval.tasks import SUITE_DIR, load_suite

    tasks = load_suite(SUITE_DIR, ["^form-name$", "^feh-next-picture$"])
    bare = {"step": 0, "frame": None, "thought": None, "action": {"kind": "answer", "content": "ok", "x": None},
            "error": None, "decision": None, "decided_by": None, "result": None, "ms": 12.0, "policy_ms": None,
            "reply_tokens": None, "reasoning_text": None, "step_seed": None,
            "elements": {"at_points": [None, {"role": None, "name": None, "bounds": None, "application": None}],
                         "focused": None, "lookup_ms": None}}
    attempts = [_attempt("form-name", passed=True, records=[bare]), _attempt("feh-next-picture", passed=False,
                                                                            records=[])]
    oracle_header = {"suite": "desktop", "policy": "oracle", "model": None, "endpoint": None, "sabotage": False,
                     "unattended": True, "display": ":5", "screen": [1280, 800],
                     "runtime": {"device": None, "device_name": None},
                     "settings": {"think": "auto", "greedy": False, "seed": None, "reasoning": None, "sampling": None}}
    (tmp_path / "oracle").mkdir()
    oracle = write_report(tmp_path / "oracle", oracle_header, tasks, attempts, 1)
    page = (tmp_path / "oracle" / "report.html").read_text(encoding="utf-8")
    assert "None" not in page, [line for line in page.splitlines() if "None" in line]
    assert "model none (the tasks&#x27; oracle replies)" in page
    assert "<b>step 1</b>" in page and "<b>step 0</b>" not in page  # the first step, as the CLI numbers it
    assert "reply tokens not recorded (the tasks&#x27; oracle replies)" in page and "decision: none recorded" in page

    sampled = {**bare, "reasoning_text": "The <b>Save</b> button & then done.", "step_seed": 1234,
               "reply_tokens": 40, "decision": "approve", "decided_by": "unattended", "result": "clicked"}
    local_header = {**oracle_header, "policy": "local", "model": "/models/tiny",
                    "settings": {"think": "on", "greedy": False, "seed": 1234, "reasoning": "on",
                                 "sampling": {"greedy": False, "temperature": 0.8, "top_p": 0.95, "seed": 1234}}}
    (tmp_path / "local").mkdir()
    local = write_report(tmp_path / "local", local_header, tasks, [_attempt("form-name", passed=True,
                                                                            records=[sampled])], 1)
    page = (tmp_path / "local" / "report.html").read_text(encoding="utf-8")
    assert "None" not in page
    assert "reasoning: The &lt;b&gt;Save&lt;/b&gt; button &amp; then done." in page
    assert "think before acting: on (think: on); sampling: temperature 0.8, top_p 0.95, seed 1234" in page
    assert "step seed 1234" in page and "decision: approve by unattended" in page

    text = compare(oracle, local)
    assert "None" not in text, text
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert lines["mean_reply_tokens"].split()[1:] == ["not", "recorded", "40.000"]
    assert "temperature 0.8, top_p 0.95, seed 1234" in text and "not recorded (the tasks' oracle replies)" in text


def test_compare_labels_tell_the_runs_apart() -> None:
    """The columns are named by policy, sabotage and model, and by the reports' file names when those agree."""
    oracle = {**_report({"t1": 1}, 1, "oracle"), "sabotage": False}
    sabotaged = {**_report({"t1": 0}, 1, "oracle"), "sabotage": True}
    header = compare(oracle, sabotaged, ("a.json", "b.json")).splitlines()[0]
    assert "A: oracle" in header and "B: oracle sabotaged" in header and "a.json" not in header
    header = compare(oracle, oracle, ("run-1", "run-2")).splitlines()[0]
    assert "A: oracle (run-1)" in header and "B: oracle (run-2)" in header


def test_checkers_verify_all_the_instruction_asks(tmp_path: Path) -> None:
    """A cell that must hold a formula fails with the right value typed as a number (the workbook written by
    Gnumeric's ssconvert, read as saved); an answer naming every candidate fails for the one asked for."""
    import shutil

    from holodesk.eval.tasks import CheckContext, run_check

    if shutil.which("ssconvert") is None:
        if os.environ.get("CI"):
            pytest.fail("ssconvert not installed (installers/_setup.sh APT_TEST installs gnumeric)")
        pytest.skip("ssconvert (gnumeric) not installed")
    spec = {"kind": "cell", "path": "book.gnumeric", "cell": "B1", "equals": "143",
            "formulas": ["=SUM(A1:A3)", "=A1+A2+A3"]}
    verdicts = {}
    for name, b1 in (("formula", "=sum( $A$1:A3 )"), ("typed", "143")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "data.csv").write_text(f"14,{b1}\n92\n37\n", encoding="utf-8")
        subprocess.run(["ssconvert", "data.csv", "book.gnumeric"], cwd=folder, check=True, capture_output=True,
                       timeout=60)
        context = CheckContext(folder, None, None, None, None, None, {})
        verdicts[name] = run_check(spec, context)
    assert verdicts["formula"][0], verdicts
    assert not verdicts["typed"][0] and "not a formula" in verdicts["typed"][1], verdicts

    answered = {"kind": "answered", "contains": ["92"], "excludes": ["14", "37"]}
    assert run_check(answered, CheckContext(tmp_path, None, None, None, None, "The largest is 92.", {}))[0]
    assert not run_check(answered, CheckContext(tmp_path, None, None, None, None, "14, 92 and 37", {}))[0]


def test_a_steps_time_counts_the_policys_parts_once(tmp_path: Path) -> None:
    from holodesk.eval.runner import step_records

    timings = {"capture": 10.0, "policy": 100.0, "policy.prefill": 15.0, "policy.decode": 80.0, "execute": 5.0}
    lines = [{"type": "start", "task": "t", "started_at": 0.0, "policy": "p", "executor": "e", "mode": "auto"},
             {"type": "step", "step": 0, "frame": "step-000.png", "timings_ms": timings}]
    (tmp_path / "episode.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    record = step_records(tmp_path)[0]
    assert record["ms"] == 115.0 and record["policy_ms"] == 100.0  # the parts are inside "policy"


def test_the_report_names_the_device_the_local_model_ran_on(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the local runtime (pip install -e '.[local]')")
    from holodesk.bench.tiny_checkpoint import write_tiny_checkpoint
    from holodesk.eval.runner import policy_runtime
    from holodesk.policy.local import load_local_policy
    from holodesk.policy.remote import RemotePolicy

    policy = load_local_policy(write_tiny_checkpoint(tmp_path / "tiny", seed=0), device="cpu")
    try:
        runtime = policy_runtime(policy)
    finally:
        policy.close()
    assert runtime == {"device": "cpu", "device_name": None}
    with RemotePolicy("http://127.0.0.1:9/v1", "m", api_key=None) as remote:
        assert policy_runtime(remote) == {"device": None, "device_name": None}  # the server's device is unknown
    a = {**_report({"t1": 1}, 1, "local"), "runtime": runtime}
    b = _report({"t1": 1}, 1, "remote")
    lines = {line.split()[0]: line for line in compare(a, b).splitlines() if line.strip()}
    assert lines["model"].split()[2:] == ["cpu", "n/a"]


class _ScriptedServer(BaseHTTPRequestHandler):
    """A loopback stand-in for an OpenAI-compatible model server (a named fake: no model runs here). It answers
    each chat request with the next of ``replies`` and counts 17 completion tokens; it keeps the requests."""

    replies: ClassVar[list[str]] = []
    requests: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        text = type(self).replies.pop(0)
        message = {"content": text, "reasoning_content": "The <next> picture comes with Right."}
        data = json.dumps({"model": body["model"], "choices": [{"message": message, "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 900, "completion_tokens": 17}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.gui
@pytest.mark.e2e
def test_a_remote_endpoint_runs_through_the_harness(tmp_path: Path) -> None:
    _require_programs()
    _ScriptedServer.replies = [
        json.dumps({"note": None, "thought": "Next picture.", "tool_call": {"tool_name": "hotkey_desktop",
                                                                          "keys": ["Right"]}}),
        json.dumps({"note": None, "thought": "Done.", "tool_call": {"tool_name": "answer", "content": "Shown."}})]
    _ScriptedServer.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ScriptedServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        code, report, output = _eval(tmp_path, "--endpoint", f"http://127.0.0.1:{server.server_port}/v1", "--model",
                                     "Hcompany/Holotron-12B", "--tasks", "^feh-next-picture$", "--unattended",
                                     "--think", "on", "--seed", "1234", timeout=120, HOLODESK_API_KEY="none")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0, output[-2000:]
    attempt = report["attempts"][0]
    assert attempt["passed"] and attempt["steps"] == 2 and report["policy"] == "remote"
    assert [s["reply_tokens"] for s in attempt["step_records"]] == [17, 17]
    assert report["summary"]["mean_reply_tokens"] == 17
    assert report["runtime"] == {"device": None, "device_name": None}  # no model in the harness's process
    first = _ScriptedServer.requests[0]["messages"]
    assert any("Show the next picture" in json.dumps(m) for m in first)  # the task's instruction went out
    assert any("image_url" in json.dumps(m) for m in first)  # with the harness's frame
    # the options of holodesk run reached the policy, and the report says what it used
    assert [r["seed"] for r in _ScriptedServer.requests] == [1234, 1235]
    assert report["settings"]["reasoning"] == "on" and report["settings"]["think"] == "on"
    assert report["settings"]["sampling"] == {"greedy": False, "temperature": 0.8, "top_p": 0.95, "seed": 1234}
    assert [s["step_seed"] for s in attempt["step_records"]] == [1234, 1235]
    assert attempt["step_records"][0]["reasoning_text"] == "The <next> picture comes with Right."
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "reasoning: The &lt;next&gt; picture comes with Right." in page and "None" not in page
    assert "sampling: temperature 0.8, top_p 0.95, seed 1234" in page
    # the harness releases its watch of its own X server before stopping it: no warning of a desktop's end
    assert "desktop session ended" not in output, output[-2000:]
