"""`POST /api/v1/runs/{run_id}/fork`: fork a run from a step (`models.engine.forks`, issue 32).

The command is `models.front.forks.fork`, as behind `agentq run fork` and the console's "Fork
from here"; this module checks the token: a submitter forks its own user's runs (another's is a
404, as if it did not exist), an admin any; a `plan` only from the roles that may submit one
(`AGENTQ_PLAN_SUBMIT_ROLES`)."""

from __future__ import annotations

from fastapi import APIRouter, status

from api.auth import Submitter
from api.errors import QUOTA_REFUSAL
from api.responses import ErrorOut, SubmittedOut
from api.run_views import run_detail, submitted_out
from api.runs import RunId, check_plan_role
from api.schemas import RunFork
from models.engine.forks import ForkRequest
from models.front.forks import fork

router = APIRouter(prefix="/runs", tags=["runs"])


@router.post(
    "/{run_id}/fork",
    status_code=status.HTTP_201_CREATED,
    response_model=SubmittedOut,
    summary="Fork a run from a step",
    responses={429: {"model": ErrorOut, **QUOTA_REFUSAL}},
)
def fork_run(run_id: RunId, body: RunFork, principal: Submitter) -> SubmittedOut:
    """Make a new run of the same user whose steps before `from_step` keep this run's results
    (copied, never executed again: no effect repeated, nothing paid again) and whose `from_step`
    and every step waiting for it run anew, from `plan` if given; it is submitted and started as
    `POST /api/v1/runs` does (quotas, first decision in the same transaction), with this run's
    goal, facts (with `facts` over them), budgets, success criteria and approvals. Both runs show
    it: the new one's `forked_from`, this one's `forks`.

    409 naming `from_step` for a step this run's current plan has not, one it waits for that did
    not succeed, or a reviewer's answer to re-run without a `plan`; 400 naming the plan's field
    for a plan that does not validate; 404 for a run the token may not see; 429 over a quota.
    Nothing is written then."""
    if body.plan is not None:
        check_plan_role(principal)
    owner = None if principal.role == "admin" else principal.user_id
    plan = body.plan.model_dump() if body.plan is not None else None
    request = ForkRequest(run_id, body.from_step, plan, dict(body.facts))
    forked = fork(request, user_id=owner, describe=run_detail)
    return submitted_out(forked.seen, forked)
