"""Forking a run from a step (issue 32, item 1): a new run of the same user whose steps before the
chosen step keep their recorded results and whose chosen step, and everything after it, run anew.

What it is for: re-running a failed or wrongly-answered run after fixing a tool or a fact, without
paying again for what went right. DBOS's `fork_workflow(id, start_step)` and LangGraph's re-run
from a checkpoint ("time travel") are the peers; here the unit is a step of the run's current plan
version, a graph (DESIGN.md, invariant 12), so "after" means "waits for, directly or not".

The source's current plan version splits in three (`Split`):
- **re-run**: the chosen step and every step that waits for it; with a plan given (`plan`), its
  steps take their place, validated as a reviewer's edit is (`models.plans.plans.parse_plan` over
  the kept steps: names, graph, references, tools, arguments, facts);
- **copied**: every other step that succeeded: written `succeeded` in the new run with the
  source's result and its conversation turn (working memory reads it back), never executed again,
  so no effect of theirs is repeated and no model call paid again. Their spend stays the source
  run's; their results are charged to the new run's step-data budget and the user's total
  (`models.engine.storage`);
- **left**: the rest (steps that never ran, a failure on another branch) run anew, pending; a
  failure a later version answered (a replan, an edit) is history and is left out.

Refused, with nothing written (`Conflict` naming `from_step`: the request is well formed, the
source's state refuses it): a step the current version does
not have, a step whose results the fork would need (one it waits for) that did not succeed, a
reviewer's answer (a `human` step) among the steps to re-run without a plan to replace them, and a
run whose content was erased (`agentq memory forget --runs`). The new run is submitted as any run
is (`models.engine.submissions.insert_and_decide`: the user's quotas, the stack's limits, its first
decision in the same transaction) with the source's goal, pinned facts (changed by `facts`),
budgets, success criteria, replan check and approval tightening. `run_forks` keeps where it came
from; both runs show it (`forked_from`, `forks`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, Session, SQLModel, select

from models import sql
from models.approvals.calls import run_policy
from models.engine import events, storage, transitions
from models.engine.erased_runs import ERASED
from models.engine.runs import pinned_facts
from models.engine.submissions import RunRequest
from models.errors import BudgetExhausted, Conflict, NotFound
from models.plans import graph
from models.plans.plan_writes import add_forked_version
from models.plans.plans import (
    Splice,
    StepSpec,
    current_graph,
    handled_failures,
    parse_plan,
)
from models.plans.references import referenced_facts
from models.plans.step_data import json_bytes
from models.plans.tools import argument_problems, configured_tool_names
from models.settings import get_settings
from models.tables import PlanVersion, Run, Step, created_field, utcnow

# copy_turns: the conversation turns of the copied steps (`:copies`, old -> new step id) into the
# new run, in their order: working memory reads them back as it would have in the source run.
COPY_TURNS: Final = """
INSERT INTO messages (run_id, user_id, step_id, role, content, token_count, created_at)
SELECT :run_id, m.user_id, c.new_id, m.role, m.content, m.token_count, :now
FROM messages m
JOIN jsonb_to_recordset(CAST(:copies AS jsonb)) AS c(old_id integer, new_id integer)
  ON m.step_id = c.old_id
