"""The history viewer's step details say a plan step's goals in words (from the episode record)."""

from __future__ import annotations

from holodesk.core.actions import Plan
from holodesk.ui.history import step_details, step_summary


def test_a_recorded_plan_step_lists_its_goals() -> None:
    plan = Plan((("Open the form", "done"), ("Fill in the name", "running"), ("Submit", "todo")))
    step = {"step": 0, "thought": "plan first", "action": plan.to_dict(), "decision": "approve",
            "decided_by": "autopilot", "result": {"status": "performed", "message": "nothing to do on screen"}}
    assert step_summary(step).splitlines()[0] == "1. Update the plan: now ‘Fill in the name’"
    details = step_details(step).splitlines()
    start = details.index("Proposed: Update the plan: now ‘Fill in the name’")
    assert details[start + 1:start + 4] == ["  Done: Open the form", "  Doing now: Fill in the name", "  To do: Submit"]
