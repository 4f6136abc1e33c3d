"""Escalation deadlines on real Postgres, and releasing a claim.

The beat function is called directly with a clock moved forward (`now`) and the action as an
argument, so a test needs neither a day's wait nor its own scheduler. The test escalation's
deadline is put one hour ahead in the database: the running engine's beat (real clock, default
`wait`) leaves it alone, and the one-hour-ahead clock reaches no other test's escalation (theirs
are a day ahead). One test watches the running beat itself apply a deadline set in the past.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from sqlmodel import col, select
from structlog.testing import capture_logs

from models.db import session_scope
from models.engine import run_transitions, transitions
from models.errors import ClaimedByAnother, IllegalTransition
from models.review import reviews
from models.settings import get_settings
from models.tables import Escalation, Run, RunEvent, Step, utcnow
from scheduler.tasks import apply_escalation_deadlines

pytestmark = pytest.mark.integration
NOOP = {"name": "a", "kind": "tool", "tool": "noop"}
BEAT_WAIT_S = 20.0  # the engine's beat runs every second; generous for a loaded 2-core machine


def escalated_run(make_run: Callable[..., int]) -> tuple[int, int]:
    """A run waiting for review with one open escalation; returns (run id, escalation id)."""
    run_id = make_run([NOOP], start=False)
    with session_scope() as session:
        esc = run_transitions.escalate(
            session, run_id, expected="running", reason="replan_budget_spent"
        )
        assert esc is not None
        return run_id, esc.id or 0


def due_in_an_hour(escalation_id: int) -> datetime:
    """Move the escalation's deadline to an hour from now; returns a clock just past it."""
    deadline = utcnow() + timedelta(hours=1)
    with session_scope() as session:
        esc = reviews.get_escalation(session, escalation_id)
        esc.deadline_at = deadline
    return deadline + timedelta(seconds=1)


def escalation(escalation_id: int) -> Escalation:
    with session_scope() as session:
        return reviews.get_escalation(session, escalation_id)


def events(run_id: int, kind: str | None = None) -> list[RunEvent]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
        return [e for e in session.exec(stmt) if kind is None or e.kind == kind]


def test_an_escalation_opens_with_its_deadline(make_run: Callable[..., int]) -> None:
    _, esc_id = escalated_run(make_run)
    esc = escalation(esc_id)
    assert esc.deadline_at is not None and esc.deadline_passed_at is None
    timeout = (esc.deadline_at - esc.created_at).total_seconds()
    assert timeout == pytest.approx(get_settings().escalation_timeout_s)


def test_reject_at_the_deadline_ends_the_run_as_a_rejection(make_run: Callable[..., int]) -> None:
    run_id, esc_id = escalated_run(make_run)
    with session_scope() as session:  # a claim does not stop the clock
        transitions.claim_escalation(session, esc_id, reviewer="gone-reviewer")
    now = due_in_an_hour(esc_id)

    assert apply_escalation_deadlines(now=now, action="reject")["rejected"] == 1

    esc = escalation(esc_id)
    assert (esc.status, esc.decision, esc.decided_by) == ("decided", "reject", "deadline")
    assert esc.deadline_passed_at == now and "deadline passed" in (esc.comment or "")
    with session_scope() as session:
        run = session.get(Run, run_id)
        steps = session.exec(select(Step).where(Step.run_id == run_id)).all()
    assert run is not None and run.status == "failed"
    assert (run.error or "").startswith("rejected by deadline: the review deadline passed")
    assert [s.status for s in steps] == ["cancelled"]

    # The run's memory task writes its `memory.*` events whenever it runs: not the deadline's.
    def engine_kinds() -> list[str]:
        return [e.kind for e in events(run_id) if not e.kind.startswith("memory.")]

    kinds = engine_kinds()
    passed = kinds.index("escalation.deadline_passed")
    assert kinds[passed:] == [
        "escalation.deadline_passed",
        "escalation.decided",
        "step.cancelled",
        "run.failed",
    ]
    (event,) = events(run_id, "escalation.deadline_passed")
    assert event.detail["action"] == "reject" and event.detail["claimed_by"] == "gone-reviewer"

    assert apply_escalation_deadlines(now=now, action="reject")["rejected"] == 0
    assert engine_kinds() == kinds


