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
