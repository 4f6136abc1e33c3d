"""Paid phases run once per claim (issue 11, item 1), against real Postgres with the model
provider faked in this process: a plan, replan, synthesis or fact extraction delivered twice at
once calls the model once; the reconciler never re-sends a phase whose holder's lease is live,
and does once it expired; a deferred phase claimed early is refused with the time left."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import col, select

from models.db import session_scope
from models.engine import phases, run_transitions, transitions
from models.engine.queue import TASK_SYNTHESIZE
from models.errors import PhaseNotDue
from models.plans.tools import load_tool_modules
from models.settings import get_settings
from models.tables import Escalation, Run, RunEvent, utcnow
from scheduler import tasks
from worker.memory import remembering
from worker.model_calls import calls
from worker.model_calls.providers import Completion, ModelRequest
from worker.phases import planner, synthesis

pytestmark = pytest.mark.integration

PLAN = '{"steps": [{"name": "only", "kind": "tool", "tool": "noop", "args": {}}]}'
NOOP = [{"name": "only", "kind": "tool", "tool": "noop", "args": {}}]
CALL_S = 0.5  # how long the fake model takes to answer: both deliveries overlap within it


class SlowProvider:
    """Answers every call with `text` after `CALL_S`, counting the calls (thread-safe)."""

    name = "scripted"

    def __init__(self, text: str) -> None:
        self.text = text
        self.requests: list[ModelRequest] = []
        self._lock = threading.Lock()

    def complete(self, request: ModelRequest) -> Completion:
        with self._lock:
            self.requests.append(request)
        time.sleep(CALL_S)
        return Completion(self.text, "scripted", 100, 10, "stop", offline=False)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], SlowProvider]]:
    load_tool_modules(get_settings().tool_modules)

    def install(text: str) -> SlowProvider:
        fake = SlowProvider(text)
        monkeypatch.setattr(calls, "provider", lambda: fake)
        return fake

    yield install


def _run_in(status: str, make_run: Callable[..., int]) -> int:
    """A run (not started: nothing is sent for it) moved to `status` as its task would find it.
    Its phase is due a minute from now (`updated_at`), so no worker woken meanwhile takes it from
    the fair queue (`models.engine.fair_queue`): only this test's deliveries claim it (a claim
    checks the due time of a deferred phase only)."""
    if status == "planning":
        run_id = make_run(None, user="phases", start=False)
        with session_scope() as session:
            run_transitions.start_planning(session, run_id)
    else:
        run_id = make_run(NOOP, user="phases", start=False)
        with session_scope() as session:
            run_transitions.start_synthesis(session, run_id)
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.updated_at = utcnow() + timedelta(seconds=60)
    return run_id


def _twice_at_once(work: Callable[[], Any]) -> list[Any]:
    """Run `work` in two threads at once (two deliveries of one message); their results."""
    results: list[Any] = []
    start = threading.Barrier(2)

    def deliver() -> None:
        start.wait()
        results.append(work())

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def _events(run_id: int, kind: str) -> list[RunEvent]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == kind)
        return list(session.exec(stmt.order_by(col(RunEvent.id))))


def test_a_synthesis_delivered_twice_at_once_calls_the_model_once(
    engine: object, make_run: Callable[..., int], slow: Callable[[str], SlowProvider]
) -> None:
    fake = slow("the answer")
    run_id = _run_in("synthesizing", make_run)
    _twice_at_once(lambda: synthesis.synthesize(run_id))
    assert len(fake.requests) == 1
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.status == "succeeded"
        assert run.final_result is not None and run.final_result["answer"] == "the answer"
        assert (run.phase_attempt, run.phase_lease_expires_at) == (1, None)
    assert len(_events(run_id, "model.call")) == 1
    assert len(_events(run_id, "run.succeeded")) == 1


def test_a_plan_delivered_twice_at_once_calls_the_model_once(
    engine: object, make_run: Callable[..., int], slow: Callable[[str], SlowProvider]
) -> None:
    fake = slow(PLAN)
    run_id = _run_in("planning", make_run)
    moved = _twice_at_once(lambda: planner.plan(run_id))
    assert sorted(moved) == [False, True]
    assert len(fake.requests) == 1
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None and (run.status, run.plan_version) == ("running", 1)


def test_a_phase_is_held_until_its_holder_ends_it_or_its_lease_expires(
    engine: object, make_run: Callable[..., int]
) -> None:
    run_id = _run_in("synthesizing", make_run)
    now = utcnow()
    claim = {"statuses": ("synthesizing",), "worker": "w", "lease_s": 60.0}
    with session_scope() as session:
        first = phases.claim(session, run_id, now=now, **claim)
    with session_scope() as session:
        held = phases.claim(session, run_id, now=now, **claim)
    assert isinstance(first, phases.Claimed) and first.attempt == 1
    assert held == phases.Refused("synthesizing")
    later = now + timedelta(seconds=61)  # the first holder's lease has expired
    with session_scope() as session:
        second = phases.claim(session, run_id, now=later, **claim)
    assert isinstance(second, phases.Claimed) and second.attempt == 2
    with session_scope() as session:  # the first holder may no longer write
        assert not phases.end(session, run_id, 1, statuses=("synthesizing",))
    with session_scope() as session:
        assert phases.end(session, run_id, 2, statuses=("synthesizing",))
    with session_scope() as session:  # released: the next delivery may take it
        third = phases.claim(session, run_id, now=later, **claim)
    assert isinstance(third, phases.Claimed) and third.attempt == 3


def test_a_deferred_phase_is_not_claimed_before_it_is_due(
    engine: object, make_run: Callable[..., int], slow: Callable[[str], SlowProvider]
) -> None:
    fake = slow("the answer")
    run_id = _run_in("synthesizing", make_run)
    with session_scope() as session:
        run_transitions.defer_run(
            session,
            run_id,
            phase="synthesizing",
            retry_after_s=170,
            max_deferrals=10,
            error="429",
        )
    with pytest.raises(PhaseNotDue) as early:
        synthesis.synthesize(run_id)
    assert 160 < early.value.due_in_s <= 170
    assert fake.requests == []


def test_the_reconciler_never_resends_a_phase_whose_holder_is_alive(
    engine: object, make_run: Callable[..., int]
) -> None:
    """A phase quiet for longer than `AGENTQ_PHASE_STALE_S` is re-sent only if no attempt holds
    it: a slow model call under a live lease is left alone; a killed holder's expired one not."""
    run_id = _run_in("synthesizing", make_run)
    now = utcnow()
    stale = now - timedelta(seconds=get_settings().phase_stale_s)
    with session_scope() as session:
        claimed = phases.claim(
            session, run_id, statuses=("synthesizing",), worker="w", lease_s=60.0, now=now
        )
        assert isinstance(claimed, phases.Claimed)
        backdated = "UPDATE runs SET updated_at = :at WHERE id = :id"
        session.execute(sa.text(backdated), {"at": stale - timedelta(seconds=1), "id": run_id})
    with session_scope() as session:
        alive = tasks._stale_runs(session, stale, now)
    assert (TASK_SYNTHESIZE, (run_id,)) not in alive
    expired = now + timedelta(seconds=61)
    with session_scope() as session:
        dead = tasks._stale_runs(session, expired - timedelta(days=1), expired)
    assert (TASK_SYNTHESIZE, (run_id,)) in dead


