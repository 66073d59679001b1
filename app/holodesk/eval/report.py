"""The evaluation report: JSON (``report.json``) and a static HTML page (``report.html``), and the side-by-side
comparison of two reports.

JSON shape::

    {"suite": str, "policy": str, "model": str | null, "endpoint": str | null, "sabotage": bool,
     "unattended": bool, "repeat": k, "display": ":N", "screen": [w, h],
     "runtime": {"device": "cuda:0" | "cpu" | null, "device_name": GPU name | null} (where a local model ran:
                 holodesk.eval.runner.policy_runtime; null for the oracle, a script, a remote endpoint),
     "settings": {"think": "auto" | "on" | "off", "greedy": bool, "seed": int | null (as asked: the options and
                  settings), "reasoning": "on" | "off" | null, "sampling": {"greedy", "temperature", "top_p",
                  "seed"} | null (as the policy used them: holodesk.eval.runner.policy_generation; null for the
                  oracle and a script, which generate nothing)},
     "summary": {"tasks": n, "programs": m, "pass@1": 0..1, "pass^k": 0..1, "mean_steps": float,
                 "mean_step_s": float, "mean_reply_tokens": float | null, "failures": {class: count}},
     "tasks": [{"id", "program", "skills", "passes": int, "runs": k, "pass@1", "pass^k"}],
     "attempts": [Attempt as a dict (see holodesk.eval.runner.Attempt)]}

pass@1 of a task is the fraction of its k runs that passed; pass^k is 1 when all k passed (0 else); the
summary gives their means over the tasks.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from holodesk.errors import HolodeskError
from holodesk.eval.runner import Attempt
from holodesk.eval.tasks import Task


def summarise(tasks: list[Task], attempts: list[Attempt], repeat: int) -> dict[str, Any]:
    """The ``summary`` and ``tasks`` parts of the report."""
    rows: list[dict[str, Any]] = []
    for task in tasks:
        runs = [a for a in attempts if a.task == task.id]
        passes = sum(a.passed for a in runs)
        rows.append({"id": task.id, "program": task.program, "skills": list(task.skills), "passes": passes,
                     "runs": len(runs), "pass@1": passes / len(runs) if runs else 0.0,
                     "pass^k": 1.0 if runs and passes == len(runs) else 0.0})
    steps = [s for a in attempts for s in a.step_records]
    tokens = [s["reply_tokens"] for s in steps if isinstance(s.get("reply_tokens"), int)]
    summary = {
        "tasks": len(tasks), "programs": len({t.program for t in tasks}), "repeat": repeat,
        "pass@1": sum(r["pass@1"] for r in rows) / len(rows) if rows else 0.0,
        "pass^k": sum(r["pass^k"] for r in rows) / len(rows) if rows else 0.0,
        "passed_runs": sum(a.passed for a in attempts), "runs": len(attempts),
        "mean_steps": sum(a.steps for a in attempts) / len(attempts) if attempts else 0.0,
        "mean_step_s": (sum(s["ms"] for s in steps) / len(steps) / 1000.0) if steps else 0.0,
        "mean_reply_tokens": sum(tokens) / len(tokens) if tokens else None,
        "failures": dict(Counter(a.failure for a in attempts if a.failure)),
    }
    return {"summary": summary, "tasks": rows}


def write_report(out: Path, header: dict[str, Any], tasks: list[Task], attempts: list[Attempt],
                 repeat: int) -> dict[str, Any]:
    """Write ``out/report.json`` and ``out/report.html``; return the report."""
    report = {**header, **summarise(tasks, attempts, repeat), "attempts": [dataclasses.asdict(a) for a in attempts]}
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    (out / "report.html").write_text(render_html(report, out), encoding="utf-8")
    return report


def load_report(path: Path) -> dict[str, Any]:
    """A report written by :func:`write_report` (a report.json, or its folder).

    Raises:
        HolodeskError: not readable, or not a report.
    """
    file = path / "report.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HolodeskError(f"cannot read the report {file}: {exc}",
                            hint="Give a report.json written by holodesk eval (or its folder).") from exc
    if not isinstance(data, dict) or "summary" not in data or "tasks" not in data:
        raise HolodeskError(f"{file} is not a holodesk eval report (no summary/tasks)")
    return data


NOT_RECORDED = "not recorded"
DASH = "\u2014"


def _words(value: Any, missing: str = DASH) -> str:
    """``value`` as a person reads it: ``missing`` (default "—") for None, else its text."""
    return missing if value is None else str(value)


SCRIPTED = {"oracle": "the tasks' oracle replies", "script": "a script of replies"}
"""The policies that generate nothing (``report["policy"]``), with what replies in their place."""


def _not_generated(report: dict[str, Any]) -> str:
    """What a person reads where the policy recorded nothing about its generation: why, by the policy."""
    scripted = SCRIPTED.get(str(report.get("policy")))
    return f"{NOT_RECORDED} ({scripted or 'the policy did not report it'})"


def _model_words(report: dict[str, Any]) -> str:
    """The model of the run, or why there is none."""
    if report.get("model"):
        return str(report["model"])
    scripted = SCRIPTED.get(str(report.get("policy")))
    return DASH if scripted is None else f"none ({scripted})"


def _sampling_words(sampling: dict[str, Any] | None, missing: str) -> str:
    """``greedy`` or ``temperature 0.8, top_p 0.95``, then ``seed N``; ``missing`` when not recorded."""
    if not isinstance(sampling, dict):
        return missing
    how = "greedy" if sampling.get("greedy") else (f"temperature {_words(sampling.get('temperature'))}, "
                                                   f"top_p {_words(sampling.get('top_p'))}")
    return f"{how}, seed {_words(sampling.get('seed'))}"


def generation_words(report: dict[str, Any]) -> tuple[str, str]:
    """(reasoning, sampling) of the run in words, as the policy used them (``settings``); "not recorded (...)"
    where the policy generates nothing or the report predates these settings."""
    settings = report.get("settings") or {}
    missing = _not_generated(report)
    reasoning = settings.get("reasoning")
    think = settings.get("think")
    reasoning_words = missing if reasoning is None else (
        f"{reasoning} (think: {think})" if think else str(reasoning))
    return reasoning_words, _sampling_words(settings.get("sampling"), missing)


def run_label(report: dict[str, Any]) -> str:
    """A run's name in words: its policy, ``sabotaged`` where it was, and its model: ``oracle sabotaged``,
    ``local Hcompany/Holotron-12B``."""
    parts = [str(report.get("policy") or DASH)]
    if report.get("sabotage"):
        parts.append("sabotaged")
    if report.get("model"):
        parts.append(str(report["model"]))
    return " ".join(parts)


def _marker(action: dict[str, Any] | None) -> str:
    """Absolutely placed markers (percent of the frame) at the action's points."""
    if not isinstance(action, dict):
        return ""
    marks = []
    for key in ("point", "start", "end"):
        point = action.get(key)
        if isinstance(point, dict) and "x" in point and "y" in point:
            marks.append(f'<span class="mark" style="left:{point["x"] / 10:.1f}%;top:{point["y"] / 10:.1f}%"'
                         f' title="{key}"></span>')
    return "".join(marks)


