"""What an earlier run of the same request teaches a new one (issue 31: an agent that learns from
its own runs).

A request is what a user asked: the goal text, the success criteria the user wrote and the facts
the user pinned (a reviewer's answers and a planner's criteria are not the request). A user who
makes the same request again (a recurring goal, a schedule, a retry) gets what the last one
learned, from that user's own runs only:

- **a plan to reuse** (`plan_to_reuse`): the newest earlier run of the same request that
  succeeded with no escalation (its goal met by its own plan, no person involved) gives its
  final plan as written, the failures a later version answered left out
  (`models.engine.forks.as_written_from_start`). The planning phase writes it as plan version 1
  with no model call (`worker.phases.planner`, `AGENTQ_REUSE_PLANS`, on): the plan the first
  run had to find, by a replan or not, is the one the next starts with. Not a run whose
  should-replan check answered `replan`: that plan was cut to what one step's result showed
  then (no receipts, no account manager), and copied it would stop short for data that may have
  changed. Agentic plan caching (Zhang et al., 2025) reuses plans across similar tasks; here
  only an identical request reuses one, and its steps, expectations and goal check hold it
  as they hold a planner's plan: a plan that no longer fits fails or is replanned;
- **a replan not worth trying** (`unmet_before`): when an earlier run of the same request
  replanned and still escalated `goal_not_met`, a goal check that fails again is escalated at
  once (`models.engine.coordinator.decide_unmet`, `AGENTQ_SKIP_FUTILE_REPLANS`, on; ExpeL, Zhao
  et al., AAAI 2024, learns such insights from its own failed trials). A goal check is a verdict
  on what the request asks, so the same request fails it the same way; a failed step is not
  treated so (a tool that timed out may answer the next time).

A user's runs created before they were last forgotten (`agentq memory forget`, with or without
`--runs`: `models.memory.erasures`) teach nothing: the runs stay as the record of work done, but
what the agent learns from them is memory, and it was forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.engine import forks

# The request of run `{run}` as one row: its user-written success criteria (sorted by text) and its
# user-pinned facts, as jsonb, to compare with another run's.
_CRITERIA: Final = """(SELECT coalesce(jsonb_agg(c ORDER BY c->>'text'), '[]'::jsonb)
    FROM jsonb_array_elements({run}.success_criteria) c WHERE c->>'by' = 'user')"""
_FACTS: Final = """(SELECT coalesce(jsonb_object_agg(f.key, f.value), '{{}}'::jsonb)
    FROM pinned_facts f WHERE f.run_id = {run}.id AND f.set_by = 'user')"""
# same_request: the other runs of run :run_id's request, as `r`, but those created before their
# user was last forgotten (a statement appends its own conditions on `r` after `AND`).
SAME_REQUEST: Final = f"""
WITH this AS (
    SELECT t.id, t.user_id, t.goal, {_CRITERIA.format(run="t")} AS criteria,
        {_FACTS.format(run="t")} AS facts
    FROM runs t WHERE t.id = :run_id
)
SELECT r.id FROM runs r, this
WHERE r.user_id = this.user_id AND r.id <> this.id AND r.goal = this.goal
    AND {_CRITERIA.format(run="r")} = this.criteria AND {_FACTS.format(run="r")} = this.facts
    AND NOT EXISTS (SELECT 1 FROM memory_erasures e
                    WHERE e.user_id = r.user_id AND e.erased_at >= r.created_at)
    AND """
# unmet_before: the newest that replanned and escalated `goal_not_met`.
UNMET_BEFORE: Final = (
    SAME_REQUEST
    + """r.replans_used > 0
    AND EXISTS (SELECT 1 FROM escalations e WHERE e.run_id = r.id AND e.reason = 'goal_not_met')
ORDER BY r.id DESC LIMIT 1"""
)
# succeeded_alone: the newest that succeeded with no escalation and no should-replan check that
# answered `replan`.
SUCCEEDED_ALONE: Final = (
    SAME_REQUEST
    + """r.status = 'succeeded'
    AND NOT EXISTS (SELECT 1 FROM escalations e WHERE e.run_id = r.id)
    AND NOT EXISTS (SELECT 1 FROM plan_checks c WHERE c.run_id = r.id AND c.verdict = 'replan')
ORDER BY r.id DESC LIMIT 1"""
)


def unmet_before(session: Session, run_id: int) -> int | None:
    """The id of the newest earlier run of run `run_id`'s request that replanned and still
    escalated `goal_not_met`; None when there is none (or no such run `run_id`)."""
    found = sql.scalar(session, UNMET_BEFORE, {"run_id": run_id})
    return None if found is None else int(found)


def succeeded_alone(session: Session, run_id: int) -> int | None:
    """The id of the newest earlier run of run `run_id`'s request that succeeded with no
    escalation and no should-replan check answering `replan`; None when there is none."""
    found = sql.scalar(session, SUCCEEDED_ALONE, {"run_id": run_id})
    return None if found is None else int(found)


@dataclass(frozen=True)
class Reusable:
    """A plan run `run_id` may start with: `source_id`'s final plan as written (`plan`:
    `{"steps": [...], "success_criteria": [...]}`, the criteria its planner added) and who wrote
    it (`author`, `PlanVersion.created_by`: a plan whose context carried a reviewer's procedure
    keeps a reviewer's rights, issue 27)."""

    source_id: int
    plan: dict[str, Any]
    author: str


def plan_to_reuse(session: Session, run_id: int) -> Reusable | None:
    """The plan run `run_id` may start with (`succeeded_alone`'s, as written: each step's
    `after` by name, the failures a later version answered left out); None when there is no
    such run. The caller validates it (`models.plans.plans.parse_plan`): a tool removed since
    makes it unusable."""
    source_id = succeeded_alone(session, run_id)
    if source_id is None:
        return None
    source = forks.source_run(session, source_id)
    written = forks.as_written_from_start(session, source)
    if written is None:
        return None
    criteria = [str(c["text"]) for c in source.success_criteria if c.get("by") == "planner"]
    plan = {"steps": written, "success_criteria": criteria}
    return Reusable(source_id, plan, forks.author_of(session, source))