def test_a_cancelled_phase_leaves_no_claim_behind(
    engine: object, make_run: Callable[..., int]
) -> None:
    """A run leaving its phase (here cancelled mid-synthesis) releases the claim: its memory
    task can claim the run's fact extraction at once."""
    run_id = _run_in("synthesizing", make_run)
    claim = {"worker": "w", "lease_s": 60.0, "now": utcnow()}
    with session_scope() as session:
        held = phases.claim(session, run_id, statuses=("synthesizing",), **claim)
        assert isinstance(held, phases.Claimed)
        transitions.cancel_run(session, run_id)
    with session_scope() as session:
        ended = phases.claim(session, run_id, statuses=("cancelled",), **claim)
    assert isinstance(ended, phases.Claimed) and ended.attempt == 2


def test_a_fact_extraction_delivered_twice_at_once_calls_the_model_once(
    engine: object, make_run: Callable[..., int], slow: Callable[[str], SlowProvider]
) -> None:
    fake = slow('{"facts": []}')
    think = [{"name": "think", "kind": "model", "instruction": "think it over"}]
    run_id = make_run(think, user="phases-memory", start=False)
    with session_scope() as session:
        run_transitions.start_synthesis(session, run_id)
        run_transitions.succeed_run(session, run_id, final_result={"answer": "done"})
    _twice_at_once(lambda: remembering.remember_ended_run(run_id))
    assert len(fake.requests) == 1
    assert len(_events(run_id, "memory.remembered")) == 1


