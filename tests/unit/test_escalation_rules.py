"""What each outcome a worker reports comes to (`models.engine.escalation_rules.decide`): the status
the run must be in, the reason, the detail a reviewer is shown, and the step. The rows these
escalations write are pinned by the integration tests of each phase (test_phase_claims,
test_model_faults, test_planner, test_goal_checks)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from sqlmodel import Session

from models.engine.escalation_rules import (
    Crashed,
    DeferredTooOften,
    Escalating,
    Reported,
    StepEscalated,
    SynthesisFailed,
    Unanswered,
    decide,
    escalate,
)
from models.errors import (
    ContextOverflow,
    CostBudgetSpent,
    ProviderError,
    ProviderUnavailable,
    QuotaExhausted,
    TokenBudgetSpent,
)

INTERNAL = "planning failed with an internal error (KeyError); see the worker log"


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (
            Crashed("planning", "KeyError"),
            Escalating("planning", "internal_error", {"error": INTERNAL}),
        ),
        (
            DeferredTooOften("replanning", "429 slow down"),
            Escalating("replanning", "rate_limited", {"error": "429 slow down"}),
        ),
        (
            Unanswered("planning", "plan", None, "steps: field required", "{}"),
            Escalating(
                "planning",
                "invalid_plan",
                {"error": "steps: field required", "raw_output": "{}"},
            ),
        ),
        (
            Unanswered("replanning", "plan", "quota_exhausted", "QuotaExhausted: 429", "", 7),
            Escalating(
                "replanning",
                "quota_exhausted",
                {"error": "QuotaExhausted: 429", "raw_output": ""},
                step_id=7,
            ),
        ),
        (
            Unanswered("synthesizing", "goal_check", None, "met: field required", "{"),
            Escalating(
                "synthesizing",
                "invalid_goal_check",
                {"error": "met: field required", "raw_output": "{"},
            ),
        ),
        (
            StepEscalated(3, "fetch", "http_get", "bad calls", "invalid_tool_call", "[{...}]"),
            Escalating(
                "running",
                "invalid_tool_call",
                {
                    "step": "fetch",
                    "error": "bad calls",
                    "tool": "http_get",
                    "raw_output": "[{...}]",
                },
                step_id=3,
            ),
        ),
        (
            StepEscalated(4, "write", "", "no tokens", "token_budget_spent"),
            Escalating(
                "running",
                "token_budget_spent",
                {"step": "write", "error": "no tokens", "tool": ""},
                step_id=4,
            ),
        ),
    ],
)
def test_each_outcome_comes_to_its_escalation(outcome: Reported, expected: Escalating) -> None:
    assert decide(outcome) == expected


@pytest.mark.parametrize(
    ("cause", "reason"),
    [
        (TokenBudgetSpent("no tokens left"), "token_budget_spent"),
        (CostBudgetSpent("no money left"), "cost_budget_spent"),
        (QuotaExhausted("429 insufficient_quota"), "quota_exhausted"),
        (ContextOverflow("the run state alone is too long"), "context_overflow"),
        (ProviderError("401 unauthorized"), "synthesis_failed"),
        (ProviderUnavailable("timed out"), "synthesis_failed"),
    ],
)
def test_a_failed_synthesis_escalates_with_its_errors_reason(cause: Exception, reason: str) -> None:
    assert decide(SynthesisFailed(cause)) == Escalating(
        "synthesizing", reason, {"error": str(cause)}
    )


class _Untouched:
    """A session that fails the test if the escalation is attempted."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the session was used: {name}")


def test_a_run_found_in_another_status_is_left_as_it_is() -> None:
    """A step's run cancelled while the step ran: nothing is written, and the caller is told."""
    report = StepEscalated(3, "fetch", "http_get", "no quota", "quota_exhausted")
    assert escalate(cast(Session, _Untouched()), 1, report, found="cancelled") is False
