"""agentq behind PgBouncer in transaction pooling mode (issue 29, item 4).

A transaction pooler hands each transaction whichever server connection is free. Two things broke
there: psycopg's prepared statements (a client's `_pg3_0` already existed on the server
connection another client had prepared it on) and the beat's session-level advisory lock (left on
a pooled server connection after a clean stop, so no later beat ever sent). With
`AGENTQ_DATABASE_POOLER=transaction` nothing is prepared, and the beat's lease is a row
(`models.process_leases`), which needs no session. Debian's `pgbouncer` 1.18 (no prepared
statement support of its own) runs in front of this file's embedded Postgres.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url

from models import sql
from models.db import session_scope
from models.engine import submissions
from models.engine.queue import QUEUE_COORDINATOR
from models.engine.submissions import RunRequest
from models.errors import DatabaseError
from models.migrate import alembic_config, upgrade
from models.plans.plans import parse_plan
from models.plans.tools import configured_tool_names
from models.process_leases import ProcessLease
from models.settings import get_settings
from ops import processes
from ops.deployment import worker_argv
from ops.local import engine_env
from ops.stack import LocalStack
from tests.integration.conftest import TEST_ENV, TESTS_IMPORTABLE, other_engine, wait_for_run
from tests.support.pgbouncer import pgbouncer

pytestmark = pytest.mark.integration
ENV = {**TEST_ENV, "AGENTQ_EMBEDDING_PROVIDER": "hash"}
POOLED = {"AGENTQ_DATABASE_POOLER": "transaction"}
PERIOD_S = float(TEST_ENV["AGENTQ_RECONCILE_INTERVAL_S"])  # 1 s: the schedule's shortest period
SENT = "Sending due task reconcile (agentq.reconcile)"
WINDOW_S = 5.0
STOP_GRACE_S = 30.0
CLIENTS = 4
STATEMENTS = 10  # per client, in one transaction: psycopg prepares a statement run 5 times


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with other_engine(ENV) as engine:
        yield engine


@pytest.fixture
def pooler(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """This process's AGENTQ_DATABASE_POOLER, set by the test with `monkeypatch.setenv`."""
    yield monkeypatch
    monkeypatch.undo()
    get_settings.cache_clear()


