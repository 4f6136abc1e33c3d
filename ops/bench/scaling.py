"""The scaling table: agentq and LangGraph throughput on 1, 2, 4... worker processes.

`python -m ops.bench.engine_throughput --workers 1,2,4 [--plans 200 --steps 1 --sleep 0.1]`

For each worker count W, a fresh engine (`ops.local.start_engine(root, worker_concurrency=W)`)
and W LangGraph processes run `--plans` plans (graphs) of `--steps` `sleep` steps (nodes) of
`--sleep` seconds each, in alternating rounds (`ops.bench.rounds`). Sleeping steps hold a worker
without using a CPU, so on a small machine the figures show how the engine overlaps waiting work:
at best W / sleep steps per second ("ideal"). Each engine's rate is also given as a multiple of
the first worker count's, and agentq's over LangGraph's at the same W.

The per-user dispatch cap (AGENTQ_USER_MAX_RUNNING_STEPS, default 4) is off here unless
`--dispatch-cap` is given: the benchmark is one user, and a cap of 4 tasks queued or running
would bound one user's throughput, not the engine's, from W = 4 on.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from ops.bench import figures as fig
from ops.bench.agentq_peer import agentq_round, plan_of
from ops.bench.cpu import CpuMeter
from ops.bench.harness import engine, engine_env
from ops.bench.langgraph_peer import GraphSpec, LangGraphPeer
from ops.bench.rounds import System, alternate

SCALING_PLANS = 200
SCALING_STEPS = 1
CAP_OFF = 0


@dataclass(frozen=True)
class Scale:
    """The figures of agentq and LangGraph at one worker count."""

    workers: int
    agentq: fig.Figures
    langgraph: fig.Figures


def scaling(args: argparse.Namespace, worker_counts: list[int]) -> None:
    """One engine per worker count; print the scaling table."""
    plans, steps = args.plans or SCALING_PLANS, args.steps or SCALING_STEPS
    cap = CAP_OFF if args.dispatch_cap is None else args.dispatch_cap
    found: list[Scale] = []
    for workers in worker_counts:
        scale = measure_at(args, workers, plans, steps, cap)
        found.append(scale)
        agentq, langgraph = scale.agentq.rate, scale.langgraph.rate
        print(f"workers {workers}: agentq {agentq:.1f}, LangGraph {langgraph:.1f} steps/s")
    report(f"{plans} plans x {steps} sleep {args.sleep:g} s steps", found, args, cap)


def measure_at(args: argparse.Namespace, workers: int, plans: int, steps: int, cap: int) -> Scale:
    """A fresh engine and LangGraph peer on `workers` processes; their figures."""
    plan = plan_of(steps, tool="sleep", args={"seconds": args.sleep})
    spec = GraphSpec("chain", steps, args.sleep)
    root = args.data_dir / f"workers-{workers}" if args.data_dir else None
    with (
        engine(root, workers, engine_env(args.embedder, cap)) as eng,
        LangGraphPeer(eng.database_url, processes=workers, spec=spec) as graphs,
    ):
        systems = [
            System(
                "agentq",
                plans * steps,
                run=lambda: agentq_round(plans, plan),
                warm_up=lambda: agentq_round(workers, plan),
            ),
            System(
                "LangGraph",
                plans * steps,
                run=lambda: graphs.run(plans),
                warm_up=lambda: graphs.run(workers),
            ),
        ]
        meter = CpuMeter(eng.pgdata)
        agentq, langgraph = alternate(systems, args.rounds, meter, eng.settle)
    return Scale(workers, agentq, langgraph)


def scaling_rows(found: list[Scale], sleep_s: float) -> list[list[str]]:
    """One row per worker count: each system's rate, its multiple of the first row's, CPU ms
    per step; agentq over LangGraph; the ideal rate (W / sleep)."""
    base = found[0]
    rows = []
    for s in found:
        ideal = s.workers / sleep_s if sleep_s > 0 else float("inf")
        rows.append(
            [
                str(s.workers),
                f"{s.agentq.rate:.1f}",
                fig.ratio(s.agentq.rate, base.agentq.rate),
                f"{s.agentq.cpu_ms_per_step:.1f}",
                f"{s.langgraph.rate:.1f}",
                fig.ratio(s.langgraph.rate, base.langgraph.rate),
                f"{s.langgraph.cpu_ms_per_step:.1f}",
                fig.ratio(s.agentq.rate, s.langgraph.rate),
                f"{ideal:.0f}",
            ]
        )
    return rows


SCALING_HEAD = (
    "workers",
    "agentq steps/s",
    "x first",
    "agentq CPU ms/step",
    "LangGraph steps/s",
    "x first",
    "LangGraph CPU ms/step",
    "agentq / LangGraph",
    "ideal steps/s",
)


def report(shape: str, found: list[Scale], args: argparse.Namespace, cap: int) -> None:
    """Print the setup and the table."""
    print(f"\nmachine: {fig.machine()}")
    print(f"workload per round: {shape}; median of {args.rounds} rounds, order rotated")
    print(
        f"agentq: W worker processes + 1 coordinator process with beat; embeddings "
        f"{args.embedder}; dispatch cap {cap or 'off'}. LangGraph: W processes, PostgresSaver, "
        "durability=sync, the same Postgres"
    )
    print("\n" + fig.markdown_table(SCALING_HEAD, scaling_rows(found, args.sleep)) + "\n")
    named = [
        replace(f, name=f"{f.name}, {s.workers} W") for s in found for f in (s.agentq, s.langgraph)
    ]
    print(fig.markdown_table(*fig.cpu_rows(named)))
    print("\nsummary: " + scaling_summary(shape, found))


def scaling_summary(shape: str, found: list[Scale]) -> str:
    """One line for the README: each system's rate at the first and last worker count."""
    first, last = found[0], found[-1]
    parts = []
    for name in ("agentq", "langgraph"):
        low, high = getattr(first, name), getattr(last, name)
        parts.append(
            f"{low.name} {low.rate:.1f} steps/s on {first.workers} to {high.rate:.1f} on "
            f"{last.workers} ({fig.ratio(high.rate, low.rate)}x)"
        )
    return f"{shape}, {fig.machine()}: " + "; ".join(parts)
