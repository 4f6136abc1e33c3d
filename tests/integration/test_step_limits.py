"""Limits a running step meets (issue 27): its user's step data (item 5) and its run's wall time
(item 14), on an engine of its own.

The engine's workers call a fake OpenAI-compatible server (`ops.fake_provider`) and hold a
user's runs to `USER_MAX_BYTES` of step data together; a step may run 20 s
(`AGENTQ_STEP_TIME_LIMIT_S`), so a 15 s `sleep` is within it and only the run's wall time can cut
it short. The per-run budget at its default (8 MiB) is tested against `agentq up` in
tests/security/test_tools_and_caps.py.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import select

from models.db import session_scope
from models.engine import queue, storage, submissions
from models.engine.queue import TASK_COORDINATE
from models.engine.submissions import RunRequest
from models.errors import InvalidInput
from models.memory import memory_admin
from models.operations import retention
from models.plans.plans import parse_plan
from models.plans.step_data import json_bytes
from models.plans.tools import configured_tool_names
from models.review import reviews
from models.settings import get_settings
from models.tables import Escalation, Run, Step, utcnow
from ops.fake_provider import FakeOpenAI, slow, tool_calls
from ops.stack import LocalStack
from tests.integration.conftest import fake_model_env, other_engine, run_steps, wait_for_run
from tests.integration.test_model_faults import events, seconds

pytestmark = pytest.mark.integration

USER_MAX_BYTES = 1_000_000  # a user's total, and a run's budget, on this engine
CAPS = {
    "AGENTQ_RUN_STEP_DATA_MAX_BYTES": str(USER_MAX_BYTES),
    "AGENTQ_USER_STEP_DATA_MAX_BYTES": str(USER_MAX_BYTES),
}
SEED_CHARS = 50_000  # a plan's arguments are at most 64,000 characters: a seed and copies of it
SEED = json_bytes({"value": "x" * SEED_CHARS})  # 50,012 bytes
BIG = json_bytes({"value": ["x" * SEED_CHARS] * 4})  # 200,023 bytes
RUN = SEED + 2 * BIG  # `seeded(2)`
VALUE_CHARS = 200_000  # a model's tool call: its arguments, and `echo`'s result, 200,012 bytes
ECHOED = json_bytes({"value": "x" * VALUE_CHARS})
WALL_TIME_S = 5.0
# How late a step may end after its run's deadline on a machine shared with other test runs:
# the claim, the alarm, and the commit of its outcome.
LATE_S = 3.0


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def limited(fake: FakeOpenAI) -> Iterator[LocalStack]:
    env = fake_model_env(
        fake.url,
        AGENTQ_STEP_TIME_LIMIT_S="20",
        AGENTQ_SOFT_TIME_LIMIT_S="25",
        AGENTQ_HARD_TIME_LIMIT_S="30",
        AGENTQ_MODEL_REQUEST_TIMEOUT_S="18",  # one attempt: 18 < 20
        AGENTQ_MODEL_MAX_ATTEMPTS="1",
        **CAPS,
    )
    saved = {name: os.environ.get(name) for name in CAPS}
    os.environ.update(CAPS)  # this process submits runs and decides reviews: the same caps
    try:
        with other_engine(env) as stack:
            yield stack
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        get_settings.cache_clear()


def submit(steps: list[dict[str, Any]], *, user: str, wall_time_s: float | None = None) -> int:
    plan = parse_plan({"steps": steps}, tools=configured_tool_names())
    request = RunRequest(user_id=user, goal="limits", plan=plan, replans=0, wall_time_s=wall_time_s)
    submitted = submissions.submit(request, settings=get_settings())
    assert submitted.notified
    return submitted.run_id


def seeded(copies: int) -> list[dict[str, Any]]:
    """A plan that stores `SEED`, then `copies` steps of `BIG` (four references to the seed),
    one after the other."""
    seed = {"name": "seed", "kind": "tool", "tool": "echo", "args": {"value": "x" * SEED_CHARS}}
    big = {"kind": "tool", "tool": "echo", "args": {"value": ["${steps.seed.value}"] * 4}}
    return [seed, *({"name": f"big{i}", **big} for i in range(1, copies + 1))]


def held(run_id: int) -> tuple[int, int]:
    """The run's step data, and its user's total, as stored."""
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.step_data_bytes, storage.user_bytes(session, run.user_id)


def stored(run_id: int) -> int:
    """What the run's steps hold, measured: their results and journaled tool calls."""
    journal = sa.text(
        "SELECT j.arguments, j.result, j.error FROM tool_journal j "
        "JOIN steps s ON s.id = j.step_id WHERE s.run_id = :run_id"
    )
    with session_scope() as session:
        calls = session.execute(journal, {"run_id": run_id}).all()
    in_journal = sum(
        json_bytes(a) + (json_bytes(r) if r is not None else len((e or "").encode()))
        for a, r, e in calls
        if not (e or "").startswith("not kept:")
    )
    results = sum(json_bytes(s.result) for s in run_steps(run_id) if s.result is not None)
    return results + in_journal


