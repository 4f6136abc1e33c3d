"""The LangGraph peer: graphs of no-op nodes checkpointed in Postgres, on as many processes.

Needs the `bench` extra (`pip install -e '.[bench]'`: langgraph, langgraph-checkpoint-postgres).
Each graph is a `StateGraph` over one counter (`{"count": int}`, summed by an `operator.add`
reducer) whose nodes each return `{"count": 1}` (after `sleep_s` seconds, if given):
- `chain`: START -> n0 -> n1 -> ... -> END, one node per superstep;
- `fanout`: START -> n0..n(K-1) -> END, all K nodes in one superstep (LangGraph runs them on
  its thread pool).
Compiled with `PostgresSaver` (langgraph-checkpoint-postgres; one psycopg connection per
process, autocommit, as `PostgresSaver.from_conn_string` makes it) and invoked with
`durability="sync"`: LangGraph writes each superstep's checkpoint before it starts the next
(`langgraph.types.Durability`; the loop waits for the checkpoint's future after each tick), and
saves each node's writes (`put_writes`) as the node ends. So its unit of durability is the
superstep: a chain of 5 writes 7 checkpoints and 11 `checkpoint_writes` rows per invocation, a
fan-out of 5 writes 3 checkpoints and 11 write rows (counted with langgraph 1.2.24 and
langgraph-checkpoint-postgres 3.2.0). Each invocation has its own `thread_id`. Its tables
(`checkpoints`, `checkpoint_blobs`, `checkpoint_writes`, `checkpoint_migrations`) live in their
own schema, `langgraph`, of the stack's database (`search_path` set per connection).

`LangGraphPeer` starts `processes` spawned processes once; each connects, compiles the graph
and runs one untimed warm-up invocation. A round gives each process its share of the graphs,
releases all of them at once (a `multiprocessing.Barrier` that this process also waits at), and
is timed from that release to the last process's end (each reports its `time.time()`).
"""

from __future__ import annotations

import multiprocessing as mp
import operator
import queue
import time
import traceback
import uuid
from dataclasses import dataclass
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from types import TracebackType
from typing import Annotated, Any, Literal, Self, TypedDict

import psycopg

from ops.bench.harness import libpq_conninfo

try:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph
except ImportError as exc:
    raise ImportError(
        f"the LangGraph peer needs the `bench` extra: pip install -e '.[bench]' ({exc})"
    ) from exc

SCHEMA = "langgraph"
READY_TIMEOUT_S = 120.0  # spawn + import langgraph + connect + warm-up, per process, 2 cores
ROUND_TIMEOUT_S = 600.0
Shape = Literal["chain", "fanout"]


class LangGraphError(RuntimeError):
    """A LangGraph benchmark process failed, or did not answer in time."""


class Count(TypedDict):
    """The graph's state: one counter, which every node increments."""

    count: Annotated[int, operator.add]


@dataclass(frozen=True)
class GraphSpec:
    """What each process compiles: `nodes` nodes of `shape`, each sleeping `sleep_s` seconds."""

    shape: Shape
    nodes: int
    sleep_s: float = 0.0


def build_graph(spec: GraphSpec, checkpointer: Any) -> Any:
    """The compiled graph of `spec` (`CompiledStateGraph`) using `checkpointer`."""

    def node(state: Count) -> dict[str, int]:
        if spec.sleep_s:
            time.sleep(spec.sleep_s)
        return {"count": 1}

    graph = StateGraph(Count)
    names = [f"n{i}" for i in range(spec.nodes)]
    for name in names:
        graph.add_node(name, node)
    if spec.shape == "chain":
        for a, b in zip([START, *names], [*names, END], strict=True):
            graph.add_edge(a, b)
    else:
        for name in names:
            graph.add_edge(START, name)
            graph.add_edge(name, END)
    return graph.compile(checkpointer=checkpointer)


def invoke(graph: Any, spec: GraphSpec, thread_id: str) -> None:
    """One invocation from `{"count": 0}`, checkpointed synchronously under `thread_id`.
    Raises `LangGraphError` if the counter does not end at `spec.nodes`."""
    # The recursion limit counts supersteps (LangGraph's default is 25): a chain of 50 needs 50.
    config = {"configurable": {"thread_id": thread_id}, "recursion_limit": spec.nodes + 5}
    out = graph.invoke({"count": 0}, config, durability="sync")
    if out["count"] != spec.nodes:
        raise LangGraphError(f"graph {thread_id} ended at count {out['count']}, not {spec.nodes}")