def _action_words(action: dict[str, Any] | None) -> str:
    if not isinstance(action, dict):
        return "(no action)"
    fields = ", ".join(f"{k}={v}" for k, v in action.items() if k != "kind" and v is not None)
    return f"{_words(action.get('kind'), 'unknown kind')}: {fields or 'no fields'}"


def _element_words(elements: dict[str, Any] | None) -> str:
    """The autopilot's lookup of a step in words: ``at the point: push button ‘OK’ [503, 352, 85, 34] (zenity);
    focused: text ‘’ ...; 3.1 ms``; "" when the lookup did not run."""
    if not isinstance(elements, dict):
        return ""

    def one(element: Any) -> str:
        if not isinstance(element, dict):
            return "nothing known"
        application = _words(element.get("application"), "no application")
        return (f"{_words(element.get('role'), 'no role')} \u2018{_words(element.get('name'), '')}\u2019 "
                f"{_words(element.get('bounds'), 'no bounds')} ({application})")

    parts = [f"at the point: {one(e)}" for e in elements.get("at_points") or []]
    if "focused" in elements:
        parts.append(f"focused: {one(elements.get('focused'))}")
    parts.append(f"{_words(elements.get('lookup_ms'))} ms")
    return "; ".join(parts)


def _device_words(report: dict[str, Any]) -> str:
    """``cuda:0 (NVIDIA H100 80GB HBM3)``, ``cpu``, or ``n/a`` (no model in the harness's process)."""
    runtime = report.get("runtime") or {}
    device = runtime.get("device")
    if not device:
        return "n/a"
    return f"{device} ({runtime['device_name']})" if runtime.get("device_name") else str(device)


