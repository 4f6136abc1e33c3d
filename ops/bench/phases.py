"""Where a run's client CPU and SQL go, phase by phase, in one process with no broker.

`python -m ops.bench.phases [--runs 50] [--steps 5] [--parallel]`

Starts the embedded services only (Postgres 18 + Redis, migrated, in a temp dir), then runs
`--runs` runs of `--steps` `noop` tool steps in this process, calling the very functions the
engine's processes call, in their order, with every message collected instead of sent:
`submit` (`models.engine.submissions.submit`: the run and its first decision, committed), `claim`
(each first step, sent through the broker), `finish` (each step's outcome, chained:
the next step is claimed in the same transaction), `synthesize` and `remember` (the memory task).
For each phase it prints the client CPU per run (`time.process_time` of this process, ms), and
the SQL statements and transactions per run (counted by SQLAlchemy events), and the Postgres
server's CPU per run over all phases (its processes' user + system time, sampled once before and
once after the measured runs: `ops.bench.cpu`; sampling around each phase would cost more than a
phase, and the kernel's 10 ms ticks would charge it to the phases). The counts are stable on a
noisy machine, the times less so: compare two commits back to back, alternating. Profile it with
`py-spy record -- python -m ops.bench.phases` to see a phase's lines.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from models import sql
from models.db import get_engine
from models.engine import queue
from models.engine.submissions import RunRequest, submit
from models.migrate import upgrade
from models.plans.plans import PlanSpec
from models.settings import get_settings
from ops.bench.agentq_peer import BENCH_USER, plan_of
from ops.bench.cpu import POSTGRES, CpuMeter
from ops.stack import LocalStack
from worker.execution import messages as step_messages
from worker.execution import steps
from worker.memory import remembering
from worker.phases import synthesis

PHASES = ("submit", "claim", "finish", "synthesize", "remember")


@dataclass
class Tally:
    """Per phase: CPU seconds of this process, SQL statements and transactions."""

    cpu_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    statements: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    transactions: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    phase: str = ""

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        """Count what runs inside under `phase`."""
        self.phase, start = phase, time.process_time()
        try:
            yield
        finally:
            self.cpu_s[phase] += time.process_time() - start
            self.phase = ""

    def listen(self, engine: sa.Engine) -> None:
        """Count every statement (through SQLAlchemy, and `models.sql`'s on the driver) and every
        commit of `engine` under the current phase."""

        def statement(*_: Any) -> None:
            self.statements[self.phase] += 1

        def commit(*_: Any) -> None:
            self.transactions[self.phase] += 1

        sa.event.listen(engine, "before_cursor_execute", statement)
        sa.event.listen(engine, "commit", commit)
        on_driver = sql.execute

        def counted(*args: Any, **kwargs: Any) -> Any:
            statement()
            return on_driver(*args, **kwargs)

        sql.execute = counted


class Collected:
    """The messages the phases would have sent, by task name, for the next phase to take."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, tuple[Any, ...]]] = []

    def send(self, task: str, *args: Any, **_: Any) -> bool:
        self.sent.append((task, args))
        return True

    def take(self, task: str) -> list[tuple[Any, ...]]:
        """The arguments of every collected `task` message, removed from the collection."""
        found = [args for name, args in self.sent if name == task]
        self.sent = [(name, args) for name, args in self.sent if name != task]
        return found


def one_run(plan: PlanSpec, tally: Tally, messages: Collected) -> None:
    """Drive one run through every phase, as the engine's processes would."""
    settings = get_settings().model_copy(
        update={"user_max_active_runs": 0, "user_submits_per_minute": 0}
    )
    request = RunRequest(user_id=BENCH_USER, goal="phases", plan=plan)
    with tally.timing("submit"):
        run_id = submit(request, settings=settings).run_id
    for (step_id,) in messages.take(queue.TASK_EXECUTE_STEP):
        with tally.timing("claim"):
            claimed = step_messages.claim(step_id)
        while claimed is not None:
            outcome = steps.perform(claimed)
            with tally.timing("finish"):
                done = steps.finish(claimed, outcome, may_chain=True)
            messages.sent += done.sends
            if done.synthesize:
                with tally.timing("synthesize"):
                    messages.sent += synthesis.synthesize(run_id)
            claimed = done.next
    for (remembered,) in messages.take(queue.TASK_REMEMBER_RUN):
        with tally.timing("remember"):
            remembering.remember_ended_run(remembered)
    leftover = [task for task, _ in messages.sent if task != queue.TASK_EXECUTE_STEP]
    if leftover:
        raise RuntimeError(f"run {run_id}: messages no phase took: {leftover}")


def report(tally: Tally, runs: int) -> None:
    """Print the per-run figures of each phase, and their sum."""
    print("| phase | client CPU ms/run | statements/run | transactions/run |")
    print("|---|---|---|---|")
    for phase in (*PHASES, "total"):
        if phase == "total":
            cpu, stmts, txs = (
                sum(d.values()) for d in (tally.cpu_s, tally.statements, tally.transactions)
            )
        else:
            cpu = tally.cpu_s[phase]
            stmts, txs = tally.statements[phase], tally.transactions[phase]
        print(f"| {phase} | {1000 * cpu / runs:.2f} | {stmts / runs:.1f} | {txs / runs:.1f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="measured runs (after 5 warm-up)")
    parser.add_argument("--steps", type=int, default=5, help="noop steps per plan")
    parser.add_argument("--parallel", action="store_true", help='steps with "after": []')
    args = parser.parse_args(argv)
    plan = plan_of(args.steps, parallel=args.parallel)
    data_dir = Path(tempfile.mkdtemp(prefix="agentq-phases-"))
    try:
        with LocalStack(data_dir) as stack:
            database_url, broker_url = stack.start_services()
            upgrade(database_url)
            measure(plan, args.runs, database_url, broker_url, data_dir / "pgdata")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def measure(plan: PlanSpec, runs: int, database_url: str, broker_url: str, pgdata: Path) -> None:
    """Warm up, then drive `runs` runs and print their figures."""
    import os

    os.environ |= {"AGENTQ_DATABASE_URL": database_url, "AGENTQ_BROKER_URL": broker_url}
    os.environ.setdefault("AGENTQ_EMBEDDING_PROVIDER", "hash")
    get_settings.cache_clear()
    messages = Collected()
    send: Callable[..., bool] = messages.send
    queue.send = queue.try_send = send  # type: ignore[assignment]
    warm = Tally()
    for _ in range(5):
        one_run(plan, warm, messages)
    tally = Tally()
    tally.listen(get_engine())
    server = CpuMeter(pgdata)
    server.start()
    for _ in range(runs):
        one_run(plan, tally, messages)
    server_ms = 1000 * server.stop().get(POSTGRES, 0.0) / runs
    print(f"{runs} runs x {len(plan.steps)} noop steps, in one process, no broker")
    report(tally, runs)
    print(f"Postgres CPU ms/run, all phases: {server_ms:.1f}")


if __name__ == "__main__":
    main()
