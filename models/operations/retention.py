"""Retention of ended runs (issue 15): delete the runs that ended before a cutoff, with every row
that belongs to them, a batch of runs per transaction.

What goes: the run and its plan versions, steps, step attempts, journaled and gated tool calls
(and the run's approval rules), replan
checks, pinned facts, escalations, events, conversation turns, rolling summaries, idempotency
keys, and its webhook
deliveries with their attempts (every table that holds a run's or a step's rows: `PURGED`, in
the order it is deleted, children first); the runs' step data leaves their users' totals
(`models.engine.storage.release_purged`).
Each batch is one transaction that locks its runs (`FOR UPDATE SKIP LOCKED`: a run another
transaction holds is left for the next pass) and deletes at most `batch` of them, so a purge of a
large backlog never holds a long lock or builds one huge transaction.

What stays, and why:
- A run that has not ended (`runs.status` not `succeeded`, `failed` or `cancelled`), or whose
  memory task has not ended (`models.engine.ended_runs.MEMORY_ENDED_OF`, the rule of
  `models.memory.memory_admin.memory_ended`): the memory task reads the run's rows to write its
  episode and facts, and the reconciler asks for it again until it ends.
- Episodes and facts. They are memory, which belongs to the user (DESIGN.md, invariant 7): the
  user deletes it (`agentq memory forget`, `agentq memory delete`), and recall keeps using it
  after the run record is gone; that is the point of memory. An episode holds what recall
  needs (goal, plan, failures, outcome, answer, summary, embedding), none of it read from the
  run. Its `run_id`, and a fact's `source_run_id` and `source` (`run:<id>`), are then the id
  of a run that no longer exists: no foreign key holds them, run ids are never reused (a
  sequence), so `episodes.run_id` stays unique and a late memory task still writes nothing twice.
- A run with a webhook delivery still to send (`pending` or `delivering`): its attempts read the
  run's goal and error to build the body (`models.engine.notifications.body`); it goes once the
  delivery is delivered or given up (`AGENTQ_WEBHOOK_RETRY_WINDOW_S` after its event at most).
- A run a procedure was saved from (`procedures.source_run_id`), while that procedure exists:
  `agentq memory forget` finds a procedure of any scope through the run it was saved from
  (`models.memory.procedures.forget_procedures`), so deleting the run would let the procedure, which
  holds the user's goal and values, outlive the user's erasure.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Final

import sqlalchemy as sa
from sqlmodel import Session

from models.db import session_scope
from models.engine import storage
from models.engine.ended_runs import MEMORY_ENDED_OF

DAY_S: Final = 86_400
IN_BATCH: Final = "= ANY(CAST(:ids AS integer[]))"
# retired_runs: up to :batch runs that ended before :before, whose memory task has ended, from
# which no procedure was saved and with no webhook delivery still to send, oldest end first,
# locked for this transaction (runs that another transaction has locked are skipped: the next
# pass takes them).
RETIRED_RUNS: Final = f"""
SELECT r.id FROM runs r
WHERE r.finished_at < :before AND r.status IN ('succeeded', 'failed', 'cancelled')
    AND {MEMORY_ENDED_OF}
    AND NOT EXISTS (SELECT 1 FROM procedures p WHERE p.source_run_id = r.id)
    AND NOT EXISTS (SELECT 1 FROM webhook_deliveries w
        WHERE w.run_id = r.id AND w.status IN ('pending', 'delivering'))
