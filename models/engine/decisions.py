"""Applying the coordinator's decision to a run, under its row lock: one place for both appliers.

The worker that ends a step advances its own run in the same transaction (issue 10): it locks
the run (`lock`), records the outcome, reads the decision (`models.engine.coordinator.decide`) and
applies it (`apply`): one ready step it claims itself and runs next, in-process; several go to
the broker; a finished plan starts its synthesis. A submit makes a new run's first decision in
the transaction that inserts it (`advance`, from `models.engine.submissions`), and the scheduler's
coordinator task the same for everything else (a reviewer's decision, a plan's or replan's
result, recovery; it first ends the steps whose child runs have ended: `models.engine.children`).
Messages are sent only after the commit (`Applied.sends`), and a run's user
is dispatched (`models.engine.dispatch`) whenever the decision may have freed one of their slots.
Every applier takes the run's lock before the user's dispatch lock, so none deadlocks another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.approvals import calls as approval_calls
from models.approvals.calls import APPROVAL_REQUIRED
from models.engine import (
    children,
    dispatch,
    fair_queue,
    leases,
    run_transitions,
    step_transitions,
)
from models.engine.coordinator import Decision, RunView, StepView, decide
from models.engine.dispatch import Send
from models.engine.queue import TASK_REPLAN, TASK_SYNTHESIZE
from models.errors import BudgetExhausted
from models.plans import plan_checks
from models.settings import get_settings
from models.tables import Step, utcnow

# lock_run: the run row, locked FOR UPDATE until the transaction ends; when :erasure_key is
# given, the user's erasure lock is taken shared first (an InitPlan runs before the row lock),
# for a step whose end writes a conversation turn (`models.memory.erasures`).
LOCK_RUN: Final = """
SELECT r.id, r.status, r.user_id, r.plan_version, r.replans_used, r.replans_limit,
    r.deadline_at, r.tokens_used >= r.tokens_limit AS tokens_spent, r.replan_check
FROM runs r
WHERE r.id = :run_id AND (
    SELECT true FROM (SELECT pg_advisory_xact_lock_shared(hashtextextended(:erasure_key, 0))) l)
FOR UPDATE OF r"""
# run_graph: the current version's steps, in order, and what each waits for; the name and
# status of every step of the run; the failed steps a version answered; the steps of the current
# version after which the should-replan check answered `replan` (read only for a run that
# checks: `models.plans.plan_checks`); for a worker ending a step (:ending), whether another user's
# waiting item is owed a turn first (`models.engine.fair_queue.OWED`). A statement of its own, after
# the lock, so that it sees what committed while the lock was awaited; it reads the run's version,
# user and check from the row itself, so it is sent with LOCK_RUN in one round trip (`lock`).
RUN_GRAPH: Final = f"""
WITH run_row AS (
    SELECT plan_version, user_id, replan_check <> 'off' AS checking FROM runs WHERE id = :run_id)
