"""The holodesk command line: sub-command routing and argument errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from holodesk.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_bench_takes_its_own_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["bench", "--help"])
    assert info.value.code == 0
    assert "--episode-steps" in capsys.readouterr().out


def test_unknown_options_of_other_commands_are_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "x", "--bogus"])
    assert info.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_script_cannot_be_combined_with_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"note": None, "thought": "", "tool_call": None}) + "\n")
    assert main(["run", "x", "--script", str(script), "--model", "some/model"]) == 2
    assert "cannot be combined" in capsys.readouterr().err


def test_policy_cost_line_names_the_stages_and_the_decoder() -> None:
    from holodesk.cli import policy_cost

    local = policy_cost({"preprocess": 5.2, "vision": 31.0, "prefill": 155.4, "decode": 342.1},
                        {"decoder": "static"})
    assert local == "model 534 ms (preprocess 5, vision 31, prefill 155, decode 342; static decoder)"
    remote = policy_cost({"build_prompt": 1.0, "encode_images": 9.0, "request": 400.0,
                          "request_all_attempts": 410.0, "parse": 0.2, "total": 420.4}, {})
    assert remote == "model 420 ms (build_prompt 1, encode_images 9, request 400)"
    assert policy_cost({"policy": 0.1}, {}) == ""  # a scripted policy reports no stages


def test_terminal_approval_speaks_the_same_words_as_the_card() -> None:
    import io

    import numpy as np

    from holodesk.cli import TerminalApprover
    from holodesk.core.actions import Click, Point, Type
    from holodesk.core.geometry import Frame, Monitor, place
    from holodesk.core.risk import Risk, RiskAssessment
    from holodesk.core.wording import WindowInfo, step_words
    from holodesk.policy.base import Proposal
    from holodesk.policy.registry import get_protocol
    from holodesk.session.approval import Decision, make_request
    from holodesk.session.state import STOPPED_BY_NO_INPUT

    frame = Frame(np.zeros((1080, 1920, 3), np.uint8), Monitor(1, 0, 0, 1920, 1080))
    form = WindowInfo("Demo form", "Tk", (700, 300, 520, 420))
    proposal = Proposal(Click(Point(500, 500), element="Cancel button"), thought="cancel it")
    click = make_request(0, proposal, place(proposal.action, frame),
                         RiskAssessment(Risk.LOW, "pointer action"), "step", window=form)
    out = io.StringIO()
    contract = get_protocol("agent-loop-v1")
    assert TerminalApprover(io.StringIO("a\n"), out, protocol=contract)(click).decision is Decision.APPROVE
    lines = out.getvalue().splitlines()
    words = step_words(click.action, window=form, input_points=click.input_points, monitor_label=frame.monitor.label)
    assert lines[1] == f"Step 1: {words.headline}" == "Step 1: Click ‘Cancel button’ in Demo form"
    assert lines[2:4] == [f"  {d}" for d in words.details]
    assert lines[4:6] == ["  risk: low (pointer action)", "  model's thought: 'cancel it'"]

    proposal = Proposal(Type("John\x1b[2J Smith"))
    typed = make_request(1, proposal, place(proposal.action, frame), RiskAssessment(Risk.LOW, "types text"),
                         "step", focus_element="Your name")
    out = io.StringIO()
    TerminalApprover(io.StringIO("s\n"), out, protocol=contract)(typed)
    printed = out.getvalue()
    assert "Step 2: Type ‘John\\x1b[2J Smith’ into ‘Your name’" in printed and "\x1b" not in printed
    assert "  exact text: 'John\\x1b[2J Smith'" in printed
    assert printed.endswith("  [a]pprove / [e]dit / [s]kip / [q]uit? s\n  skipped: nothing was done\n")  # echoed

    out = io.StringIO()
    stopped = TerminalApprover(io.StringIO(""), out, protocol=contract)(typed)  # no input left: nobody to ask
    assert stopped.decision is Decision.STOP and stopped.by == STOPPED_BY_NO_INPUT
    assert out.getvalue().endswith("? \n  (no more input: stopping)\n")


def test_the_autopilot_line_names_the_element_as_the_card_does(capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    from holodesk.cli import EventPrinter, terminal_safe
    from holodesk.core.actions import Click, Point, Type
    from holodesk.core.element import Element
    from holodesk.core.geometry import Frame, Monitor, place
    from holodesk.core.risk import Risk, RiskAssessment
    from holodesk.core.wording import WindowInfo
    from holodesk.policy.base import Proposal
    from holodesk.session.approval import ApprovalResponse, Decision, make_request
    from holodesk.session.state import SessionEvent, State

    frame = Frame(np.zeros((1080, 1920, 3), np.uint8), Monitor(1, 0, 0, 1920, 1080))
    editor = WindowInfo("Text Editor", "Mousepad", (0, 0, 1920, 1080))
    save = Element("push button", "  Save ", frozenset({"sensitive"}))
    field = Element("text", "Name\x1b[2J", frozenset({"editable"}))  # not sensitive: disabled
    low = RiskAssessment(Risk.LOW, "a click in a known window")
    printer, cards = EventPrinter(), []
    cases = [(Proposal(Click(Point(500, 500), element="Save button")), save),
             (Proposal(Type("hello")), field), (Proposal(Click(Point(500, 500), element="Save button")), None)]
    for step, (proposal, element) in enumerate(cases):
        cards.append(make_request(step, proposal, place(proposal.action, frame), low, "auto", window=editor,
                                  element=element))
        printer(SessionEvent("decision", State.AWAITING_APPROVAL, step, "approve",
                             {"request": cards[-1], "response": ApprovalResponse(Decision.APPROVE, by="autopilot")}))
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "[step 1] approved by the autopilot (low risk: a click in a known window): Click ‘Save button’ in "
        "Text Editor — Really there: push button ‘Save’",
        "[step 2] approved by the autopilot (low risk: a click in a known window): Type ‘hello’ in Text Editor "
        "— Has the keyboard focus: text ‘Name\\x1b[2J’ (disabled)",
        "[step 3] approved by the autopilot (low risk: a click in a known window): Click ‘Save button’ in "
        "Text Editor"]
    assert [line.endswith(f" — {terminal_safe(card.details[-1])}") for line, card in zip(lines, cards, strict=True)
            ] == [True, True, False]  # the card's own line, as the card shows it


EXPECTED_ERRORS = {
    "empty task": (["run", ""], "the task is empty"),
    "blank task with a script": (["run", "  ", "--script", "SCRIPT"], "the task is empty"),
    "missing script": (["run", "x", "--script", "TMP/missing.jsonl"], "cannot read script"),
    "script is a folder": (["run", "x", "--script", "TMP"], "cannot read script"),
    "bad int flag": (["run", "x", "--max-steps", "abc"], "invalid int value"),
    "out of range flag": (["run", "x", "--max-steps", "0"], "max_steps"),
    "all monitors": (["run", "x", "--script", "SCRIPT", "--monitor", "0"],
                     "monitor: Holodesk looks at and acts on one monitor, not all monitors together; pick one "
                     "(1 = first), `holodesk doctor` lists them (got 0)"),
    "bad endpoint": (["run", "x", "--endpoint", "notaurl", "--model", "m"], "endpoint must start with http"),
    "endpoint with a broken host": (["run", "x", "--endpoint", "http://[::1", "--model", "m"],
                                    "endpoint is not a valid URL"),
    "endpoint with a bad port": (["run", "x", "--endpoint", "http://127.0.0.1:99999/v1", "--model", "m"],
                                 "endpoint is not a valid URL"),
    "missing model": (["run", "x", "--model", "TMP/no-such-model"], "TMP/no-such-model"),
    "episodes dir is a file": (["run", "x", "--script", "SCRIPT", "--episodes-dir", "SCRIPT"],
                               "cannot create the episode folder"),
    "bench on an unknown device": (["bench", "--device", "foo", "--tiny"], "is not a device PyTorch knows"),
    "unwritable checkpoint path": (["tiny-checkpoint", "/proc/holodesk-no/x"], "No such file or directory"),
    "bad settings file": (["run", "x", "--script", "SCRIPT"], "not valid TOML"),
}


@pytest.mark.parametrize("case", list(EXPECTED_ERRORS))
def test_expected_errors_are_one_clear_line_without_a_traceback(case: str, tmp_path: Path,
                                                                 xvfb_session: Any) -> None:
    """The real `holodesk` command: bad input, a missing file or model, an unwritable folder end with
    status 2 and one message on stderr, never a traceback."""
    import subprocess
    import sys

    argv, expected = EXPECTED_ERRORS[case]
    script = tmp_path / "steps.jsonl"
    script.write_text('{"thought": "t", "note": null, "tool_call": null}\n', encoding="utf-8")
    config = tmp_path / "settings.toml"
    if case == "bad settings file":
        config.write_text("approval = [\n", encoding="utf-8")
    argv = [a.replace("SCRIPT", str(script)).replace("TMP", str(tmp_path)) for a in argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLODESK_")}
    env.update(xvfb_session.env(), HOLODESK_CONFIG=str(config), HOLODESK_DATA_DIR=str(tmp_path / "data"),
               PYTHONPATH=str(ROOT / "app"))
    res = subprocess.run([sys.executable, "-m", "holodesk", *argv], env=env, capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout, res.stderr
    assert expected.replace("TMP", str(tmp_path)) in res.stderr, res.stderr
    assert not list((tmp_path / "data").rglob("episode.jsonl"))  # nothing ran


def test_tiny_checkpoint_without_the_local_runtime_says_what_to_install(tmp_path: Path) -> None:
    """The README's setup without a GPU leaves torch out: ``holodesk tiny-checkpoint`` says so in one line."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None; from holodesk.cli import main; "
            f"sys.exit(main(['tiny-checkpoint', {str(tmp_path / 'tc')!r}]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": "app", "PATH": "/usr/bin:/bin"}, cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 2, res.stderr  # EXIT_ERROR
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "the local runtime is not installed" in res.stderr and "holodesk[local]" in res.stderr
    assert not (tmp_path / "tc").exists()


