"""Who holds what: this process's name on a claim, and the claim of a run's paid phase.

A step is claimed by `models.engine.leases`; a phase (plan, replan, synthesis, fact extraction) by
`models.engine.phases`, before its model call, so a task delivered twice calls the model once. Both
take a lease of `AGENTQ_LEASE_S`, which this process's heartbeat renews while the work between
the claim's transaction and the one that ends it runs (`renewed`, `worker.execution.heartbeats`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import structlog
from sqlmodel import Session

from models.db import session_scope
from models.engine import phases
from models.errors import PhaseNotDue
from models.operations.logs import bind_work
from models.settings import get_settings
from models.tables import utcnow
from worker.execution.heartbeats import PhaseHeld, heartbeat

log = structlog.get_logger("agentq.worker")


def worker_name() -> str:
    """`host:pid` of this process (a pool child after the fork), recorded on each claim."""
    return f"{socket.gethostname()}:{os.getpid()}"


def claim_phase_in(
    session: Session, run_id: int, statuses: tuple[str, ...]
) -> phases.Claimed | None:
    """Claim run `run_id`'s phase (its status one of `statuses`) in the caller's transaction, for
    a lease of `AGENTQ_LEASE_S` (renew it with `renewed` once the transaction has committed),
    its attempt bound on the task's log lines;
    None, logged as `phase.skipped`, when another delivery holds it or the run is in none of
    `statuses`. Raises `PhaseNotDue` for a deferred phase not due yet."""
    claimed = phases.claim(
        session,
        run_id,
        statuses=statuses,
        worker=worker_name(),
        lease_s=get_settings().lease_s,
        now=utcnow(),
    )
    if isinstance(claimed, phases.Claimed):
        bind_work(attempt=claimed.attempt)  # on the task's following log lines
        return claimed
    if claimed.due_in_s is not None:
        raise PhaseNotDue(run_id, due_in_s=claimed.due_in_s)
    log.info("phase.skipped", run_id=run_id, phase="/".join(statuses), status=claimed.status)
    return None


def claim_phase(run_id: int, statuses: tuple[str, ...]) -> phases.Claimed | None:
    """`claim_phase_in`, in a transaction of its own."""
    with session_scope() as session:
        return claim_phase_in(session, run_id, statuses)


@contextmanager
def renewed(claimed: phases.Claimed | None) -> Iterator[None]:
    """Renew `claimed`'s lease every heartbeat while the block runs (its model calls, embeddings,
    folds: the work between the claim's transaction and the one that ends the phase), until it
    ends or raises; with None (nothing claimed), renew nothing. The claim's lease covers the
    moments before the first beat, and the last beat's the transaction that ends the phase."""
    if claimed is None:
        yield
        return
    with heartbeat.renewing(PhaseHeld(claimed.run.id or 0, claimed.attempt)):
        yield
