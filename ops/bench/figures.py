"""The engine benchmark's arithmetic and text: percentiles, rates, ratios, the machine, tables.

Pure functions (no services), so they are unit-tested (tests/unit/test_bench_figures.py). Every
speed figure the benchmark prints is paired with a peer measured in the same invocation: the
machine is shared and noisy, so only ratios between peers of one run carry across runs.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CPUINFO_PATH = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class Round:
    """One timed round of one system: wall seconds, and CPU seconds by process group."""

    seconds: float
    cpu_by_group: Mapping[str, float]

    @property
    def cpu_s(self) -> float:
        """CPU seconds of every process."""
        return sum(self.cpu_by_group.values())


@dataclass(frozen=True)
class Figures:
    """The rounds of one system, each doing `steps` units of work (steps, tasks or nodes)."""

    name: str
    steps: int
    rounds: tuple[Round, ...]

    @property
    def seconds(self) -> float:
        """The median wall seconds of the rounds."""
        return statistics.median(r.seconds for r in self.rounds)

    @property
    def rate(self) -> float:
        """Steps per second at the median round."""
        return self.steps / self.seconds

    @property
    def cpu_ms_per_step(self) -> float:
        """The median round's CPU (all processes) per step, milliseconds."""
        return 1000.0 * statistics.median(r.cpu_s for r in self.rounds) / self.steps

    def cpu_ms_per_step_of(self, group: str) -> float:
        """The median over rounds of one process group's CPU per step, milliseconds."""
        return (
            1000.0
            * statistics.median(r.cpu_by_group.get(group, 0.0) for r in self.rounds)
            / self.steps
        )


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) of `values`, linear between closest ranks (numpy's
    default method). Raises `ValueError` for no values or `q` outside 0..100."""
    if not values or not 0 <= q <= 100:
        raise ValueError(f"percentile: need values and 0 <= q <= 100, got {len(values)}, {q}")
    ordered, pos = sorted(values), (len(values) - 1) * q / 100
    low, high = int(pos), min(int(pos) + 1, len(values) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def ratio(numerator: float, denominator: float) -> str:
    """`numerator / denominator` as printed: two significant digits below 1 ("0.071", "0.5"),
    one decimal below 10 ("1.4"), none above ("12"); "n/a" when the denominator is not
    positive."""
    if denominator <= 0:
        return "n/a"
    value = numerator / denominator
    if value >= 10:
        return f"{value:.0f}"
    if value >= 1:
        return f"{value:.1f}"
    return f"{value:.2g}"


def cpu_model(cpuinfo: str) -> str:
    """The first `model name` in the text of /proc/cpuinfo ("unknown" if none)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return "unknown"


def machine() -> str:
    """This machine: CPU count, CPU model, Python version."""
    try:
        model = cpu_model(CPUINFO_PATH.read_text(errors="replace"))
    except OSError:
        model = platform.processor() or "unknown"
    return f"{os.cpu_count()} CPUs ({model}), Python {platform.python_version()}"


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (the README's format)."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def comparison_rows(systems: Sequence[Figures]) -> list[list[str]]:
    """One row per system: median s, steps/s, CPU ms/step, and the first system's rate over
    this one's (agentq / peer)."""
    first = systems[0]
    return [
        [
            f.name,
            f"{f.seconds:.2f}",
            f"{f.rate:.1f}",
            f"{f.cpu_ms_per_step:.2f}",
            "1" if f is first else ratio(first.rate, f.rate),
        ]
        for f in systems
    ]


def cpu_rows(systems: Sequence[Figures]) -> tuple[list[str], list[list[str]]]:
    """The head and rows of CPU ms per step by process group: a row per system, a column per
    group (the one that used most, over all rounds of all systems, first)."""
    groups: dict[str, float] = {}
    for f in systems:
        for r in f.rounds:
            for group, cpu_s in r.cpu_by_group.items():
                groups[group] = groups.get(group, 0.0) + cpu_s
    order = sorted(groups, key=lambda g: -groups[g])
    rows = [[f.name, *(f"{f.cpu_ms_per_step_of(g):.2f}" for g in order)] for f in systems]
    return ["CPU ms/step by process", *order], rows


COMPARISON_HEAD = (
    "system",
    "median s",
    "steps/s",
    "CPU ms/step, all processes",
    "first row's steps/s / this row's",
)


def ratio_line(first: Figures, other: Figures) -> str:
    """`first` over `other`: rates, and CPU per step."""
    rates = ratio(first.rate, other.rate)
    cpu = ratio(first.cpu_ms_per_step, other.cpu_ms_per_step)
    return f"{first.name} / {other.name}: {rates}x steps/s, {cpu}x CPU per step"


# How `latency_lines` names a group that is not "<group> steps".
LATENCY_GROUPS = {"submitted": "first steps from their run's submit (started_at - runs.created_at)"}


def latency_lines(latencies: Mapping[str, Sequence[float]]) -> list[str]:
    """p50 and p99 in milliseconds of each group of latencies (seconds); none if empty."""
    if not latencies:
        return []
    lines = ["\nagentq dispatch latency at low load (steps.started_at - queued_at):"]
    for group, values in latencies.items():
        if values:
            p50, p99 = (1000 * percentile(values, q) for q in (50, 99))
            what = LATENCY_GROUPS.get(group, f"{group} steps")
            lines.append(f"  {what} (n={len(values)}): p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    return lines


def summary(shape: str, workers: int, systems: Sequence[Figures]) -> str:
    """The one line for the README: the shape, the machine, each rate and CPU, both ratios."""
    first, *peers = systems
    rates = ", ".join(f"{f.name} {f.rate:.1f}/s ({f.cpu_ms_per_step:.1f} CPU ms)" for f in systems)
    ratios = ", ".join(f"{first.name}/{f.name} {ratio(first.rate, f.rate)}x" for f in peers)
    return f"{shape}, {workers} worker processes, {machine()}: {rates}; {ratios}"
