"""Whose rights a step acts with (`models.review.authorship.reviewers_steps`), and which failures
the user's memory keeps (`worker.memory.run_memory.remembered_failures`), on rows built in
memory."""

from __future__ import annotations

from typing import Any

from models.review.authorship import reviewers_steps
from models.tables import PlanVersion, Step
from worker.memory.run_memory import remembered_failures

Rows = list[tuple[Step, PlanVersion | None]]


class Run:
    """A run's rows as they grow: each `version(...)` adds a plan version and its new steps."""

    def __init__(self) -> None:
        self.rows: Rows = []
        self.versions: dict[int, PlanVersion] = {}

    def version(
        self, created_by: str, *steps: dict[str, Any], replaces: Step | None = None
    ) -> list[Step]:
        number = len(self.versions) + 1
        version = PlanVersion(
            run_id=1,
            version=number,
            created_by=created_by,
            replaces_step_id=replaces.id if replaces else None,
        )
        self.versions[number] = version
        made = []
        for spec in steps:
            step = Step(id=len(self.rows) + 1, run_id=1, plan_version=number, position=0, **spec)
            self.rows.append((step, version))
            made.append(step)
        return made

    def theirs(self, **kwargs: Any) -> set[str]:
        ids = reviewers_steps(self.rows, **kwargs)
        return {f"{s.name}#{s.id}" for s, _ in self.rows if s.id in ids}


def tool(name: str, tool: str = "noop", status: str = "pending", **args: Any) -> dict[str, Any]:
    return {"name": name, "kind": "tool", "tool": tool, "args": args, "status": status}


def test_the_users_plan_and_the_planners_act_for_the_user() -> None:
    run = Run()
    run.version("submitter", tool("a"))
    run.version("planner", tool("b"))
    assert run.theirs() == set()


def test_an_edits_steps_and_an_answer_act_for_the_reviewer() -> None:
    run = Run()
    (failed,) = run.version("submitter", tool("x", "always_fails", status="failed"))
    run.version("reviewer", tool("rate", "always_fails", message="NOTE"), replaces=failed)
    answer = {"name": "rate", "kind": "human", "status": "succeeded", "result": {"ok": True}}
    run.version("reviewer", answer, replaces=failed)
    assert run.theirs() == {"rate#2", "rate#3"}


def test_an_approvals_retry_acts_for_whoever_wrote_the_step_it_retries() -> None:
    run = Run()
    (mine,) = run.version("submitter", tool("x", "flaky", status="failed", fail_times=9))
    (retry,) = run.version(
        "reviewer", tool("x", "flaky", status="failed", fail_times=9), replaces=mine
    )
    assert run.theirs() == set()  # the user's own step, approved: still the user's
    (edited,) = run.version("reviewer", tool("y", "always_fails", status="failed"), replaces=retry)
    run.version("reviewer", tool("y", "always_fails"), replaces=edited)
    assert run.theirs() == {"y#3", "y#4"}  # a retry of the reviewer's step is the reviewer's


def test_an_edit_that_changes_the_retried_step_is_the_reviewers() -> None:
    run = Run()
    (mine,) = run.version("submitter", tool("x", "always_fails", status="failed"))
    run.version("reviewer", tool("x", "always_fails", message="NOTE"), replaces=mine)
    assert run.theirs() == {"x#2"}


def test_the_replanners_steps_for_a_reviewers_step_are_the_reviewers() -> None:
    run = Run()
    (mine,) = run.version("submitter", tool("x", "always_fails", status="failed"))
    (theirs,) = run.version("reviewer", tool("r", "always_fails", status="failed"), replaces=mine)
    run.version("replanner", tool("r"), tool("s"), replaces=theirs)
    (again,) = run.version("submitter", tool("z", "always_fails", status="failed"))
    run.version("replanner", tool("z"), replaces=again)
    assert run.theirs() == {"r#2", "r#3", "s#4"}  # z's replan answers the user's own step


def test_a_step_fed_by_a_reviewers_result_or_pinned_answer_is_the_reviewers() -> None:
    run = Run()
    convert = tool("convert", "echo", status="failed", value="${steps.rate.rate}")
    pinned = tool("note", "echo", status="failed", value="see ${facts.reviewer_answer}")
    own = tool("total", "echo", value="${steps.convert.value} ${facts.currency}")
    (failed, *_) = run.version(
        "submitter", tool("rate", "live_rate", status="failed"), convert, pinned, own
    )
    answer = {"name": "rate", "kind": "human", "status": "succeeded", "result": {"rate": 0.9}}
    run.version("reviewer", answer, replaces=failed)
    # convert refers to the answer's name; total to convert's, found on a later pass
    assert run.theirs() == {"rate#5", "convert#2", "total#4"}
    assert run.theirs(reviewer_facts={"reviewer_answer"}) == {
        "rate#5",
        "convert#2",
        "note#3",
        "total#4",
    }


def test_a_step_whose_version_row_is_missing_acts_for_a_reviewer() -> None:
    step = Step(id=1, run_id=1, plan_version=7, position=0, name="a", kind="tool", tool="noop")
    assert reviewers_steps([(step, None)]) == {1}


def test_the_users_memory_keeps_only_the_users_failures_and_credits_fixes_to_the_reviewer() -> None:
    run = Run()
    (live,) = run.version("submitter", tool("rate", "live_rate", status="failed"))
    (theirs,) = run.version(
        "reviewer", tool("rate", "cached_rate", status="succeeded"), replaces=live
    )
    (note,) = run.version("reviewer", tool("note", "always_fails", status="failed"))
    steps = [s for s, _ in run.rows]
    for s, error in ((live, "timed out"), (note, "NOTE FOR FUTURE PLANS")):
        s.error = error
    kept = remembered_failures(steps, reviewers_steps(run.rows))
    assert kept == [
        {"step": "rate", "tool": "live_rate", "error": "timed out", "fixed_by": "reviewer"}
    ]
    assert theirs.id and remembered_failures(steps, set())[0]["fixed_by"] == "cached_rate"
