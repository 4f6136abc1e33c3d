"""A taken step's message, handed over to a step queued without one (DESIGN.md, invariant 13: the
broker only wakes idle workers).

Every queued step has a message in the broker that will wake a worker for it: its own, or one
handed over to it. A worker takes steps from Postgres in fair order, message or none
(`worker.execution.wakeups`): the worker that ends a step takes the fair-next item in the same
transaction, and a wake-up takes the fair-next item for whichever message woke it. The message of
a step taken so is still in the broker. It used to be spent on arrival, after a step queued in
the taking transaction had been sent a message of its own: two messages per hand-over under load,
one of them useless (issue 29's profile: sending and spending them were about a sixth of a chained
step's worker CPU). Now the taker queues that step with no message, pointing to the taken step
(`steps.wake_via`, `hand_over`), and the taken step's message, when it comes, wakes a worker for
the first step still queued along those pointers (`heir`).

Two transactions racing for one step are ordered by its row lock: a wake-up that loses the step
to a chain reads the pointers again in a new statement, which sees the chain's commit and the step
it handed the message to. What is lost with a message (a broker that came back empty, a killed
worker's message that was never redelivered) leaves queued steps with no message, which the
reconciler finds as it always has: it counts the due queued steps against the broker's depth
(`scheduler.tasks.lost_at_most`) and re-sends the stale ones.
"""

from __future__ import annotations

from typing import Final

from sqlmodel import Session

from models import sql
from models.engine.dispatch import Send
from models.engine.queue import TASK_EXECUTE_STEP

# heir: the oldest step still queued on the line of step :step_id's message: itself (then the only
# row: a queued step's line goes no further), or a step it was handed over to, or one that step's
# was, ... Each step is visited once (UNION, not UNION ALL: a step queued again after it was taken
# may point back along its own line, which UNION ALL would walk round and round).
HEIR: Final = """
WITH RECURSIVE line(id, status) AS (
    SELECT id, status FROM steps WHERE id = :step_id
    UNION
    SELECT s.id, s.status FROM line JOIN steps s ON s.wake_via = line.id
    WHERE line.status <> 'queued')
SELECT id FROM line WHERE status = 'queued' ORDER BY id LIMIT 1"""
# hand_over: queued step :heir is woken by the message of step :taken (guarded: still queued).
HAND_OVER: Final = """
UPDATE steps SET wake_via = :taken WHERE id = :heir AND status = 'queued' RETURNING id"""


def heir(session: Session, step_id: int) -> int | None:
    """The step the message of step `step_id` wakes a worker for: `step_id` itself while it is
    queued, else the oldest step still queued that its message was handed over to (`HEIR`);
    None when there is none (the message is spent)."""
    row = sql.one(session, HEIR, {"step_id": step_id})
    return None if row is None else int(row.id)


def hand_over(session: Session, *, taken: int, heir: int) -> bool:
    """Point queued step `heir` to step `taken`, whose message will wake a worker for it; False
    (nothing written) when `heir` is no longer queued."""
    return sql.one(session, HAND_OVER, {"taken": taken, "heir": heir}) is not None


def handed_in_chain(session: Session, sends: list[Send], *, taken: int) -> list[Send]:
    """`sends` less what queued step `taken`'s claim in this transaction makes needless, for a
    worker that ended a step and took `taken` in fair order: the message of `taken` itself when
    this transaction queued it (its send is still in `sends`), else one step queued here takes
    over `taken`'s message instead of a message of its own (`hand_over`). The others keep
    theirs."""
    queued_here = [args[0] for task, args in sends if task == TASK_EXECUTE_STEP and not args[1:]]
    if taken in queued_here:
        dropped = taken
    elif queued_here and hand_over(session, taken=taken, heir=queued_here[0]):
        dropped = queued_here[0]
    else:
        return sends
    return [send for send in sends if send != (TASK_EXECUTE_STEP, (dropped,))]
