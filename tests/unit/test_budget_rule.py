"""The model layer's rules without services: how a failed step attempt ends, and a property test
of the budget rule over any sequence of call outcomes.

The simulation below is a pure model of a run making model calls: it reserves with the rule
`models.engine.budgets.fits` (the same expression `reserve` puts in its UPDATE), settles to the
reported usage, and decides each failed attempt with `worker.execution.steps.failure_outcome`, as
the engine does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from billiard.exceptions import SoftTimeLimitExceeded
from hypothesis import given, settings
from hypothesis import strategies as st

from models.engine.budgets import cost_usd, fits
from models.errors import (
    CostBudgetSpent,
    InvalidToolCalls,
    ProviderError,
    ProviderUnavailable,
    QuotaExhausted,
    RateLimited,
    RetryableToolError,
    TokenBudgetSpent,
    ToolError,
)
from models.settings import ModelPrice
from models.tables import Step
from worker.execution.steps import failure_outcome

PRICE = ModelPrice(input=0.15, output=0.60)


def step(attempt: int = 1, deferrals: int = 0, max_attempts: int = 3) -> Step:
    return Step(
        run_id=1,
        plan_version=1,
        position=0,
        name="s",
        kind="model",
        attempt=attempt,
        deferrals=deferrals,
        max_attempts=max_attempts,
    )


def test_a_rate_limit_defers_without_counting_an_attempt() -> None:
    out = failure_outcome(RateLimited("429", retry_after_s=90), step(3), max_deferrals=2)
    assert (out.kind, out.retry_after_s) == ("deferred", 90)
    # three claims of which two were deferrals: one failure, so a retry is left
    out = failure_outcome(ProviderUnavailable("500"), step(3, deferrals=2), max_deferrals=2)
    assert out.kind == "retry"


def test_a_rate_limit_deferred_too_often_is_a_failure() -> None:
    limited = RateLimited("429", retry_after_s=1)
    assert failure_outcome(limited, step(3, deferrals=2), max_deferrals=2).kind == "retry"
    assert failure_outcome(limited, step(3), max_deferrals=0).kind == "failed"


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (QuotaExhausted("429 insufficient_quota"), "quota_exhausted"),
        (TokenBudgetSpent("no tokens"), "token_budget_spent"),
        (CostBudgetSpent("no money"), "cost_budget_spent"),
    ],
)
def test_quota_and_spent_budgets_escalate(exc: Exception, reason: str) -> None:
    out = failure_outcome(exc, step(1), max_deferrals=5)
    assert (out.kind, out.reason, out.error) == ("escalated", reason, str(exc))


@pytest.mark.parametrize(
    "exc",
    [
        ProviderUnavailable("timed out"),
        ProviderError("401"),
        RetryableToolError("503"),
        SoftTimeLimitExceeded(),
    ],
)
def test_retryable_failures_retry_while_attempts_are_left(exc: BaseException) -> None:
    assert failure_outcome(exc, step(2), max_deferrals=5).kind == "retry"
    assert failure_outcome(exc, step(3), max_deferrals=5).kind == "failed"


def test_tool_calls_that_stay_invalid_escalate_with_the_raw_calls() -> None:
    raw = '[{"tool": "echo", "arguments": "{\\"value\\": "}]'
    out = failure_outcome(InvalidToolCalls("still invalid", raw=raw), step(1), max_deferrals=5)
    assert (out.kind, out.reason, out.raw) == ("escalated", "invalid_tool_call", raw)


def test_a_tool_error_fails_at_once() -> None:
    assert failure_outcome(ToolError("bad"), step(1), max_deferrals=5).kind == "failed"


# -- the property -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answered:
    """The provider answered with this usage."""

    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Failed:
    """The provider failed: `rate_limited`, `quota`, `unavailable` (every attempt of the call)."""

    kind: str


@dataclass(frozen=True)
class InvalidCall:
    """The provider answered (this usage is charged) with a tool call whose arguments are
    invalid: the step asks again, up to `MAX_INVALID` times (`AGENTQ_TOOL_CALL_MAX_INVALID`)."""

    prompt_tokens: int
    completion_tokens: int


CallOutcome = Answered | Failed | InvalidCall
MAX_INVALID = 2


@dataclass
class Run:
    """A pure model of one run: its budgets, its plan of model steps, and its replans."""

    tokens_limit: int
    cost_limit: float
    steps_left: int
    replans_left: int
    max_attempts: int
    max_deferrals: int
    tokens_used: int = 0
    cost_used: float = 0.0
    status: str = "running"  # running | succeeded | waiting_review
    reason: str = ""
    claims: int = 0
    invalid_answers: int = 0  # of the current step
    current: Step = field(default_factory=step)


ESTIMATE, MAX_OUTPUT = 400, 300  # each call's prompt estimate and max_output_tokens


def reserve(run: Run) -> tuple[int, float] | Exception:
    tokens = ESTIMATE + MAX_OUTPUT
    cost = cost_usd(PRICE, prompt_tokens=ESTIMATE, completion_tokens=MAX_OUTPUT)
    if not fits(run.tokens_used, tokens, run.tokens_limit):
        return TokenBudgetSpent()
    if not fits(run.cost_used, cost, run.cost_limit):
        return CostBudgetSpent()
    run.tokens_used += tokens
    run.cost_used += cost
    return tokens, cost


def attempt(run: Run, outcome: CallOutcome) -> None:
    """One claim of the current step: reserve, call, settle, and what the engine does next."""
    run.claims += 1
    run.current.attempt += 1
    held = reserve(run)
    if isinstance(held, Exception):
        return decide(run, held)
    tokens, cost = held
    run.tokens_used -= tokens
    run.cost_used -= cost
    if isinstance(outcome, Answered | InvalidCall):
        run.tokens_used += outcome.prompt_tokens + outcome.completion_tokens
        run.cost_used += cost_usd(
            PRICE, prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens
        )
    if isinstance(outcome, InvalidCall):
        run.current.attempt -= 1  # another call within the same attempt, not a new claim
        run.invalid_answers += 1
        if run.invalid_answers > MAX_INVALID:
            return decide(run, InvalidToolCalls("still invalid", raw="{"))
        return None
    if isinstance(outcome, Answered):
        run.steps_left -= 1
        run.current = step(0, max_attempts=run.max_attempts)
        run.invalid_answers = 0
        if run.steps_left == 0:
            run.status = "succeeded"
        return None
    errors: dict[str, Exception] = {
        "rate_limited": RateLimited("429", retry_after_s=90),
        "quota": QuotaExhausted("429"),
        "unavailable": ProviderUnavailable("500"),
    }
    return decide(run, errors[outcome.kind])


def decide(run: Run, exc: Exception) -> None:
    out = failure_outcome(exc, run.current, max_deferrals=run.max_deferrals)
    run.invalid_answers = 0  # the attempt is over; the next one starts its own tool loop
    if out.kind == "deferred":
        run.current.deferrals += 1
    elif out.kind == "escalated":
        run.status, run.reason = "waiting_review", out.reason
    elif out.kind == "failed":  # the coordinator: replan while the budget allows, else escalate
        if run.replans_left == 0:
            run.status, run.reason = "waiting_review", "replan_budget_spent"
        else:
            run.replans_left -= 1
            run.current = step(0, max_attempts=run.max_attempts)


outcomes = st.one_of(
    st.builds(
        Answered,
        prompt_tokens=st.integers(0, 2 * ESTIMATE),  # the server may count more than we did
        completion_tokens=st.integers(0, MAX_OUTPUT),
    ),
    st.sampled_from([Failed("rate_limited"), Failed("quota"), Failed("unavailable")]),
    st.builds(
        InvalidCall,
        prompt_tokens=st.integers(0, 2 * ESTIMATE),
        completion_tokens=st.integers(0, MAX_OUTPUT),
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    calls=st.lists(outcomes, max_size=80),
    tokens_limit=st.integers(0, 20_000),
    cost_limit=st.floats(0, 0.01),
    steps=st.integers(1, 6),
    replans=st.integers(0, 3),
    max_attempts=st.integers(1, 4),
    max_deferrals=st.integers(0, 5),
)
def test_spend_stays_within_budget_and_every_run_ends(
    calls: list[CallOutcome],
    tokens_limit: int,
    cost_limit: float,
    steps: int,
    replans: int,
    max_attempts: int,
    max_deferrals: int,
) -> None:
    run = Run(tokens_limit, cost_limit, steps, replans, max_attempts, max_deferrals)
    run.current = step(0, max_attempts=max_attempts)
    script = iter(calls)
    # Past the script every call is answered: a run ends even with a provider that recovers.
    bound = (steps + replans) * (max_attempts + max_deferrals + MAX_INVALID + 1)
    while run.status == "running":
        attempt(run, next(script, Answered(ESTIMATE, 1)))
        assert run.claims <= bound, "the run loops"
    one_call_max = 2 * ESTIMATE + MAX_OUTPUT
    assert run.tokens_used <= tokens_limit + one_call_max
    assert run.cost_used <= cost_limit + cost_usd(
        PRICE, prompt_tokens=2 * ESTIMATE, completion_tokens=MAX_OUTPUT
    )
    assert run.status in ("succeeded", "waiting_review")
    if run.status == "waiting_review":
        assert run.reason in (
            "token_budget_spent",
            "cost_budget_spent",
            "quota_exhausted",
            "replan_budget_spent",
            "invalid_tool_call",
        )
