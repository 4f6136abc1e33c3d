"""The stack's limits without a database (`models.engine.stack_limits`): applying the stored values,
what a process whose environment disagrees is told, and a worker taking them on (`refresh`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from models import settings as settings_module
from models.engine import stack_limits
from models.engine.stack_limits import Stored
from models.errors import ConfigurationError
from models.settings import Settings, get_settings

AT = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def _stored(**values: Any) -> dict[str, Stored]:
    return {name: Stored(value, "agentq up (pid 7)", AT) for name, value in values.items()}


def test_the_stacks_values_win_and_a_disagreeing_environment_is_named() -> None:
    own = Settings(user_max_active_runs=100, user_submits_per_minute=60)
    stored = _stored(user_max_active_runs=3, user_submits_per_minute=60, max_token_budget=5000)
    applied = stack_limits.apply(own, stored)
    assert (applied.user_max_active_runs, applied.max_token_budget) == (3, 5000)
    assert stack_limits.apply(applied, stored) is applied  # nothing differs: the same object
    # only what this environment sets counts as disagreeing (not its defaults)
    assert stack_limits.disagreements(own, stored) == [
        "AGENTQ_USER_MAX_ACTIVE_RUNS=100 (the stack's: 3, set by agentq up (pid 7) at "
        "2026-12-05 09:00 UTC)"
    ]


def test_a_stored_value_its_setting_cannot_take_is_named() -> None:
    with pytest.raises(ConfigurationError, match="stack_limits row 'user_max_active_runs'"):
        stack_limits.parsed("user_max_active_runs", -1)
    assert stack_limits.parsed("max_cost_budget_usd", "2.5") == 2.5


@pytest.fixture
def clean_overrides() -> Iterator[None]:
    yield
    settings_module._overrides.clear()
    get_settings.cache_clear()


def test_a_worker_takes_the_stacks_limits_on_before_its_tasks(
    monkeypatch: pytest.MonkeyPatch, clean_overrides: None
) -> None:
    @contextmanager
    def no_database() -> Iterator[None]:
        yield None

    reads: list[int] = []

    def read(_session: object) -> dict[str, Stored]:
        reads.append(1)
        return _stored(user_max_running_steps=1)

    monkeypatch.setattr(stack_limits, "session_scope", no_database)
    monkeypatch.setattr(stack_limits, "read", read)
    monkeypatch.setattr(stack_limits, "_refreshed_at", -stack_limits.REFRESH_S)
    stack_limits.refresh()
    stack_limits.refresh()  # within REFRESH_S: not read again
    assert get_settings().user_max_running_steps == 1 and reads == [1]
