"""Goals on a schedule against the real engine (`models.schedules`), with effects counted: runs
in `runs`, fire rows in `schedule_fires`.

The fire passes here are given a clock (`now`) past the schedules' real due times, so the
session engine's own beat (which fires what is due by the database's clock) never fires these
schedules itself; one test lets it, on purpose. Each test's schedule belongs to a user of its
own, whose runs are counted.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from models.db import session_scope
from models.engine import stack_limits
from models.engine.submissions import RunRequest
from models.errors import Conflict, IllegalTransition
from models.front import commands
from models.front import schedules as front
from models.schedules import fires
from models.schedules.listing import ScheduleShown
from models.settings import get_settings
from ops.stack import LocalStack
from tests.integration.conftest import REPO_ROOT, wait_for_run

pytestmark = pytest.mark.integration
MakeSchedule = Callable[..., ScheduleShown]
MINUTE = timedelta(minutes=1)
# One pass of a scheduler in a process of its own: fire at the given clock, once the given wall
# time comes (so two such processes, started apart, fire at the same moment); prints how many
# due times it submitted.
SCHEDULER = """
import sys, time
from datetime import datetime
from models.schedules import fires
from models.settings import get_settings
now, start = datetime.fromisoformat(sys.argv[1]), float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
print(sum(f.outcome == "submitted" for f in fires.fire_due(settings=get_settings(), now=now)))
"""


def _step(name: str, tool: str = "noop") -> dict[str, Any]:
    return {"name": name, "kind": "tool", "tool": tool, "args": {}}


@pytest.fixture
def make_schedule(engine: LocalStack) -> Iterator[MakeSchedule]:
    """`make_schedule(tool="noop", every_s=60, **create_kwargs)`: a schedule of a new user whose
    runs have one step calling `tool`. At the end the schedule is removed (no later pass fires
    it) and its user's runs still active are cancelled."""
    made: list[ScheduleShown] = []

    def make(tool: str = "noop", every_s: int | None = 60, **kwargs: Any) -> ScheduleShown:
        user = f"sched-{uuid.uuid4().hex[:8]}"
        plan = commands.checked_plan({"steps": [_step("only", tool)]}, facts=[])
        request = RunRequest(user_id=user, goal="scheduled", plan=plan, replans=0)
        made.append(front.create(request, name="every-minute", every_s=every_s, **kwargs))
        return made[-1]

    yield make
    for shown in made:
        front.remove(shown.schedule.id or 0)
        for run_id in _run_ids(shown.schedule.user_id):
            with contextlib.suppress(IllegalTransition):  # ended already
                commands.cancel(run_id)


def _run_ids(user: str) -> list[int]:
    with session_scope() as session:
        query = sa.text("SELECT id FROM runs WHERE user_id = :user ORDER BY id")
        return [row.id for row in session.execute(query, {"user": user})]


def _fires(schedule_id: int) -> list[Any]:
    with session_scope() as session:
        query = sa.text(
            "SELECT due_at, outcome, run_id, detail, due_times FROM schedule_fires "
            "WHERE schedule_id = :id ORDER BY due_at"
        )
        return list(session.execute(query, {"id": schedule_id}))


def _next_due(schedule_id: int) -> datetime:
    return front.show(schedule_id).schedule.next_due_at


def test_two_schedulers_and_a_restart_submit_once_per_due_time(
    make_schedule: MakeSchedule,
) -> None:
    """Two scheduler processes fire the same schedule at the same moment, with six due times
    owed: six runs, one per due time. A restarted scheduler at the same clock submits nothing
    more; two minutes later, two more."""
    shown = make_schedule(overlap="allow", catch_up=6)
    schedule_id, user = shown.schedule.id or 0, shown.schedule.user_id
    first = shown.schedule.next_due_at
    now = first + 5 * MINUTE + timedelta(seconds=1)
    start = time.time() + 4.0  # both have imported agentq by then
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-c", SCHEDULER, now.isoformat(), str(start)]
    both = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    submitted = [int(p.communicate(timeout=120)[0].split()[-1]) for p in both]  # logs before
    assert sorted(submitted) in ([0, 6], [1, 5], [2, 4], [3, 3])  # six between them, whoever
    assert len(_run_ids(user)) == 6
    rows = _fires(schedule_id)
    assert [r.due_at for r in rows] == [first + i * MINUTE for i in range(6)]
    assert {r.outcome for r in rows} == {"submitted"}
    assert sorted(r.run_id for r in rows) == _run_ids(user)

    restarted = subprocess.run([*argv[:3], now.isoformat(), "0"], env=env, capture_output=True)
    assert restarted.stdout.split()[-1] == b"0", restarted.stderr
    assert len(_run_ids(user)) == 6
    later = fires.fire_due(settings=get_settings(), now=now + 2 * MINUTE)
    assert [f.outcome for f in later if f.schedule_id == schedule_id] == ["submitted"] * 2
    assert len(_run_ids(user)) == 8
    assert _next_due(schedule_id) == first + 8 * MINUTE