SELECT
    (SELECT jsonb_build_array(v.step_ids, v.after) FROM plan_versions v, run_row
     WHERE v.run_id = :run_id AND v.version = run_row.plan_version) AS version,
    (SELECT coalesce(jsonb_agg(jsonb_build_array(s.id, s.name, s.status)), '[]'::jsonb)
     FROM steps s WHERE s.run_id = :run_id) AS steps,
    (SELECT coalesce(jsonb_agg(p.replaces_step_id), '[]'::jsonb) FROM plan_versions p
     WHERE p.run_id = :run_id AND p.replaces_step_id IS NOT NULL) AS handled,
    (SELECT coalesce(jsonb_agg(c.step_id), '[]'::jsonb) FROM plan_checks c, run_row
     WHERE run_row.checking AND c.run_id = :run_id AND c.plan_version = run_row.plan_version
        AND c.verdict = 'replan') AS doubted,
    CASE WHEN :ending THEN (
        SELECT {fair_queue.OWED.replace(":user_id", "run_row.user_id")} FROM run_row)
    ELSE false END AS others_waiting"""


@dataclass
class Locked:
    """A run locked for this transaction: its row's values and its current plan graph.
    `others_waiting`: another user's waiting item (of any kind) is owed a turn first, or a lost
    worker's step waits to be taken back (`models.engine.fair_queue.OWED`), so a worker that ends a
    step of this run hands the next one to the fair queue rather than run it itself."""

    run_id: int
    status: str
    user_id: str
    replans_used: int
    replans_limit: int
    deadline_at: datetime | None
    tokens_spent: bool
    steps: list[StepView] = field(default_factory=list)
    handled: frozenset[int] = frozenset()
    others_waiting: bool = False
    doubted: frozenset[int] = frozenset()  # `RunView.replan_verdicts`
    plan_version: int = 0
    unmet_before: int | None = None  # `RunView.unmet_before`
    effect_made: str | None = None  # `RunView.effect_made`

    def view(self) -> RunView:
        """The coordinator's view of the run (`decide`'s input)."""
        return RunView(
            id=self.run_id,
            status=self.status,
            replans_used=self.replans_used,
            replans_limit=self.replans_limit,
            steps=tuple(self.steps),
            handled_failures=self.handled,
            deadline_passed=self.deadline_at is not None and self.deadline_at <= utcnow(),
            tokens_spent=self.tokens_spent,
            replan_verdicts=self.doubted,
            unmet_before=self.unmet_before,
            effect_made=self.effect_made,
        )

    def doubt(self, step_id: int) -> None:
        """Note a `replan` answer of the should-replan check after `step_id`, written by this
        transaction."""
        self.doubted = self.doubted | {step_id}

    def set_status(self, step_id: int, status: str) -> None:
        """Note a step's new status, written by this transaction."""
        self.steps = [
            StepView(s.id, s.name, status, s.after) if s.id == step_id else s for s in self.steps
        ]

    def after(self) -> dict[int, tuple[int, ...]]:
        """What each step of the current version waits for, by id."""
        return {s.id: s.after for s in self.steps}


def lock(
    session: Session, run_id: int, *, erasure_key: str | None = None, used_s: float | None = None
) -> Locked | None:
    """Lock run `run_id` and read its graph (two statements, in one round trip:
    `models.sql.first_rows`); None when there is no such run.
    `used_s`, for a worker ending a step: the seconds that step has had, which its user is about
    to be charged; then `others_waiting` is read (the users' service compared with it counted,
    and the stack's time slice, `AGENTQ_FAIR_SLICE_S`: `models.engine.fair_queue.OWED`), else it
    is False and not read (a decision at a submit, a plan's or the coordinator's)."""
    times = {
        "now": utcnow(),
        "ending": used_s is not None,
        "used_s": used_s or 0.0,
        "slice_s": get_settings().fair_slice_s,
    }
    row, graph = sql.first_rows(
        session,
        (LOCK_RUN, {"run_id": run_id, "erasure_key": erasure_key}),
        (RUN_GRAPH, {"run_id": run_id, **times}),
    )
    if row is None:
        return None
    locked = Locked(
        run_id=row.id,
        status=row.status,
        user_id=row.user_id,
        replans_used=row.replans_used,
        replans_limit=row.replans_limit,
        deadline_at=row.deadline_at,
        tokens_spent=bool(row.tokens_spent),
        plan_version=row.plan_version,
    )
    if graph.version is not None:
        step_ids, after = graph.version
        known = {s[0]: (s[1], s[2]) for s in graph.steps}
        locked.steps = [
            StepView(i, known[i][0], known[i][1], tuple(after.get(str(i), ()))) for i in step_ids
        ]
    locked.handled = frozenset(graph.handled)
    locked.doubted = frozenset(graph.doubted)
    locked.others_waiting = bool(graph.others_waiting)
    return locked


@dataclass
class Applied:
    """What applying a decision left to do after the commit: `sends` (task, args) to send, the
    step this process claimed to run next (`claimed`), and whether it should synthesize the run
    itself (`synthesize`). `slot_passed`: the run's next task (a claimed step, its synthesis or
    replan) holds the dispatch slot its last step held, so none was freed."""

    sends: list[Send] = field(default_factory=list)
    claimed: leases.Claim | None = None
    synthesize: bool = False
    slot_passed: bool = False


