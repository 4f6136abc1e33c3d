"""Engine throughput: agentq steps per second against raw Celery, LangGraph and DBOS, in one run.

`python -m ops.bench.engine_throughput [--plans 20] [--steps 5 | --parallel K] [--workers 2]`
`python -m ops.bench.engine_throughput --workers 1,2,4 [--plans 200 --steps 1 --sleep 0.1]`

Needs the `bench` extra (`pip install -e '.[bench]'`). One embedded engine (`ops.local.
start_engine`: Postgres 18 with pgvector, Redis, the `steps` worker with `--workers` processes,
the coordinator with beat) serves four systems, each measured on it in alternating rounds
(`ops.bench.rounds`; medians reported):
- agentq (`ops.bench.agentq_peer`): `--plans` runs of `--steps` `noop` tool steps in order, or
  with `--parallel K` of K independent steps (`"after": []`), timed from the first submit to
  the newest `runs.finished_at`;
- raw Celery (`ops.bench.celery_peer`): as many chains of bare no-op tasks on the same broker
  and worker processes (with `--parallel K`, K lone tasks per plan), no durability at all;
- LangGraph (`ops.bench.langgraph_peer`): as many invocations of a graph of as many no-op nodes
  (a chain, or a fan-out of K), checkpointed by `PostgresSaver` with `durability="sync"` into
  the same Postgres, on as many OS processes as agentq has workers;
- DBOS (`ops.bench.dbos_peer`): as many workflows of as many no-op `@DBOS.step`s (in order, or
  K at once), enqueued on a DBOS queue polled every 0.05 s by as many executor processes as
  agentq has workers, its tables in their own database of the same Postgres server.
For each: steps per second, and CPU milliseconds per step of every process of the stack
(`ops.bench.cpu`); then agentq's rate over each peer's. Then agentq's dispatch latency at low
load (`--latency-runs` runs one at a time): p50 and p99 of `steps.started_at - queued_at`.

With several `--workers` (`1,2,4`) it prints a scaling table instead (`ops.bench.scaling`):
one engine per worker count, `sleep` steps, agentq and LangGraph on as many processes.

Embeddings default to `hash` (`--embedder`): each run's synthesis records its episode and
facts, and the `local` model's loading in every worker process would otherwise land in the
rounds. The machine is shared: only the ratios between systems of one invocation carry over.
"""

from __future__ import annotations

import argparse
from importlib.metadata import version
from pathlib import Path

from models.plans.plans import PlanSpec
from ops.bench import figures as fig
from ops.bench.agentq_peer import agentq_round, dispatch_latencies, one_at_a_time, plan_of
from ops.bench.celery_peer import raw_round
from ops.bench.cpu import CpuMeter
from ops.bench.dbos_peer import DBOSPeer, WorkflowSpec
from ops.bench.harness import Engine, engine, engine_env
from ops.bench.langgraph_peer import GraphSpec, LangGraphPeer, Shape
from ops.bench.rounds import System, alternate
from ops.bench.scaling import scaling

LANGGRAPH = "LangGraph"
LANGGRAPH_POSTGRES = "langgraph-checkpoint-postgres"
DBOS = "DBOS"


def comparison(args: argparse.Namespace, workers: int) -> None:
    """agentq, raw Celery, LangGraph and DBOS on one engine; print the figures."""
    steps = args.parallel or args.steps
    plan = plan_of(steps, parallel=bool(args.parallel))  # refused before anything starts
    shape: Shape = "fanout" if args.parallel else "chain"
    env = engine_env(args.embedder, args.dispatch_cap)
    with engine(args.data_dir, workers, env) as eng:
        with (
            LangGraphPeer(
                eng.database_url, processes=workers, spec=GraphSpec(shape, steps)
            ) as graphs,
            DBOSPeer(
                eng.database_url,
                processes=workers,
                spec=WorkflowSpec(shape, steps),
                worker_concurrency=args.dbos_concurrency or None,
            ) as flows,
        ):
            systems = comparison_systems(args, eng, graphs, flows, plan)
            found = alternate(systems, args.rounds, CpuMeter(eng.pgdata), eng.settle)
        latencies = low_load_latencies(eng, args.latency_runs, plan)
    kind = "independent noop steps" if args.parallel else "noop steps in order"
    report(args, workers, f"{args.plans} plans x {steps} {kind}", found, latencies)


def comparison_systems(
    args: argparse.Namespace, eng: Engine, graphs: LangGraphPeer, flows: DBOSPeer, plan: PlanSpec
) -> list[System]:
    """agentq, raw Celery, LangGraph, DBOS: `args.plans` x the plan's steps per round each."""
    plans, steps, parallel = args.plans, len(plan.steps), bool(args.parallel)
    return [
        System(
            "agentq",
            plans * steps,
            run=lambda: agentq_round(plans, plan),
            warm_up=lambda: agentq_round(1, plan),
        ),
        System(
            "raw Celery",
            plans * steps,
            run=lambda: raw_round(eng.broker, plans, steps, parallel=parallel),
            warm_up=lambda: raw_round(eng.broker, 1, steps, parallel=parallel),
        ),
        System(
            LANGGRAPH,
            plans * steps,
            run=lambda: graphs.run(plans),
            warm_up=lambda: graphs.run(graphs.processes),
        ),
        System(
            DBOS,
            plans * steps,
            run=lambda: flows.run(plans),
            warm_up=lambda: flows.run(flows.processes),
        ),
    ]