def test_many_threads_racing_submit_once_per_due_time(make_schedule: MakeSchedule) -> None:
    """Eight passes released at once by a barrier, three due times owed: three runs."""
    shown = make_schedule(overlap="allow", catch_up=3)
    schedule_id, user = shown.schedule.id or 0, shown.schedule.user_id
    now = shown.schedule.next_due_at + 2 * MINUTE
    barrier, results = threading.Barrier(8), []

    def scheduler() -> None:
        barrier.wait()
        results.append(fires.fire_due(settings=get_settings(), now=now))

    threads = [threading.Thread(target=scheduler) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    mine = [f for found in results for f in found if f.schedule_id == schedule_id]
    assert sorted(f.due_at for f in mine) == [r.due_at for r in _fires(schedule_id)]
    assert len(mine) == 3 and len(_run_ids(user)) == 3


def test_after_downtime_at_most_catch_up_fire_and_the_rest_are_missed(
    make_schedule: MakeSchedule,
) -> None:
    """Ten due times passed while no scheduler ran; catch-up 1 (the default): the latest fires,
    the nine before it are one `missed` row, and the next due time is after now."""
    shown = make_schedule()
    assert shown.schedule.catch_up == get_settings().schedule_catch_up == 1
    schedule_id, user = shown.schedule.id or 0, shown.schedule.user_id
    first = shown.schedule.next_due_at
    now = first + 9 * MINUTE + timedelta(seconds=30)
    fires.fire_due(settings=get_settings(), now=now)
    missed, fired = _fires(schedule_id)
    assert (missed.outcome, missed.due_at, missed.due_times) == ("missed", first, 9)
    assert "9 due times from" in missed.detail and "at most 1 (catch_up)" in missed.detail
    assert (fired.outcome, fired.due_at) == ("submitted", first + 9 * MINUTE)
    assert _run_ids(user) == [fired.run_id]
    assert _next_due(schedule_id) == first + 10 * MINUTE


def test_overlap_skip_makes_no_run_while_the_last_one_is_active(
    make_schedule: MakeSchedule,
) -> None:
    """The first run escalates (its step always fails, no replan budget) and stays active: the
    next due time is `skipped`, naming it; once it is cancelled, the one after fires."""
    shown = make_schedule(tool="always_fails")
    schedule_id, user = shown.schedule.id or 0, shown.schedule.user_id
    first = shown.schedule.next_due_at
    fires.fire_due(settings=get_settings(), now=first)
    (run_id,) = _run_ids(user)
    wait_for_run(run_id, ("waiting_review",))
    fires.fire_due(settings=get_settings(), now=first + MINUTE)
    skipped = _fires(schedule_id)[-1]
    assert (skipped.outcome, skipped.run_id) == ("skipped", None)
    assert skipped.detail == f"run {run_id} of this schedule is waiting_review"
    assert _run_ids(user) == [run_id]
    commands.cancel(run_id)
    fires.fire_due(settings=get_settings(), now=first + 2 * MINUTE)
    assert _fires(schedule_id)[-1].outcome == "submitted"
    assert len(_run_ids(user)) == 2


@pytest.fixture
def one_active_run_each(engine: LocalStack) -> Iterator[None]:
    """The stack's AGENTQ_USER_MAX_ACTIVE_RUNS at 1 for one test, as the stack's owner writes it
    (`models.engine.stack_limits.publish`), then as it was."""
    strict = get_settings().model_copy(update={"user_max_active_runs": 1})
    with session_scope() as session:
        stack_limits.publish(session, strict, by="tests/integration/test_schedules.py")
    yield
    with session_scope() as session:
        stack_limits.publish(session, get_settings(), by="agentq up (tests)")


def test_a_quota_refusal_is_recorded_not_raised(
    make_schedule: MakeSchedule, one_active_run_each: None
) -> None:
    """One active run per user: of two due times fired in one pass (overlap allow), the first
    submits a run that stays active and the second is `refused` with the quota's words; the
    pass raises nothing and the schedule goes on."""
    shown = make_schedule(tool="always_fails", overlap="allow", catch_up=2)
    schedule_id, user = shown.schedule.id or 0, shown.schedule.user_id
    first = shown.schedule.next_due_at
    fired = fires.fire_due(settings=get_settings(), now=first + MINUTE)
    assert [f.outcome for f in fired if f.schedule_id == schedule_id] == ["submitted", "refused"]
    refused = _fires(schedule_id)[-1]
    assert refused.detail.startswith("UserQuotaExceeded: AGENTQ_USER_MAX_ACTIVE_RUNS: user")
    assert len(_run_ids(user)) == 1
    assert _next_due(schedule_id) == first + 2 * MINUTE


def test_pause_stops_fires_and_resume_goes_on_from_the_next_due_time(
    make_schedule: MakeSchedule,
) -> None:
    """Paused, no due time fires however late the clock; resumed, the due times of the pause are
    not owed (no burst, nothing missed): the next one fires, once."""
    shown = make_schedule()
    schedule_id, user = shown.schedule.id or 0, shown.schedule.user_id
    paused = front.pause(schedule_id)
    assert paused.next_due_at is None and paused.schedule.paused_at is not None
    with pytest.raises(Conflict, match="is paused already; nothing was changed"):
        front.pause(schedule_id)
    fires.fire_due(settings=get_settings(), now=shown.schedule.next_due_at + 30 * MINUTE)
    assert _fires(schedule_id) == [] and _run_ids(user) == []
    resumed = front.resume(schedule_id)
    next_due = resumed.next_due_at
    assert next_due is not None and datetime.now(UTC) < next_due <= datetime.now(UTC) + MINUTE
    with pytest.raises(Conflict, match="is not paused"):
        front.resume(schedule_id)
    fires.fire_due(settings=get_settings(), now=next_due + timedelta(seconds=5))
    assert [(r.outcome, r.due_at) for r in _fires(schedule_id)] == [("submitted", next_due)]
    assert len(_run_ids(user)) == 1


def test_a_failed_pass_writes_nothing_and_the_next_fires_once(
    make_schedule: MakeSchedule, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass whose transaction fails after the submit (here the schedule's advance) leaves
    neither the run nor the fire row; the next pass fires the due time once."""
    shown = make_schedule()
    schedule_id, user = shown.schedule.id or 0, shown.schedule.user_id
    now = shown.schedule.next_due_at
    monkeypatch.setattr(fires, "ADVANCE_SCHEDULE", "UPDATE schedules SET no_such_column = 1")
    assert fires.fire_due(settings=get_settings(), now=now) == []
    assert _fires(schedule_id) == [] and _run_ids(user) == []
    monkeypatch.undo()
    fires.fire_due(settings=get_settings(), now=now)
    assert [r.outcome for r in _fires(schedule_id)] == ["submitted"]
    assert len(_run_ids(user)) == 1


def test_the_beat_fires_a_due_schedule(make_schedule: MakeSchedule) -> None:
    """The session engine's beat (`agentq.fire_schedules` every AGENTQ_SCHEDULE_POLL_INTERVAL_S)
    fires a schedule whose due time has come, by the database's clock, and its run succeeds."""
    shown = make_schedule()
    schedule_id, user = shown.schedule.id or 0, shown.schedule.user_id
    with session_scope() as session:  # due now: as if created a minute ago
        session.execute(
            sa.text("UPDATE schedules SET next_due_at = now() WHERE id = :id"), {"id": schedule_id}
        )
    deadline = time.monotonic() + 30
    while not _run_ids(user):
        assert time.monotonic() < deadline, "the beat fired nothing in 30 s"
        time.sleep(0.5)
    (run_id,) = _run_ids(user)
    assert wait_for_run(run_id).status == "succeeded"
    assert [(r.outcome, r.run_id) for r in _fires(schedule_id)] == [("submitted", run_id)]
    assert _next_due(schedule_id) > datetime.now(UTC)


def test_forgetting_a_users_runs_deletes_their_schedules(engine: LocalStack) -> None:
    """`memory forget --runs` erases what the user wrote in runs; a schedule holds a goal they
    wrote and would submit it again, so it goes too. A forget without `runs` keeps it."""
    from models.front import forgetting

    user = f"sched-forget-{uuid.uuid4().hex[:8]}"
    plan = commands.checked_plan({"steps": [_step("only")]}, facts=[])
    request = RunRequest(user_id=user, goal="scheduled", plan=plan, replans=0)
    kept = front.create(request, name="kept", every_s=3600)
    assert forgetting.forget(user).erased_runs == {}
    assert [s.schedule.id for s in front.listed(user_id=user)] == [kept.schedule.id]
    done = forgetting.forget(user, runs=True)
    assert done.erased_runs["schedules"] == 1
    assert front.listed(user_id=user) == []
