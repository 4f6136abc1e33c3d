"""Writing a plan version: its new steps and its `plan_versions` row (`add_plan_version`), and a
reviewer's answer as a step (`add_answer_step`).

Every plan a run gets is written here: a submitter's explicit plan, the planner's and replanner's,
a reviewer's edit. The new steps go in one statement (`INSERT_STEPS`, their columns as one JSON
array) rather than as ORM rows: building and flushing a `Step` per step was half of the API's CPU
for a 50-step plan's submit (issue 29's profile of `POST /api/v1/runs`). The version's row and a
splice's moved steps stay ORM writes (one row; a replan's few).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.errors import InvalidPlan
from models.plans.expectations import stored
from models.plans.plans import Splice, StepSpec
from models.tables import PlanVersion, Run, Step, utcnow

# insert_steps: a plan version's new steps, `pending` with no attempt yet, from :steps (a JSON
# array of their columns); an `output` left out is JSON null, as the ORM writes a None there.
# Returns each new row's id with its position, which is unique within the version.
INSERT_STEPS: Final = """
INSERT INTO steps (run_id, plan_version, position, name, instruction, kind, tool, args, tools,
    expect, output, status, attempt, max_attempts, deferrals, tokens_used, cost_used_usd)
SELECT :run_id, :version, s.position, s.name, s.instruction, s.kind, s.tool, s.args, s.tools,
    s.expect, coalesce(s.output, 'null'::jsonb), 'pending', 0, :max_attempts, 0, 0, 0.0
FROM jsonb_to_recordset(CAST(:steps AS jsonb)) AS s(position integer, name text,
    instruction text, kind text, tool text, args jsonb, tools jsonb, expect jsonb, output jsonb)
