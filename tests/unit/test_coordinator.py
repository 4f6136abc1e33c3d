"""The coordinator's decisions, table-driven over run states and plan graphs; no services."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.engine.coordinator import Decision, GoalVerdict, RunView, StepView, decide, decide_unmet
from models.states import STEP_STATUSES

Step = tuple[int, str] | tuple[int, str, tuple[int, ...]]


def view(
    status: str = "running",
    *steps: Step,
    used: int = 0,
    limit: int = 1,
    handled: frozenset[int] = frozenset(),
    **kw: Any,
) -> RunView:
    """A run whose steps are `(id, status)` (a chain: each waits for the one before it) or
    `(id, status, after)`."""
    views = []
    for i, step in enumerate(steps):
        after = step[2] if len(step) == 3 else ((steps[i - 1][0],) if i else ())
        views.append(StepView(step[0], f"s{step[0]}", step[1], after))
    return RunView(
        id=1,
        status=status,
        replans_used=used,
        replans_limit=limit,
        steps=tuple(views),
        handled_failures=handled,
        **kw,
    )


CASES = [
    ("queued run is planned", view("queued"), "plan", None),
    ("planning in flight", view("planning"), "wait", None),
    ("replanning in flight", view("replanning"), "wait", None),
    ("synthesis in flight", view("synthesizing"), "wait", None),
    ("waiting for a reviewer", view("waiting_review", (1, "failed")), "wait", None),
    ("succeeded is final", view("succeeded", (1, "succeeded")), "wait", None),
    ("failed is final", view("failed"), "wait", None),
    ("cancelled is final", view("cancelled", (1, "pending"), (2, "pending", ())), "wait", None),
    ("first pending step", view("running", (1, "pending"), (2, "pending")), "enqueue_steps", 1),
    ("next after done", view("running", (1, "succeeded"), (2, "pending")), "enqueue_steps", 2),
    ("step queued", view("running", (1, "succeeded"), (2, "queued")), "wait", 2),
    ("step ready, waiting for a slot", view("running", (1, "ready"), (2, "pending")), "wait", 1),
    ("step running", view("running", (1, "running"), (2, "pending")), "wait", 1),
    ("failure with budget", view("running", (1, "failed"), (2, "pending")), "replan", 1),
    ("failure, budget spent", view("running", (1, "failed"), used=1, limit=1), "escalate", 1),
    ("failure, zero budget", view("running", (1, "failed"), limit=0), "escalate", 1),
    (
        "handled failure: its replacement's dependents go on",
        view(
            "running",
            (1, "failed", ()),
            (3, "succeeded", ()),
            (2, "pending", (3,)),
            handled=frozenset({1}),
        ),
        "enqueue_steps",
        2,
    ),
    (
        "join waits for both branches",
        view("running", (1, "succeeded", ()), (2, "running", ()), (3, "pending", (1, 2))),
        "wait",
        2,
    ),
    (
        "join starts once both succeeded",
        view("running", (1, "succeeded", ()), (2, "succeeded", ()), (3, "pending", (1, 2))),
        "enqueue_steps",
        3,
    ),
    (
        "a failure in one branch while another runs is replanned at once",
        view("running", (1, "running", ()), (2, "failed", ()), (3, "pending", (1, 2))),
        "replan",
        2,
    ),
    (
        "a failure in one branch, budget spent, escalates while the other runs",
        view("running", (1, "running", ()), (2, "failed", ()), (3, "pending", (1, 2)), limit=0),
        "escalate",
        2,
    ),
    (
        "a step waiting for a step with no result is blocked",
        view("running", (1, "cancelled", ()), (2, "pending", (1,))),
        "escalate",
        2,
    ),
    ("all done", view("running", (1, "succeeded"), (2, "succeeded")), "synthesize", None),
    ("empty plan", view("running"), "synthesize", None),
    ("wall time spent", view("running", (1, "pending"), deadline_passed=True), "escalate", None),
    ("tokens spent", view("running", (1, "pending"), tokens_spent=True), "escalate", None),
    ("planning past its deadline", view("planning", deadline_passed=True), "escalate", None),
    ("synthesis past its deadline", view("synthesizing", deadline_passed=True), "escalate", None),
    ("review waits past its deadline", view("waiting_review", deadline_passed=True), "wait", None),
]


@pytest.mark.parametrize(("case", "run", "action", "step_id"), CASES, ids=[c[0] for c in CASES])
def test_decision(case: str, run: RunView, action: str, step_id: int | None) -> None:
    decision = decide(run)
    assert (decision.action, decision.step_id) == (action, step_id), case


def test_fan_out_enqueues_every_step_that_can_start() -> None:
    run = view(
        "running",
        (1, "succeeded", ()),
        (2, "pending", (1,)),
        (3, "pending", (1,)),
        (4, "pending", ()),
        (5, "pending", (2, 3)),
    )
    decision = decide(run)
    assert (decision.action, decision.step_ids) == ("enqueue_steps", (2, 3, 4))


def test_blocked_and_escalation_say_why() -> None:
    decision = decide(view("running", (1, "failed"), used=2, limit=2))
    assert decision == Decision(
        "escalate", "replan_budget_spent", 1, {"step": "s1", "replans": "2/2"}
    )
    assert decide(view("running", deadline_passed=True)).reason == "wall_time_budget_spent"
    blocked = decide(view("running", (1, "cancelled", ()), (2, "pending", (1,))))
    assert (blocked.reason, blocked.detail) == ("plan_blocked", {"step": "s2"})


def test_a_step_stopped_before_a_gated_call_escalates_before_a_failure_is_replanned() -> None:
    run = view("running", (1, "failed", ()), (2, "waiting_approval", ()), (3, "running", ()))
    decision = decide(run)
    assert (decision.action, decision.reason, decision.step_id) == (
        "escalate",
        "approval_required",
        2,
    )
    assert decision.detail == {"step": "s2"}
    assert decide(view("waiting_review", (2, "waiting_approval", ()))).action == "wait"


STATUSES = st.sampled_from(STEP_STATUSES)


@st.composite
def graphs(draw: st.DrawFn) -> list[tuple[int, str, tuple[int, ...]]]:
    """Up to 8 steps, each waiting for a subset of the steps before it (a DAG)."""
    statuses = draw(st.lists(STATUSES, max_size=8))
    return [
        (i, status, tuple(draw(st.sets(st.sampled_from(range(i)))) if i else ()))
        for i, status in enumerate(statuses)
    ]


@given(
    steps=graphs(),
    used=st.integers(0, 3),
    limit=st.integers(0, 3),
    handled_mask=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_decisions_are_deterministic_and_follow_the_graph(
    steps: list[tuple[int, str, tuple[int, ...]]], used: int, limit: int, handled_mask: list[bool]
) -> None:
    handled = frozenset(i for i, h in enumerate(handled_mask) if h)
    run = view("running", *steps, used=used, limit=limit, handled=handled)
    twin = view("running", *steps, used=used, limit=limit, handled=frozenset(sorted(handled)))
    decision = decide(run)
    assert decision == decide(twin)
    status = {i: s for i, s, _ in steps}
    unhandled = [i for i, s, _ in steps if s == "failed" and i not in handled]
    stopped = [i for i, s, _ in steps if s == "waiting_approval"]
    if stopped:  # a call waiting for a person goes first, one at a time (DESIGN.md, inv. 14)
        assert (decision.action, decision.reason) == ("escalate", "approval_required")
        assert decision.step_id == stopped[0]
    elif unhandled:
        assert decision.action in ("replan", "escalate")
        assert decision.step_id == unhandled[0]
        assert (decision.action == "replan") == (used < limit)
    elif decision.action == "enqueue_steps":
        expected = [
            i
            for i, s, after in steps
            if s == "pending" and all(status[d] == "succeeded" for d in after)
        ]
        assert list(decision.step_ids) == expected
        assert decision.step_id == expected[0]
    elif decision.action == "synthesize":
        assert all(s in ("succeeded", "cancelled", "failed") for s in status.values())


UNMET = GoalVerdict(False, "the total is not 473.43", ("no deliverable holds '473.43'",), 7)


@pytest.mark.parametrize(
    ("name", "run", "verdict", "action", "reason"),
    [
        ("a replan is left", view("synthesizing", used=0, limit=1), UNMET, "replan", "goal not"),
        ("budget spent", view("synthesizing", used=1, limit=1), UNMET, "escalate", "goal_not_met"),
        ("no budget at all", view("synthesizing", limit=0), UNMET, "escalate", "goal_not_met"),
        (
            "nothing delivered to replace",
            view("synthesizing"),
            GoalVerdict(False, "nothing delivered", (), None),
            "escalate",
            "goal_not_met",
        ),
        (
            "the deadline passed",
            view("synthesizing", deadline_passed=True),
            UNMET,
            "escalate",
            "wall_time_budget_spent",
        ),
        (
            "the same request replanned in vain before",
            view("synthesizing", used=0, limit=1, unmet_before=3),
            UNMET,
            "escalate",
            "goal_not_met",
        ),
        (
            "the deliverable made an effect a replan would make again",
            view("synthesizing", used=0, limit=1, effect_made="step s9 (submit_report)"),
            UNMET,
            "escalate",
            "goal_not_met",
        ),
    ],
)
def test_a_goal_not_met_is_replanned_while_the_budget_lasts(
    name: str, run: RunView, verdict: GoalVerdict, action: str, reason: str
) -> None:
    decision = decide_unmet(run, verdict)
    assert (decision.action, decision.reason[: len(reason)]) == (action, reason), name
    assert decision.step_id == verdict.step_id
    if decision.reason == "goal_not_met":
        assert decision.detail["missing"] == list(verdict.missing)
        assert decision.detail["reason"] == verdict.reason
        skipped = decision.detail.get("replan_skipped", "")
        assert skipped.startswith("run 3 ") == (run.unmet_before == 3), name
        assert skipped.startswith("step s9 (submit_report) already ran") == bool(run.effect_made)


@pytest.mark.parametrize(
    ("name", "run", "action", "step_id"),
    [
        (
            "a 'no' after a step is a replan",
            view("running", (1, "succeeded"), (2, "pending"), replan_verdicts=frozenset({1})),
            "replan",
            1,
        ),
        (
            "with the budget spent, an escalation",
            view(
                "running",
                (1, "succeeded"),
                (2, "pending"),
                used=1,
                replan_verdicts=frozenset({1}),
            ),
            "escalate",
            1,
        ),
        (
            "a verdict of another version is not the current plan's",
            view("running", (3, "succeeded"), (4, "pending"), replan_verdicts=frozenset({1})),
            "enqueue_steps",
            4,
        ),
        (
            "a failure comes first",
            view(
                "running",
                (1, "succeeded"),
                (2, "failed", ()),
                (3, "pending", (1,)),
                replan_verdicts=frozenset({1}),
            ),
            "replan",
            2,
        ),
    ],
)
def test_the_should_replan_check_is_read_from_its_rows(
    name: str, run: RunView, action: str, step_id: int
) -> None:
    decision = decide(run)
    assert (decision.action, decision.step_id) == (action, step_id), name
    if action == "escalate":
        assert decision.reason == "replan_budget_spent"
        assert decision.detail["replan_check"] == "replan"
