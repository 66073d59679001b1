"""``holodesk eval``: task success of a policy on the shipped suite, on a desktop the harness starts itself.

    holodesk eval SUITE [--policy oracle|local|remote|script] [--model M] [--endpoint URL] [--script FILE]
                        [--precision P] [--think auto|on|off] [--greedy] [--seed N] [--sabotage]
                        [--unattended] [--repeat K] [--tasks REGEX ...] [--out DIR]
    holodesk eval compare A.json B.json
    holodesk eval grounding (see holodesk.eval.grounding)

SUITE is ``desktop`` (the shipped suite, ``app/holodesk/eval/suite/``) or a folder / TOML file of tasks.
Exit status: 0 when every run passed (with ``--sabotage``: when none passed), 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from holodesk.core.policy_options import add_policy_options, policy_overrides
from holodesk.errors import HolodeskError
from holodesk.eval.desktop import EvalDesktop
from holodesk.eval.grounding import main as grounding_main
from holodesk.eval.report import compare, load_report, write_report
from holodesk.eval.runner import ORACLE, SuiteRunner, point_process_at
from holodesk.eval.tasks import SUITE_DIR, load_suite
from holodesk.policy.models import series_names
from holodesk.settings import load_settings

if TYPE_CHECKING:
    from holodesk.eval.tasks import Task

SHIPPED = "desktop"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="holodesk eval", description="Measure whether tasks get done: each task "
                                     "of SUITE through the agent loop on a fresh Xvfb desktop with openbox, "
                                     "checked from the programs' own state.",
                                     epilog="Also: holodesk eval compare A.json B.json (two reports side by side); "
                                     "holodesk eval grounding --help (click accuracy). See docs/evaluation.md.")
    parser.add_argument("suite", help=f"'{SHIPPED}' (the shipped suite) or a folder / .toml file of tasks")
    parser.add_argument("--policy", choices=["oracle", "local", "remote", "script"],
                        help="oracle: each task's own solution; default: local with --model, remote with --endpoint, "
                        "script with --script (the same script for every task)")
    # those of holodesk run: --script --model --endpoint --precision --think --greedy --seed
    add_policy_options(parser, models=series_names())
    parser.add_argument("--sabotage", action="store_true", help="with --policy oracle: play each task's sabotaged "
                        "replies, which must all fail (proves the checkers honest)")
    parser.add_argument("--unattended", action="store_true", help="approve every step, high-risk ones included, "
                        "without a person (only ever on the harness's own desktop); recorded in every episode")
    parser.add_argument("--repeat", type=int, default=1, help="runs per task (pass@1 and pass^k); default 1")
    parser.add_argument("--tasks", nargs="+", metavar="REGEX", help="only the tasks whose id matches")
    parser.add_argument("--out", type=Path, help="report folder (default: ./holodesk-eval-<time>)")
    return parser


def main(argv: Sequence[str]) -> int:
    """Entry point of ``holodesk eval``; returns the exit status.

    Raises:
        HolodeskError: bad input, a missing program, no desktop (printed by the main CLI).
    """
    args_list = list(argv)
    if args_list[:1] == ["compare"]:
        return _compare(args_list[1:])
    if args_list[:1] == ["grounding"]:
        return grounding_main(args_list[1:])
    args = _parser().parse_args(args_list)
    if args.repeat < 1:
        raise HolodeskError("--repeat must be 1 or more")
    overrides = policy_overrides(args)
    policy = args.policy or overrides["policy"]
    if policy is None:
        raise HolodeskError("no policy chosen", hint="Pass --policy oracle, --model PATH (local), "
                            "--endpoint URL --model NAME (remote) or --script FILE.")
    if args.sabotage and policy != "oracle":
        raise HolodeskError("--sabotage plays the oracle's sabotaged replies; it needs --policy oracle")
    suite_path = SUITE_DIR if args.suite == SHIPPED else Path(args.suite)
    if args.suite != SHIPPED and not suite_path.exists():
        raise HolodeskError(f"no suite {args.suite!r}", hint=f"Use '{SHIPPED}' or a folder / .toml file of tasks.")
    tasks = load_suite(suite_path, args.tasks)
    out = args.out or Path(f"holodesk-eval-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    return _run(args, policy, overrides, tasks, out.resolve())


def _run(args: argparse.Namespace, policy: str, overrides: dict[str, Any], tasks: list[Task], out: Path) -> int:
    settings = load_settings(**{**overrides, "policy": None if policy == ORACLE else policy}, desktop_backend="mss")
    # SIGTERM ends the run through the finally below, so the desktop's X server and programs are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    desktop = EvalDesktop.start(directory=out / "desktop")
    runner = None
    runtime: dict[str, str | None] = {"device": None, "device_name": None}
    generation: dict[str, Any] | None = None
    attempts = []
    try:
        point_process_at(desktop)
        runner = SuiteRunner(desktop, settings, policy="settings" if policy != ORACLE else ORACLE,
                             sabotage=args.sabotage, unattended=args.unattended, out=out)
        for task in tasks:
            for repeat in range(args.repeat):
                attempt = runner.run_task(task, repeat)
                attempts.append(attempt)
                print(f"{'PASS' if attempt.passed else 'FAIL'} {task.id} (run {repeat + 1}): {attempt.verdict}"
                      f"{'' if attempt.passed else f' [{attempt.failure}: {attempt.reason}]'}", flush=True)
    finally:
        if runner is not None:
            runtime, generation = runner.runtime(), runner.generation()
            runner.close()
        desktop.stop()
    model = settings.model if policy in ("local", "remote") else None  # the model the settings' policy ran
    header = {"suite": args.suite, "policy": policy, "model": model, "endpoint": args.endpoint,
              "sabotage": args.sabotage, "unattended": args.unattended, "display": desktop.display,
              "screen": [desktop.width, desktop.height], "runtime": runtime,
              "settings": {"think": settings.reasoning, "greedy": settings.greedy, "seed": settings.seed,
                           **(generation or {"reasoning": None, "sampling": None})}}
    report = write_report(out, header, tasks, attempts, args.repeat)
    s = report["summary"]
    device = "" if runtime["device"] is None else f"; model on {runtime['device']}" + (
        f" ({runtime['device_name']})" if runtime["device_name"] else "")
    print(f"pass@1 {s['pass@1']:.1%}, pass^{args.repeat} {s['pass^k']:.1%}: {s['passed_runs']}/{s['runs']} runs "
          f"passed over {s['tasks']} tasks in {s['programs']} programs{device}; report: {out / 'report.html'}")
    if args.sabotage:
        return 0 if s["passed_runs"] == 0 else 1
    return 0 if s["passed_runs"] == s["runs"] else 1


def _compare(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="holodesk eval compare", description="two eval reports side by side")
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    names = (_file_name(args.a), _file_name(args.b))
    sys.stdout.write(compare(load_report(args.a), load_report(args.b), names) + "\n")
    return 0


def _file_name(path: Path) -> str:
    """A report's name in the comparison: its folder's name for a ``report.json`` (or a folder), else its file's."""
    return path.parent.name if path.name == "report.json" else path.name
