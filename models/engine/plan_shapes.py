"""The shape of a run's plan version, read from Postgres once per process.

A decision (`models.engine.decisions.lock`) needs the run's current plan version as a graph: its
steps in order, their names, what each waits for, and the failed steps the versions so far
answered. None of that changes once the version is written: a new plan (a replan, a reviewer's
edit or answer, a fork) is a new version, a step's name is fixed when it is inserted, and a
version answers only failures of the versions before it. Only the steps' statuses move. So the
shape is read with the version's first decision in this process and kept, by run, beside the
version number it belongs to; every later decision reads the steps' statuses alone (two arrays)
and the shape only when the run's version is not the one kept (issue 29: on a 50-step plan the
whole graph, names and all, was read and decoded as JSON at every step's end, a cost that grew
with the plan: 1.9 ms of Postgres CPU per step against 1.3 on a 5-step plan).

Erasing an ended run's content renames its steps (`models.engine.erased_runs`); an ended run's
decision is `wait` whatever its steps are called, so a kept shape is never read for it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

# Shapes kept per process: far more than the runs a worker advances at once.
KEPT: Final = 512


@dataclass(frozen=True)
class Shape:
    """Plan version `version` of a run: its step ids in plan order, each one's name and what it
    waits for (ids), and `handled`, the failed steps this version and those before answered."""

    version: int
    step_ids: tuple[int, ...]
    names: dict[int, str]
    after: dict[int, tuple[int, ...]]
    handled: frozenset[int]


# shape_sql: the shape of run :run_id's version (`run_row.plan_version`) as one jsonb value
# [step ids, after, {id: name}, handled], NULL when :known_version is already that version
# (the caller keeps it). For a statement whose FROM has `run_row` (`models.engine.decisions`).
SHAPE_SQL: Final = """
CASE WHEN run_row.plan_version IS DISTINCT FROM CAST(:known_version AS integer) THEN (
    SELECT jsonb_build_array(v.step_ids, v.after,
        (SELECT coalesce(jsonb_object_agg(s.id, s.name), '{}'::jsonb)
         FROM steps s WHERE s.run_id = :run_id),
        (SELECT coalesce(jsonb_agg(p.replaces_step_id), '[]'::jsonb) FROM plan_versions p
         WHERE p.run_id = :run_id AND p.version <= v.version
            AND p.replaces_step_id IS NOT NULL))
    FROM plan_versions v WHERE v.run_id = :run_id AND v.version = run_row.plan_version)
END"""

_kept: OrderedDict[int, Shape] = OrderedDict()
_guard = threading.Lock()


def kept(run_id: int) -> Shape | None:
    """The shape of run `run_id` this process keeps, if any (of the version it was read for)."""
    with _guard:
        return _kept.get(run_id)


def resolved(
    run_id: int, version: int, found: list[Any] | None, known: Shape | None
) -> Shape | None:
    """Run `run_id`'s shape of `version`: built from `found` (SHAPE_SQL's value) when the
    statement read one, and kept (the least recently used of `KEPT` shapes is dropped); else
    `known`, the kept shape whose version the statement was given, when it is of `version`.
    None when the run has no such version (a run not planned yet)."""
    if found is None:
        return known if known is not None and known.version == version else None
    step_ids, after, names, handled = found
    shape = Shape(
        version=version,
        step_ids=tuple(step_ids),
        names={int(i): n for i, n in names.items()},
        after={int(i): tuple(waits) for i, waits in after.items()},
        handled=frozenset(handled),
    )
    with _guard:
        _kept[run_id] = shape
        _kept.move_to_end(run_id)
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
    return shape
