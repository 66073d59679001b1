"""The evaluation report: JSON (``report.json``) and a static HTML page (``report.html``), and the side-by-side
comparison of two reports.

JSON shape::

    {"suite": str, "policy": str, "model": str | null, "endpoint": str | null, "sabotage": bool,
     "unattended": bool, "repeat": k, "display": ":N", "screen": [w, h],
     "runtime": {"device": "cuda:0" | "cpu" | null, "device_name": GPU name | null} (where a local model ran:
                 holodesk.eval.runner.policy_runtime; null for the oracle, a script, a remote endpoint),
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
    return f"{action.get('kind')}: {fields}"


def _element_words(elements: dict[str, Any] | None) -> str:
    """The autopilot's lookup of a step in words: ``at the point: push button ‘OK’ [503, 352, 85, 34] (zenity);
    focused: text ‘’ ...; 3.1 ms``; "" when the lookup did not run."""
    if not isinstance(elements, dict):
        return ""

    def one(element: Any) -> str:
        if not isinstance(element, dict):
            return "nothing known"
        return (f"{element.get('role')} \u2018{element.get('name')}\u2019 {element.get('bounds')}"
                f" ({element.get('application')})")

    parts = [f"at the point: {one(e)}" for e in elements.get("at_points") or []]
    if "focused" in elements:
        parts.append(f"focused: {one(elements.get('focused'))}")
    parts.append(f"{elements.get('lookup_ms')} ms")
    return "; ".join(parts)


def _device_words(report: dict[str, Any]) -> str:
    """``cuda:0 (NVIDIA H100 80GB HBM3)``, ``cpu``, or ``n/a`` (no model in the harness's process)."""
    runtime = report.get("runtime") or {}
    device = runtime.get("device")
    if not device:
        return "n/a"
    return f"{device} ({runtime['device_name']})" if runtime.get("device_name") else str(device)


def render_html(report: dict[str, Any], out: Path) -> str:
    """The static HTML page of ``report``; frames are linked relative to ``out`` (the report's folder)."""
    s = report["summary"]
    tokens = "n/a" if s["mean_reply_tokens"] is None else f"{s['mean_reply_tokens']:.1f}"
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
        f"<h1>holodesk eval: {esc(str(report.get('suite')))}</h1>",
        f"<p>policy <b>{esc(str(report.get('policy')))}</b>"
        f"{' (sabotaged)' if report.get('sabotage') else ''}; model {esc(str(report.get('model')))}; "
        f"{'unattended' if report.get('unattended') else 'autopilot rules, nobody present'}; "
        f"screen {report.get('screen')}; repeat k={s['repeat']}; model on {esc(_device_words(report))}</p>",
        f"<p><b>pass@1 {s['pass@1']:.1%}</b>, pass^{s['repeat']} {s['pass^k']:.1%} over {s['tasks']} tasks in "
        f"{s['programs']} programs; {s['passed_runs']}/{s['runs']} runs passed; mean steps {s['mean_steps']:.1f}; "
        f"mean step {s['mean_step_s']:.2f} s; mean reply tokens {tokens}; failures "
        f"{esc(json.dumps(s['failures']))}</p>",
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
                     f"<td>{esc(runs[-1]['verdict'] if runs else '')}</td>"
                     f"<td>{esc(', '.join(str(a['failure']) for a in runs if a['failure']))}</td></tr>")
    parts.append("</table>")
    for attempt in report["attempts"]:
        css = "pass" if attempt["passed"] else "fail"
        parts.append(f"<h3 id='{esc(attempt['task'])}' class='{css}'>{esc(attempt['task'])} "
                     f"(run {attempt['repeat'] + 1}): {'passed' if attempt['passed'] else 'failed'}</h3>"
                     f"<p>checker: {esc(attempt['verdict'])}<br>end: {esc(attempt['status'])} — "
                     f"{esc(attempt['reason'])}; {attempt['steps']} steps in {attempt['seconds']} s</p>"
                     f"<details{'' if attempt['passed'] else ' open'}>"
                     "<summary>steps</summary>")
        episode = attempt.get("episode")
        for step in attempt["step_records"]:
            image = ""
            if episode and step.get("frame"):
                src = os.path.relpath(Path(episode) / step["frame"], out)
                image = f"<span class='frame'><img src='{esc(src)}'>{_marker(step.get('action'))}</span>"
            parts.append(f"<div class='step'>{image}<div class='text'><b>step {step['step']}</b><br>"
                         f"thought: {esc(str(step.get('thought')))}<br>action: "
                         f"{esc(_action_words(step.get('action')))}<br>decision: {esc(str(step.get('decision')))} "
                         f"by {esc(str(step.get('decided_by')))}<br>result: {esc(str(step.get('result')))}"
                         f"{'<br>error: ' + esc(str(step['error'])) if step.get('error') else ''}"
                         f"{'<br>element: ' + esc(words) if (words := _element_words(step.get('elements'))) else ''}"
                         "<br>"
                         f"{step.get('ms')} ms, reply tokens {step.get('reply_tokens')}</div></div>")
        parts.append("</details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def compare(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Two reports side by side as text: the summary figures, then each task's passes in A and B."""
    sa, sb = a["summary"], b["summary"]
    name_a = f"A: {a.get('policy')} {a.get('model') or ''}".strip()
    name_b = f"B: {b.get('policy')} {b.get('model') or ''}".strip()
    lines = [f"{'':28} {name_a[:24]:>24} {name_b[:24]:>24}"]
    for key in ("tasks", "pass@1", "pass^k", "mean_steps", "mean_step_s", "mean_reply_tokens"):
        va, vb = sa.get(key), sb.get(key)
        fa = f"{va:.3f}" if isinstance(va, float) else str(va)
        fb = f"{vb:.3f}" if isinstance(vb, float) else str(vb)
        lines.append(f"{key:28} {fa:>24} {fb:>24}")
    lines.append(f"{'model on':28} {_device_words(a)[:24]:>24} {_device_words(b)[:24]:>24}")
    tasks_a = {t["id"]: t for t in a["tasks"]}
    tasks_b = {t["id"]: t for t in b["tasks"]}
    lines.append("")
    for task_id in sorted(tasks_a.keys() | tasks_b.keys()):
        ta, tb = tasks_a.get(task_id), tasks_b.get(task_id)
        fa = f"{ta['passes']}/{ta['runs']}" if ta else "-"
        fb = f"{tb['passes']}/{tb['runs']}" if tb else "-"
        mark = "" if fa == fb else "  <- differs"
        lines.append(f"{task_id[:28]:28} {fa:>24} {fb:>24}{mark}")
    return "\n".join(lines)
