"""A plan reused from an earlier run of the same request is validated as a planner's
(`worker.phases.planner._reusable`): one naming a tool no longer registered is not reused, and
the planner is asked instead."""

from __future__ import annotations

from models.engine.repeats import Reusable
from worker.phases.planner import _reusable


def _plan(tool: str) -> Reusable:
    step = {"name": "a", "kind": "tool", "tool": tool, "args": {}}
    return Reusable(7, {"steps": [step], "success_criteria": ["a ran"]}, "planner")


def test_a_plan_that_still_validates_is_reused_with_its_criteria() -> None:
    reused = _reusable(_plan("noop"), set())
    assert reused is not None
    assert [s.tool for s in reused.steps] == ["noop"] and reused.success_criteria == ["a ran"]


def test_a_plan_naming_a_tool_removed_since_is_not() -> None:
    assert _reusable(_plan("a_tool_removed_since"), set()) is None
