"""The fork command behind `agentq run fork`, `POST /api/v1/runs/{id}/fork` and the console's
"Fork from here" (`models.engine.forks` has the rule): one transaction that checks the fork,
submits the new run and makes its first decision, then its messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlmodel import Session

from models.db import session_scope
from models.engine import forks, queue, submissions, tracing
from models.engine.forks import ForkRequest
from models.engine.submissions import Submitted
from models.memory.erasures import hold_shared
from models.settings import get_settings
from models.tables import Run


def fork(
    request: ForkRequest,
    *,
    user_id: str | None = None,
    describe: Callable[[Session, Run], Any] | None = None,
) -> Submitted[Any]:
    """Fork run `request.run_id` from its step `request.from_step` (`models.engine.forks`) in
    one transaction, under the process's settings, then send the new run's messages.
    `user_id`: the only user whose runs the caller may fork (a submitter token's; None: any).
    `describe(session, run)`, if given, reads what the caller shows of the new run, after its
    first decision. Raises `NotFound`, `Conflict` (naming `from_step` or `run_id`), `InvalidPlan`
    (naming the plan's field) or `UserQuotaExceeded`, and then nothing is written."""
    with tracing.span("agentq.fork", run_id=request.run_id):
        with session_scope() as session:
            source = forks.source_run(session, request.run_id, user_id=user_id)
            hold_shared(session, user_id=source.user_id)  # a forget waits for the copies
            run_request, then = forks.fork_in(session, source, request)
            run, sends = submissions.insert_and_decide(
                session, run_request, settings=get_settings(), then=then
            )
            seen = describe(session, run) if describe is not None else None
        return Submitted(run.id or 0, queue.send_all(sends), seen)