def _step_html(report: dict[str, Any], step: dict[str, Any], image: str) -> str:
    """One step of an attempt: its frame with the marker, the thought, the model's reasoning, the action, the
    decision and its result, every value in words (never a bare None)."""
    esc = html.escape
    missing = _not_generated(report)
    decision = _words(step.get("decision"), "none recorded")
    if step.get("decided_by"):
        decision += f" by {step['decided_by']}"
    reasoning_words = step.get("reasoning_text") or (
        missing if str(report.get("policy")) in SCRIPTED else "none recorded (no thought before acting)")
    seed = step.get("step_seed")
    number = step.get("step")  # the session's record counts from 0; people (and the CLI) count from 1
    lines = [f"<b>step {number + 1 if isinstance(number, int) else _words(number)}</b>",
             f"thought: {esc(_words(step.get('thought')))}",
             f"reasoning: {esc(reasoning_words)}",
             f"action: {esc(_action_words(step.get('action')))}",
             f"decision: {esc(decision)}",
             f"result: {esc(_words(step.get('result'), 'nothing performed'))}"]
    if step.get("error"):
        lines.append(f"error: {esc(str(step['error']))}")
    if words := _element_words(step.get("elements")):
        lines.append(f"element: {esc(words)}")
    tokens = step.get("reply_tokens")
    lines.append(f"{_words(step.get('ms'))} ms, reply tokens {esc(_words(tokens, missing))}, step seed "
                 f"{esc(_words(seed, missing))}")
    return f"<div class='step'>{image}<div class='text'>{'<br>'.join(lines)}</div></div>"


