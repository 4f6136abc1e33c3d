"""The coordinator's decisions, table-driven over run states; no services."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.states import STEP_STATUSES
from scheduler.coordinator import Decision, RunView, StepView, decide


def view(
    status: str = "running",
    *steps: tuple[int, str],
    used: int = 0,
    limit: int = 1,
    handled: frozenset[int] = frozenset(),
    **kw: bool,
) -> RunView:
    return RunView(
        id=1,
        status=status,
        replans_used=used,
        replans_limit=limit,
        steps=tuple(StepView(i, f"s{i}", st) for i, st in steps),
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
    ("cancelled is final", view("cancelled", (1, "pending")), "wait", None),
    ("first pending step", view("running", (1, "pending"), (2, "pending")), "enqueue_step", 1),
    ("next after done", view("running", (1, "succeeded"), (2, "pending")), "enqueue_step", 2),
    ("step queued", view("running", (1, "succeeded"), (2, "queued")), "wait", 2),
    ("step ready, waiting for a slot", view("running", (1, "ready"), (2, "pending")), "wait", 1),
    ("step running", view("running", (1, "running"), (2, "pending")), "wait", 1),
    ("failure with budget", view("running", (1, "failed"), (2, "pending")), "replan", 1),
    ("failure, budget spent", view("running", (1, "failed"), used=1, limit=1), "escalate", 1),
    ("failure, zero budget", view("running", (1, "failed"), limit=0), "escalate", 1),
    (
        "handled failure is passed",
        view("running", (1, "failed"), (3, "succeeded"), (2, "pending"), handled=frozenset({1})),
        "enqueue_step",
        2,
    ),
    (
        "cancelled steps are passed",
        view("running", (1, "cancelled"), (2, "pending")),
        "enqueue_step",
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


def test_escalation_says_why() -> None:
    decision = decide(view("running", (1, "failed"), used=2, limit=2))
    assert decision == Decision(
        "escalate", "replan_budget_spent", 1, {"step": "s1", "replans": "2/2"}
    )
    assert decide(view("running", deadline_passed=True)).reason == "wall_time_budget_spent"


STATUSES = st.sampled_from(STEP_STATUSES)


@given(
    statuses=st.lists(STATUSES, max_size=8),
    used=st.integers(0, 3),
    limit=st.integers(0, 3),
    handled_mask=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_decisions_are_deterministic_and_respect_plan_order(
    statuses: list[str], used: int, limit: int, handled_mask: list[bool]
) -> None:
    handled = frozenset(i for i, h in enumerate(handled_mask) if h)
    steps = [(i, s) for i, s in enumerate(statuses)]
    run = view("running", *steps, used=used, limit=limit, handled=handled)
    twin = view("running", *steps, used=used, limit=limit, handled=frozenset(sorted(handled)))
    decision = decide(run)
    assert decision == decide(twin)
    first_open = next(
        (
            i
            for i, s in steps
            if s not in ("succeeded", "cancelled") and not (s == "failed" and i in handled)
        ),
        None,
    )
    assert decision.step_id == first_open
    if decision.action == "replan":
        assert used < limit
    if decision.action == "escalate":
        assert used >= limit