def ended_step(run_id: int, timeout_s: float = 60) -> Step:
    """The run's one step once it has ended: the run may escalate for its wall time (the
    coordinator's deadline check) while its step still runs."""
    deadline = time.monotonic() + timeout_s
    while (step := run_steps(run_id)[0]).finished_at is None:
        assert time.monotonic() < deadline, f"step {step.name!r} still {step.status}"
        time.sleep(0.1)
    return step


def escalation_of(run_id: int) -> Escalation:
    with session_scope() as session:
        return session.exec(select(Escalation).where(Escalation.run_id == run_id)).one()


# -- item 5: a user's step data across runs ------------------------------------------------------


def test_a_users_step_data_is_capped_across_runs_and_given_back_when_runs_go(
    limited: LocalStack,
) -> None:
    user, other = f"hoarder-{uuid.uuid4().hex[:6]}", f"bystander-{uuid.uuid4().hex[:6]}"
    first = wait_for_run(submit(seeded(2), user=user), memory=True)
    assert first.status == "succeeded"
    assert held(first.id or 0) == (RUN, RUN) == (stored(first.id or 0),) * 2

    second_id = submit(seeded(3), user=user)
    second = wait_for_run(second_id)
    assert second.status == "waiting_review"
    *kept, refused = run_steps(second_id)
    assert [s.status for s in kept] == ["succeeded"] * 3 and refused.status == "failed"
    assert refused.result is None  # nothing half-written: no result without its charge
    assert refused.error == (
        f"the result of step 'big3': {BIG:,} bytes as JSON do not fit user {user!r}'s step "
        f"data: {2 * RUN:,} of {USER_MAX_BYTES:,} bytes held by their runs "
        "(AGENTQ_USER_STEP_DATA_MAX_BYTES); runs purged by retention or erased by "
        "`agentq memory forget --runs` give theirs back"
    )
    esc = escalation_of(second_id)
    assert (esc.reason, esc.step_id) == ("user_step_data_spent", refused.id)
    assert held(second_id) == (RUN, 2 * RUN) and stored(second_id) == RUN

    # another user is not held back by this one's total
    theirs = wait_for_run(submit(seeded(2), user=other))
    assert theirs.status == "succeeded" and held(theirs.id or 0) == (RUN, RUN)

    # a reviewer's answer is step data too: over the total it is refused, and nothing is decided
    with pytest.raises(InvalidInput, match="AGENTQ_USER_STEP_DATA"), session_scope() as session:
        reviews.respond(session, esc.id or 0, reviewer="rita", answer={"v": "y" * 250_000})
    assert escalation_of(second_id).status == "open" and held(second_id) == (RUN, 2 * RUN)

    # retention: the purged run's bytes leave the user's total
    with session_scope() as session:
        retention.purge_batch(session, before=utcnow() + timedelta(days=1), batch=500)
        assert session.get(Run, first.id) is None
    assert held(second_id) == (RUN, RUN)

    # forget --runs: the erased runs hold nothing, and the user can store again
    memory_admin.forget(user, cancel_runs=True, runs=True)
    assert held(second_id) == (0, 0)
    again = wait_for_run(submit(seeded(2), user=user))
    assert again.status == "succeeded" and held(again.id or 0) == (RUN, RUN)


