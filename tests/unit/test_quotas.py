"""The per-user quota rules alone: submit refusals, Retry-After, free dispatch slots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.engine.dispatch import free_slots
from models.engine.quotas import ACTIVE_RUNS_RETRY_AFTER_S, SUBMIT_WINDOW_S, refusal, retry_after_s
from models.errors import UserQuotaExceeded
from models.settings import Settings

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def limits(active: int = 3, per_minute: int = 5) -> Settings:
    return Settings(user_max_active_runs=active, user_submits_per_minute=per_minute)


def test_under_both_limits_passes() -> None:
    recent = [ago(50), ago(30), ago(1)]
    assert refusal(user_id="ann", active=2, recent=recent, settings=limits(), now=NOW) is None


def test_the_active_run_limit_names_its_setting() -> None:
    problem = refusal(user_id="ann", active=3, recent=[], settings=limits(), now=NOW)
    assert isinstance(problem, UserQuotaExceeded)
    assert problem.setting == "AGENTQ_USER_MAX_ACTIVE_RUNS"
    assert problem.retry_after_s == ACTIVE_RUNS_RETRY_AFTER_S
    assert str(problem).startswith("AGENTQ_USER_MAX_ACTIVE_RUNS: user 'ann' has 3 runs")


def test_the_rate_limit_waits_until_the_oldest_leaves_the_window() -> None:
    recent = [ago(40.2), ago(30), ago(20), ago(10), ago(0)]  # five in the window, limit 5
    problem = refusal(user_id="ann", active=0, recent=recent, settings=limits(), now=NOW)
    assert isinstance(problem, UserQuotaExceeded)
    assert problem.setting == "AGENTQ_USER_SUBMITS_PER_MINUTE"
    assert problem.retry_after_s == 20  # 60 - 40.2 = 19.8, rounded up
    assert "try again in 20 s" in str(problem)


def test_more_than_the_limit_in_the_window_waits_for_enough_of_them() -> None:
    # Seven in the window (a limit lowered since): five must leave before one more fits under 3.
    recent = [ago(59), ago(58), ago(50), ago(45), ago(44), ago(5), ago(1)]
    assert retry_after_s(recent, limit=3, now=NOW) == 16  # the 5th oldest (44 s ago) leaves


def test_retry_after_is_at_least_one_second() -> None:
    assert retry_after_s([ago(SUBMIT_WINDOW_S - 0.001)], limit=1, now=NOW) == 1


def test_zero_turns_a_limit_off() -> None:
    recent = [ago(i) for i in range(100)]
    off = limits(0, 0)
    assert refusal(user_id="ann", active=10_000, recent=recent, settings=off, now=NOW) is None


def test_the_active_limit_is_checked_first() -> None:
    problem = refusal(user_id="ann", active=3, recent=[ago(1)] * 5, settings=limits(), now=NOW)
    assert problem is not None and problem.setting == "AGENTQ_USER_MAX_ACTIVE_RUNS"


@given(
    ages=st.lists(st.floats(0, SUBMIT_WINDOW_S - 0.01), min_size=1, max_size=30),
    limit=st.integers(1, 30),
)
def test_waiting_retry_after_always_lets_the_next_submit_pass(
    ages: list[float], limit: int
) -> None:
    recent = sorted(ago(a) for a in ages)
    if len(recent) < limit:
        return
    wait = retry_after_s(recent, limit=limit, now=NOW)
    later = NOW + timedelta(seconds=wait)
    still = [t for t in recent if t > later - timedelta(seconds=SUBMIT_WINDOW_S)]
    assert len(still) < limit
    sooner = NOW + timedelta(seconds=wait - 1)
    if wait > 1:  # one second sooner would still have been refused
        assert len([t for t in recent if t > sooner - timedelta(seconds=SUBMIT_WINDOW_S)]) >= limit


@pytest.mark.parametrize(
    ("cap", "in_flight", "free"), [(4, 0, 4), (4, 3, 1), (4, 4, 0), (4, 6, 0), (0, 99, None)]
)
def test_free_slots(cap: int, in_flight: int, free: int | None) -> None:
    assert free_slots(cap, in_flight) == free


def test_the_limits_are_settings_with_documented_defaults() -> None:
    names = ("user_max_active_runs", "user_submits_per_minute", "user_max_running_steps")
    assert [Settings.model_fields[n].default for n in names] == [20, 60, 4]