def test_only_the_holder_of_a_phase_renews_it(engine: object, make_run: Callable[..., int]) -> None:
    """A heartbeat's renewal (`phases.renew`) extends the lease of the attempt that holds the
    phase, and of no other: not an attempt whose phase was taken over, nor one that ended it."""
    run_id = _run_in("synthesizing", make_run)
    now = utcnow()
    claim = {"statuses": ("synthesizing",), "worker": "w", "lease_s": 10.0}
    with session_scope() as session:
        first = phases.claim(session, run_id, now=now, **claim)
    assert isinstance(first, phases.Claimed)
    later = now + timedelta(seconds=8)  # a beat before the lease ends keeps the phase
    with session_scope() as session:
        assert phases.renew(session, run_id, 1, lease_s=10.0, now=later)
    with session_scope() as session:
        held = phases.claim(session, run_id, now=now + timedelta(seconds=12), **claim)
    assert held == phases.Refused("synthesizing")
    expired = later + timedelta(seconds=11)
    with session_scope() as session:
        second = phases.claim(session, run_id, now=expired, **claim)
    assert isinstance(second, phases.Claimed) and second.attempt == 2
    with session_scope() as session:  # the first holder's late beat takes nothing back
        assert not phases.renew(session, run_id, 1, lease_s=10.0, now=expired)
        assert phases.end(session, run_id, 2, statuses=("synthesizing",))
    with session_scope() as session:  # ended: released, and no beat holds it again
        assert not phases.renew(session, run_id, 2, lease_s=10.0, now=expired)
        run = session.get(Run, run_id)
        assert run is not None and run.phase_lease_expires_at is None


@pytest.mark.parametrize("status", ["planning", "synthesizing"])
def test_a_bug_in_a_phase_escalates_its_run_once(make_run: Callable[..., int], status: str) -> None:
    """A phase's task that raised an unexpected error left its run in the phase, re-sent by the
    reconciler and crashing again for ever; now the run escalates `internal_error` with the
    exception's type only, and a second crash of the same phase (the run moved on) changes
    nothing."""
    from worker.execution.crashes import escalated_on_crash

    run_id = _run_in(status, make_run)
    for _ in range(2):
        with escalated_on_crash(run_id, status):
            raise KeyError("/srv/agentq/secret-path")
    with session_scope() as session:
        run = session.get(Run, run_id)
        escalations = session.exec(select(Escalation).where(Escalation.run_id == run_id)).all()
    assert run is not None and run.status == "waiting_review"
    (esc,) = escalations
    assert esc.reason == "internal_error"
    assert esc.detail["error"] == (
        f"{status} failed with an internal error (KeyError); see the worker log"
    )
    with pytest.raises(PhaseNotDue), escalated_on_crash(run_id, status):  # not a crash
        raise PhaseNotDue(run_id, due_in_s=1.0)