def test_a_model_steps_tool_calls_are_charged_and_one_over_the_budget_is_kept_out(
    fake: FakeOpenAI, limited: LocalStack
) -> None:
    user, mark = f"caller-{uuid.uuid4().hex[:6]}", f"MARK-{uuid.uuid4().hex[:6]}"
    arguments = '{"value": "' + "x" * VALUE_CHARS + '"}'
    fake.script(tool_calls(*[("echo", arguments)] * 3), when=mark)
    step = {"name": "m", "kind": "model", "instruction": f"{mark}: echo", "tools": ["echo"]}
    run_id = submit([step], user=user)
    assert wait_for_run(run_id).status == "waiting_review"
    assert escalation_of(run_id).reason == "step_data_budget_spent"  # the run's budget, first
    call = ECHOED + ECHOED  # its arguments and its result
    assert held(run_id) == (2 * call, 2 * call) == (stored(run_id),) * 2
    with session_scope() as session:
        errors = session.execute(
            sa.text(
                "SELECT j.error FROM tool_journal j JOIN steps s ON s.id = j.step_id "
                "WHERE s.run_id = :run_id ORDER BY j.id"
            ),
            {"run_id": run_id},
        ).scalars()
        kept_out = [error for error in errors if error]
    assert len(kept_out) == 1 and kept_out[0].startswith(
        f"not kept: the call of tool 'echo' (its arguments and result): {call:,} bytes as JSON"
    )
    # approving grants the default limit, as for tokens (`models.engine.budget_grants`): the spend
    # plus the original limit, at most the ceiling (the user's total); the step's retry (the model
    # answers in text now) is stored
    with session_scope() as session:
        reviews.approve(session, escalation_of(run_id).id or 0, reviewer="rita", max_attempts=3)
    queue.send(TASK_COORDINATE, run_id)
    assert wait_for_run(run_id, ("succeeded", "failed")).status == "succeeded"
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
    assert run.step_data_limit_bytes == min(2 * call + USER_MAX_BYTES, USER_MAX_BYTES)
    assert run.step_data_bytes == stored(run_id) > 2 * call


# -- item 14: the wall-time budget inside a running step -----------------------------------------


def test_a_sleep_past_the_runs_wall_time_is_cut_at_the_deadline(limited: LocalStack) -> None:
    nap = {"name": "nap", "kind": "tool", "tool": "sleep", "args": {"seconds": 15}}
    run_id = submit([nap], user="sleeper", wall_time_s=WALL_TIME_S)
    step = ended_step(run_id)
    run = wait_for_run(run_id, timeout_s=60)
    assert run.status == "waiting_review"
    took = seconds(step.finished_at) - seconds(run.created_at)
    assert WALL_TIME_S - 0.5 < took < WALL_TIME_S + LATE_S  # was 15 s: the sleep ran out
    assert step.status == "failed" and step.result is None
    assert "wall-time deadline" in (step.error or "")
    esc = escalation_of(run_id)
    assert (esc.reason, esc.step_id) == ("wall_time_budget_spent", step.id)


def test_a_model_call_past_the_runs_wall_time_is_cut_at_the_deadline(
    fake: FakeOpenAI, limited: LocalStack
) -> None:
    mark = f"MARK-{uuid.uuid4().hex[:6]}"
    fake.script(slow(15), when=mark)  # an answer in 15 s, within the request timeout
    step = {"name": "think", "kind": "model", "instruction": f"{mark}: think"}
    run_id = submit([step], user="thinker", wall_time_s=WALL_TIME_S)
    think = ended_step(run_id)
    run = wait_for_run(run_id, timeout_s=60)
    assert run.status == "waiting_review"
    took = seconds(think.finished_at) - seconds(run.created_at)
    assert WALL_TIME_S - 0.5 < took < WALL_TIME_S + LATE_S  # was 15 s: the answer came
    assert escalation_of(run_id).reason == "wall_time_budget_spent"
    (call,) = [e.detail for e in events(run_id, "model.call", think.id)]
    assert call["outcome"] == "cut_off"  # its reservation kept: the provider may bill it
    assert call["error"] == "interrupted by StepTimeLimitExceeded"
