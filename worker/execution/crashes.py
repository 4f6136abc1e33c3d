"""A bug in a paid phase escalates its run instead of coming back for ever.

A plan, replan or synthesis task that raised an error agentq did not raise on purpose (a bug, a
statement the server refused) used to leave its run in the phase: the reconciler re-sends a
phase once its claim's lease has run out (`scheduler.tasks`), so the task ran again every
reconcile interval and failed the same way, and the run never moved (issue 12 found one: a
synthesis stuck `synthesizing` past every test's timeout). `escalated_on_crash` turns such an
error into an escalation with reason `internal_error` (a `Crashed` report to
`models.engine.escalation_rules`), as a step's bug fails its step
(`worker.execution.steps.perform`): a reviewer sees it, and the worker log has the traceback.

What is no failure of the phase still goes up: a database that is away (the task waits out the
outage), a rate limit and a phase not yet due (the task sends itself again).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import structlog

from models.db import session_scope
from models.engine import escalation_rules
from models.errors import DatabaseUnavailable, IllegalTransition, PhaseNotDue, RateLimited

log = structlog.get_logger("agentq.worker")
NOT_CRASHES: Final = (DatabaseUnavailable, RateLimited, PhaseNotDue)


@contextmanager
def escalated_on_crash(run_id: int, phase: str) -> Iterator[None]:
    """Run the block, the task of run `run_id`'s `phase` (its status: `planning`, `replanning`,
    `synthesizing`); an exception other than `NOT_CRASHES` is logged with its traceback and
    escalates the run from `phase` (reason `internal_error`, detail `{"error"}` naming the
    phase and the exception's type only: its text may hold host paths), and is not raised. A run
    no longer in `phase` is left as it is. Raises `NOT_CRASHES`, and what the escalation's own
    transaction raises."""
    try:
        yield
    except NOT_CRASHES:
        raise
    except Exception as exc:
        log.exception(f"{phase}.unexpected", run_id=run_id)
        crashed = escalation_rules.Crashed(phase, error_type=type(exc).__name__)
        try:
            with session_scope() as session:
                escalation_rules.escalate(session, run_id, crashed)
        except IllegalTransition:
            log.info("crash.not_escalated", run_id=run_id, phase=phase, reason="run moved on")
