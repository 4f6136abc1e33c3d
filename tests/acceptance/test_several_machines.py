"""Several machines, as an operator runs them: `agentq up --listen` on one, and `agentq worker`
on another with nothing but the two URLs it printed. The CLI in subprocesses; "another machine"
is a process with a clean environment that reaches the stack over TCP only."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest
from sqlmodel import col, select

from models import queue
from models.db import normalize_url, session_scope
from models.plans import parse_plan
from models.settings import get_settings
from models.submissions import RunRequest, submit
from models.tables import Run, StepAttempt
from ops.local import WORKER_WARM
from tests.acceptance.test_api_up import start_up
from tests.acceptance.test_cli import AGENTQ
from tests.integration.conftest import SETTLED, TEST_ENV, engine_dir
from tests.support.net import free_port

pytestmark = pytest.mark.acceptance
URL_LINE = re.compile(r"^\s+(AGENTQ_DATABASE_URL|AGENTQ_BROKER_URL)=(\S+)$", re.MULTILINE)
REMOTE_NODE = "remote@%h"
REMOTE_POOL = 2  # its pool processes
READY_TIMEOUT_S = 180  # the worker's start loads the embedding model: 5-30 s on 2 busy cores
RUNS = 4
SLEEP_S = 3  # each run's first step: long enough that the stack's one pool process is busy


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    yield from engine_dir()


@pytest.fixture(scope="module")  # one stack for the module: each start takes 30-60 s here
def listening(home: Path) -> Iterator[tuple[dict[str, str], int, int]]:
    """`agentq up --listen 127.0.0.1` (one pool process), the URLs it printed for other
    machines, and its Postgres and Redis ports."""
    pg_port, redis_port = free_port(), free_port()
    args = ["--listen", "127.0.0.1", "--postgres-port", str(pg_port)]
    env = {**TEST_ENV, "AGENTQ_WORKER_CONCURRENCY": "1"}
    proc, out = start_up(home, free_port(), env, args=[*args, "--redis-port", str(redis_port)])
    try:
        assert proc.stdout is not None
        while len(URL_LINE.findall(out)) < 2 and proc.poll() is None:
            out += proc.stdout.readline()
        yield dict(URL_LINE.findall(out)), pg_port, redis_port
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


def test_listen_prints_urls_that_need_the_passwords(
    listening: tuple[dict[str, str], int, int], home: Path
) -> None:
    urls, pg_port, redis_port = listening
    assert set(urls) == {"AGENTQ_DATABASE_URL", "AGENTQ_BROKER_URL"}, urls
    pg_password = (home / "postgres_password").read_text().strip()
    redis_password = (home / "redis_password").read_text().strip()
    assert urls["AGENTQ_DATABASE_URL"] == (
        f"postgresql://agentq:{pg_password}@127.0.0.1:{pg_port}/postgres"
    )
    assert urls["AGENTQ_BROKER_URL"] == f"redis://:{redis_password}@127.0.0.1:{redis_port}/0"
    for secret in ("postgres_password", "redis_password"):
        assert (home / secret).stat().st_mode & 0o777 == 0o600, secret
    with psycopg.connect(urls["AGENTQ_DATABASE_URL"]) as connection:  # the role reads the data
        (count,) = connection.execute("SELECT count(*) FROM runs").fetchone() or (None,)
        assert isinstance(count, int)
    for refused in (
        f"postgresql://agentq:wrong@127.0.0.1:{pg_port}/postgres",
        f"postgresql://postgres@127.0.0.1:{pg_port}/postgres",  # initdb's trust is gone on TCP
    ):
        with pytest.raises(psycopg.OperationalError, match=r"authentication failed|no pg_hba"):
            psycopg.connect(refused, connect_timeout=5).close()


def test_a_worker_with_only_the_two_urls_takes_steps(
    listening: tuple[dict[str, str], int, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    urls = listening[0]
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
