"""The DBOS peer: workflows of no-op steps on a DBOS queue, served by as many executor processes.

Needs the `bench` extra (`pip install -e '.[bench]'`: dbos). Set up as /work/shared/PEERS.md
says DBOS users set it up for speed (checked against the dbos 3.4.0 source):
- each step is a `@DBOS.step` returning 1 (after `sleep_s` seconds, if given), registered at
  module level, so its qualified name is the same in every process. DBOS writes each step's
  output (one `operation_outputs` row) before the step returns to its workflow;
- `chain`: a sync `@DBOS.workflow` calling the step `steps` times in order;
- `fanout`: an async `@DBOS.workflow` starting its `steps` async steps at once
  (`asyncio.gather`; DBOS numbers each step as it starts, in call order, so replay is
  deterministic) and summing them;
- `processes` executor processes (spawned), each: `DBOS(config)`, `DBOS.listen_queues([QUEUE])`,
  `DBOS.launch()`, then `DBOS.register_queue(QUEUE, polling_interval_sec=0.05,
  worker_concurrency=...)` (the default polling interval, 1 s, would dominate short
  workflows). Each has its own `executor_id`, so none recovers another's workflows on launch;
- the runs are enqueued from this process with `DBOSClient(...).enqueue({"queue_name": QUEUE,
  "workflow_name": ...}, steps, sleep_s)`, one workflow id per run.
DBOS keeps its tables in its own database, `dbos_bench`, of the stack's Postgres server (schema
`dbos`; DBOS creates both on the first executor's launch), so agentq's tables are untouched.

A round is timed from the first enqueue to the newest `dbos.workflow_status.updated_at` (epoch
ms, written by the executor that ends the workflow) of the batch. Between rounds the executors
are stopped (SIGSTOP) and resumed (SIGCONT) at the next `run`: idle, each polls Postgres every
0.05 s (two idle executors used 15% of a core, measured 2026-12-05), which would otherwise be
charged to the other systems' rounds.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import time
import traceback
import uuid
from dataclasses import dataclass
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from types import TracebackType
from typing import Any, Literal, NamedTuple, Self

import psutil
import psycopg
import sqlalchemy as sa

from ops.bench.harness import POLL_INTERVAL_S, libpq_conninfo

try:
    from dbos import DBOS, DBOSClient, DBOSConfig
except ImportError as exc:
    raise ImportError(
        f"the DBOS peer needs the `bench` extra: pip install -e '.[bench]' ({exc})"
    ) from exc

APP_NAME = "agentq-bench"
QUEUE = "bench"
SYSTEM_DATABASE = "dbos_bench"
SYSTEM_SCHEMA = "dbos"  # DBOS's default `dbos_system_schema`
QUEUE_POLLING_INTERVAL_S = 0.05  # PEERS.md; DBOS's default is 1.0
READY_TIMEOUT_S = 120.0  # spawn + import dbos + launch (migrations on the first), per process
ROUND_TIMEOUT_S = 600.0
FAILED_STATUSES = ("ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")
WORKFLOW_NAMES = {"chain": "chain_workflow", "fanout": "fanout_workflow"}
Shape = Literal["chain", "fanout"]


class DBOSBenchError(RuntimeError):
    """A DBOS executor process failed or did not answer in time, or a workflow failed."""


@dataclass(frozen=True)
class WorkflowSpec:
    """What each run is: `steps` no-op steps of `shape`, each sleeping `sleep_s` seconds."""

    shape: Shape
    steps: int
    sleep_s: float = 0.0


class BatchCounts(NamedTuple):
    """A batch's workflows by outcome, its step outputs recorded, its newest `updated_at` (ms)."""

    succeeded: int
    failed: int
    step_outputs: int
    last_updated_ms: int | None


@DBOS.step()
def noop_step(sleep_s: float) -> int:
    """One no-op step: 1, after `sleep_s` seconds."""
    if sleep_s:
        time.sleep(sleep_s)
    return 1


@DBOS.step()
async def noop_step_async(sleep_s: float) -> int:
    """One no-op async step (the fan-out's): 1, after `sleep_s` seconds."""
    if sleep_s:
        await asyncio.sleep(sleep_s)
    return 1


