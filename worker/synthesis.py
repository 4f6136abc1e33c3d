"""The synthesize task: the run's final answer, from the results of its steps."""

from __future__ import annotations

import structlog

from models import transitions
from models.db import session_scope
from models.errors import BudgetExhausted, IllegalTransition, ProviderError
from models.plans import current_steps
from models.runs import get_run, pinned_facts, results_by_name
from worker.calls import call_model
from worker.prompts import synthesize_request

log = structlog.get_logger("agentq.worker")


def synthesize(run_id: int) -> bool:
    """Write the final answer of a `synthesizing` run and mark it succeeded.

    `final_result` is `{"answer": str, "offline": bool, "outputs": {step name: result}}`; the
    outputs are the rows' results verbatim, so what was submitted never depends on the model's
    wording. A provider failure or a spent budget escalates the run instead.
    """
    with session_scope() as session:
        run = get_run(session, run_id)
        if run.status != "synthesizing":
            log.info("synthesize.skipped", run_id=run_id, status=run.status)
            return False
        steps = current_steps(session, run)
        request = synthesize_request(run.goal, pinned_facts(session, run_id), steps)
    try:
        completion = call_model(run_id, request)
    except (ProviderError, BudgetExhausted) as exc:
        with session_scope() as session:
            transitions.escalate(
                session,
                run_id,
                expected="synthesizing",
                reason="synthesis_failed",
                detail={"error": str(exc)},
            )
        return True
    final = {
        "answer": completion.text,
        "offline": completion.offline,
        "outputs": results_by_name(steps),
    }
    with session_scope() as session:
        try:
            transitions.succeed_run(session, run_id, final_result=final)
        except IllegalTransition as exc:
            log.info("synthesize.skipped", run_id=run_id, reason=str(exc))
            return False
    return True