def render_html(report: dict[str, Any], out: Path) -> str:
    """The static HTML page of ``report``; frames are linked relative to ``out`` (the report's folder). Every
    value is shown in words: a value not recorded says so (and why), never Python's None."""
    s = report["summary"]
    missing = _not_generated(report)
    tokens = missing if s["mean_reply_tokens"] is None else f"{s['mean_reply_tokens']:.1f}"
    reasoning, sampling = generation_words(report)
    screen = report.get("screen")
    screen_words = f"{screen[0]}x{screen[1]}" if isinstance(screen, list) and len(screen) == 2 else DASH
    failures = ", ".join(f"{k}: {v}" for k, v in (s.get("failures") or {}).items()) or "none"
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>holodesk eval</title><style>"
        "body{font-family:sans-serif;margin:16px;color:#222}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}"
        ".pass{background:#d8f5d0}.fail{background:#f8d7d4}.frame{position:relative;display:inline-block}"
        ".frame img{width:480px;border:1px solid #999}.mark{position:absolute;width:14px;height:14px;"
        "margin:-9px 0 0 -9px;border:3px solid #e00;border-radius:50%}"
        ".step{display:flex;gap:12px;margin:6px 0}.step div.text{font-size:13px;max-width:560px}"
        "details{margin:4px 0}</style></head><body>",
        f"<h1>holodesk eval: {esc(_words(report.get('suite')))}</h1>",
        f"<p>policy <b>{esc(_words(report.get('policy')))}</b>"
        f"{' (sabotaged)' if report.get('sabotage') else ''}; model {esc(_model_words(report))}; "
        f"{'unattended' if report.get('unattended') else 'autopilot rules, nobody present'}; "
        f"screen {screen_words}; repeat k={s['repeat']}; model on {esc(_device_words(report))}</p>",
        f"<p>think before acting: {esc(reasoning)}; sampling: {esc(sampling)}</p>",
        f"<p><b>pass@1 {s['pass@1']:.1%}</b>, pass^{s['repeat']} {s['pass^k']:.1%} over {s['tasks']} tasks in "
        f"{s['programs']} programs; {s['passed_runs']}/{s['runs']} runs passed; mean steps {s['mean_steps']:.1f}; "
        f"mean step {s['mean_step_s']:.2f} s; mean reply tokens {esc(tokens)}; failures {esc(failures)}</p>",
        "<table><tr><th>task</th><th>program</th><th>runs passed</th><th>verdict</th><th>failure</th></tr>",
    ]
    by_task: dict[str, list[dict[str, Any]]] = {}
    for attempt in report["attempts"]:
        by_task.setdefault(attempt["task"], []).append(attempt)
    for row in report["tasks"]:
        runs = by_task.get(row["id"], [])
        css = "pass" if row["pass^k"] else "fail"
        parts.append(f"<tr class='{css}'><td><a href='#{esc(row['id'])}'>{esc(row['id'])}</a></td>"
                     f"<td>{esc(row['program'])}</td><td>{row['passes']}/{row['runs']}</td>"
                     f"<td>{esc(runs[-1]['verdict'] if runs else 'not run')}</td>"
                     f"<td>{esc(', '.join(str(a['failure']) for a in runs if a['failure']) or DASH)}</td></tr>")
    parts.append("</table>")
    for attempt in report["attempts"]:
        css = "pass" if attempt["passed"] else "fail"
        parts.append(f"<h3 id='{esc(attempt['task'])}' class='{css}'>{esc(attempt['task'])} "
                     f"(run {attempt['repeat'] + 1}): {'passed' if attempt['passed'] else 'failed'}</h3>"
                     f"<p>checker: {esc(_words(attempt['verdict']))}<br>end: {esc(_words(attempt['status']))} — "
                     f"{esc(_words(attempt['reason']))}"
                     f"{'; answer: ' + esc(attempt['answer']) if attempt.get('answer') else ''}; "
                     f"{attempt['steps']} steps in {attempt['seconds']} s</p>"
                     f"<details{'' if attempt['passed'] else ' open'}>"
                     "<summary>steps</summary>")
        episode = attempt.get("episode")
        if not attempt["step_records"]:
            parts.append("<p>no step recorded</p>")
        for step in attempt["step_records"]:
            image = ""
            if episode and step.get("frame"):
                src = os.path.relpath(Path(episode) / step["frame"], out)
                image = f"<span class='frame'><img src='{esc(src)}'>{_marker(step.get('action'))}</span>"
            parts.append(_step_html(report, step, image))
        parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _figure(value: Any) -> str:
    """A summary figure of the comparison: 3 decimals for a float, NOT_RECORDED for None."""
    if value is None:
        return NOT_RECORDED
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def compare(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str] = ("", "")) -> str:
    """Two reports side by side as text: the runs' names, the summary figures, how each policy generated
    (reasoning, sampling, seed), then each task's passes in A and B. ``names`` (the reports' file names) are
    added to the columns' labels when the policy, sabotage and model alone do not tell the runs apart."""
    sa, sb = a["summary"], b["summary"]
    label_a, label_b = run_label(a), run_label(b)
    if label_a == label_b and names[0] != names[1]:
        label_a, label_b = f"{label_a} ({names[0]})", f"{label_b} ({names[1]})"
    rows = [(key, _figure(sa.get(key)), _figure(sb.get(key)))
            for key in ("tasks", "pass@1", "pass^k", "mean_steps", "mean_step_s", "mean_reply_tokens")]
    rows.append(("model on", _device_words(a), _device_words(b)))
    (reason_a, sample_a), (reason_b, sample_b) = generation_words(a), generation_words(b)
    rows += [("think before acting", reason_a, reason_b), ("sampling", sample_a, sample_b)]
    tasks_a = {t["id"]: t for t in a["tasks"]}
    tasks_b = {t["id"]: t for t in b["tasks"]}
    task_rows = []
    for task_id in sorted(tasks_a.keys() | tasks_b.keys()):
        ta, tb = tasks_a.get(task_id), tasks_b.get(task_id)
        task_rows.append((task_id[:28], f"{ta['passes']}/{ta['runs']}" if ta else "-",
                          f"{tb['passes']}/{tb['runs']}" if tb else "-"))
    head = ("", f"A: {label_a}", f"B: {label_b}")
    width = max(24, *(len(cell) + 2 for row in (head, *rows, *task_rows) for cell in row[1:]))
    lines = [f"{'':28} {head[1]:>{width}} {head[2]:>{width}}"]
    lines += [f"{key:28} {va:>{width}} {vb:>{width}}" for key, va, vb in rows]
    lines.append("")
    lines += [f"{key:28} {va:>{width}} {vb:>{width}}{'' if va == vb else '  <- differs'}" for key, va, vb in task_rows]
    return "\n".join(lines)