@DBOS.workflow()
def chain_workflow(steps: int, sleep_s: float) -> int:
    """`steps` no-op steps in order; their sum (`steps`)."""
    return sum(noop_step(sleep_s) for _ in range(steps))


@DBOS.workflow()
async def fanout_workflow(steps: int, sleep_s: float) -> int:
    """`steps` no-op steps at once; their sum (`steps`)."""
    return sum(await asyncio.gather(*(noop_step_async(sleep_s) for _ in range(steps))))


def system_database_url(database_url: str) -> str:
    """The SQLAlchemy URL of DBOS's database: `database_url` with the database `dbos_bench`."""
    url = sa.make_url(database_url).set(database=SYSTEM_DATABASE)
    return url.render_as_string(hide_password=False)


def serve(
    url: str, index: int, worker_concurrency: int | None, reports: Queue[Any], stop: Event
) -> None:
    """An executor process: configure, listen, launch and register the queue as the module
    docstring says, report `("ready", index, pid)`, then serve until `stop` is set. Any failure
    is reported as `("error", index, traceback)`."""
    try:
        config: DBOSConfig = {
            "name": APP_NAME,
            "system_database_url": url,
            "executor_id": f"bench-{index}",
            "log_level": "WARNING",
        }
        DBOS(config=config)
        DBOS.listen_queues([QUEUE])
        DBOS.launch()
        DBOS.register_queue(
            QUEUE,
            polling_interval_sec=QUEUE_POLLING_INTERVAL_S,
            worker_concurrency=worker_concurrency,
        )
        reports.put(("ready", index, 0.0))
        stop.wait()
        DBOS.destroy()
    except Exception:
        reports.put(("error", index, traceback.format_exc()))


