"""Lock order on real Postgres: a cancel and a step's claim take the run's lock before the step's.

A cancel locks its run (`transitions.lock_run`, FOR UPDATE) and then its steps not yet running;
a claim used to lock the step (its UPDATE) and then the run (the key-share lock of the foreign
key its timeline event takes), so the two waited for each other until Postgres broke the cycle
with `deadlock detected` (issue 27, item 10). Here the cancel holds the run while the claim
starts, then cancels the step: the claim must wait for the run, not hold the step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from models.db import session_scope
from models.engine import leases, transitions
from models.errors import AgentqError, IllegalTransition
from models.tables import Run, Step, utcnow
from tests.integration.conftest import run_steps

pytestmark = pytest.mark.integration
NOOP = {"name": "a", "kind": "tool", "tool": "noop"}
CLAIMS_WAIT_S = 0.5  # for the claim to reach its first lock wait


def _queued_step(make_run: Callable[..., int]) -> tuple[int, int]:
    """A running run with one queued step no message names (set up directly)."""
    run_id = make_run([NOOP], start=False)
    with session_scope() as session:
        session.get(Run, run_id).status = "running"  # type: ignore[union-attr]
        step = session.get(Step, run_steps(run_id)[0].id)
        assert step is not None
        step.status, step.queued_at = "queued", utcnow() - timedelta(seconds=1)
    return run_id, step.id or 0


def _claim(step_id: int, found: list[object]) -> None:
    try:
        with session_scope() as session:
            leases.claim(session, step_id, worker="lock-order", lease_s=10, now=utcnow())
        found.append("claimed")
    except (AgentqError, IllegalTransition) as exc:
        found.append(exc)


@pytest.mark.parametrize("rounds", [3])
def test_a_cancel_and_a_claim_of_its_step_never_deadlock(
    make_run: Callable[..., int], rounds: int
) -> None:
    for _ in range(rounds):
        run_id, step_id = _queued_step(make_run)
        found: list[object] = []
        claimer = threading.Thread(target=_claim, args=(step_id, found))
        with session_scope() as cancel:
            transitions.lock_run(cancel, run_id)
            claimer.start()
            time.sleep(CLAIMS_WAIT_S)
            transitions.cancel_run(cancel, run_id)  # deadlocked here when the claim held the step
        claimer.join(timeout=30)
        assert len(found) == 1 and isinstance(found[0], IllegalTransition), found
        assert "deadlock" not in str(found[0])
        assert [s.status for s in run_steps(run_id)] == ["cancelled"]


def test_concurrent_cancels_and_claims_end_without_a_deadlock(
    make_run: Callable[..., int],
) -> None:
    """Many runs, each cancelled while its step is claimed: every run ends cancelled or its step
    is claimed once, and no transaction meets `deadlock detected`."""
    pairs = [_queued_step(make_run) for _ in range(30)]
    errors: list[BaseException] = []
    claimed: list[object] = []

    def cancel(run_id: int) -> None:
        try:
            with session_scope() as session:
                transitions.lock_run(session, run_id)
                time.sleep(0.01)
                transitions.cancel_run(session, run_id)
        except AgentqError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=_claim, args=(s, claimed)) for _, s in pairs]
    threads += [threading.Thread(target=cancel, args=(r,)) for r, _ in pairs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    failures = [e for e in [*errors, *claimed] if "deadlock" in str(e)]
    assert not failures, failures
    assert not errors, errors
    for run_id, _ in pairs:
        assert run_steps(run_id)[0].status in ("cancelled", "running")
