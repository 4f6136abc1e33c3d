"""Several machines, as an operator runs them: `agentq up --listen` on one, and `agentq worker`
on another with nothing but the two URLs of its `remote.env`. The CLI in subprocesses; "another
machine" is a process with a clean environment that reaches the stack over TCP only."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg
import pytest
from sqlmodel import col, select

from models.db import normalize_url, session_scope
from models.engine import queue
from models.engine.submissions import RunRequest, submit
from models.plans.plans import parse_plan
from models.settings import get_settings
from models.tables import Run, StepAttempt
from ops.listen import REMOTE_ENV_FILE_NAME
from ops.local import WORKER_WARM
from tests.acceptance.test_api_up import start_up
from tests.acceptance.test_cli import AGENTQ
from tests.integration.conftest import SETTLED, TEST_ENV, engine_dir
from tests.support.net import free_port

pytestmark = pytest.mark.acceptance
URL_LINE = re.compile(r"^\s+(AGENTQ_DATABASE_URL|AGENTQ_BROKER_URL)=(\S+)$", re.MULTILINE)
ENV_LINE = re.compile(r"^(AGENTQ_DATABASE_URL|AGENTQ_BROKER_URL)=(\S+)$", re.MULTILINE)
LAST_LINE = "(all 0600)"  # the end of what `agentq up --listen` prints for other machines
REMOTE_NODE = "remote@%h"
REMOTE_POOL = 2  # its pool processes
READY_TIMEOUT_S = 180  # the worker's start loads the embedding model: 5-30 s on 2 busy cores
RUNS = 4
SLEEP_S = 3  # each run's first step: long enough that the stack's one pool process is busy


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    yield from engine_dir()


@dataclass(frozen=True)
class Listening:
    """A running `agentq up --listen 127.0.0.1`: what it printed, the URLs of its `remote.env`,
    and its Postgres and Redis ports."""

    printed: str
    urls: dict[str, str]
    pg_port: int
    redis_port: int


@pytest.fixture(scope="module")  # one stack for the module: each start takes 30-60 s here
def listening(home: Path) -> Iterator[Listening]:
    """`agentq up --listen 127.0.0.1` (one pool process)."""
    pg_port, redis_port = free_port(), free_port()
    args = ["--listen", "127.0.0.1", "--postgres-port", str(pg_port)]
    env = {**TEST_ENV, "AGENTQ_WORKER_CONCURRENCY": "1"}
    proc, out = start_up(home, free_port(), env, args=[*args, "--redis-port", str(redis_port)])
    try:
        assert proc.stdout is not None
        while LAST_LINE not in out and proc.poll() is None:
            out += proc.stdout.readline()
        urls = dict(ENV_LINE.findall((home / REMOTE_ENV_FILE_NAME).read_text()))
        yield Listening(out, urls, pg_port, redis_port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def remote_worker(urls: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`agentq worker` with PATH, PYTHONPATH, HOME and the two URLs alone; output to `log`."""
    keep = {k: os.environ[k] for k in ("PATH", "PYTHONPATH", "HOME") if k in os.environ}
    argv = [AGENTQ, "worker", "--name", REMOTE_NODE, "--concurrency", str(REMOTE_POOL)]
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, env={**keep, **urls}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_ready(proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the worker consumes and each pool process has loaded its embedding model (before
    that, a message it took waits, and the reconciler hands the step to the other machine)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _ready(log.read_text(errors="replace")):
        assert proc.poll() is None, f"agentq worker exited {proc.returncode}:\n{log.read_text()}"
        assert time.monotonic() < deadline, f"agentq worker not ready:\n{log.read_text()}"
        time.sleep(0.2)


def _ready(text: str) -> bool:
    return "ready." in text and text.count(WORKER_WARM) >= REMOTE_POOL


def talk_to(urls: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """This process uses the stack through the URLs for other machines, as a CLI there would."""
    for name, url in urls.items():
        monkeypatch.setenv(name, url)
    get_settings.cache_clear()
    monkeypatch.setattr(queue, "_client", {})  # the Celery client caches its broker URL


def submit_runs() -> list[int]:
    steps = [
        {"name": "slow", "kind": "tool", "tool": "sleep", "args": {"seconds": SLEEP_S}},
        {"name": "after", "kind": "tool", "tool": "noop"},
    ]
    plan = parse_plan({"steps": steps}, tools=["sleep", "noop"])  # built-ins: every worker has them
    request = RunRequest(user_id="remote-test", goal="two machines", plan=plan)
    return [submit(request, settings=get_settings()).run_id for _ in range(RUNS)]


def wait_settled(run_ids: list[int], timeout_s: float = 120) -> list[Run]:
    deadline = time.monotonic() + timeout_s
    while True:
        with session_scope() as session:
            runs = [session.get(Run, run_id) for run_id in run_ids]
        if all(run is not None and run.status in SETTLED for run in runs):
            return [run for run in runs if run is not None]
        assert time.monotonic() < deadline, [run.status for run in runs if run is not None]
        time.sleep(0.3)


def pids_of(proc: subprocess.Popen[bytes]) -> set[int]:
    """The worker's main process and its pool processes."""
    main = psutil.Process(proc.pid)
    return {main.pid, *(child.pid for child in main.children(recursive=True))}


def test_listen_prints_the_urls_without_their_passwords(listening: Listening, home: Path) -> None:
    """Issue 27, item 9: `agentq up`'s output ends up in journald or `docker logs`."""
    pg_password = (home / "postgres_password").read_text().strip()
    redis_password = (home / "redis_password").read_text().strip()
    assert dict(URL_LINE.findall(listening.printed)) == {
        "AGENTQ_DATABASE_URL": f"postgresql://agentq:**@127.0.0.1:{listening.pg_port}/postgres",
        "AGENTQ_BROKER_URL": f"redis://:**@127.0.0.1:{listening.redis_port}/0",
    }
    for secret in ("postgres_password", "redis_password", REMOTE_ENV_FILE_NAME):
        assert str(home / secret) in listening.printed, secret
        assert (home / secret).stat().st_mode & 0o777 == 0o600, secret
    logs = [*(home / "logs").glob("*.log"), home / "pgdata" / "log"]
    assert len(logs) > 4
    for password in (pg_password, redis_password):
        assert password not in listening.printed
        assert [log.name for log in logs if password in log.read_text(errors="replace")] == []
    assert listening.urls == {
        "AGENTQ_DATABASE_URL": (
            f"postgresql://agentq:{pg_password}@127.0.0.1:{listening.pg_port}/postgres"
        ),
        "AGENTQ_BROKER_URL": f"redis://:{redis_password}@127.0.0.1:{listening.redis_port}/0",
    }


def test_the_urls_need_the_passwords(listening: Listening) -> None:
    port = listening.pg_port
    with psycopg.connect(listening.urls["AGENTQ_DATABASE_URL"]) as connection:  # reads the data
        (count,) = connection.execute("SELECT count(*) FROM runs").fetchone() or (None,)
        assert isinstance(count, int)
    for refused in (
        f"postgresql://agentq:wrong@127.0.0.1:{port}/postgres",
        f"postgresql://postgres@127.0.0.1:{port}/postgres",  # initdb's trust is gone on TCP
    ):
        with pytest.raises(psycopg.OperationalError, match=r"authentication failed|no pg_hba"):
            psycopg.connect(refused, connect_timeout=5).close()


FORBIDDEN = [
    "INSERT INTO api_tokens (name, role, token_hash, created_at)"
    " VALUES ('planted', 'admin', repeat('a', 64), now())",
    "SELECT token_hash FROM api_tokens",
    "DELETE FROM console_sessions",
    "INSERT INTO webhook_subscriptions (url, events, enabled, secret_ref, created_at)"
    " VALUES ('http://x.test/', ARRAY['run.succeeded'], true, 'default', now())",
    "UPDATE alembic_version SET version_num = version_num",
    "CREATE TABLE planted (id int)",
]


@pytest.mark.parametrize("statement", FORBIDDEN)
def test_a_worker_machine_cannot_mint_credentials(listening: Listening, statement: str) -> None:
    """Role `agentq` writes the engine's tables but not the API's credentials (item 9)."""
    url = listening.urls["AGENTQ_DATABASE_URL"]
    with psycopg.connect(url) as connection, pytest.raises(psycopg.errors.InsufficientPrivilege):
        connection.execute(statement)


def test_a_worker_machine_writes_the_engine_tables(listening: Listening) -> None:
    with psycopg.connect(listening.urls["AGENTQ_DATABASE_URL"]) as connection:
        granted = connection.execute(
            "SELECT pg_has_role('agentq', 'pg_write_all_data', 'MEMBER'),"
            " has_table_privilege('agentq', 'steps', 'INSERT, UPDATE, DELETE'),"
            " has_table_privilege('agentq', 'webhook_deliveries', 'INSERT, UPDATE, DELETE'),"
            " has_table_privilege('agentq', 'run_progress', 'SELECT')"
        ).fetchone()
        assert granted == (False, True, True, True)
        connection.rollback()


def test_a_worker_with_only_the_two_urls_takes_steps(
    listening: Listening, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = listening.urls
    log = tmp_path / "remote-worker.log"
    worker = remote_worker(urls, log)
    try:
        wait_ready(worker, log)
        pids = pids_of(worker)
        talk_to(urls, monkeypatch)
        runs = wait_settled(submit_runs())
        assert [run.status for run in runs] == ["succeeded"] * RUNS
        with session_scope() as session:
            stmt = select(StepAttempt.worker).where(col(StepAttempt.outcome) == "succeeded")
            workers = list(session.exec(stmt))
        remote = [w for w in workers if int(w.rsplit(":", 1)[1]) in pids]
        assert remote, f"no step taken by the remote worker {sorted(pids)}: {workers}"
        assert normalize_url(urls["AGENTQ_DATABASE_URL"]).startswith("postgresql+psycopg://")
        worker.send_signal(signal.SIGTERM)  # a warm shutdown: exits 0 once idle
        assert worker.wait(timeout=60) == 0, log.read_text()
    finally:
        get_settings.cache_clear()  # read again once monkeypatch has put the environment back
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