def setup_schema(dsn: str) -> None:
    """Create the `langgraph` schema and PostgresSaver's tables in it (its migrations)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    with PostgresSaver.from_conn_string(libpq_conninfo(dsn, schema=SCHEMA)) as saver:
        saver.setup()


def serve(
    dsn: str,
    spec: GraphSpec,
    index: int,
    barrier: Barrier,
    commands: Queue[Any],
    reports: Queue[Any],
) -> None:
    """A benchmark process: connect, compile, warm up, report ready; then for each command
    `count`, wait at the barrier, run `count` invocations, report the end time. `None` ends it.
    Any failure is reported as `("error", index, traceback)`."""
    try:
        with PostgresSaver.from_conn_string(libpq_conninfo(dsn, schema=SCHEMA)) as saver:
            graph = build_graph(spec, saver)
            invoke(graph, spec, f"warmup-{uuid.uuid4().hex}")
            reports.put(("ready", index, time.time()))
            while (count := commands.get()) is not None:
                barrier.wait(timeout=ROUND_TIMEOUT_S)
                prefix = uuid.uuid4().hex
                for i in range(count):
                    invoke(graph, spec, f"{prefix}-{index}-{i}")
                reports.put(("done", index, time.time()))
    except Exception:
        reports.put(("error", index, traceback.format_exc()))


def shares(total: int, parts: int) -> list[int]:
    """`total` split into `parts` counts that differ by at most one, larger first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class LangGraphPeer:
    """`processes` LangGraph processes on `database_url`, warmed up; `run(graphs)` -> seconds.

    Use as a context manager; leaving it stops the processes. Raises `LangGraphError` when a
    process fails or does not answer within its timeout."""

    def __init__(self, database_url: str, *, processes: int, spec: GraphSpec) -> None:
        self.dsn = libpq_conninfo(database_url)
        self.spec = spec
        self.processes = processes
        ctx = mp.get_context("spawn")
        self._barrier = ctx.Barrier(processes + 1)
        self._reports: Queue[Any] = ctx.Queue()
        self._commands: list[Queue[Any]] = [ctx.Queue() for _ in range(processes)]
        self._procs: list[SpawnProcess] = [
            ctx.Process(
                target=serve,
                args=(self.dsn, spec, i, self._barrier, q, self._reports),
                name=f"langgraph-bench-{i}",
                daemon=True,
            )
            for i, q in enumerate(self._commands)
        ]

    def __enter__(self) -> Self:
        setup_schema(self.dsn)
        for proc in self._procs:
            proc.start()
        self._collect("ready", READY_TIMEOUT_S)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def pids(self) -> list[int]:
        """The pids of the benchmark processes."""
        return [p.pid for p in self._procs if p.pid is not None]

    def run(self, graphs: int) -> float:
        """Seconds for `graphs` invocations spread over the processes: from their release to
        the last one's end."""
        for q, count in zip(self._commands, shares(graphs, len(self._procs)), strict=True):
            q.put(count)
        try:
            self._barrier.wait(timeout=READY_TIMEOUT_S)
        except Exception as exc:  # threading.BrokenBarrierError: a process died
            raise LangGraphError(f"a LangGraph process did not reach the start: {exc}") from exc
        start = time.time()
        return max(self._collect("done", ROUND_TIMEOUT_S)) - start

    def _collect(self, kind: str, timeout_s: float) -> list[float]:
        """One `kind` report per process (their times); raises `LangGraphError` on an error
        report, when a process has died, or when `timeout_s` passes."""
        times: list[float] = []
        deadline = time.monotonic() + timeout_s
        while len(times) < len(self._procs):
            try:
                got, index, value = self._reports.get(timeout=1.0)
            except queue.Empty:
                dead = [p.name for p in self._procs if p.exitcode is not None]
                if dead or time.monotonic() > deadline:
                    why = f"{', '.join(dead)} exited" if dead else f"{timeout_s:g} s passed"
                    message = f"no {kind!r} from the LangGraph processes: {why}"
                    raise LangGraphError(message) from None
                continue
            if got == "error":
                raise LangGraphError(f"LangGraph process {index} failed:\n{value}")
            times.append(value)
        return times

    def close(self) -> None:
        """Ask every process to end; terminate those still running after 10 s."""
        for q in self._commands:
            q.put(None)
        for proc in self._procs:
            if proc.pid is not None:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.terminate()
                    proc.join()


def measure_langgraph(
    database_url: str,
    *,
    processes: int,
    graphs: int,
    nodes: int = 5,
    sleep_s: float = 0.0,
    shape: Shape = "chain",
) -> float:
    """Seconds for `graphs` invocations of a `nodes`-node graph of `shape` on `processes`
    processes, excluding their start-up, connection, `setup()` and one warm-up invocation each.
    """
    spec = GraphSpec(shape, nodes, sleep_s)
    with LangGraphPeer(database_url, processes=processes, spec=spec) as peer:
        return peer.run(graphs)