class DBOSPeer:
    """`processes` DBOS executor processes on the Postgres server of `database_url` (a
    SQLAlchemy URL), warmed up; `run(workflows)` -> seconds. With `worker_concurrency`, each
    executor runs at most that many workflows at once (DBOS's `worker_concurrency`); without,
    the executor that polls first claims every queued workflow.

    Use as a context manager; leaving it stops the processes. Raises `DBOSBenchError` when a
    process fails or does not answer within its timeout, or a workflow fails."""

    def __init__(
        self,
        database_url: str,
        *,
        processes: int,
        spec: WorkflowSpec,
        worker_concurrency: int | None = None,
    ) -> None:
        self.url = system_database_url(database_url)
        self.spec = spec
        self.processes = processes
        self.worker_concurrency = worker_concurrency
        ctx = mp.get_context("spawn")
        self._reports: Queue[Any] = ctx.Queue()
        self._stop = ctx.Event()
        self._procs: list[SpawnProcess] = [
            ctx.Process(
                target=serve,
                args=(self.url, i, worker_concurrency, self._reports, self._stop),
                name=f"dbos-bench-{i}",
                daemon=True,
            )
            for i in range(processes)
        ]
        self._client: DBOSClient | None = None
        self._conn: psycopg.Connection[Any] | None = None

    def __enter__(self) -> Self:
        try:
            for proc in self._procs:  # one by one: the first creates the database and tables
                proc.start()
                self._collect("ready", 1, READY_TIMEOUT_S)
            self._client = DBOSClient(system_database_url=self.url, application_name=APP_NAME)
            self._conn = psycopg.connect(libpq_conninfo(self.url), autocommit=True)
            self.run(self.processes)  # warm-up, untimed
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def pids(self) -> list[int]:
        """The pids of the executor processes."""
        return [p.pid for p in self._procs if p.pid is not None]

    def run(self, workflows: int) -> float:
        """Seconds for `workflows` runs of the spec: from the first enqueue to the newest
        `updated_at` of the batch. Raises `DBOSBenchError` if one fails or time runs out."""
        return self.run_batch(workflows)[0]

    def run_batch(self, workflows: int) -> tuple[float, str]:
        """`run`, also returning the batch's workflow id prefix (for `counts`)."""
        if self._client is None:
            raise DBOSBenchError("the DBOS peer is not started: use it as a context manager")
        batch = f"bench-{uuid.uuid4().hex}-"
        options = {"queue_name": QUEUE, "workflow_name": WORKFLOW_NAMES[self.spec.shape]}
        self._signal(resume=True)
        try:
            start = time.time()
            for i in range(workflows):
                opts: Any = {**options, "workflow_id": f"{batch}{i}"}
                self._client.enqueue(opts, self.spec.steps, self.spec.sleep_s)
            last_ms = self._wait(batch, workflows)
        finally:
            self._signal(resume=False)
        return last_ms / 1000.0 - start, batch

    def counts(self, batch: str) -> BatchCounts:
        """The workflows of `batch` (a workflow id prefix) by outcome, and their step outputs."""
        if self._conn is None:
            raise DBOSBenchError("the DBOS peer is not started: use it as a context manager")
        like = batch.replace("_", r"\_") + "%"
        ws = self._conn.execute(
            f"SELECT count(*) FILTER (WHERE status = 'SUCCESS'),"
            f" count(*) FILTER (WHERE status = ANY(%s)), max(updated_at)"
            f" FROM {SYSTEM_SCHEMA}.workflow_status WHERE workflow_uuid LIKE %s",
            (list(FAILED_STATUSES), like),
        ).fetchone()
        ops = self._conn.execute(
            f"SELECT count(*) FROM {SYSTEM_SCHEMA}.operation_outputs"
            f" WHERE workflow_uuid LIKE %s AND error IS NULL",
            (like,),
        ).fetchone()
        assert ws is not None and ops is not None
        return BatchCounts(ws[0], ws[1], ops[0], ws[2])

    def _wait(self, batch: str, workflows: int) -> int:
        """Poll until all `workflows` of `batch` succeeded; the newest `updated_at` (ms)."""
        deadline = time.monotonic() + ROUND_TIMEOUT_S
        while True:
            found = self.counts(batch)
            if found.failed:
                raise DBOSBenchError(f"{found.failed} of {workflows} DBOS workflows failed")
            if found.succeeded == workflows and found.last_updated_ms is not None:
                return found.last_updated_ms
            self._check_alive()
            if time.monotonic() > deadline:
                raise DBOSBenchError(
                    f"DBOS: {found.succeeded} of {workflows} workflows after {ROUND_TIMEOUT_S:g} s"
                )
            time.sleep(POLL_INTERVAL_S / 4)

    def _signal(self, *, resume: bool) -> None:
        """SIGCONT (`resume`) or SIGSTOP every executor (see the module docstring)."""
        for pid in self.pids():
            try:
                process = psutil.Process(pid)
                process.resume() if resume else process.suspend()
            except psutil.Error:
                continue  # it died: `_check_alive` says so

    def _check_alive(self) -> None:
        dead = [p.name for p in self._procs if p.exitcode is not None]
        if dead:
            raise DBOSBenchError(f"DBOS executor processes exited: {', '.join(dead)}")

    def _collect(self, kind: str, count: int, timeout_s: float) -> None:
        """`count` reports of `kind`; raises `DBOSBenchError` on an error report, when a process
        has died, or when `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s
        while count:
            try:
                got, index, value = self._reports.get(timeout=1.0)
            except queue.Empty:
                self._check_alive()
                if time.monotonic() > deadline:
                    raise DBOSBenchError(
                        f"no {kind!r} from a DBOS executor in {timeout_s:g} s"
                    ) from None
                continue
            if got == "error":
                raise DBOSBenchError(f"DBOS executor {index} failed:\n{value}")
            count -= 1

    def close(self) -> None:
        """Stop the executors (DBOS.destroy); terminate those still running after 10 s."""
        self._signal(resume=True)
        self._stop.set()
        for proc in self._procs:
            if proc.pid is not None:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.terminate()
                    proc.join()
        if self._client is not None:
            self._client.destroy()
            self._client = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def measure_dbos(
    database_url: str,
    *,
    processes: int,
    workflows: int,
    steps: int = 5,
    sleep_s: float = 0.0,
    shape: Shape = "chain",
    worker_concurrency: int | None = None,
) -> float:
    """Seconds for `workflows` runs of a `steps`-step workflow of `shape` on `processes`
    executors, excluding their start-up, launch and a warm-up batch of `processes` runs."""
    spec = WorkflowSpec(shape, steps, sleep_s)
    with DBOSPeer(
        database_url, processes=processes, spec=spec, worker_concurrency=worker_concurrency
    ) as peer:
        return peer.run(workflows)
