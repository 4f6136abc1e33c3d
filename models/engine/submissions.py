"""Submitting a run: insert it and make its first decision in one transaction, then send.

A new run's first decision used to wait for the coordinator: the submit committed and sent
`agentq.coordinate`, and the scheduler locked the run, decided and dispatched in a transaction of
its own, one Celery hop and one transaction more per run before its first step could start
(issue 10: about 6.5 ms of coordinator CPU per run in the engine benchmark). `submit` decides in
the transaction that inserts the run instead, with what every other decision uses
(`models.engine.decisions.advance`: the pure `models.engine.coordinator.decide`, then `apply` and
the user's dispatch, `models.engine.dispatch`):

- an explicit plan: the steps that can start are made `ready`, and as many as the user's
  dispatch cap (`AGENTQ_USER_MAX_RUNNING_STEPS`) has room for are `queued`, each with its
  `agentq.execute_step` to send;
- a goal alone: the run is made `planning`, with its `agentq.plan` to send, when the user has a
  free slot; otherwise it stays `queued` until a later dispatch of the user starts it.
Either way the user's older held work goes first, as it would at the coordinator.

Locks are taken in the order of every other transaction that dispatches: the user's service row
(`models.engine.fair_queue.lift`: a user with no run active is lifted to the least service of the
active users), the user's submit lock (`models.engine.quotas`, when quotas are on), the run's row (a
new row nobody else sees yet), then the user's dispatch lock; dispatch takes other rows `SKIP
LOCKED`. The messages are sent after the commit. One the broker does not take is recovered by
the reconciler (`scheduler.tasks.reconcile`): a step queued for longer than
`AGENTQ_QUEUED_STALE_S` is sent again, a run planning or queued with no news for
`AGENTQ_PHASE_STALE_S` gets its task again, a user whose steps stayed ready is dispatched. The
CLI, the HTTP API, the demo and the benchmarks all submit here.

Here too the goal is read for the values it states exactly (`models.plans.goal_values`: amounts,
currencies, ISO dates, identifiers such as `CC-4410`), which the run pins when the submitter
asks (`pin_from_goal`); the submitter is shown what was found and what was pinned
(`Submitted.from_goal`), and a fact it pinned explicitly always wins over a value found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Generic, TypeVar, overload

import structlog
from sqlmodel import Session

from models.db import session_scope
from models.engine import decisions, fair_queue, idempotency, queue, stack_limits, tracing
from models.engine.dispatch import Send
from models.engine.runs import MAX_PINNED_FACTS, check_user_id, submit_run
from models.errors import AgentqError
from models.plans.goal_values import GoalPins, pins
from models.plans.plans import PlanSpec
from models.settings import Settings
from models.tables import Run

T = TypeVar("T")
log = structlog.get_logger("agentq.submissions")


@dataclass(frozen=True)
class RunRequest:
    """A run as its submitter asks for it: the arguments of `models.engine.runs.submit_run`, which
    validates them; a budget left None takes its default (`AGENTQ_DEFAULT_*`).

    `pin_from_goal`: also pin the values the goal states (`models.plans.goal_values.pins`; the
    explicit `facts` win). Off unless asked (`agentq run submit --pin-from-goal`, the API's
    `pin_from_goal: true`), because a pin binds: it reaches every prompt of the run whole and
    the goal check fails a run whose deliverable disagrees with it (`models.engine.goal_checks`), so
    a value read by a rule, however plain, binds a run only when its submitter chose that. The
    values found are shown either way (`Submitted.from_goal`), so the submitter sees what
    asking would pin; and existing submitters keep the runs they had.
    """

    user_id: str
    goal: str
    facts: dict[str, str] = field(default_factory=dict)
    plan: PlanSpec | None = None
    replans: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    wall_time_s: float | None = None
    success_criteria: list[str] = field(default_factory=list)
    pin_from_goal: bool = False
    replan_check: str | None = None  # None: AGENTQ_REPLAN_CHECK
    approvals: dict[str, Any] = field(default_factory=dict)  # tightens AGENTQ_TOOL_APPROVALS

    def goal_pins(self) -> GoalPins:
        """The values the goal states, and the facts the run pins with them (see the class)."""
        return pins(self.goal, self.facts, pin=self.pin_from_goal, room=MAX_PINNED_FACTS)

    def fingerprint(self) -> str:
        """The SHA-256 of everything asked (`models.engine.idempotency.fingerprint`): an idempotency
        key answers only a request with the same one."""
        asked = {f.name: getattr(self, f.name) for f in fields(self)}
        asked["plan"] = None if self.plan is None else self.plan.model_dump(mode="json")
        return idempotency.fingerprint(asked)


@dataclass(frozen=True)
class Submitted(Generic[T]):
    """A committed run. `notified`: every message its first decision left was sent (False: the
    broker could not be reached, and the reconciler sends them once it is back; True too when
    there was none, the user's dispatch slots being full). `seen`: what the caller's `describe`
    read of the run in the submit transaction, after the decision (None without one).
    `from_goal`: the values found in the goal and those pinned (`RunRequest.pin_from_goal`).
    `replayed`: an idempotency key answered with the run an earlier request made
    (`submit_once`); nothing was written or sent now."""

    run_id: int
    notified: bool
    seen: T
    from_goal: GoalPins = field(default_factory=GoalPins)
    replayed: bool = False


def insert_and_decide(
    session: Session,
    request: RunRequest,
    *,
    settings: Settings,
    then: Callable[[Session, Run], None] | None = None,
) -> tuple[Run, list[Send]]:
    """Insert the run (`models.engine.runs.submit_run`) and apply its first decision
    (`models.engine.decisions.advance`, under the stack's `user_max_running_steps`:
    `models.engine.stack_limits`), in the caller's transaction; the run and the `(task, args)` to
    send once the caller has committed. `then(session, run)`, if given, runs between the two
    (a fork writes its plan there: `models.engine.forks`). Raises what `submit_run` and `then`
    raise (`InvalidInput`, `InvalidPlan`, `UserQuotaExceeded`); the caller's transaction must
    then write nothing."""
    check_user_id(request.user_id)  # before the fair queue's row of that user is written
    settings = stack_limits.effective(session, settings)
    fair_queue.lift(session, request.user_id)  # a user back from a pause banks no credit
    run = insert(session, request, settings=settings)
    if then is not None:
        then(session, run)
    advanced = decisions.advance(session, run.id or 0, cap=settings.user_max_running_steps)
    return run, advanced[1].sends if advanced is not None else []


def insert(session: Session, request: RunRequest, *, settings: Settings) -> Run:
    """Insert `request`'s run (`models.engine.runs.submit_run`, with the values its goal states
    pinned as asked: `RunRequest.goal_pins`), in the caller's transaction, nothing decided.
    Raises what `submit_run` raises, and then nothing is written."""
    goal_pins = request.goal_pins()
    return submit_run(
        session,
        settings=settings,
        user_id=request.user_id,
        goal=request.goal,
        facts=goal_pins.facts,
        from_goal=goal_pins.pinned,
        plan=request.plan,
        replans=request.replans,
        tokens=request.tokens,
        cost_usd=request.cost_usd,
        wall_time_s=request.wall_time_s,
        success_criteria=request.success_criteria,
        replan_check=request.replan_check,
        approvals=request.approvals,
    )


@overload
def submit(request: RunRequest, *, settings: Settings) -> Submitted[None]: ...
@overload
def submit(
    request: RunRequest, *, settings: Settings, describe: Callable[[Session, Run], T]
) -> Submitted[T]: ...
def submit(
    request: RunRequest,
    *,
    settings: Settings,
    describe: Callable[[Session, Run], T] | None = None,
) -> Submitted[Any]:
    """Submit `request` in one transaction (`insert_and_decide`), commit, then send its messages
    (`models.engine.queue.send_all`: a broker that is down is not an error). `describe(session,
    run)`, if given, reads what the caller shows of the run, in that transaction after the decision.
    Raises what `insert_and_decide` raises, or `DatabaseError`; nothing is sent then.
    Traced as `agentq.submit`, the root of the run's trace (`models.engine.tracing`)."""
    with tracing.span("agentq.submit"):
        with session_scope() as session:
            run, sends = insert_and_decide(session, request, settings=settings)
            seen = describe(session, run) if describe is not None else None
        return Submitted(run.id or 0, queue.send_all(sends), seen, request.goal_pins())