def set_pooler(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("AGENTQ_DATABASE_POOLER", value)
    get_settings.cache_clear()


def share_one_server_connection(url: str) -> list[str]:
    """`CLIENTS` clients (pooled connections of this process's engine for `url`, each a client
    of PgBouncer), each running one statement `STATEMENTS` times in a transaction of its own:
    with one server connection, they run on it in turn. Returns the database errors raised."""
    together = threading.Barrier(CLIENTS)

    def client(n: int) -> None:
        with session_scope(url) as session:
            session.connection()  # checked out: a client of its own, not yet in a transaction
            together.wait(timeout=30)
            for i in range(STATEMENTS):
                assert sql.scalar(session, "SELECT :n::int * 100 + :i::int", {"n": n, "i": i}) == (
                    n * 100 + i
                )

    errors: list[str] = []
    with ThreadPoolExecutor(CLIENTS) as pool:
        for future in [pool.submit(client, n) for n in range(CLIENTS)]:
            try:
                future.result()
            except DatabaseError as exc:
                errors.append(str(exc))
    return errors


def test_no_statement_is_prepared_through_a_transaction_pooler(
    stack: LocalStack, pooler: pytest.MonkeyPatch
) -> None:
    direct = os.environ["AGENTQ_DATABASE_URL"]
    with pgbouncer(direct, pool_size=1) as bounced:
        set_pooler(pooler, "none")  # the reported failure, as a control: the test can fail
        errors = share_one_server_connection(f"{bounced}&application_name=prepared")
        assert any('prepared statement "_pg3_0" already exists' in e for e in errors), errors
    with pgbouncer(direct, pool_size=1) as bounced:
        set_pooler(pooler, "transaction")
        url = f"{bounced}&application_name=unprepared"
        assert share_one_server_connection(url) == []
        with session_scope(url) as session:  # the one server connection
            assert sql.scalar(session, "SELECT count(*) FROM pg_prepared_statements") == 0


def test_migrations_run_through_a_transaction_pooler(
    stack: LocalStack, pooler: pytest.MonkeyPatch
) -> None:
    direct = make_url(os.environ["AGENTQ_DATABASE_URL"])
    conninfo = f"host={direct.query['host']} user=postgres dbname=postgres"
    if "port" in direct.query:
        conninfo += f" port={direct.query['port']}"
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute("DROP DATABASE IF EXISTS through_pgbouncer")
        connection.execute("CREATE DATABASE through_pgbouncer")
    set_pooler(pooler, "transaction")
    with pgbouncer(str(direct), pool_size=1) as bounced:
        url = bounced.replace("/postgres?", "/through_pgbouncer?")
        upgrade(url)
        with session_scope(url) as session:
            head = sql.scalar(session, "SELECT version_num FROM alembic_version")
            leases = sql.scalar(session, "SELECT count(*) FROM process_leases")
    assert (head, leases) == (ScriptDirectory.from_config(alembic_config()).get_current_head(), 0)


@pytest.fixture(scope="module")
def bounced(stack: LocalStack) -> Iterator[str]:
    """The stack's worker and scheduler replaced by ones whose every connection goes through
    one PgBouncer (one server connection, shared by all their processes), with the setting on;
    the stack's own scheduler stopped cleanly first (its beat lets the lease go). Yields the
    URL through PgBouncer."""
    with pgbouncer(os.environ["AGENTQ_DATABASE_URL"], pool_size=1) as url:
        stop(stack, "worker")
        stop(stack, "scheduler")
        stack.start_process("worker-pgb", worker_argv(concurrency=2), pooled_env(url))
        stack.wait_for_log("worker-pgb", "ready.", 90)
        start_scheduler(stack, url, "scheduler-a")
        yield url
        for name in ("worker-pgb", "scheduler-a", "scheduler-b", "scheduler-c"):
            stop(stack, name)


def pooled_env(url: str) -> dict[str, str]:
    return engine_env(url, os.environ["AGENTQ_BROKER_URL"], {**TESTS_IMPORTABLE, **ENV, **POOLED})


def start_scheduler(stack: LocalStack, url: str, name: str) -> subprocess.Popen[bytes]:
    """A scheduler with beat (a schedule file of its own) connected through PgBouncer."""
    argv = stack.celery_argv(
        "scheduler.app", QUEUE_COORDINATOR, concurrency=1, hostname=f"{name}@%h", beat=True
    )
    argv[argv.index("-s") + 1] = str(stack.data_dir / f"celerybeat-schedule-{name}")
    popen = stack.start_process(name, argv, pooled_env(url))
    stack.wait_for_log(name, "ready.", 90)
    return popen


def stop(stack: LocalStack, name: str) -> None:
    """Stop process `name` as `agentq up` stops it (SIGTERM: Celery's warm shutdown)."""
    child = stack._children.get(name)
    if child is not None:
        processes.terminate([child.popen], STOP_GRACE_S)


def sends(stack: LocalStack, name: str) -> int:
    """How many times the beat of scheduler `name` has sent `agentq.reconcile`."""
    return stack.log_path(name).read_text().count(SENT)


def wait_for_sends(stack: LocalStack, name: str, more_than: int, within_s: float) -> float:
    """Seconds until scheduler `name` has sent more than `more_than` times; fails after
    `within_s`."""
    started = time.monotonic()
    while sends(stack, name) <= more_than:
        assert time.monotonic() - started < within_s, f"{name} sent nothing within {within_s} s"
        time.sleep(0.05)
    return time.monotonic() - started


def test_the_beat_lease_is_let_go_or_runs_out(
    stack: LocalStack, pooler: pytest.MonkeyPatch
) -> None:
    set_pooler(pooler, "transaction")
    with pgbouncer(os.environ["AGENTQ_DATABASE_URL"], pool_size=1) as url:
        pooler.setenv("AGENTQ_DATABASE_URL", url)
        get_settings.cache_clear()
        first, second = (ProcessLease("test-lease", length_s=1.0) for _ in range(2))
        assert (first.held(), second.held(), first.held()) == (True, False, True)
        first.release()  # a clean stop: the other takes it at its next try
        assert (second.held(), first.held()) == (True, False)
        time.sleep(1.2)  # the holder stops renewing: its lease runs out
        assert (first.held(), second.held()) == (True, False)
        first.release()


def test_a_run_goes_through_a_transaction_pooler(stack: LocalStack, bounced: str) -> None:
    steps = [{"name": f"s{n}", "kind": "tool", "tool": "noop"} for n in range(3)]
    plan = parse_plan({"steps": steps}, tools=configured_tool_names())
    request = RunRequest(user_id="pooled", goal="through pgbouncer", plan=plan)
    run_id = submissions.submit(request, settings=get_settings()).run_id
    assert wait_for_run(run_id, timeout_s=60).status == "succeeded"
    for name in ("worker-pgb", "scheduler-a"):
        assert "prepared statement" not in stack.log_path(name).read_text()


def test_one_beat_sends_through_a_transaction_pooler(stack: LocalStack, bounced: str) -> None:
    wait_for_sends(stack, "scheduler-a", 0, 5 * PERIOD_S)  # the stack's beat let the lease go
    start_scheduler(stack, bounced, "scheduler-b")
    before = {name: sends(stack, name) for name in ("scheduler-a", "scheduler-b")}
    time.sleep(WINDOW_S)
    sent = {name: sends(stack, name) - count for name, count in before.items()}
    assert sent["scheduler-b"] == 0, sent  # two at once: one sends
    assert WINDOW_S / PERIOD_S - 2 <= sent["scheduler-a"] <= WINDOW_S / PERIOD_S + 1, sent

    stopping = time.monotonic()
    stop(stack, "scheduler-a")  # a clean stop: its beat lets the lease go
    wait_for_sends(stack, "scheduler-b", before["scheduler-b"], 3 * PERIOD_S)
    took = time.monotonic() - stopping
    assert "beat.active" in stack.log_path("scheduler-b").read_text()
    start_scheduler(stack, bounced, "scheduler-c")
    count_b, count_c = sends(stack, "scheduler-b"), sends(stack, "scheduler-c")
    time.sleep(WINDOW_S)
    assert sends(stack, "scheduler-c") == count_c  # b holds it: c waits
    assert sends(stack, "scheduler-b") >= count_b + WINDOW_S / PERIOD_S - 2

    killed = stack._children["scheduler-b"].popen
    os.kill(killed.pid, signal.SIGKILL)  # no clean stop: c takes over when b's lease runs out
    taken_over = wait_for_sends(stack, "scheduler-c", count_c, 5 + 3 * PERIOD_S)
    stopped_b = sends(stack, "scheduler-b")
    time.sleep(3 * PERIOD_S)
    assert sends(stack, "scheduler-b") == stopped_b
    stop(stack, "scheduler-c")  # the last beat, stopped cleanly: no lease is left, even expired
    with session_scope() as session:
        assert sql.scalar(session, "SELECT count(*) FROM process_leases") == 0
    print(f"beat taken over {took:.2f} s after a clean stop, {taken_over:.2f} s after kill -9")
