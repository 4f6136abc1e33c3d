"""Replans an earlier run of the same request already showed futile (issue 31: learn that a
replan does not help).

A run whose goal check finds its goal not met is replanned in the place of its deliverable while
its replan budget lasts (`models.engine.coordinator.decide_unmet`). When an earlier run of the
same user made the same request (the same goal text, the same success criteria of the user's,
the same facts the user pinned) replanned and still escalated `goal_not_met`, another replan
of this one is expected to fail the same way: it would cost a replan call, a new plan's steps
and another check before reaching the reviewer it ends with. So the run escalates at once, its
escalation naming the earlier run (`AGENTQ_SKIP_FUTILE_REPLANS`, on by default; ExpeL, Zhao et
al., AAAI 2024, learns such insights from its own failed trials). It is only ever a
shorter way to a person: never a success, and a reviewer who edits or answers decides as for any
escalation.

Runs whose content was erased (`agentq memory forget --runs`) keep no goal text to match, so a
forgotten user's history teaches nothing.
"""

from __future__ import annotations

from typing import Final

from sqlmodel import Session

from models import sql

# tried_before: the newest other run of run :run_id's user with its goal, its user-written
# success criteria and its user-pinned facts, that replanned and escalated `goal_not_met`.
TRIED_BEFORE: Final = """
WITH this AS (
    SELECT r.id, r.user_id, r.goal,
        (SELECT coalesce(jsonb_agg(c ORDER BY c->>'text'), '[]'::jsonb)
         FROM jsonb_array_elements(r.success_criteria) c WHERE c->>'by' = 'user') AS criteria,
        (SELECT coalesce(jsonb_object_agg(f.key, f.value), '{}'::jsonb)
         FROM pinned_facts f WHERE f.run_id = r.id AND f.set_by = 'user') AS facts
    FROM runs r WHERE r.id = :run_id
)
SELECT r.id FROM runs r, this
WHERE r.user_id = this.user_id AND r.id <> this.id AND r.goal = this.goal
    AND r.replans_used > 0
    AND EXISTS (SELECT 1 FROM escalations e WHERE e.run_id = r.id AND e.reason = 'goal_not_met')
    AND (SELECT coalesce(jsonb_agg(c ORDER BY c->>'text'), '[]'::jsonb)
         FROM jsonb_array_elements(r.success_criteria) c WHERE c->>'by' = 'user') = this.criteria
    AND (SELECT coalesce(jsonb_object_agg(f.key, f.value), '{}'::jsonb)
         FROM pinned_facts f WHERE f.run_id = r.id AND f.set_by = 'user') = this.facts
ORDER BY r.id DESC LIMIT 1"""


def tried_before(session: Session, run_id: int) -> int | None:
    """The id of the newest earlier run of run `run_id`'s request (its user, goal, user-written
    success criteria and user-pinned facts) that replanned and still escalated `goal_not_met`;
    None when there is none (or no such run `run_id`)."""
    found = sql.scalar(session, TRIED_BEFORE, {"run_id": run_id})
    return None if found is None else int(found)
