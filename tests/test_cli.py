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
