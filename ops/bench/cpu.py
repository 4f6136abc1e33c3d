"""CPU seconds (user + system) spent by every process of the benchmark's stack during a round.

The stack is sampled with psutil at the start and the end of a round, by group:
- `bench process`: this process alone (submits, polls, Celery publishes, the LangGraph
  barrier);
- each child of this process with all its descendants, grouped by its command line (`GROUPS`):
  `worker` (the Celery `steps` worker and its pool processes), `coordinator` (the scheduler's
  worker, its pool process and beat), `redis`, `bench children` (LangGraph's benchmark
  processes, DBOS's executor processes and multiprocessing's resource tracker);
- `postgres`: the postmaster (its pid is the first line of `<pgdata>/postmaster.pid`, a file
  Postgres documents) and its descendants: one backend per connection, the checkpointer,
  background writer, WAL writer, autovacuum launcher and workers.

A process's figure is its own user + system time plus `children_user` + `children_system`, the
times of the children it has reaped (the kernel adds a child's own and reaped times to its
parent's when the parent waits for it). So `spent` counts:
- processes alive at both samples: their growth;
- processes born after the first sample: all of their time (they did nothing before it);
- processes that end during the round: through their parent's reaped-children times, which
  grow by the child's whole life; the child's time before the round (its first sample) is
  subtracted. Short-lived Postgres backends that start and end within a round are counted this
  way, through the postmaster.

Not counted: processes outside these trees (other tenants of a shared machine, the kernel's
own threads: softirq work on loopback sockets done outside a process context, page cache
writeback, the filesystem journal), and a process that ends during the round without being
reaped by a sampled process (none does in this stack: the postmaster reaps its backends, Celery
its pool processes, this process its children). A process that has exited but is not yet reaped
(a zombie) still reports its final times, and counts once. psutil reads `/proc/<pid>/stat`:
times have clock-tick resolution (10 ms on Linux), per process; sampling itself costs this
process about a millisecond.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import psutil

from models.errors import StackError

# (pid, create_time): a pid can be reused within a round; the pair cannot.
ProcessKey = tuple[int, float]
# Each process's group (`group_of`) and cumulative CPU seconds.
Sample = dict[ProcessKey, tuple[str, float]]
BENCH = "bench process"
POSTGRES = "postgres"
# The groups of this process's children, by a word of their command line, first match wins.
GROUPS = (
    ("worker.app", "worker"),
    ("scheduler.app", "coordinator"),
    ("scheduler.sender", "sender"),
    ("uvicorn", "api"),
    ("ops.cli up", "agentq up"),  # the supervisor of `agentq up` (ops.bench.up_stack)
    ("redis", "redis"),
    ("multiprocessing", "bench children"),  # LangGraph's and DBOS's processes, the tracker
)


def postmaster_pid(pgdata: Path) -> int:
    """The Postgres server's pid, from `<pgdata>/postmaster.pid` (its first line). Raises
    `StackError` if the file is missing or malformed (no server runs there)."""
    try:
        first = (pgdata / "postmaster.pid").read_text().splitlines()[0]
        return int(first.strip())
    except (OSError, IndexError, ValueError) as exc:
        raise StackError(f"no running Postgres found in {pgdata}: {exc}") from exc


def group_of(cmdline: list[str], default: str = "other") -> str:
    """The group of a process by its command line (`GROUPS`), else `default`."""
    text = " ".join(cmdline)
    return next((group for word, group in GROUPS if word in text), default)


def cumulative_cpu_s(process: psutil.Process) -> float:
    """The process's own user + system seconds plus those of its reaped children."""
    times = process.cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)


def _add_tree(found: Sample, root: psutil.Process, group: str | None, *, alone: bool) -> None:
    """Add `root` (and, unless `alone`, its descendants) under `group`; with None, each process
    by its own command line, or else its tree root's (`agentq up` starts the stack's processes:
    each is grouped as what it is; a child forked with its parent's command line, a Celery pool
    process, as "<group> pool"). Processes that vanish while being read are left out: they
    ended, and their parent's reaped-children times have them."""
    try:
        root_group = group or group_of(root.cmdline())
        tree = [root] if alone else [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    commands: dict[int, list[str]] = {}
    for process in tree:
        try:
            with process.oneshot():
                command = commands[process.pid] = process.cmdline()
                own = group or group_of(command, root_group)
                if group is None and commands.get(process.ppid()) == command:
                    own += " pool"  # a forked child of its group's process (a Celery pool)
                found[(process.pid, process.create_time())] = (own, cumulative_cpu_s(process))
        except psutil.Error:
            continue


def sample(pgdata: Path) -> Sample:
    """Every process of the stack (see the module docstring) with its group and cumulative CPU
    seconds: this process, each of its children's trees, the Postgres server's tree."""
    found: Sample = {}
    me = psutil.Process(os.getpid())
    _add_tree(found, me, BENCH, alone=True)
    for child in me.children():
        _add_tree(found, child, None, alone=False)
    _add_tree(found, psutil.Process(postmaster_pid(pgdata)), POSTGRES, alone=False)
    return found


def spent(
    before: Mapping[ProcessKey, tuple[str, float]], after: Mapping[ProcessKey, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds spent between two samples by group (see the module docstring): growth of
    the processes in `after`, minus the time before `before` of processes gone by `after`
    (their reaping parent, of the same group, now holds their whole life)."""
    groups: dict[str, float] = {}
    for key, (group, total) in after.items():
        groups[group] = groups.get(group, 0.0) + total - before.get(key, (group, 0.0))[1]
    for key, (group, total) in before.items():
        if key not in after:
            groups[group] = groups.get(group, 0.0) - total
    return groups


class CpuMeter:
    """`meter.start()`, then `meter.stop()` -> CPU seconds by group of every process of the
    stack whose Postgres data dir is `pgdata`, since `start`."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self._before: Sample = {}

    def start(self) -> None:
        """Take the first sample."""
        self._before = sample(self.pgdata)

    def stop(self) -> dict[str, float]:
        """CPU seconds by group since `start`."""
        return spent(self._before, sample(self.pgdata))
