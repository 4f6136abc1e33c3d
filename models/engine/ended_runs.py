"""Ended runs as their memory task reads them: one statement for a run and the runs batched with it.

A run's memory task (`worker.memory.remembering`, issue 10) writes its episode from the run row, its
steps with the plan versions that created them (`models.review.authorship.reviewers_steps` needs
both), its pinned facts and the reviewer answers asked to be remembered. `read` gets all of it, for
the task's own run and, when memory is behind (the task started a while after its run ended), for up
to `more` other runs of the same user that wait for memory and need no model call (`BATCHABLE`),
in one statement: each list is a JSON aggregate of its table, so the task costs one round trip
however many runs it remembers. When memory keeps up, the search for other runs is not made: it
probes each recent run of the user, which costs more than a batch that is seldom found saves.
SQL rather than the ORM: the memory task runs once per run, and its ORM reads were about a
quarter of a worker's CPU in the engine benchmark (`ops/bench/engine_throughput.py`).

What it reads of memory's end and of erasures is a hint, read without a lock: the write takes the
user's erasure lock and checks again (`models.memory.episodes.remember_episodes`), and an episode is
written once per run (`episodes.run_id` is unique), so two tasks that read the same run write it
once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlmodel import Session

from models.tables import Escalation

# memory_ended_of: whether run `r` has an event that ends its memory task (the same rule as
# `models.memory.memory_admin.memory_ended`: `memory.remembered`, `memory.failed`, a
# `memory.dropped` of "run").
MEMORY_ENDED_OF: Final = """EXISTS (
    SELECT 1 FROM run_events ev WHERE ev.run_id = r.id AND (
        ev.kind IN ('memory.remembered', 'memory.failed')
        OR (ev.kind = 'memory.dropped' AND ev.detail ->> 'what' = 'run')))"""
# erased_at_of: run `r`'s user's erasure point, if `r` was created at or before it.
ERASED_AT_OF: Final = """(SELECT e.erased_at FROM memory_erasures e
    WHERE e.user_id = r.user_id AND r.created_at <= e.erased_at)"""
# batchable: run `r` ended, waits for memory, and needs no model call (no model step, no failed
# step, no fact its user pinned: `worker.memory.extraction.skip_reason`) and no fact write (no
# answer to remember), so remembering it is an embedding and one row, whichever task does it.
BATCHABLE: Final = f"""r.status IN ('succeeded', 'failed', 'cancelled')
    AND NOT {MEMORY_ENDED_OF} AND {ERASED_AT_OF} IS NULL
    AND NOT EXISTS (SELECT 1 FROM steps s WHERE s.run_id = r.id
                    AND (s.kind = 'model' OR s.status = 'failed'))
    AND NOT EXISTS (SELECT 1 FROM pinned_facts f WHERE f.run_id = r.id AND f.set_by = 'user')
    AND NOT EXISTS (SELECT 1 FROM escalations x WHERE x.run_id = r.id AND x.remember_answer)"""
# runs_to_remember: run :run_id; then, if it ended before :ended_before and its memory task has
# not ended (its message waited: memory is behind, and runs that ended since wait too), up to
# :more runs of its user created since :since that are `BATCHABLE`, oldest first (else LIMIT 0,
# and that part is never executed). For each: the run's fields, whether its memory task ended,
# its erasure point, its steps (id order, each with its creating version's author and the step
# that version replaced), its current version's step ids, its pinned facts and its answers to
# remember.
RUNS_TO_REMEMBER: Final = f"""
WITH own AS (
    SELECT r.id, r.user_id, r.finished_at, {MEMORY_ENDED_OF} AS memory_ended
    FROM runs r WHERE r.id = :run_id
), batch AS (
    SELECT id, 0 AS place, memory_ended FROM own
    UNION ALL (
        SELECT r.id, 1, false FROM runs r JOIN own ON r.user_id = own.user_id
        WHERE r.created_at >= :since AND r.id <> own.id AND {BATCHABLE}
        ORDER BY r.id
        LIMIT (SELECT CASE WHEN finished_at < :ended_before AND NOT memory_ended
                      THEN :more ELSE 0 END FROM own))
)
SELECT r.id, r.user_id, r.goal, r.status, r.created_at,
    CASE WHEN r.status = 'succeeded' THEN coalesce(r.final_result ->> 'answer', '')
         ELSE coalesce(r.error, '') END AS final_answer,
    b.memory_ended,
    {ERASED_AT_OF} AS erased_at,
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
            'id', s.id, 'plan_version', s.plan_version, 'name', s.name,
            'instruction', s.instruction, 'kind', s.kind, 'tool', s.tool, 'args', s.args,
            'tools', s.tools, 'status', s.status, 'error', s.error,
            'version_found', v.id IS NOT NULL, 'created_by', v.created_by,
            'replaces_step_id', v.replaces_step_id) ORDER BY s.id), '[]'::jsonb)
     FROM steps s LEFT JOIN plan_versions v
        ON v.run_id = s.run_id AND v.version = s.plan_version
     WHERE s.run_id = r.id) AS steps,
    (SELECT v.step_ids FROM plan_versions v
     WHERE v.run_id = r.id AND v.version = r.plan_version) AS current_step_ids,
    (SELECT coalesce(jsonb_agg(jsonb_build_array(f.key, f.value, f.set_by) ORDER BY f.id),
                     '[]'::jsonb)
     FROM pinned_facts f WHERE f.run_id = r.id) AS pinned,
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
            'id', x.id, 'plan_version', x.plan_version, 'reason', x.reason,
            'decided_by', x.decided_by, 'detail', x.detail, 'answer', x.answer) ORDER BY x.id),
        '[]'::jsonb)
     FROM escalations x WHERE x.run_id = r.id AND x.decision = 'respond'
        AND x.remember_answer AND x.answer IS NOT NULL) AS answers
