"""Engine throughput on the user's path: runs submitted over the HTTP API of `agentq up` by several
users, beside DBOS Transact and LangGraph on the same Postgres, in one invocation.

`python -m ops.bench.user_path [--users 20] [--plans 100] [--steps 5] [--workers 2] [--rounds 3]`

Needs the `bench` extra (`pip install -e '.[bench]'`), except with `--agentq-only`. One
`agentq up --workers N` (`ops.bench.up_stack`: the real command, default settings, its own
AGENTQ_HOME) serves every system, each measured in alternating rounds
(`ops.bench.rounds`; medians reported):
- `agentq API`: `--plans` runs of `--steps` `noop` steps in order, spread over `--users` users,
  each with a submitter token and its own HTTP client, all submitting at once
  (`ops.bench.api_users`); the stack's quotas and dispatch cap are its defaults;
- `agentq in-process`: as many runs for as many users submitted by this process
  (`models.engine.submissions`: `ops.bench.agentq_peer`), the engine benchmark's shortcut, so
  the API's own cost stays visible (`ops.bench.engine_throughput` has the one-user figure);
- `DBOS`: as many workflows of as many `@DBOS.step` no-ops on a queue served by `--workers`
  executor processes (`ops.bench.dbos_peer`, set up as /work/shared/PEERS.md says);
- `LangGraph`: as many invocations of a chain of as many nodes on `--workers` processes,
  checkpointed by `PostgresSaver` (`ops.bench.langgraph_peer`).
Each round is timed from its first submit (enqueue, invoke) to its last completion. Then where
an API run's time went (`ops.bench.run_timeline`: submit, steps, synthesis, memory, p50/p90 ms),
how many embed calls remembered the runs, the CPU per run of each process of the stack (a Celery
pool apart from its main process), and a lone run's submit-to-finished latency over
the API (`--lone-runs`, one at a time). The machine is shared: only ratios of one invocation
carry over.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from importlib.metadata import version
from pathlib import Path

import psutil

from models.plans.plans import PlanSpec
from ops.bench import figures as fig
from ops.bench import profiles
from ops.bench.agentq_peer import agentq_round, plan_of, wait_for_runs
from ops.bench.api_users import ApiUsers
from ops.bench.cpu import CpuMeter, group_of
from ops.bench.harness import settings_here, wait_until_idle
from ops.bench.rounds import System, alternate
from ops.bench.run_timeline import PHASES, phase_rows, phases_of, remembered
from ops.bench.up_stack import UpStack

API, IN_PROCESS, DBOS, LANGGRAPH = "agentq API", "agentq in-process", "DBOS", "LangGraph"
REMEMBERED, EMBED_CALLS = "runs remembered", "embed calls"  # per API round, in `timelines`
BENCH_MODULES = ("dbos", "langgraph", "langgraph.checkpoint.postgres")  # the `bench` extra's
INSTALL_BENCH = "pip install -e '.[bench]'"


def measure(args: argparse.Namespace) -> None:
    """Start `agentq up`, run the rounds, print the figures."""
    plan = plan_of(args.steps)
    with UpStack(args.workers) as stack:
        stack_env = {
            "AGENTQ_DATABASE_URL": stack.database_url,
            "AGENTQ_BROKER_URL": stack.broker_url,
        }
        with settings_here(stack_env):
            import redis

            from models.engine import queue

            queue._client.clear()
            broker = redis.Redis.from_url(stack.broker_url)
            users = ApiUsers(stack.api_url, args.users)
            timelines: list[dict[str, list[float]]] = []
            try:
                found = _rounds(args, stack, users, plan, broker, timelines)
                lone = lone_latencies(users, args.lone_runs, plan)
            finally:
                users.close()
                queue._client.clear()
    report(args, found, timelines, lone)
    if args.py_spy is not None:
        print("\n".join(profiles.summary(args.py_spy)))


def _rounds(
    args: argparse.Namespace,
    stack: UpStack,
    users: ApiUsers,
    plan: PlanSpec,
    broker: object,
    timelines: list[dict[str, list[float]]],
) -> list[fig.Figures]:
    plans, steps, workers = args.plans, args.steps, args.workers

    def api_round() -> float:
        seconds = users.round(plans, plan)
        runs, calls = remembered(users.last.run_ids)
        timelines.append(
            phases_of(users.last.run_ids)
            | {"API submit": users.last.latencies_s, REMEMBERED: [runs], EMBED_CALLS: [calls]}
        )
        return seconds

    def settle() -> None:
        wait_until_idle(broker)  # type: ignore[arg-type]

    systems = [
        System(
            API, plans * steps, run=api_round, warm_up=lambda: users.round(len(users.clients), plan)
        ),
        System(
            IN_PROCESS,
            plans * steps,
            run=lambda: agentq_round(plans, plan, args.users),
            warm_up=lambda: agentq_round(1, plan),
        ),
    ]
    with ExitStack() as peers:
        if not args.agentq_only:
            systems += _peer_systems(peers, stack.database_url, plans, steps, workers)
        if args.py_spy is None:
            return alternate(systems, args.rounds, CpuMeter(stack.pgdata), settle)
        with profiles.recording(python_processes(stack), args.py_spy):
            return alternate(systems, args.rounds, CpuMeter(stack.pgdata), settle)


def _peer_systems(
    peers: ExitStack, database_url: str, plans: int, steps: int, workers: int
) -> list[System]:
    """DBOS and LangGraph on `workers` processes each, entered into `peers`, as `System`s of
    `plans` runs of `steps` steps in a chain. Imported here: they need the `bench` extra, which
    `--help` and `--agentq-only` do not (`require_bench_extra`)."""
    from ops.bench.dbos_peer import DBOSPeer, WorkflowSpec
    from ops.bench.langgraph_peer import GraphSpec, LangGraphPeer

    flows = WorkflowSpec("chain", steps)
    dbos = peers.enter_context(DBOSPeer(database_url, processes=workers, spec=flows))
    spec = GraphSpec("chain", steps)
    graphs = peers.enter_context(LangGraphPeer(database_url, processes=workers, spec=spec))
    return [
        System(DBOS, plans * steps, run=lambda: dbos.run(plans), warm_up=lambda: dbos.run(workers)),
        System(
            LANGGRAPH,
            plans * steps,
            run=lambda: graphs.run(plans),
            warm_up=lambda: graphs.run(workers),
        ),
    ]


def require_bench_extra() -> None:
    """Exit with one line naming the `bench` extra (status 2) when DBOS or LangGraph (or its
    Postgres checkpointer) cannot be imported, before anything starts."""
    missing = []
    for module in BENCH_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        print(
            f"error: the DBOS and LangGraph peers need the bench extra ({', '.join(missing)} not "
            f"installed): {INSTALL_BENCH}, or measure agentq alone with --agentq-only",
            file=sys.stderr,
        )
        sys.exit(2)


def python_processes(stack: UpStack) -> list[tuple[str, int]]:
    """`(group, pid)` of the stack's Python processes (`ops.bench.cpu` groups): the worker's
    pool processes and main process, the coordinator's, the API's."""
    if stack.process is None:
        return []
    found = []
    for process in psutil.Process(stack.process.pid).children(recursive=True):
        try:
            group = group_of(process.cmdline())
        except psutil.Error:
            continue
        if group in ("worker", "coordinator", "api"):
            found.append((group, process.pid))
    return found


def lone_latencies(users: ApiUsers, runs: int, plan: PlanSpec) -> list[float]:
    """`runs.finished_at - created_at` (s) of `runs` runs of `plan` submitted over the API one at
    a time by the first user, each after the one before ended."""
    totals: list[float] = []
    for _ in range(runs):
        submitted = users.submit_all(1, plan)
        wait_for_runs(submitted.run_ids, poll_s=0.01)
        totals += phases_of(submitted.run_ids)["total"]
        time.sleep(0.05)
    return totals


def report(
    args: argparse.Namespace,
    found: list[fig.Figures],
    timelines: Sequence[dict[str, list[float]]],
    lone: list[float],
) -> None:
    """Print the setup, the comparison, the ratios, the per-run breakdown and the latencies."""
    print(f"\nmachine: {fig.machine()}")
    peers = () if args.agentq_only else ("dbos", "langgraph", "langgraph-checkpoint-postgres")
    named = ", ".join(f"{p} {version(p)}" for p in peers) or "none (--agentq-only)"
    print(
        f"agentq up --workers {args.workers}, default settings; {args.users} users over the "
        f"API; peers: {named}"
    )
    shape = f"{args.plans} plans x {args.steps} noop steps in order"
    print(f"workload per round: {shape}; median of {args.rounds} rounds, order rotated\n")
    print(fig.markdown_table(fig.COMPARISON_HEAD, fig.comparison_rows(found)) + "\n")
    head, rows = fig.cpu_rows(found)
    print(fig.markdown_table(head, rows) + "\n")
    by_name = {f.name: f for f in found}
    api = by_name[API]
    for other in found[1:]:
        print(fig.ratio_line(api, other))
    print(f"in-process / API: {fig.ratio(by_name[IN_PROCESS].rate, api.rate)}x steps/s")
    print(f"\nwhere an API run's time goes ({args.plans} runs a round, all rounds):")
    merged = {
        phase: [v for t in timelines for v in t.get(phase, [])] for phase in ("API submit", *PHASES)
    }
    print(
        fig.markdown_table(
            ("phase", "p50 ms", "p90 ms", "p50 per step ms"), phase_rows(merged, args.steps)
        )
    )
    runs, calls = (sum(sum(t.get(k, [])) for t in timelines) for k in (REMEMBERED, EMBED_CALLS))
    print(f"memory: {runs:.0f} runs remembered by {calls:.0f} embed calls")
    print("\nCPU ms per API run by process (median round):")
    for group in sorted(
        {g for r in api.rounds for g in r.cpu_by_group}, key=api.cpu_ms_per_step_of, reverse=True
    ):
        print(f"  {group}: {api.cpu_ms_per_step_of(group) * args.steps:.1f}")
    if lone:
        p50, p99 = fig.percentile(lone, 50), fig.percentile(lone, 99)
        print(
            f"\nlone {args.steps}-step run over the API, submit to finished (n={len(lone)}): "
            f"p50 {1000 * p50:.1f} ms, p99 {1000 * p99:.1f} ms"
        )
    print(
        "\nsummary: "
        + fig.summary(shape + f", {args.users} users over the API", args.workers, found)
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(
        description="Engine throughput on the user's path: runs over agentq up's HTTP API by "
        "several users, beside DBOS Transact and LangGraph on the same Postgres (module docstring: "
        "what each system runs and how rounds are timed)."
    )
    p.add_argument("--users", type=int, default=20, help="users submitting over the API")
    p.add_argument("--plans", type=int, default=100, help="runs per round")
    p.add_argument("--steps", type=int, default=5, help="steps per plan, max 50")
    p.add_argument("--workers", type=int, default=2, help="agentq up --workers, and each peer's")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per system")
    p.add_argument("--lone-runs", type=int, default=20, help="one-at-a-time API runs; 0: skip")
    p.add_argument(
        "--agentq-only",
        action="store_true",
        help="measure agentq alone, no DBOS or LangGraph rounds (for profiling)",
    )
    p.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="profile the stack's Python processes during the rounds into DIR (ops.bench.profiles)",
    )
    args = p.parse_args(argv)
    for name in ("users", "plans", "steps", "workers", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, not {getattr(args, name)}")
    return args


def main() -> None:
    """Measure and print; without the `bench` extra, only `--agentq-only`."""
    args = parse_args()
    if not args.agentq_only:
        require_bench_extra()
    measure(args)


if __name__ == "__main__":
    main()
