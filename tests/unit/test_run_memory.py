"""What a run's memory is made of (`worker.memory.run_memory.run_memory`), from a run as the memory
task reads it (`models.engine.ended_runs.EndedRun`), built in memory."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from models.engine.ended_runs import EndedRun, StepRow, VersionRow
from models.tables import Escalation
from worker.memory.extraction import NOTHING_TO_LEARN
from worker.memory.run_memory import run_memory

SUBMITTER = VersionRow("submitter", None)


def step(id: int, name: str, status: str = "succeeded", **fields: Any) -> StepRow:
    row: dict[str, Any] = {
        "id": id,
        "plan_version": 1,
        "name": name,
        "instruction": "",
        "kind": "tool",
        "tool": "noop",
        "args": {},
        "tools": [],
        "status": status,
        "error": None,
    }
    return StepRow(**(row | fields))


def ended(steps: list[tuple[StepRow, VersionRow | None]], **fields: Any) -> EndedRun:
    run: dict[str, Any] = {
        "id": 7,
        "user_id": "ana",
        "goal": "File my report",
        "outcome": "succeeded",
        "created_at": datetime(2026, 1, 1, tzinfo=UTC),
        "final_answer": "done",
        "memory_ended": False,
        "erased_at": None,
        "steps": steps,
        "current": [s for s, _ in steps],
        "user_facts": {},
        "reviewer_facts": {},
        "answers": [],
    }
    return EndedRun(**(run | fields))


def test_a_run_of_tool_steps_with_nothing_to_learn_is_its_episode_alone() -> None:
    a, b = step(1, "a"), step(2, "b")
    found = run_memory(ended([(a, SUBMITTER), (b, SUBMITTER)], current=[b, a]))
    assert found.plan == [
        {"name": "b", "tool": "noop", "status": "succeeded"},
        {"name": "a", "tool": "noop", "status": "succeeded"},
    ]  # the current version's order
    assert found.summary == "Goal: File my report\nOutcome: succeeded"
    assert found.skipped == NOTHING_TO_LEARN and not found.writes_facts


def test_a_fixed_failure_is_in_the_summary_and_asks_for_facts() -> None:
    failed = step(1, "rate", "failed", tool="live_rate", error="timed out")
    fixed = step(2, "rate", tool="cached_rate")
    found = run_memory(ended([(failed, SUBMITTER), (fixed, VersionRow("replanner", 1))]))
    assert found.failures == [
        {"step": "rate", "tool": "live_rate", "error": "timed out", "fixed_by": "cached_rate"}
    ]
    assert found.summary.endswith("live_rate failed (timed out); fixed by cached_rate")
    assert found.skipped is None and found.writes_facts and found.withheld == 0


def test_a_reviewers_failed_step_is_withheld_and_a_missing_version_acts_for_a_reviewer() -> None:
    theirs = step(1, "note", "failed", error="NOTE FOR FUTURE PLANS")
    found = run_memory(ended([(theirs, None)]))
    assert found.failures == [] and found.withheld == 1
    assert "NOTE" not in found.summary and found.skipped == NOTHING_TO_LEARN


def test_pinned_facts_and_answers_are_memory_to_write() -> None:
    answer = Escalation(run_id=7, plan_version=1, reason="x", decided_by="rita", answer={"a": 1})
    stated = run_memory(ended([], user_facts={"currency": "EUR"}))
    assert stated.stated == {"currency": "EUR"} and stated.skipped is None
    answered = run_memory(ended([], reviewer_facts={"reviewer_answer": "1"}, answers=[answer]))
    assert answered.skipped == NOTHING_TO_LEARN and answered.writes_facts
    assert [a.source for a in answered.answers] == ["reviewer:rita"]
