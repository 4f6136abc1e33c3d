"""The DBOS peer of the engine benchmark (ops/bench/dbos_peer.py) on the session's embedded
Postgres: its executor processes run every enqueued workflow, DBOS records every step's output,
and its tables stay out of agentq's database."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from models.db import database_url
from ops.bench.dbos_peer import SYSTEM_SCHEMA, DBOSPeer, Shape, WorkflowSpec
from ops.stack import LocalStack

WORKFLOWS = 4
STEPS = 3


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", ["chain", "fanout"])
def test_every_workflow_succeeds_with_each_step_recorded(engine: LocalStack, shape: Shape) -> None:
    spec = WorkflowSpec(shape, STEPS)
    with DBOSPeer(database_url(), processes=2, spec=spec) as peer:
        seconds, batch = peer.run_batch(WORKFLOWS)
        counts = peer.counts(batch)
    assert seconds > 0
    assert (counts.succeeded, counts.failed) == (WORKFLOWS, 0)
    assert counts.step_outputs == WORKFLOWS * STEPS


def test_dbos_tables_are_not_in_agentqs_database(engine: LocalStack) -> None:
    spec = WorkflowSpec("chain", 1)
    with DBOSPeer(database_url(), processes=1, spec=spec) as peer:
        assert peer.counts(peer.run_batch(1)[1]).succeeded == 1
    agentq = sa.create_engine(database_url(), poolclass=NullPool)
    with agentq.connect() as conn:
        found = conn.execute(
            sa.text("SELECT count(*) FROM pg_namespace WHERE nspname = :schema"),
            {"schema": SYSTEM_SCHEMA},
        ).scalar_one()
    agentq.dispose()
    assert found == 0
