"""A step's task that meets a database outage: what its retry carries (issue 11).

`agentq.execute_step` that meets `DatabaseUnavailable` is sent again after a backoff
(`models.engine.queue.OUTAGE_RETRIES`), never acknowledged as done. What its retry carries depends
on where the outage met it:

- at the claim: nothing; the retry claims the step as the first delivery would have. The claim
  is guarded: if it did commit before its connection dropped, the retry finds the step running
  and does nothing, and the step waits for its lease to expire and the reconciler, as after a
  killed worker;
- after the claim, before the step had an outcome (a model step's budget or journal write): the
  attempt it holds and a deferral due at once (`interrupted`): the retry puts the step back in
  the queue, not counted as a failed attempt, and it is claimed anew under the next attempt;
- after the tool or model call, at the commit of its outcome: the attempt and that outcome
  (`carry`), so the tool does not run again when Postgres is back: the retry records it
  (`resume`, then `worker.execution.steps.finish`).

Either way only the attempt that holds the step writes its outcome, in the guarded transition
of `worker.execution.steps.finish`: a retry delivered twice, or one whose step's lease expired
meanwhile and was claimed again, finds another state and changes nothing, so a step has one
committed result. The carried outcome is the only thing that lives in a message, and only until it
is committed: if that message is lost, the step stays running until its lease expires and the
reconciler runs it again, as after a killed worker.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import structlog

from models.db import retry_dropped, session_scope
from models.errors import DatabaseUnavailable
from models.tables import Run, Step
from worker.execution.attempts import Claimed, Outcome

log = structlog.get_logger("agentq.worker")
ERROR_MAX_CHARS = 1000


def interrupted(exc: DatabaseUnavailable) -> Outcome:
    """The outcome of an attempt the outage cut short: deferred, due at once (`deferrals`
    grows with `attempt`, so it does not count against `max_attempts`)."""
    return Outcome("deferred", error=f"interrupted: {exc}"[:ERROR_MAX_CHARS], retry_after_s=0.0)


def carry(claimed: Claimed, outcome: Outcome | None, exc: DatabaseUnavailable) -> dict[str, Any]:
    """What the retry of the task holding `claimed` carries, as JSON: `{"attempt": int,
    "outcome": the fields of `outcome`, or of `interrupted(exc)` when it had none yet}`."""
    return {"attempt": claimed.step.attempt, "outcome": asdict(outcome or interrupted(exc))}


@retry_dropped
def resume(step_id: int, held: dict[str, Any]) -> tuple[Claimed, Outcome] | None:
    """Step `step_id` as the attempt `held["attempt"]` holds it, and the outcome `held` carries
    (`carry`); None, logged as `execute_step.skipped`, when the step is no longer running under
    that attempt (its outcome was committed after all, or its lease expired and it was claimed
    again). Raises `DatabaseUnavailable` while the outage lasts."""
    attempt = int(held["attempt"])
    with session_scope() as session:
        step = session.get(Step, step_id)
        if step is None or step.status != "running" or step.attempt != attempt:
            found = None if step is None else (step.status, step.attempt)
            log.info("execute_step.skipped", step_id=step_id, attempt=attempt, found=found)
            return None
        run = session.get(Run, step.run_id)
        user_id = run.user_id if run is not None else ""
    return Claimed(step, {}, {}, 0, user_id), Outcome(**held["outcome"])