def low_load_latencies(eng: Engine, runs: int, plan: PlanSpec) -> dict[str, list[float]]:
    """Dispatch latencies of `runs` runs of `plan`, one at a time (none if `runs` is 0)."""
    if runs <= 0:
        return {}
    eng.settle()
    return dispatch_latencies(one_at_a_time(runs, plan))


def report(
    args: argparse.Namespace,
    workers: int,
    shape: str,
    found: list[fig.Figures],
    latencies: dict[str, list[float]],
) -> None:
    """Print the setup, the comparison table, the ratios, the latencies and the summary."""
    agentq, raw, graphs, flows = found
    print(f"\nmachine: {fig.machine()}")
    for line in setup_lines(args, workers, shape):
        print(line)
    print("\n" + fig.markdown_table(fig.COMPARISON_HEAD, fig.comparison_rows(found)) + "\n")
    print(fig.markdown_table(*fig.cpu_rows(found)) + "\n")
    print(fig.ratio_line(agentq, graphs))
    print(fig.ratio_line(agentq, flows))
    print(fig.ratio_line(agentq, raw))
    for line in fig.latency_lines(latencies):
        print(line)
    print("\nsummary: " + fig.summary(shape, workers, found))


def setup_lines(args: argparse.Namespace, workers: int, shape: str) -> list[str]:
    """What ran: each system's processes and settings, the workload, the rounds."""
    cap = "default" if args.dispatch_cap is None else str(args.dispatch_cap)
    versions = ", ".join(f"{p} {version(p)}" for p in ("langgraph", LANGGRAPH_POSTGRES))
    concurrency = args.dbos_concurrency or "unlimited"
    return [
        f"agentq: {workers} worker processes (steps queue) + 1 coordinator process with beat; "
        f"embeddings {args.embedder}; dispatch cap {cap}",
        "raw Celery: the same broker and worker processes; no result backend, no rows",
        f"LangGraph: {workers} processes, PostgresSaver, durability=sync, the same Postgres "
        f"({versions})",
        f"DBOS: {workers} executor processes, queue polled every 0.05 s, worker concurrency "
        f"{concurrency}; its own database of the same Postgres (dbos {version('dbos')})",
        f"workload per round: {shape}; median of {args.rounds} rounds, order rotated",
    ]


def parse_workers(text: str) -> list[int]:
    """`"1,2,4"` -> `[1, 2, 4]`; raises `argparse.ArgumentTypeError` unless all are >= 1."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from exc
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"worker counts must be >= 1: {text!r}")
    return counts


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; `--plans` and `--steps` default by mode (None here)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--plans", type=int, help="runs per round (default 20; scaling: 200)")
    p.add_argument("--steps", type=int, help="steps per plan, max 50 (default 5; scaling: 1)")
    p.add_argument("--parallel", type=int, default=0, metavar="K", help="K independent steps")
    p.add_argument("--workers", type=parse_workers, default=[2], help="e.g. 2, or 1,2,4")
    p.add_argument("--sleep", type=float, default=0.1, help="scaling: each sleep step's s")
    p.add_argument("--dispatch-cap", type=int, default=None, help="AGENTQ_USER_MAX_RUNNING_STEPS")
    p.add_argument(
        "--dbos-concurrency", type=int, default=0, help="DBOS worker_concurrency; 0: unlimited"
    )
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per system")
    p.add_argument("--latency-runs", type=int, default=20, help="one-at-a-time runs; 0: skip")
    p.add_argument("--embedder", default="hash", choices=["hash", "local"], help="embeddings")
    p.add_argument("--data-dir", type=Path, default=None, help="kept; default: a temp dir")
    args = p.parse_args(argv)
    for name in ("plans", "steps", "rounds"):
        if (value := getattr(args, name)) is not None and value < 1:
            p.error(f"--{name} must be at least 1, not {value}")
    if args.parallel and len(args.workers) > 1:
        p.error(
            "--parallel is for the comparison; the scaling table (several --workers) runs "
            "sleep steps in order"
        )
    return args


def main() -> None:
    """Measure and print: the comparison, or with several worker counts the scaling table."""
    args = parse_args()
    if len(args.workers) > 1:
        scaling(args, args.workers)
        return
    args.plans = args.plans or 20
    args.steps = args.steps or 5
    comparison(args, args.workers[0])


if __name__ == "__main__":
    main()