def submit_once(
    request: RunRequest,
    key: idempotency.Key,
    *,
    settings: Settings,
    describe: Callable[[Session, Run], dict[str, Any]],
) -> Submitted[dict[str, Any]]:
    """`submit` under an idempotency key (`models.engine.idempotency`), claimed first in the submit
    transaction: a key the same request made within `AGENTQ_IDEMPOTENCY_WINDOW_S` answers with
    that run (`replayed`; `seen` is the response stored with it, nothing is written or sent),
    one another request made raises `IdempotencyKeyReused` (and nothing is written); a new key
    submits, storing `describe(session, run)` (JSON) as its response. Raises as `submit`, and
    then the key is not kept."""
    with tracing.span("agentq.submit"):
        with session_scope() as session:
            sha256, window_s = request.fingerprint(), settings.idempotency_window_s
            replay = idempotency.claim(session, key, sha256=sha256, window_s=window_s)
            if replay is None:
                run, sends = insert_and_decide(session, request, settings=settings)
                seen = describe(session, run)
                idempotency.answered(session, key, run_id=run.id or 0, response=seen)
        if replay is not None:
            notified = bool(replay.notified)
            return Submitted(replay.run_id, notified, replay.response, request.goal_pins(), True)
        notified = queue.send_all(sends)
        _note_sent(key, notified)
        return Submitted(run.id or 0, notified, seen, request.goal_pins())


def _note_sent(key: idempotency.Key, notified: bool) -> None:
    """Keep whether the first answer's messages were sent; the run is committed either way, so
    a database that fails now is logged, not raised (a replay then says they were not)."""
    try:
        with session_scope() as session:
            idempotency.sent(session, key, notified=notified)
    except AgentqError as exc:
        log.warning("submit.unrecorded_notified", key=key.key, error=str(exc))
