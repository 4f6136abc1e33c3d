"""What `AGENTQ_DATABASE_POOLER` changes, and the beat's lease length (issue 29, item 4); the
behaviour through a real PgBouncer is tests/integration/test_pgbouncer.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery.schedules import crontab, schedule

from models.db import driver_options
from models.errors import ConfigurationError
from models.settings import get_settings
from scheduler.beat import DEFAULT_PERIOD_S, shortest_period_s


@pytest.fixture
def settings_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.mark.parametrize(
    ("pooler", "options"), [("none", {}), ("transaction", {"prepare_threshold": None})]
)
def test_a_transaction_pooler_turns_prepared_statements_off(
    settings_env: pytest.MonkeyPatch, pooler: str, options: dict[str, object]
) -> None:
    settings_env.setenv("AGENTQ_DATABASE_POOLER", pooler)
    get_settings.cache_clear()
    assert driver_options() == options


def test_an_unknown_pooler_is_refused_naming_the_setting(settings_env: pytest.MonkeyPatch) -> None:
    settings_env.setenv("AGENTQ_DATABASE_POOLER", "statement")
    get_settings.cache_clear()
    with pytest.raises(ConfigurationError, match="AGENTQ_DATABASE_POOLER"):
        get_settings()


class Entry:
    def __init__(self, every: object) -> None:
        self.schedule = every


def test_the_lease_follows_the_shortest_fixed_period() -> None:
    entries = [Entry(schedule(10.0)), Entry(schedule(2.0)), Entry(crontab(minute="*/1"))]
    assert shortest_period_s(entries) == 2.0  # type: ignore[arg-type]
    assert shortest_period_s([Entry(crontab())]) == DEFAULT_PERIOD_S  # type: ignore[list-item]
