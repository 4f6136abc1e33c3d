"""Retention of ended runs (issue 15, part 7): exactly the runs that ended before the cutoff and
whose memory task ended go, with every row of theirs; memory (episodes, facts) stays."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlmodel import col, select

from models.db import session_scope
from models.errors import InvalidInput
from models.front import commands
from models.memory.episodes import Episode
from models.memory.procedures import Procedure
from models.operations import retention
from models.operations.webhook_tables import WebhookAttempt, WebhookDelivery, WebhookSubscription
from models.settings import get_settings
from models.tables import Run, utcnow
from ops.stack import LocalStack
from scheduler import tasks
from tests.integration.conftest import wait_for_run

pytestmark = pytest.mark.integration
LONG_AGO = datetime(2001, 1, 1, tzinfo=UTC)  # before anything another test leaves behind
CUTOFF = datetime(2002, 1, 1, tzinfo=UTC)
STEPS = [
    {"name": "first", "kind": "tool", "tool": "noop"},
    {"name": "think", "kind": "model", "instruction": "Say what the first step did."},
]
# rows_of: per table of `retention.PURGED`, the rows of the runs :ids.
ROWS_OF = {
    table: sql.replace("DELETE FROM", "SELECT count(*) FROM", 1)
    for table, sql in retention.PURGED.items()
}
# run_foreign_keys: the tables with a foreign key to `runs` or `steps`.
RUN_FOREIGN_KEYS = """
SELECT DISTINCT conrelid::regclass::text FROM pg_constraint
WHERE contype = 'f' AND confrelid IN ('runs'::regclass, 'steps'::regclass)"""


WEBHOOK_TABLES = ("webhook_deliveries", "webhook_attempts")


def rows_of(run_ids: list[int]) -> dict[str, int]:
    """The rows of the runs `run_ids` in every table the purge deletes from."""
    with session_scope() as session:
        return {
            table: int(session.execute(sa.text(sql), {"ids": run_ids}).scalar_one())
            for table, sql in ROWS_OF.items()
        }


def ended_long_ago(make_run: Callable[..., int], user: str, **fields: object) -> int:
    """A run of `user` that succeeded, and whose memory task ended, in 2001."""
    run_id = make_run(STEPS, user=user, facts={"currency": "EUR"}, **fields)
    assert wait_for_run(run_id, memory=True).status == "succeeded"
    backdate(run_id, status=None)
    return run_id


def backdate(run_id: int, *, status: str | None) -> None:
    """Move the run's times to `LONG_AGO` (and set `status` without its events, if given)."""
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.created_at = LONG_AGO
        if run.finished_at is not None or status is not None:
            run.finished_at = LONG_AGO
        run.status = status or run.status


def episodes_of(run_ids: list[int]) -> int:
    """How many episodes remember the runs `run_ids`."""
    with session_scope() as session:
        return len(session.exec(select(Episode.id).where(col(Episode.run_id).in_(run_ids))).all())


def test_the_purge_covers_every_table_that_refers_to_runs_or_steps(engine: LocalStack) -> None:
    with session_scope() as session:
        referring = set(session.execute(sa.text(RUN_FOREIGN_KEYS)).scalars())
    # the webhook outbox names its run by id alone (`webhook_deliveries.run_id`), and its
    # attempts their delivery
    assert referring | set(WEBHOOK_TABLES) == set(retention.PURGED) - {"runs"}