ORDER BY m.id"""
Then = Callable[[Session, Run], None]


class RunFork(SQLModel, table=True):
    """Where a forked run came from: the source run and the step it was forked from (id and
    name), and the copied steps, new step id (as text: a JSON key) -> the source's step id. The
    source may be purged since; the row keeps its ids."""

    __tablename__ = "run_forks"
    run_id: int = Field(
        sa_column=sa.Column(
            sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
        )
    )
    from_run_id: int = Field(index=True)
    from_step_id: int
    from_step: str = Field(max_length=100)
    copied: dict[str, int] = Field(default_factory=dict, sa_type=JSONB)
    created_at: datetime = created_field()


@dataclass(frozen=True)
class ForkRequest:
    """A fork as its caller asks for it: run `run_id` from its step named `from_step`; `plan`
    (a dict or JSON text, `{"steps": [...]}`) replaces that step and what waits for it; `facts`
    are pinned over the source's (a key given replaces the source's value)."""

    run_id: int
    from_step: str
    plan: Any = None
    facts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Split:
    """The source's current version split for a fork (see the module docstring): the steps kept
    (copied or left), in order, with what each waits for (`after`, by id); the kept steps
    `copied`; the steps to re-run, in order, with what each waits for (`rerun_after`)."""

    kept: list[Step]
    after: dict[int, tuple[int, ...]]
    copied: list[Step]
    rerun: list[Step]
    rerun_after: dict[int, tuple[int, ...]]
    answered: dict[str, Step] = field(default_factory=dict)  # failures left out, by name


def split(
    steps: Sequence[Step],
    after: Mapping[int, tuple[int, ...]],
    at: Step,
    answered: set[int],
    *,
    stale: Collection[int] = (),
) -> Split:
    """Split a version's `steps` (in order; `after` by id) at step `at`: the rule alone, no
    reads. `answered`: failed steps a later version answered, which the fork leaves out (kept
    by name in `Split.answered`: a reviewer's answer re-runs as the step it answered). `stale`:
    steps whose result a changed fact makes stale, which run anew too, with what waits for them.
    Raises `Conflict` naming `from_step` when a step `at` waits for did not succeed. The steps
    kept but not copied are given as `pending`, as the fork writes them."""
    at_id = at.id or 0
    waited = graph.ancestors(after, at_id)
    unmet = [s for s in steps if (s.id or 0) in waited and s.status != "succeeded"]
    if unmet:
        names = ", ".join(f"{s.name!r} ({s.status})" for s in unmet)
        raise Conflict(
            f"from_step: step {at.name!r} waits for steps that did not succeed: {names}; fork "
            "from the first of them"
        )
    roots = {at_id, *(set(stale) - answered)}  # an answered failure is left out, stale or not
    rerun = roots | {s.id or 0 for s in steps if roots & graph.ancestors(after, s.id or 0)}
    gone = {s.id or 0 for s in steps if s.status == "failed" and s.id in answered} - rerun

    def deps(step: Step) -> tuple[int, ...]:
        return tuple(d for d in after.get(step.id or 0, ()) if d not in gone)

    kept = [
        s if s.status == "succeeded" else s.model_copy(update={"status": "pending"})
        for s in steps
        if (s.id or 0) not in rerun | gone
    ]
    again = [s for s in steps if (s.id or 0) in rerun]
    return Split(
        kept,
        {s.id or 0: deps(s) for s in kept},
        [s for s in kept if s.status == "succeeded"],
        again,
        {s.id or 0: deps(s) for s in again},
        {s.name: s for s in steps if (s.id or 0) in gone},
    )


def stale_steps(steps: Sequence[Step], changed: Collection[str]) -> set[int]:
    """The steps whose result the facts `changed` (keys whose value a fork changes) make stale:
    a tool or child-run step naming one (`${facts.KEY}`), and every model step (a run's pinned
    facts are in each of its prompts)."""
    if not changed:
        return set()
    return {
        s.id or 0
        for s in steps
        if s.kind == "model" or (s.kind != "human" and referenced_facts(s.args) & set(changed))
    }


def source_run(session: Session, run_id: int, *, user_id: str | None = None) -> Run:
    """The run to fork; `NotFound` alike for a missing run and, with `user_id` (the only user
    whose runs the caller may fork; None: any), another user's."""
    source = session.get(Run, run_id)
    if source is None or (user_id is not None and source.user_id != user_id):
        raise NotFound(f"run {run_id} does not exist")
    return source


def fork_in(session: Session, source: Run, request: ForkRequest) -> tuple[RunRequest, Then]:
    """Check the fork of `source` (`source_run`; the caller holds its user's erasure lock
    shared, so a forget waits for the fork to commit): the `RunRequest` of the new run, and the
    hook `insert_and_decide` calls between inserting it and its first decision (`then`), which
    writes its plan version and its copies. Raises `Conflict` (see the module docstring) or
    `InvalidPlan` for a plan that does not validate; nothing is written."""
    if source.goal == ERASED:
        raise Conflict(f"run_id: run {source.id}'s content was erased; nothing to fork")
    current = current_graph(session, source)
    given = pinned_facts(session, source.id or 0)
    facts = {**given, **request.facts}
    changed = {k for k, v in request.facts.items() if given.get(k) != v}
    answered = handled_failures(session, source.id or 0)
    stale = stale_steps(current.kept, changed)
    at, parts = _split_at(source, current, request.from_step, answered, stale=stale)
    new = _rerun_specs(parts, request.plan, facts)
    run_request = RunRequest(
        user_id=source.user_id,
        goal=source.goal,
        facts=facts,
        replans=source.replans_limit,
        tokens=source.tokens_limit,
        cost_usd=source.cost_limit_usd,
        wall_time_s=source.wall_time_limit_s,
        replan_check=source.replan_check,
        approvals=run_policy(session, source.id or 0),
    )
    author = "submitter" if request.plan is not None else author_of(session, source)

    def then(session: Session, run: Run) -> None:
        _write(session, run, Forked(source, at, parts, new, author))

    return run_request, then


def as_written_from_start(session: Session, source: Run) -> list[dict[str, Any]] | None:
    """`source`'s current plan as written, every step to run anew (`_as_written`): the failures
    a later version answered left out, and out of what waits for them (`after` by name). None
    when it holds a reviewer's answer, which only a person can give again."""
    current = current_graph(session, source)
    answered = handled_failures(session, source.id or 0)
    live = [s for s in current.kept if (s.id or 0) not in answered]
    if not live or any(s.kind == "human" for s in live):
        return None
    waits = current.after or {}
    after = {
        s.id or 0: tuple(d for d in waits.get(s.id or 0, ()) if d not in answered) for s in live
    }
    names = {s.id or 0: s.name for s in live}
    return [_as_written(s, after, names, {}) for s in live]


@dataclass(frozen=True)
class Forked:
    """What a fork writes: the `source` run forked at step `at`, its `parts`, the `new` steps
    that re-run, and who the new version is `created_by` (`PlanVersion`)."""

    source: Run
    at: Step
    parts: Split
    new: list[StepSpec]
    author: str


def _rerun_specs(parts: Split, plan: Any, facts: Mapping[str, str]) -> list[StepSpec]:
    """The steps that re-run: `plan`'s, or the source's own as written; validated over the kept
    steps as a reviewer's edit is (`parse_plan` with their `Splice`). Raises `InvalidPlan`, or
    `Conflict` for a reviewer's answer among the source's steps to re-run."""
    if plan is None:
        if human := _answers_to_rerun(parts):
            raise Conflict(
                f"from_step: the steps to re-run hold a reviewer's answer ({', '.join(human)}), "
                "which cannot run again; give the fork a plan for the steps from there on"
            )
        names = {s.id or 0: s.name for s in [*parts.kept, *parts.rerun]}
        written = [_as_written(s, parts.rerun_after, names, parts.answered) for s in parts.rerun]
        plan = {"steps": written}
    checked = parse_plan(
        plan,
        tools=configured_tool_names(),
        splice=Splice(parts.kept, parts.after, None),
        facts=set(facts),
        check_args=argument_problems,
    )
    return checked.steps


def _split_at(
    run: Run, current: Splice, name: str, answered: set[int], *, stale: Collection[int] = ()
) -> tuple[Step, Split]:
    """`run`'s current version (`current`) split at its step `name` (`split`): the newest step
    of that name, as a replan's or a reviewer's step takes a failed one's place. Raises
    `Conflict` naming `from_step` for a name the version has not, and as `split` does."""
    at = next((s for s in reversed(current.kept) if s.name == name), None)
    if at is None:
        names = ", ".join(dict.fromkeys(s.name for s in current.kept)) or "none"
        raise Conflict(
            f"from_step: run {run.id} has no step {name!r} to fork from (its plan version "
            f"{run.plan_version} has: {names})"
        )
    return at, split(current.kept, current.after or {}, at, answered, stale=stale)


def _answers_to_rerun(parts: Split) -> list[str]:
    """The reviewers' answers among the steps to re-run that answer no failed step of their name
    (such a one re-runs as the step it answered): only a plan given can take their place."""
    return [s.name for s in parts.rerun if s.kind == "human" and s.name not in parts.answered]


def _as_written(
    step: Step,
    after: Mapping[int, tuple[int, ...]],
    names: Mapping[int, str],
    answered: Mapping[str, Step],
) -> dict[str, Any]:
    """A stored step as a plan writes it, with what it waits for by name; a reviewer's answer
    as the failed step it answered (`answered`, by name), which runs again."""
    waits = [names[d] for d in after.get(step.id or 0, ()) if d in names]
    if step.kind == "human":
        step = answered[step.name]
    written: dict[str, Any] = {
        "name": step.name,
        "instruction": step.instruction,
        "kind": step.kind,
        "after": waits,
        "expect": step.expect,
    }
    if step.kind == "tool":
        written |= {"tool": step.tool, "args": step.args}
    else:
        written |= {"tools": step.tools, "output": step.output}
    return written


def author_of(session: Session, source: Run) -> str:
    """Who wrote the source's current version (its steps are copied as written)."""
    version = session.exec(
        select(PlanVersion.created_by).where(
            PlanVersion.run_id == source.id, PlanVersion.version == source.plan_version
        )
    ).one_or_none()
    return version or "submitter"


def _write(session: Session, run: Run, forked: Forked) -> None:
    """Write the new run's plan version 1 (the kept steps, copied or left to run, and the new
    ones), charge and copy the copied results and turns, keep the source's success criteria,
    record where it came from, and make it `running`. Raises `Conflict` when the copied
    results do not fit the run's step-data budget or the user's total."""
    source, parts, settings = forked.source, forked.parts, get_settings()
    run_id = run.id or 0
    ids = add_forked_version(
        session,
        run,
        splice=Splice(parts.kept, parts.after, None),
        copied={s.id or 0 for s in parts.copied},
        new=forked.new,
        created_by=forked.author,
        max_attempts=settings.step_max_attempts,
        reason=f"forked from run {source.id} at step {forked.at.name!r}",
    )
    copies = {ids[s.id or 0]: s.id or 0 for s in parts.copied}
    size = sum(json_bytes(s.result or {}) for s in parts.copied)
    try:
        charge = storage.Charge("the copied results", size, settings.user_step_data_max_bytes)
        storage.charge(session, run_id, charge)
    except BudgetExhausted as refused:
        raise Conflict(f"from_step: {refused}; fork from an earlier step") from refused
    pairs = [{"old_id": old, "new_id": new} for new, old in copies.items()]
    sql.execute(
        session, COPY_TURNS, {"run_id": run_id, "copies": json.dumps(pairs), "now": utcnow()}
    )
    run.success_criteria = [dict(c) for c in source.success_criteria]
    session.add(
        RunFork(
            run_id=run_id,
            from_run_id=source.id or 0,
            from_step_id=forked.at.id or 0,
            from_step=forked.at.name,
            copied={str(new): old for new, old in copies.items()},
        )
    )
    events.record_event(
        session,
        run_id,
        "run.forked",
        from_run_id=source.id,
        from_step=forked.at.name,
        copied=[s.name for s in parts.copied],
        rerun=[s.name for s in forked.new],
    )
    session.flush()
    transitions.resume_run(session, run_id, expected="queued", plan_version=1)


def forkable(session: Session, run: Run) -> set[str]:
    """The names of the steps of `run`'s current version a fork with no plan may start at, by
    the rules `fork_in` applies (`_split_at`, `_answers_to_rerun`)."""
    current = current_graph(session, run)
    answered = handled_failures(session, run.id or 0)
    names = set()
    for name in dict.fromkeys(s.name for s in current.kept):
        try:
            _, parts = _split_at(run, current, name, answered)
        except Conflict:
            continue
        if not _answers_to_rerun(parts):
            names.add(name)
    return names
