"""Where a run's time goes, from its rows: submit, dispatch, steps, synthesis, memory.

For each run the benchmark made, the timestamps the engine writes give its phases (milliseconds):
- `submit → first start`: `runs.created_at` (the submit transaction) to its first step's
  `started_at` (a worker claimed it): the commit, the broker, the dispatch wait;
- `steps`: the sum of its steps' `finished_at - started_at` (the tool and the step's own
  transaction);
- `between steps`: the rest of the span from the first start to the last finish (the next
  step's hand-over: in-process, or through the broker and the dispatch cap);
- `synthesis`: the last step's `finished_at` to `runs.finished_at` (the run's last decision and
  its synthesis task);
- `memory`: `runs.finished_at` to its episode's `created_at` (the memory task; not in the
  round's time, which ends at the newest `finished_at`).
Timestamps come from Python (`models.storable.utcnow`) in several processes of one machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa

from models.db import session_scope
from ops.bench.figures import percentile

PHASES = ("submit → first start", "steps", "between steps", "synthesis", "memory", "total")
TIMELINE = sa.text(
    """
    SELECT r.created_at, r.finished_at, min(s.started_at), max(s.finished_at),
           sum(extract(epoch FROM s.finished_at - s.started_at)),
           (SELECT e.created_at FROM episodes e WHERE e.run_id = r.id)
    FROM runs r JOIN steps s ON s.run_id = r.id
    WHERE r.id = ANY(:ids)
    GROUP BY r.id
    """
)


# remembered: how many of the runs were remembered, and by how many memory tasks' embed calls (a
# run batched with another's, `worker.memory.remembering`, has `batched_with`).
REMEMBERED = sa.text(
    """
    SELECT count(*), count(*) FILTER (WHERE NOT detail ? 'batched_with')
    FROM run_events WHERE kind = 'memory.remembered' AND run_id = ANY(:ids)
    """
)


def remembered(run_ids: Sequence[int]) -> tuple[int, int]:
    """(runs remembered, embed calls that remembered them) over `run_ids`."""
    with session_scope() as session:
        runs, calls = session.execute(REMEMBERED, {"ids": list(run_ids)}).one()
    return int(runs), int(calls)


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return (later - earlier).total_seconds()


def phases_of(run_ids: Sequence[int]) -> dict[str, list[float]]:
    """Each phase's seconds (see the module docstring) over `run_ids`; a phase a run has no
    timestamps for (no episode yet) is left out for that run."""
    found: dict[str, list[float]] = {phase: [] for phase in PHASES}
    with session_scope() as session:
        rows = session.execute(TIMELINE, {"ids": list(run_ids)}).all()
    for created, finished, first_start, last_finish, busy, remembered in rows:
        span = _seconds(last_finish, first_start)
        values = {
            "submit → first start": _seconds(first_start, created),
            "steps": float(busy) if busy is not None else None,
            "between steps": span - float(busy) if span is not None and busy is not None else None,
            "synthesis": _seconds(finished, last_finish),
            "memory": _seconds(remembered, finished),
            "total": _seconds(finished, created),
        }
        for phase, value in values.items():
            if value is not None:
                found[phase].append(value)
    return found


def phase_rows(found: dict[str, list[float]], steps: int) -> list[list[str]]:
    """Table rows `[phase, p50 ms, p90 ms, p50 per step ms]` of `phases_of`'s result."""
    rows = []
    for phase, values in found.items():
        if not values:
            rows.append([phase, "-", "-", "-"])
            continue
        p50 = 1000 * percentile(values, 50)
        per_step = f"{p50 / steps:.1f}" if phase in ("steps", "between steps") else ""
        rows.append([phase, f"{p50:.1f}", f"{1000 * percentile(values, 90):.1f}", per_step])
    return rows