def test_wait_at_the_deadline_notifies_once_and_stays_open(make_run: Callable[..., int]) -> None:
    run_id, esc_id = escalated_run(make_run)
    now = due_in_an_hour(esc_id)

    with capture_logs() as logs:
        first = apply_escalation_deadlines(now=now, action="wait")
        second = apply_escalation_deadlines(now=now + timedelta(minutes=5), action="wait")

    assert (first["waiting"], second["waiting"]) == (1, 0)
    (event,) = events(run_id, "escalation.deadline_passed")
    assert event.detail["action"] == "wait" and event.detail["escalation_id"] == esc_id
    esc = escalation(esc_id)
    assert esc.status == "open" and esc.deadline_passed_at == now
    warnings = [log for log in logs if log.get("escalation_id") == esc_id]
    assert [(w["event"], w["log_level"]) for w in warnings] == [
        ("escalation.deadline_passed", "warning")
    ]
    with session_scope() as session:  # still decidable by a reviewer
        reviews.reject(session, esc_id, reviewer="late-reviewer", comment="looked at it")
    assert escalation(esc_id).decided_by == "late-reviewer"


def test_concurrent_beats_apply_a_deadline_once(make_run: Callable[..., int]) -> None:
    run_id, esc_id = escalated_run(make_run)
    now = due_in_an_hour(esc_id)
    start = threading.Barrier(4)
    results: list[dict[str, int]] = []

    def beat() -> None:
        start.wait()
        results.append(apply_escalation_deadlines(now=now, action="reject"))

    threads = [threading.Thread(target=beat) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(r["rejected"] for r in results) == 1 and not any(r["failed"] for r in results)
    assert len(events(run_id, "escalation.deadline_passed")) == 1
    assert len(events(run_id, "run.failed")) == 1


def test_a_cancelled_run_has_no_deadline_left_to_pass(
    make_run: Callable[..., int],
) -> None:
    run_id, esc_id = escalated_run(make_run)
    with session_scope() as session:
        transitions.cancel_run(session, run_id)  # withdraws the escalation
    now = due_in_an_hour(esc_id)

    counts = apply_escalation_deadlines(now=now, action="reject")

    assert counts == {"rejected": 0, "waiting": 0, "failed": 0}
    withdrawn = escalation(esc_id)
    assert (withdrawn.decision, withdrawn.deadline_passed_at) == ("withdrawn", None)
    assert events(run_id, "escalation.deadline_passed") == []
    with session_scope() as session:
        assert session.get(Run, run_id).status == "cancelled"  # type: ignore[union-attr]


def test_the_running_beat_applies_a_passed_deadline_once(make_run: Callable[..., int]) -> None:
    assert get_settings().escalation_deadline_action == "wait", "the engine runs the default"
    run_id, esc_id = escalated_run(make_run)
    with session_scope() as session:
        reviews.get_escalation(session, esc_id).deadline_at = utcnow() - timedelta(seconds=1)

    give_up = time.monotonic() + BEAT_WAIT_S
    while not events(run_id, "escalation.deadline_passed"):
        assert time.monotonic() < give_up, "the beat did not apply the deadline"
        time.sleep(0.2)
    time.sleep(3)  # three more beats

    assert len(events(run_id, "escalation.deadline_passed")) == 1
    assert escalation(esc_id).status == "open"


def test_release_by_the_claimer_or_with_force(make_run: Callable[..., int]) -> None:
    run_id, esc_id = escalated_run(make_run)
    alice = f"alice-{run_id}"
    with session_scope() as session:
        reviews.get_escalation(session, esc_id)
        transitions.claim_escalation(session, esc_id, reviewer=alice)
    with session_scope() as session:
        assert reviews.claims_by_reviewer(session)[alice] == 1

    with session_scope() as session, pytest.raises(ClaimedByAnother, match=f"claimed by {alice}"):
        reviews.release(session, esc_id, reviewer="bob")
    assert escalation(esc_id).claimed_by == alice

    with session_scope() as session:
        reviews.release(session, esc_id, reviewer=alice)
    esc = escalation(esc_id)
    assert (esc.status, esc.claimed_by, esc.claimed_at) == ("open", None, None)

    with session_scope() as session:
        transitions.claim_escalation(session, esc_id, reviewer=alice)
    with session_scope() as session:
        reviews.release(session, esc_id, reviewer="bob", force=True)
    assert escalation(esc_id).status == "open"
    released = [e.detail for e in events(run_id, "escalation.released")]
    assert released == [
        {"claimer": alice, "reviewer": alice, "forced": False},
        {"claimer": alice, "reviewer": "bob", "forced": True},
    ]
    with session_scope() as session:
        assert alice not in reviews.claims_by_reviewer(session)

    with session_scope() as session, pytest.raises(IllegalTransition, match="'open'"):
        reviews.release(session, esc_id, reviewer=alice, force=True)