def test_purge_deletes_exactly_the_old_ended_runs_and_keeps_their_memory(
    make_run: Callable[..., int],
) -> None:
    gone = [ended_long_ago(make_run, "retention-a"), ended_long_ago(make_run, "retention-b")]
    recent = make_run(STEPS, user="retention-a")
    wait_for_run(recent, memory=True)
    active = make_run(STEPS, user="retention-a", start=False)  # queued since 2001
    backdate(active, status=None)
    unremembered = make_run(STEPS, user="retention-a", start=False)
    backdate(unremembered, status="failed")  # ended in 2001, its memory task never ended
    saved_from = ended_long_ago(make_run, "retention-b")
    with session_scope() as session:
        session.add(
            Procedure(
                scope="everyone",
                title="retention test",
                when_to_use="never",
                body="-",
                embedding=[0.1] * 8,
                embedding_model="hash-8",
                embedding_dim=8,
                source_run_id=saved_from,
                created_by="test",
                updated_by="test",
            )
        )
    kept = [recent, active, unremembered, saved_from]
    before_gone, before_kept = rows_of(gone), rows_of(kept)
    assert before_gone["runs"] == 2 and before_gone["steps"] == 4
    assert all(before_gone[t] > 0 for t in ("step_attempts", "run_events", "pinned_facts"))
    assert episodes_of(gone) == 2

    counts = retention.purge(before=CUTOFF, batch=1)  # one run per transaction

    assert counts == before_gone
    assert set(rows_of(gone).values()) == {0}
    assert rows_of(kept) == before_kept
    assert episodes_of(gone) == 2  # memory outlives the run record
    assert retention.purge(before=CUTOFF, batch=10)["runs"] == 0  # nothing left that may go


def test_a_purged_run_takes_its_webhook_deliveries_and_one_still_to_send_keeps_its_run(
    make_run: Callable[..., int],
) -> None:
    told, waiting = (ended_long_ago(make_run, "retention-hooks") for _ in range(2))
    later = utcnow() + timedelta(days=1)  # no sender takes the pending one during the test
    with session_scope() as session:
        sub = WebhookSubscription(  # disabled: later runs' ends write no delivery for it
            url="https://hooks.example.com/in",
            events=["run.finished"],
            secret="whsec_r",
            enabled=False,
        )
        session.add(sub)
        session.flush()
        for run_id, status in ((told, "delivered"), (waiting, "pending")):
            delivery = WebhookDelivery(
                subscription_id=sub.id or 0,
                event="run.finished",
                run_id=run_id,
                snapshot={},
                status=status,
                attempts=1,
                give_up_at=later,
                next_attempt_at=later,
            )
            session.add(delivery)
            session.flush()
            session.add(
                WebhookAttempt(delivery_id=delivery.id or 0, attempt=1, started_at=LONG_AGO)
            )
    assert rows_of([told])["webhook_attempts"] == 1

    retention.purge(before=CUTOFF, batch=10)

    assert set(rows_of([told]).values()) == {0}
    kept = rows_of([waiting])
    assert kept["runs"] == 1 and kept["webhook_deliveries"] == 1 and kept["webhook_attempts"] == 1


def test_beat_purges_only_with_retention_set(
    make_run: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    old = ended_long_ago(make_run, "retention-beat")
    now = datetime(2001, 1, 11, tzinfo=UTC)  # ten days after it ended
    assert tasks.purge_runs(now=now) == {}  # AGENTQ_RUN_RETENTION_DAYS unset: off
    monkeypatch.setenv("AGENTQ_RUN_RETENTION_DAYS", "11")
    get_settings.cache_clear()
    assert tasks.purge_runs(now=now)["runs"] == 0  # it ended ten days ago: kept
    monkeypatch.setenv("AGENTQ_RUN_RETENTION_DAYS", "9")
    get_settings.cache_clear()
    try:
        assert tasks.purge_runs(now=now)["runs"] == 1
    finally:
        monkeypatch.delenv("AGENTQ_RUN_RETENTION_DAYS")
        get_settings.cache_clear()
    assert rows_of([old])["runs"] == 0


def test_the_cli_purges_and_prints_the_counts(make_run: Callable[..., int]) -> None:
    old = ended_long_ago(make_run, "retention-cli")
    steps = rows_of([old])["steps"]
    done = subprocess.run(
        ["agentq", "run", "purge", "--before", "2002-01-01", "--yes"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ.copy(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed = dict(
        cells
        for line in done.stdout.splitlines()
        if len(cells := [c.strip() for c in line.split("│") if c.strip()]) == 2
    )
    assert printed["runs"] == "1" and printed["steps"] == str(steps), done.stdout
    assert rows_of([old])["runs"] == 0


def test_a_future_or_naive_cutoff_is_refused(engine: LocalStack) -> None:
    with pytest.raises(InvalidInput, match=r"before: .* in the future"):
        commands.purge_runs(datetime(2999, 1, 1, tzinfo=UTC))
    with pytest.raises(InvalidInput, match="before: must carry a time zone"):
        commands.purge_runs(datetime(2001, 1, 1))