ORDER BY r.finished_at, r.id
LIMIT :batch
FOR UPDATE OF r SKIP LOCKED"""
_OF_STEPS: Final = f"step_id IN (SELECT id FROM steps WHERE run_id {IN_BATCH})"
# purged: per table, the statement that deletes the rows of the runs :ids, children before
# their parents (so each count is the table's own rows, none left to a cascade).
PURGED: Final = {
    "step_attempts": f"DELETE FROM step_attempts WHERE {_OF_STEPS}",
    "tool_journal": f"DELETE FROM tool_journal WHERE {_OF_STEPS}",
    "tool_approvals": f"DELETE FROM tool_approvals WHERE run_id {IN_BATCH}",
    "run_approvals": f"DELETE FROM run_approvals WHERE run_id {IN_BATCH}",
    "run_forks": f"DELETE FROM run_forks WHERE run_id {IN_BATCH}",  # a fork's source: kept by id
    "run_children": f"DELETE FROM run_children WHERE run_id {IN_BATCH} OR parent_run_id {IN_BATCH}",
    "plan_checks": f"DELETE FROM plan_checks WHERE run_id {IN_BATCH}",
    "procedure_outcomes": f"DELETE FROM procedure_outcomes WHERE run_id {IN_BATCH}",
    "steps": f"DELETE FROM steps WHERE run_id {IN_BATCH}",
    "plan_versions": f"DELETE FROM plan_versions WHERE run_id {IN_BATCH}",
    "pinned_facts": f"DELETE FROM pinned_facts WHERE run_id {IN_BATCH}",
    "escalations": f"DELETE FROM escalations WHERE run_id {IN_BATCH}",
    "run_events": f"DELETE FROM run_events WHERE run_id {IN_BATCH}",
    "messages": f"DELETE FROM messages WHERE run_id {IN_BATCH}",
    "run_summaries": f"DELETE FROM run_summaries WHERE run_id {IN_BATCH}",
    "idempotency_keys": f"DELETE FROM idempotency_keys WHERE run_id {IN_BATCH}",
    "webhook_attempts": "DELETE FROM webhook_attempts WHERE delivery_id IN "
    f"(SELECT id FROM webhook_deliveries WHERE run_id {IN_BATCH})",
    "webhook_deliveries": f"DELETE FROM webhook_deliveries WHERE run_id {IN_BATCH}",
    "runs": f"DELETE FROM runs WHERE id {IN_BATCH}",
}


def cutoff(retention_days: int | None, now: datetime) -> datetime | None:
    """The end time before which runs are purged: `now` (timezone-aware) less `retention_days`
    days; None when retention is off (`AGENTQ_RUN_RETENTION_DAYS` unset)."""
    if retention_days is None:
        return None
    return now - timedelta(seconds=retention_days * DAY_S)


def purge_batch(session: Session, *, before: datetime, batch: int) -> dict[str, int]:
    """Delete up to `batch` (>= 1) runs that ended before `before` (timezone-aware) and may go
    (see the module docstring), with all their rows, in the caller's transaction (which it
    does not commit). Returns the rows deleted per table of `PURGED` (`runs`: how many runs;
    all zero when none was due). Raises `ValueError` for a `batch` below 1."""
    if batch < 1:
        raise ValueError(f"batch {batch!r}: must be >= 1")
    found = session.execute(sa.text(RETIRED_RUNS), {"before": before, "batch": batch})
    ids = [int(run_id) for run_id in found.scalars()]
    if not ids:
        return dict.fromkeys(PURGED, 0)
    storage.release_purged(session, ids)  # their step data leaves their users' totals
    return {
        table: int(getattr(session.execute(sa.text(sql), {"ids": ids}), "rowcount", 0))
        for table, sql in PURGED.items()
    }


def purge(*, before: datetime, batch: int, time_limit_s: float | None = None) -> dict[str, int]:
    """Purge every run that ended before `before` and may go, `batch` runs per transaction
    (each committed before the next starts), until a batch finds fewer than `batch`, or, with
    `time_limit_s`, once that many seconds have passed (what is left waits for the next call).
    Returns the rows deleted per table of `PURGED`, summed over the batches."""
    total: Counter[str] = Counter(dict.fromkeys(PURGED, 0))
    started = time.monotonic()
    while True:
        with session_scope() as session:
            counts = purge_batch(session, before=before, batch=batch)
        total.update(counts)
        out_of_time = time_limit_s is not None and time.monotonic() - started >= time_limit_s
        if counts["runs"] < batch or out_of_time:
            return dict(total)
