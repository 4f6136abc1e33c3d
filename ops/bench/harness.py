"""The engine benchmark's stack: start an embedded engine, wait for its broker to be idle.

One engine is `ops.local.start_engine` on a data dir: embedded Postgres 18 with pgvector,
Redis, the `steps` worker with `workers` processes and the coordinator with beat, the same
processes a deployment runs. The peers (raw Celery, LangGraph) use the same Postgres and broker.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import redis
from psycopg import conninfo

from models.db import database_url, dispose_engines
from models.engine import queue
from models.settings import get_settings
from ops.local import start_engine
from ops.stack import LocalStack

POLL_INTERVAL_S = 0.2
IDLE_TIMEOUT_S = 30.0
# Set by `start_engine` in this process; restored on leaving `engine`.
STACK_URLS = ("AGENTQ_DATABASE_URL", "AGENTQ_BROKER_URL")
UNACKED_KEY = "unacked"  # kombu's Redis hash of delivered, not yet acknowledged messages


class BenchError(RuntimeError):
    """The benchmark could not finish a round (a run failed, or the timeout passed)."""


@dataclass(frozen=True)
class Engine:
    """A running engine: its stack, a Redis client on its broker, its Postgres data dir and
    database URL (SQLAlchemy form)."""

    stack: LocalStack
    broker: redis.Redis
    pgdata: Path
    database_url: str

    def settle(self) -> None:
        """Wait until the broker is idle (`wait_until_idle`)."""
        wait_until_idle(self.broker)


def engine_env(embedder: str, dispatch_cap: int | None) -> dict[str, str]:
    """The engine's settings for a benchmark: the embedding provider (`hash` or `local`), and
    the per-user dispatch cap if given (AGENTQ_USER_MAX_RUNNING_STEPS; 0 is off)."""
    env = {"AGENTQ_EMBEDDING_PROVIDER": embedder}
    if dispatch_cap is not None:
        env["AGENTQ_USER_MAX_RUNNING_STEPS"] = str(dispatch_cap)
    return env


def libpq_conninfo(database_url: str, *, schema: str | None = None) -> str:
    """A libpq conninfo string (`key=value ...`) for a SQLAlchemy URL such as
    `postgresql+psycopg://postgres@/postgres?host=%2Ftmp%2Fd` (the `+driver` part is dropped,
    the query, a Unix socket's `host`, is kept), a libpq URL, or a conninfo string. With
    `schema`, the connection's `search_path` is that schema (libpq `options`). Raises
    `psycopg.ProgrammingError` for an invalid URL."""
    url = re.sub(r"^(postgres(?:ql)?)\+\w+://", r"\1://", database_url)
    extra = {"options": f"-c search_path={schema}"} if schema else {}
    return conninfo.make_conninfo(url, **extra)


@contextmanager
def settings_here(env: dict[str, str]) -> Iterator[None]:
    """`env` in this process's environment too, for the block, then as before. The benchmarks
    submit from this process, and a submit dispatches its run's first steps under this
    process's AGENTQ_USER_MAX_RUNNING_STEPS (`models.engine.submissions`): it must be the
    engine's."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    get_settings.cache_clear()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        get_settings.cache_clear()


UNLIMITED_SUBMITS: Final = {
    "AGENTQ_USER_MAX_ACTIVE_RUNS": "0",
    "AGENTQ_USER_SUBMITS_PER_MINUTE": "0",
}


@contextmanager
def engine(
    root: Path | None, workers: int, extra_env: dict[str, str] | None = None
) -> Iterator[Engine]:
    """An engine on `root` (default: a temp dir, removed after) with `workers` worker
    processes and `extra_env` in their environment and this process's (`settings_here`);
    stopped on leaving. Its submit quotas are off unless `extra_env` sets them: a benchmark
    submits in bursts, and the quotas are the stack's, whoever submits
    (`models.engine.stack_limits`)."""
    extra_env = {**UNLIMITED_SUBMITS, **(extra_env or {})}
    data_dir = root or Path(tempfile.mkdtemp(prefix="agentq-bench-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        with settings_here(extra_env or {}):
            yield from _running(data_dir, workers, extra_env)
    finally:
        if root is None:
            shutil.rmtree(data_dir, ignore_errors=True)


def _running(data_dir: Path, workers: int, extra_env: dict[str, str] | None) -> Iterator[Engine]:
    saved = {key: os.environ.get(key) for key in STACK_URLS}
    try:
        stack = start_engine(data_dir, worker_concurrency=workers, extra_env=extra_env)
        try:
            get_settings.cache_clear()  # this process now talks to this engine (new URLs)
            queue._client.clear()  # the Celery client keeps the broker URL it was made with
            with redis.Redis.from_url(queue.broker_url()) as broker:
                yield Engine(stack, broker, stack.data_dir / "pgdata", database_url())
        finally:
            stack.stop()
            # its Postgres is gone: a next engine on the same data directory has the same URL,
            # and this process's pool would hand out connections the old server terminated
            dispose_engines()
    finally:
        for key, value in saved.items():  # back to whatever this process talked to before
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        get_settings.cache_clear()
        queue._client.clear()


def wait_until_idle(broker: redis.Redis, timeout_s: float = IDLE_TIMEOUT_S) -> None:
    """Wait until no message is queued or unacknowledged (the last link acks just after it
    publishes its marker), so a round's tail never overlaps the next and the logs end complete.
    Raises `BenchError` after `timeout_s` (default `IDLE_TIMEOUT_S`)."""
    deadline = time.monotonic() + timeout_s
    queues = (*queue.WORKER_QUEUES, queue.QUEUE_COORDINATOR)
    while any(broker.llen(q) for q in queues) or broker.hlen(UNACKED_KEY):
        if time.monotonic() > deadline:
            raise BenchError(f"the broker was still busy after {timeout_s:g} s")
        time.sleep(POLL_INTERVAL_S / 10)