FROM runs r JOIN batch b ON b.id = r.id
ORDER BY b.place, r.id"""

_RUNS_TO_REMEMBER: Final = sa.text(RUNS_TO_REMEMBER)  # built once: its bind names parsed once


@dataclass(frozen=True, slots=True)
class StepRow:
    """A step as the memory task reads it (the fields of `Step` it needs; no result): detached
    and plain, as building ORM rows was half the cost of the read."""

    id: int
    plan_version: int
    name: str
    instruction: str
    kind: str
    tool: str | None
    args: dict[str, Any]
    tools: list[str]
    status: str
    error: str | None


@dataclass(frozen=True, slots=True)
class VersionRow:
    """What the memory task reads of the plan version that created a step."""

    created_by: str
    replaces_step_id: int | None


@dataclass(frozen=True)
class EndedRun:
    """A run as its memory task reads it.

    `outcome` is the run's status; `final_answer` its final result's answer when it succeeded,
    else its error ("" for none). `memory_ended`: its memory task has already ended (an event of
    `models.memory.memory_admin.MEMORY_ENDED`, or a `memory.dropped` of the run); `erased_at`: its
    user's erasure point when the run was created at or before it (both unlocked hints, see the
    module docstring). `steps`: every step (all plan versions) in id order with the version that
    created it, None when that row is missing (`models.review.authorship.steps_with_versions`'s
    shape); `current`: the current version's steps, in plan order. `user_facts` and
    `reviewer_facts`: the pinned facts (key -> value) its user stated, and those a reviewer set.
    `answers`: the decided `respond` escalations whose reviewers asked to remember the answer,
    oldest first (detached rows with only the fields an answer's fact is written from).
    """

    id: int
    user_id: str
    goal: str
    outcome: str
    created_at: datetime
    final_answer: str
    memory_ended: bool
    erased_at: datetime | None
    steps: list[tuple[StepRow, VersionRow | None]]
    current: list[StepRow]
    user_facts: dict[str, str]
    reviewer_facts: dict[str, str]
    answers: list[Escalation]


def read(
    session: Session, run_id: int, *, more: int, since: datetime, ended_before: datetime
) -> list[EndedRun]:
    """Run `run_id` (first) and, when it ended before `ended_before` and its memory task has not
    ended, up to `more` (>= 0) other runs of its user created at or after `since` that can be
    remembered with it (`BATCHABLE`), oldest first; one statement. Times are timezone-aware.
    Empty when run `run_id` does not exist. Raises `ValueError` for a negative `more`."""
    if more < 0:
        raise ValueError(f"more {more!r}: must be >= 0")
    params = {"run_id": run_id, "more": more, "since": since, "ended_before": ended_before}
    return [_ended_run(row) for row in session.execute(_RUNS_TO_REMEMBER, params)]


def _ended_run(row: Any) -> EndedRun:
    steps = _steps(row.steps)
    by_id = {step.id: step for step, _ in steps}
    user_facts = {key: value for key, value, set_by in row.pinned if set_by == "user"}
    return EndedRun(
        id=row.id,
        user_id=row.user_id,
        goal=row.goal,
        outcome=row.status,
        created_at=row.created_at,
        final_answer=row.final_answer,
        memory_ended=bool(row.memory_ended),
        erased_at=row.erased_at,
        steps=steps,
        current=[by_id[i] for i in row.current_step_ids or () if i in by_id],
        user_facts=user_facts,
        reviewer_facts={key: value for key, value, set_by in row.pinned if set_by != "user"},
        answers=[Escalation(run_id=row.id, **answer) for answer in row.answers],
    )


def _steps(rows: list[dict[str, Any]]) -> list[tuple[StepRow, VersionRow | None]]:
    """The steps, each with its creating version (None when that row is missing)."""
    versions: dict[int, VersionRow] = {}
    out = []
    for data in rows:
        number = data["plan_version"]
        if number not in versions and data["version_found"]:
            versions[number] = VersionRow(data["created_by"], data["replaces_step_id"])
        step = StepRow(
            id=data["id"],
            plan_version=number,
            name=data["name"],
            instruction=data["instruction"],
            kind=data["kind"],
            tool=data["tool"],
            args=data["args"],
            tools=data["tools"],
            status=data["status"],
            error=data["error"],
        )
        out.append((step, versions.get(number)))
    return out
