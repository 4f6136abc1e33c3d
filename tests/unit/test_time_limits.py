"""A step's time limit (issue 27, item 14): the lesser of `AGENTQ_STEP_TIME_LIMIT_S` and its
run's wall time left, raised inside the step when it passes (`worker.execution.time_limits`), and
what the step's attempt comes to then (`worker.execution.steps.failure_outcome`)."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta

import pytest

from models.errors import StepDataBudgetSpent, UserStepDataSpent
from models.tables import Step
from worker.execution.steps import failure_outcome
from worker.execution.time_limits import StepTimeLimit, StepTimeLimitExceeded, enforced

NOW = datetime(2027, 1, 1, tzinfo=UTC)


def step(attempt: int = 1) -> Step:
    return Step(run_id=1, plan_version=1, position=0, name="s", kind="tool", attempt=attempt)


def test_the_limit_is_the_lesser_of_the_step_limit_and_the_wall_time_left() -> None:
    assert StepTimeLimit.of(90, None, NOW) == StepTimeLimit(90)
    assert StepTimeLimit.of(90, NOW + timedelta(seconds=200), NOW) == StepTimeLimit(90)
    assert StepTimeLimit.of(90, NOW + timedelta(seconds=5), NOW) == StepTimeLimit(5, True)
    assert StepTimeLimit.of(90, NOW - timedelta(seconds=1), NOW) == StepTimeLimit(-1, True)


def other_timer_s() -> float:
    """What is left of a timer armed outside the step (pytest-timeout's, if any), s."""
    return signal.getitimer(signal.ITIMER_REAL)[0]


def test_a_sleep_is_cut_at_the_limit_not_after_it() -> None:
    other, started = other_timer_s(), time.monotonic()
    with pytest.raises(StepTimeLimitExceeded) as cut, enforced(StepTimeLimit(0.3, True)):
        time.sleep(5)
    assert 0.25 < time.monotonic() - started < 1.5
    assert cut.value.reason == "wall_time_budget_spent"
    assert "wall-time deadline" in str(cut.value)
    assert other_timer_s() == 0 or other - 2 < other_timer_s() <= other  # ours is gone


def test_no_time_left_raises_before_the_step_runs() -> None:
    ran = []
    with pytest.raises(StepTimeLimitExceeded), enforced(StepTimeLimit(0, True)):
        ran.append(1)
    assert ran == []


def test_a_step_within_its_limit_is_not_interrupted_and_the_timer_is_cleared() -> None:
    other = other_timer_s()
    with enforced(StepTimeLimit(0.5)):
        time.sleep(0.05)
    time.sleep(0.6)  # past the limit: nothing goes off
    assert other_timer_s() == 0 or other - 2 < other_timer_s() <= other


def test_another_timer_is_put_back_and_goes_off_during_the_step_if_due_first() -> None:
    fired: list[float] = []
    other = other_timer_s()
    before = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        with enforced(StepTimeLimit(0.2)), pytest.raises(StepTimeLimitExceeded):
            time.sleep(5)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 28 < left <= 30  # the other timer, less the step's time
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        started = time.monotonic()
        with enforced(StepTimeLimit(1.0)):
            time.sleep(0.4)  # the other timer goes off inside; the step goes on
        assert len(fired) == 1 and fired[0] - started < 0.35
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:  # pytest-timeout's timer, if any, as it was
        signal.signal(signal.SIGALRM, before)
        signal.setitimer(signal.ITIMER_REAL, other)


def test_the_wall_time_deadline_escalates_and_the_step_limit_retries() -> None:
    deadline = failure_outcome(
        StepTimeLimitExceeded(StepTimeLimit(5, True)), step(), max_deferrals=0
    )
    assert (deadline.kind, deadline.reason) == ("escalated", "wall_time_budget_spent")
    assert "wall-time deadline" in deadline.error
    own = failure_outcome(StepTimeLimitExceeded(StepTimeLimit(90)), step(), max_deferrals=0)
    assert own.kind == "retry"
    assert own.error == "step exceeded its time limit (90 s, AGENTQ_STEP_TIME_LIMIT_S)"
    assert (
        failure_outcome(StepTimeLimitExceeded(StepTimeLimit(90)), step(3), max_deferrals=0).kind
        == "failed"
    )


def test_spent_step_data_escalates_with_its_reason() -> None:
    for refused in (StepDataBudgetSpent("x"), UserStepDataSpent("y")):
        out = failure_outcome(refused, step(), max_deferrals=0)
        assert (out.kind, out.reason, out.error) == ("escalated", refused.reason, str(refused))
