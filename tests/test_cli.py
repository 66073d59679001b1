"""The holodesk command line: sub-command routing and argument errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from holodesk.cli import main


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
    from holodesk.core.geometry import Frame, Monitor
    from holodesk.core.risk import Risk, RiskAssessment
    from holodesk.core.wording import WindowInfo, step_words
    from holodesk.policy.base import Proposal
    from holodesk.session.approval import Decision, make_request

    frame = Frame(np.zeros((1080, 1920, 3), np.uint8), Monitor(1, 0, 0, 1920, 1080))
    form = WindowInfo("Demo form", "Tk", (700, 300, 520, 420))
    click = make_request(0, Proposal(Click(Point(500, 500), element="Cancel button"), thought="cancel it"), frame,
                         RiskAssessment(Risk.LOW, "pointer action"), "step", window=form)
    out = io.StringIO()
    assert TerminalApprover(io.StringIO("a\n"), out)(click).decision is Decision.APPROVE
    lines = out.getvalue().splitlines()
    words = step_words(click.action, window=form, input_points=click.input_points, monitor_label=frame.monitor.label)
    assert lines[1] == f"Step 1: {words.headline}" == "Step 1: Click ‘Cancel button’ in Demo form"
    assert lines[2:4] == [f"  {d}" for d in words.details]
    assert lines[4:6] == ["  risk: low (pointer action)", "  model's thought: 'cancel it'"]

    typed = make_request(1, Proposal(Type("John\x1b[2J Smith")), frame, RiskAssessment(Risk.LOW, "types text"),
                         "step", focus_element="Your name")
    out = io.StringIO()
    TerminalApprover(io.StringIO("s\n"), out)(typed)
    printed = out.getvalue()
    assert "Step 2: Type ‘John\\x1b[2J Smith’ into ‘Your name’" in printed and "\x1b" not in printed
    assert "  exact text: 'John\\x1b[2J Smith'" in printed
