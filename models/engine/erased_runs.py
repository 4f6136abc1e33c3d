"""Erasing the content of a user's ended runs (`agentq memory forget --runs`): the engine's
own rows, emptied of what the user wrote or was told, keeping ids, statuses, timings and spend.

The forget that calls it (`models.memory.memory_admin.forget`) holds the user's erasure lock
(`models.memory.erasures.erase`) and has cancelled the user's active runs first.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlmodel import Session

from models.engine import storage

ERASED: Final = "[erased]"  # what a text column of an erased run holds

# The ended runs of :user_id, whose content `erase_runs` erases (each statement below uses it).
ENDED_RUNS: Final = (
    "SELECT id FROM runs WHERE user_id = :user_id "
    "AND status IN ('succeeded', 'failed', 'cancelled')"
)
# erase_runs: one statement per table; what each keeps is ids, statuses, timings and spend.
ERASE_RUN_CONTENT: Final = {
    # runs: the goal, the answer and the error go; budgets, spend and times stay
    "runs": "UPDATE runs SET goal = CAST(:erased AS text), final_result = NULL, "
    "error = CASE WHEN error IS NULL THEN NULL ELSE CAST(:erased AS text) END "
    f"WHERE id IN ({ENDED_RUNS})",
    # pinned facts: every row goes
    "pinned facts": f"DELETE FROM pinned_facts WHERE run_id IN ({ENDED_RUNS})",
    # steps: name, instruction, arguments, result and error go; kind, tool and counts stay
    "steps": "UPDATE steps SET name = CAST(:erased AS text), instruction = '', args = '{}'::jsonb, "
    "result = NULL, error = CASE WHEN error IS NULL THEN NULL ELSE CAST(:erased AS text) END "
    f"WHERE run_id IN ({ENDED_RUNS})",
    # step attempts: the error text goes
    "step attempts": "UPDATE step_attempts SET error = CAST(:erased AS text) "
    f"WHERE error IS NOT NULL AND step_id IN (SELECT id FROM steps WHERE run_id IN ({ENDED_RUNS}))",
    # tool journal: every row goes (a model step's tool calls, arguments and results; an ended
    # run's steps never replay them)
    "tool journal": "DELETE FROM tool_journal "
    f"WHERE step_id IN (SELECT id FROM steps WHERE run_id IN ({ENDED_RUNS}))",
    # gated tool calls: every row goes (their arguments, answers and comments, the model
    # exchange they kept), and the run's approval rules (they may quote argument values)
    "tool approvals": f"DELETE FROM tool_approvals WHERE run_id IN ({ENDED_RUNS})",
    "run approvals": f"DELETE FROM run_approvals WHERE run_id IN ({ENDED_RUNS})",
    # how the procedures the runs adopted turned out: the detail quotes a replan's reason (the
    # procedure keeps its count of failures in a row)
    "procedure outcomes": f"DELETE FROM procedure_outcomes WHERE run_id IN ({ENDED_RUNS})",
    # plan versions: the reason (it quotes step names and errors) goes
    "plan versions": f"UPDATE plan_versions SET reason = '' WHERE run_id IN ({ENDED_RUNS})",
    # events: every detail goes, but the numbers of `model.call` events (tokens, cost: spend)
    "events": "UPDATE run_events SET detail = CASE WHEN kind <> 'model.call' THEN '{}'::jsonb "
    "ELSE coalesce((SELECT jsonb_object_agg(d.key, d.value) FROM jsonb_each(detail) AS d "
    "WHERE jsonb_typeof(d.value) IN ('number', 'boolean')), '{}'::jsonb) END "
    f"WHERE run_id IN ({ENDED_RUNS})",
    # escalations: the detail (error, raw output), the comment and the answer go
    "escalations": "UPDATE escalations SET detail = '{}'::jsonb, comment = NULL, answer = NULL "
    f"WHERE run_id IN ({ENDED_RUNS})",
    # idempotency keys: every row goes (its stored answer quotes the goal; a retry after the
    # erasure makes a new run, as after the key's window)
    "idempotency keys": f"DELETE FROM idempotency_keys WHERE run_id IN ({ENDED_RUNS})",
}


def erase_runs(session: Session, *, user_id: str) -> dict[str, int]:
    """Erase the content of every ended run of `user_id` (goals, pinned facts, step names,
    instructions, arguments, results and errors, journaled and gated tool calls, plan reasons, event
    details, escalation details, comments and answers), keeping ids, statuses, timings and
    spend (budgets, tokens, cost, `model.call` numbers); the step data they held (none now) is
    taken off the user's total (`models.engine.storage.release_erased`). Returns the rows touched
    per table.
    Runs still active are left alone (the caller cancels them first); running it again erases
    what ended since."""
    params = {"user_id": user_id, "erased": ERASED}
    storage.release_erased(session, user_id)  # before their statuses could change: same runs
    return {
        table: int(getattr(session.execute(sa.text(sql), params), "rowcount", 0))
        for table, sql in ERASE_RUN_CONTENT.items()
    }