def test_the_readme_run_without_the_local_runtime_is_one_clear_error(tmp_path: Path, xvfb_session: Any) -> None:
    """The README's ``holodesk run "click OK"`` on a machine set up without a GPU (no torch: the installer
    leaves the ``local`` extra out; here ``sys.modules['torch'] = None`` stands in for that) ends with one
    message that names what is missing and what to do, not a ModuleNotFoundError traceback."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLODESK_")}
    env.update(xvfb_session.env(), HOLODESK_CONFIG=str(tmp_path / "settings.toml"),
               HOLODESK_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT / "app"))
    code = "import sys; sys.modules['torch'] = None; from holodesk.cli import main; sys.exit(main(['run', 'click OK']))"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and "ModuleNotFoundError" not in res.stderr, res.stderr
    assert "the local runtime is not installed" in res.stderr and "setup wizard" in res.stderr, res.stderr
    assert "--endpoint URL --model NAME" in res.stderr


@pytest.mark.parametrize("approve", ["auto", "step"])
def test_run_shows_each_steps_thinking_and_thought_once(approve: str, tmp_path: Path, xvfb_session: Any) -> None:
    """The real ``holodesk run`` with a replayed script: a step whose reply has no reasoning block shows its
    thought once (streamed on the ``thinking`` line; no ``thought`` line and, when asked, no ``model's thought``
    on the prompt repeating it); a step with a ``<think>`` block shows the block as its thinking and the reply's
    different thought after it; the episode records the block as the step's ``reasoning_text``."""
    import subprocess
    import sys

    reasoning = "The page is loaded and nothing else is asked."
    script = tmp_path / "steps.jsonl"
    script.write_text("\n".join([
        "# protocol: holo-v1",
        json.dumps({"note": None, "thought": "wait for the page", "tool_call": {"tool_name": "wait", "seconds": 0.1}}),
        json.dumps(f"<think>{reasoning}</think>"
                   + json.dumps({"note": None, "thought": "all done", "tool_call": None})),
    ]) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLODESK_")}
    env.update(xvfb_session.env(), HOLODESK_CONFIG=str(tmp_path / "settings.toml"),
               HOLODESK_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT / "app"))
    res = subprocess.run([sys.executable, "-m", "holodesk", "run", "wait, then say done", "--script", str(script),
                          "--approve", approve, "--episodes-dir", str(tmp_path / "episodes")],
                         env=env, capture_output=True, text=True, timeout=120, input="a\na\n")
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout.splitlines()
    assert "[step 1] thinking: wait for the page" in out, res.stdout
    assert res.stdout.count("wait for the page") == 1, res.stdout
    assert not any(line.startswith("[step 1] thought:") for line in out), res.stdout
    assert ("[a]pprove" in res.stdout) == (approve == "step"), res.stdout  # the prompt was shown, without it
    assert f"[step 2] thinking: {reasoning}" in out and "[step 2] thought: all done" in out, res.stdout
    assert res.stdout.count(reasoning) == 1 and "was ignored" not in res.stdout + res.stderr, res.stdout
    records = [json.loads(line) for path in (tmp_path / "episodes").rglob("episode.jsonl")
               for line in path.read_text(encoding="utf-8").splitlines()]
    assert reasoning in [r.get("policy_extra", {}).get("reasoning_text") for r in records], records


def test_run_help_offers_every_model_family_for_model(capsys: pytest.CaptureFixture[str]) -> None:
    """``holodesk run --help`` says ``--model`` takes any of the families Holodesk runs, not only Holotron."""
    from holodesk.policy.models import series_names

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    model_help = text.split("options:", 1)[1].split("--model MODEL", 1)[1].split("--endpoint", 1)[0]
    assert "Holotron checkpoint" not in model_help
    assert all(name in model_help for name in series_names()), model_help
    assert "local checkpoint folder" in model_help and "Hugging Face repo id" in model_help
