"""Run end off the hot path (issue 10), on the real engine: a run is `succeeded` before its memory
task writes its episode and facts on the `memory` queue; a run with nothing to learn from makes
no extraction call; each pool process loads the embedding model when it starts."""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections.abc import Callable

import psutil
import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import queue, submissions
from models.engine.queue import QUEUE_MEMORY, QUEUE_STEPS
from models.engine.runs import get_run
from models.engine.submissions import RunRequest
from models.memory.episodes import episodes_of
from models.memory.memory_admin import memory_ended
from models.plans.plans import parse_plan
from models.settings import get_settings
from models.tables import RunEvent
from ops.local import WORKER_WARM, WORKER_WARM_TIMEOUT_S
from ops.stack import LocalStack
from tests.integration.conftest import other_engine, wait_for_memory, wait_for_run

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
NOOP = [{"name": "a", "kind": "tool", "tool": "noop"}]
WARM_PID = re.compile(r"event='worker\.warm'.* pid=(\d+) .*warmed=True")


def _user(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _events(run_id: int) -> list[RunEvent]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
        return list(session.exec(stmt))


def _tokens_by_purpose(run_id: int) -> dict[str, int]:
    """The tokens of the run's model calls, by purpose (`plan`, `synthesize`, `extract_facts`)."""
    spent: dict[str, int] = {}
    for e in (e for e in _events(run_id) if e.kind == "model.call"):
        used = e.detail.get("prompt_tokens", 0) + e.detail.get("completion_tokens", 0)
        spent[e.detail["purpose"]] = spent.get(e.detail["purpose"], 0) + used
    return spent


def test_a_run_succeeds_before_its_episode_is_written(make_run: MakeRun) -> None:
    user = _user("early")
    run = wait_for_run(make_run(NOOP, user=user, facts={"currency": "EUR"}), memory=True)
    assert run.status == "succeeded" and run.finished_at is not None
    kinds = [e.kind for e in _events(run.id or 0)]
    assert kinds.index("run.succeeded") < kinds.index("memory.remembered")
    with session_scope() as session:
        (episode,) = episodes_of(session, user_id=user)
    assert episode.run_id == run.id and episode.outcome == "succeeded"
    assert episode.created_at > run.finished_at  # written by the memory task, after the end


def test_the_worker_consumes_the_memory_queue() -> None:
    assert queue.ROUTES[queue.TASK_REMEMBER_RUN] == {"queue": QUEUE_MEMORY}
    replies = queue.client().control.inspect(timeout=5).active_queues() or {}
    consumed = {
        node: {q["name"] for q in queues}
        for node, queues in replies.items()
        if node.startswith("steps@")
    }
    assert consumed and all(names == {QUEUE_STEPS, QUEUE_MEMORY} for names in consumed.values())


def _submit(user: str, facts: dict[str, str] | None = None) -> int:
    plan = parse_plan({"steps": NOOP}, tools=["noop"])
    request = RunRequest(user_id=_user(user), goal="remember", facts=facts or {}, plan=plan)
    submitted = submissions.submit(request, settings=get_settings())
    assert submitted.notified
    return submitted.run_id


def test_the_worker_that_synthesized_a_run_remembers_it_without_a_message() -> None:
    """With the `memory` queue not consumed, a run with nothing to extract is remembered all the
    same (by the worker that synthesized it, issue 29); one that needs the extraction's model
    call waits for the `memory` queue, and is remembered once the queue is consumed again. On an
    engine of its own: no other test's memory waits for this one's queue."""
    with other_engine({}):
        control = queue.client().control
        assert control.cancel_consumer(QUEUE_MEMORY, reply=True, timeout=5)
        alone = _submit("inline")
        remembered = wait_for_memory(alone, timeout_s=30)
        assert remembered.kind == "memory.remembered"
        assert remembered.detail["extraction"] == "skipped"
        extracting = wait_for_run(_submit("queued", facts={"currency": "EUR"})).id or 0
        time.sleep(3)  # what a memory task would need, were its queue consumed
        with session_scope() as session:
            assert memory_ended(session, extracting) is None
        assert control.add_consumer(QUEUE_MEMORY, reply=True, timeout=5)
        assert wait_for_memory(extracting).detail["extraction"] == "asked"


def test_a_tool_only_run_with_no_facts_makes_no_extraction_call(make_run: MakeRun) -> None:
    run_id = make_run(NOOP, user=_user("bare"))
    remembered = wait_for_memory(run_id)
    assert remembered.kind == "memory.remembered"
    assert remembered.detail["extraction"] == "skipped"
    assert "no model steps" in remembered.detail["extraction_skipped"]
    spent = _tokens_by_purpose(run_id)
    assert set(spent) == {"synthesize"}  # the run's only model call
    with session_scope() as session:
        run = get_run(session, run_id)
        assert run.tokens_used == spent["synthesize"]  # nothing else was charged to it
        assert [e.run_id for e in episodes_of(session, user_id=run.user_id)] == [run_id]


def test_a_tool_only_run_that_pins_facts_still_extracts_them(make_run: MakeRun) -> None:
    run_id = make_run(NOOP, user=_user("pins"), facts={"currency": "EUR"})
    remembered = wait_for_memory(run_id)
    assert remembered.kind == "memory.remembered"
    assert remembered.detail["extraction"] == "asked" and remembered.detail["added"] == 1
    spent = _tokens_by_purpose(run_id)
    assert set(spent) == {"synthesize", "extract_facts"} and spent["extract_facts"] > 0
    with session_scope() as session:
        assert get_run(session, run_id).tokens_used == sum(spent.values())  # charged to the run


def _warm_pids(stack: LocalStack) -> list[int]:
    return [int(pid) for pid in WARM_PID.findall(stack.log_path("worker").read_text())]


def _pool(stack: LocalStack) -> list[int]:
    main = psutil.Process(stack._children["worker"].popen.pid)
    return sorted(child.pid for child in main.children())


def test_every_pool_process_warmed_up_before_the_first_task(
    engine: LocalStack, make_run: MakeRun
) -> None:
    wait_for_run(make_run(NOOP, user=_user("warm")))  # at least one task was taken
    log = engine.log_path("worker").read_text()
    pool = _pool(engine)
    assert set(pool) <= set(_warm_pids(engine))  # each live pool process loaded its model
    first_task = log.index("] received")  # the main process logs each message it takes
    assert log[:first_task].count(WORKER_WARM) == len(pool)  # all of them, before any task
    # the main process imported torch before it forked, so no pool process imported it again
    warms = [line for line in log.splitlines() if "event='worker.warm'" in line]
    assert warms and all("preloaded=True" in line for line in warms), warms
    assert log.index("event='worker.preloaded'") < log.index(WORKER_WARM)


def test_a_replacement_pool_process_warms_up_and_is_not_killed() -> None:
    # Celery times only the start of processes that replace lost ones (worker_proc_alive_timeout,
    # 4 s by default): loading the model takes longer, so this is where the setting matters.
    with other_engine({}) as stack:
        (lost,) = _pool(stack)
        os.kill(lost, signal.SIGKILL)
        stack.wait_for_log("worker", WORKER_WARM, WORKER_WARM_TIMEOUT_S, count=2)
        (replacement,) = _pool(stack)
        assert replacement != lost and _warm_pids(stack)[-1] == replacement
        assert "Timed out waiting for UP message" not in stack.log_path("worker").read_text()