ORDER BY s.position
RETURNING id, position"""


def add_plan_version(
    session: Session,
    run: Run,
    *,
    splice: Splice,
    new: Sequence[StepSpec | Step],
    created_by: str,
    max_attempts: int,
    reason: str = "",
) -> PlanVersion:
    """Write plan version `run.plan_version + 1`: the kept steps of `splice` with the `new` ones
    in the place of `splice.replaced` (`models.plans.graph.splice`; a `Step` in `new` is a row
    already written, such as a reviewer's answer, which waits as an unwritten step would). The
    version records the replaced step as the failure it answers (`replaces_step_id`), or the
    deliverable that did not meet the run's goal, which leaves the version (`graph.remaining`).

    The run's `plan_version` is moved to it by the caller's transition (`resume_run`), in the same
    transaction. Raises `InvalidPlan` if the version is not a valid graph (callers validate with
    `parse_plan` first). Returns the new `PlanVersion` row.
    """
    version = run.plan_version + 1
    built = splice.build(new)
    if built.problems:
        raise InvalidPlan("; ".join(built.problems))
    position = {key: i for i, key in enumerate(built.order)}  # a new step's key: -(its index + 1)
    written = {-(i + 1): s for i, s in enumerate(new) if isinstance(s, Step)}
    for key, step in written.items():
        step.position = position[key]
    for step in splice.kept:  # only a splice moves kept steps (one UPDATE each that moved)
        if (step.id or 0) in position and step.position != position[step.id or 0]:
            step.position = position[step.id or 0]  # (a succeeded step replaced is not kept)
    session.flush()
    specs = {-(i + 1): s for i, s in enumerate(new) if not isinstance(s, Step)}
    ids = _insert_steps(session, run, version, specs, position, max_attempts)
    ids.update({key: step.id or 0 for key, step in written.items()})
    ids.update({s.id or 0: s.id or 0 for s in splice.kept})
    row = PlanVersion(
        run_id=run.id or 0,
        version=version,
        step_ids=[ids[k] for k in built.order],
        after={str(ids[k]): [ids[d] for d in built.after[k]] for k in built.order},
        created_by=created_by,
        reason=reason,
        replaces_step_id=splice.replaced,
    )
    session.add(row)
    session.flush()
    return row


def _insert_steps(
    session: Session,
    run: Run,
    version: int,
    specs: dict[int, StepSpec],
    position: dict[int, int],
    max_attempts: int,
) -> dict[int, int]:
    """Write the steps `specs` (by key) of version `version` in one statement; their ids by key."""
    if not specs:
        return {}
    columns = [
        {
            "position": position[key],
            "name": spec.name,
            "instruction": spec.instruction,
            "kind": spec.kind,
            "tool": spec.tool,
            "args": spec.args,
            "tools": spec.tools,
            "expect": stored(spec.expect),
            "output": dict(spec.output) if spec.output else None,
        }
        for key, spec in specs.items()
    ]
    params = {
        "run_id": run.id,
        "version": version,
        "max_attempts": max_attempts,
        "steps": json.dumps(columns),
    }
    key_at = {position[key]: key for key in specs}
    return {key_at[row.position]: row.id for row in sql.execute(session, INSERT_STEPS, params)}


# copy_steps: a fork's kept steps (`models.engine.forks`), from the source run's rows `:steps` (each
# id with its new position, and whether it is copied): a copied step is `succeeded` with the
# source's result and no attempt of its own, never run again; any other is `pending`, as new.
COPY_STEPS: Final = """
INSERT INTO steps (run_id, plan_version, position, name, instruction, kind, tool, args, tools,
    expect, output, status, attempt, max_attempts, deferrals, tokens_used, cost_used_usd,
    started_at, finished_at, result)
SELECT :run_id, :version, c.position, s.name, s.instruction, s.kind, s.tool, s.args, s.tools,
    s.expect, s.output, CASE WHEN c.copied THEN 'succeeded' ELSE 'pending' END, 0,
    :max_attempts, 0, 0, 0.0, CASE WHEN c.copied THEN CAST(:now AS timestamptz) END,
    CASE WHEN c.copied THEN CAST(:now AS timestamptz) END, CASE WHEN c.copied THEN s.result END
FROM jsonb_to_recordset(CAST(:steps AS jsonb)) AS c(id integer, position integer, copied boolean)
JOIN steps s ON s.id = c.id
ORDER BY c.position
RETURNING id, position"""


def add_forked_version(
    session: Session,
    run: Run,
    *,
    splice: Splice,
    copied: Collection[int],
    new: Sequence[StepSpec],
    created_by: str,
    max_attempts: int,
    reason: str,
) -> dict[int, int]:
    """Write the first plan version of a fork (`models.engine.forks`): another run's steps
    `splice.kept` (those in `copied` as copies that succeeded, the rest pending) with the `new`
    steps after them (`models.plans.graph.splice`). Returns each kept step's new id by its
    source id. Raises `InvalidPlan` if the version is not a valid graph (callers validate with
    `parse_plan` first)."""
    version = run.plan_version + 1
    built = splice.build(new)
    if built.problems:
        raise InvalidPlan("; ".join(built.problems))
    position = {key: i for i, key in enumerate(built.order)}
    kept = [
        {"id": s.id, "position": position[s.id or 0], "copied": s.id in copied} for s in splice.kept
    ]
    params = {
        "run_id": run.id,
        "version": version,
        "max_attempts": max_attempts,
        "now": utcnow(),
        "steps": json.dumps(kept),
    }
    source_at = {position[s.id or 0]: s.id or 0 for s in splice.kept}
    copies = {source_at[r.position]: r.id for r in sql.execute(session, COPY_STEPS, params)}
    specs = {-(i + 1): s for i, s in enumerate(new)}
    ids = {**copies, **_insert_steps(session, run, version, specs, position, max_attempts)}
    session.add(
        PlanVersion(
            run_id=run.id or 0,
            version=version,
            step_ids=[ids[k] for k in built.order],
            after={str(ids[k]): [ids[d] for d in built.after[k]] for k in built.order},
            created_by=created_by,
            reason=reason,
        )
    )
    session.flush()
    return copies


def add_answer_step(session: Session, run: Run, *, name: str, answer: dict[str, Any]) -> Step:
    """A reviewer's answer, stored as an already-succeeded `human` step named `name`."""
    step = Step(
        run_id=run.id or 0,
        plan_version=run.plan_version + 1,
        position=0,
        name=name,
        instruction="answer from a reviewer",
        kind="human",
        status="succeeded",
        result=answer,
        finished_at=utcnow(),
    )
    session.add(step)
    session.flush()
    return step
