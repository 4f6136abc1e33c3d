"""Alternating timed rounds of several systems on one stack, with the CPU each round cost.

Each system is warmed up once (untimed). Then each round runs every system once, the order
rotated by one per round (so no system always follows the same one), each starting once the
broker is idle (`settle`). A round's CPU (`ops.bench.cpu`, every process of the stack) is taken
from its start until the broker is idle again after it, so a system's tail (the last
acknowledgements, a coordinator task still running after the run's `finished_at`) is charged to
it, while its time ends at its last completion.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ops.bench.cpu import CpuMeter
from ops.bench.figures import Figures, Round


@dataclass(frozen=True)
class System:
    """One system under test: `run()` does `steps` units of work and returns its seconds;
    `warm_up()` is run once before the rounds, untimed."""

    name: str
    steps: int
    run: Callable[[], float]
    warm_up: Callable[[], object]


def rotation(names: Sequence[str], round_index: int) -> list[str]:
    """`names` rotated left by `round_index` (round 0: as given)."""
    shift = round_index % len(names)
    return [*names[shift:], *names[:shift]]


def alternate(
    systems: Sequence[System], rounds: int, meter: CpuMeter, settle: Callable[[], None]
) -> list[Figures]:
    """Warm up, then `rounds` rounds of every system; their figures, in `systems` order."""
    by_name = {s.name: s for s in systems}
    for system in systems:
        system.warm_up()
        settle()
    recorded: dict[str, list[Round]] = {s.name: [] for s in systems}
    for i in range(rounds):
        for name in rotation(list(by_name), i):
            settle()
            meter.start()
            seconds = by_name[name].run()
            settle()
            recorded[name].append(Round(seconds, meter.stop()))
        done = ", ".join(f"{n} {r[-1].seconds:.2f} s" for n, r in recorded.items())
        print(f"round {i + 1}: {done}", flush=True)
    return [Figures(s.name, s.steps, tuple(recorded[s.name])) for s in systems]