ClaimNext = Callable[[Session, int], leases.Claim]


def apply(
    session: Session,
    locked: Locked,
    decision: Decision,
    *,
    cap: int,
    claim_next: ClaimNext | None = None,
) -> Applied:
    """Apply `decision` to the locked run (one guarded transition each), then dispatch its user
    under `cap` (`AGENTQ_USER_MAX_RUNNING_STEPS`) unless the slot passed on: to a step claimed
    here, or to the run's synthesis or replan, which hold it as its last step did.

    With `claim_next` (a worker that may run one more step now), one step to start is claimed
    with it (pending -> running) and returned, and a finished plan is left for this process to
    synthesize; without, every step to start is made ready for dispatch, and a synthesis is sent.
    Raises what the transitions raise.
    """
    applied = _apply(session, locked, decision, claim_next)
    if not applied.slot_passed:
        applied.sends += dispatch.dispatch(session, locked.user_id, cap=cap)
    return applied


def advance(session: Session, run_id: int, *, cap: int) -> tuple[Decision, Applied] | None:
    """Lock run `run_id` (`lock`), decide (`decide`, pure) and apply the decision (`apply`, no
    step claimed here: every step to start is made ready and dispatched under `cap`), in the
    caller's transaction; the decision and what is left to send after the commit, or None when
    there is no such run. Raises what the transitions raise."""
    locked = lock(session, run_id)
    if locked is None:
        return None
    settle_children(session, locked)
    decision = decide(locked.view())
    return decision, apply(session, locked, decision, cap=cap)


def settle_children(session: Session, locked: Locked) -> None:
    """End the locked run's steps whose child runs have ended (`models.engine.children.settle`),
    before its decision: one read, only for a run with a step waiting for a child."""
    waiting = [s.id for s in locked.steps if s.status == "waiting_child"]
    if not waiting:
        return
    ended, spent = children.settle(session, locked.run_id, waiting)
    for step_id, status in ended.items():
        locked.set_status(step_id, status)
    locked.tokens_spent = locked.tokens_spent or spent


def _apply(
    session: Session, locked: Locked, decision: Decision, claim_next: ClaimNext | None
) -> Applied:
    run_id, step_id = locked.run_id, decision.step_id
    if decision.action == "enqueue_steps":
        if claim_next is not None and len(decision.step_ids) == 1:
            return Applied(claimed=claim_next(session, decision.step_ids[0]), slot_passed=True)
        for ready in decision.step_ids:
            step_transitions.ready_step(session, ready)
    elif decision.action == "replan" and step_id is not None:
        try:
            run_transitions.start_replanning(session, run_id, source=locked.status)
        except BudgetExhausted:
            escalate(session, locked, "replan_budget_spent", step_id, decision.detail)
            return Applied()
        return Applied(sends=[(TASK_REPLAN, (run_id, step_id))], slot_passed=True)
    elif decision.action == "escalate":
        escalate(session, locked, decision.reason, step_id, decision.detail)
    elif decision.action == "synthesize":
        run_transitions.start_synthesis(session, run_id)
        if claim_next is not None:
            return Applied(synthesize=True, slot_passed=True)
        return Applied(sends=[(TASK_SYNTHESIZE, (run_id,))], slot_passed=True)
    return Applied()


def escalate(
    session: Session, locked: Locked, reason: str, step_id: int | None, detail: dict[str, Any]
) -> None:
    """The run waits for a reviewer, with the failed step's name, error and tool in `detail`."""
    step = session.get(Step, step_id) if step_id else None
    full = dict(detail)
    if step is not None:
        full.update(step=step.name, error=step.error or full.get("error", ""), tool=step.tool or "")
    if reason == APPROVAL_REQUIRED and step_id:  # the gated call, as the reviewer judges it
        full.update(approval_calls.detail(session, step_id))
    if step_id and full.get("replan_check") == "replan":  # why the check found the rest pointless
        why = plan_checks.replan_reason(session, locked.run_id, locked.plan_version, step_id)
        full["error"] = f"the should-replan check after it said: {why}"
    run_transitions.escalate(
        session, locked.run_id, expected=locked.status, reason=reason, step_id=step_id, detail=full
    )
