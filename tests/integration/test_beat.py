"""One beat per database, and no beat without its scheduler (issue 11).

The scheduler runs `celery -A scheduler.app worker -Q coordinator -B`, whose beat is a process
of its own, forked from the worker's main process. Before issue 11 two schedulers meant two
beats sending every periodic task, and a beat outlived its killed (kill -9) parent and kept
sending. Each beat logs Celery's `Scheduler: Sending due task <entry> (<task>)` per send.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from models.engine.queue import QUEUE_COORDINATOR
from ops.local import engine_env
from ops.stack import LocalStack
from tests.integration.conftest import TEST_ENV, TESTS_IMPORTABLE, other_engine

pytestmark = pytest.mark.integration
ENV = {**TEST_ENV, "AGENTQ_EMBEDDING_PROVIDER": "hash"}
INTERVAL_S = float(TEST_ENV["AGENTQ_RECONCILE_INTERVAL_S"])  # 1 s: one reconcile per period
SENT = "Sending due task reconcile (agentq.reconcile)"
WINDOW_S = 6.0
GONE_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with other_engine(ENV) as engine:
        yield engine


def start_scheduler(stack: LocalStack, name: str) -> subprocess.Popen[bytes]:
    """One more scheduler with beat, as `ops.local.start_engine` starts its own (a schedule file
    of its own: two beats are two deployments' worth of state)."""
    argv = stack.celery_argv(
        "scheduler.app", QUEUE_COORDINATOR, concurrency=1, hostname=f"{name}@%h", beat=True
    )
    argv[argv.index("-s") + 1] = str(stack.data_dir / f"celerybeat-schedule-{name}")
    urls = os.environ["AGENTQ_DATABASE_URL"], os.environ["AGENTQ_BROKER_URL"]
    popen = stack.start_process(name, argv, engine_env(*urls, {**TESTS_IMPORTABLE, **ENV}))
    stack.wait_for_log(name, "ready.", 90)
    return popen


def sends(stack: LocalStack, name: str) -> int:
    """How many times the beat of scheduler `name` has sent `agentq.reconcile`."""
    return stack.log_path(name).read_text().count(SENT)


def wait_until_gone(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of `processes` still running (a zombie is not) after up to `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in processes if _running(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_two_schedulers_send_each_periodic_task_once_per_period(stack: LocalStack) -> None:
    start_scheduler(stack, "scheduler-2")
    before = {name: sends(stack, name) for name in ("scheduler", "scheduler-2")}
    time.sleep(WINDOW_S)
    sent = {name: sends(stack, name) - count for name, count in before.items()}
    periods = WINDOW_S / INTERVAL_S
    assert sent["scheduler-2"] == 0, sent  # the second beat idles: the first holds the lock
    assert periods - 2 <= sent["scheduler"] <= periods + 1, sent

    os.kill(stack._children["scheduler"].popen.pid, signal.SIGKILL)  # the holder's main process
    deadline = time.monotonic() + GONE_WITHIN_S + 2 * INTERVAL_S
    while sends(stack, "scheduler-2") == before["scheduler-2"]:
        assert time.monotonic() < deadline, "the second beat never took over"
        time.sleep(0.1)
    stopped = sends(stack, "scheduler")
    time.sleep(3 * INTERVAL_S)
    assert sends(stack, "scheduler") == stopped  # no beat of the killed scheduler sends
    taken_over = sends(stack, "scheduler-2")
    assert taken_over > before["scheduler-2"]
    stack.restart_dead()  # the killed scheduler, again: now it waits for the lock in turn
    stack.wait_for_log("scheduler", "ready.", 90)
    time.sleep(3 * INTERVAL_S)
    assert sends(stack, "scheduler") == stopped


def test_a_killed_scheduler_takes_its_beat_and_pool_with_it(stack: LocalStack) -> None:
    popen = start_scheduler(stack, "scheduler-3")
    children = psutil.Process(popen.pid).children(recursive=True)
    assert len(children) == 2, children  # its pool process (-c 1) and its beat
    popen.send_signal(signal.SIGKILL)  # kill -9: no shutdown of its own
    assert wait_until_gone(children, GONE_WITHIN_S) == [], "a child outlived its scheduler"
