"""`/api/v1/runs`: submit a goal, list runs, read one run whole, cancel one.

A run reads as its newest `EVENTS_PAGE_DEFAULT` events (`events_before` pages back), with every
step's args and result and every event's detail over `models.engine.previews.PREVIEW_MAX_BYTES`
shown as a preview; `/runs/{id}/steps/{step_id}/result` returns one step's whole result.

A submitter token sees and acts on its own user's runs only: another user's run is a 404, as if
it did not exist. Reviewers read every run; admins do everything. Each write is one transaction
(`session_scope`); its messages are sent after the commit.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Path, Query, Response, status
from sqlmodel import Session

from api.auth import AnyPrincipal, Principal, Submitter
from api.errors import IDEMPOTENCY_REUSED, QUOTA_REFUSAL
from api.memory import without_memory
from api.responses import (
    ErrorOut,
    RunDetail,
    RunOut,
    StepResultOut,
    SubmittedOut,
)
from api.run_views import run_detail, run_out, submitted_out
from api.schemas import PG_INT_MAX, RunStatus, RunSubmit
from api.token_limits import EVENTS_PAGE_FREE, LIMITED, RUNS_PAGE_FREE, charge_page
from models.bounds import IDEMPOTENCY_KEY_MAX_CHARS
from models.db import session_scope
from models.engine import previews
from models.engine.idempotency import Key
from models.engine.runs import USER_ID_MAX_CHARS, get_run
from models.engine.submissions import RunRequest
from models.errors import NotFound
from models.front import commands, queries
from models.patterns import IDEMPOTENCY_KEY_PATTERN, NO_NUL_PATTERN
from models.settings import get_settings
from models.tables import Run

router = APIRouter(prefix="/runs", tags=["runs"])
RunId = Annotated[int, Path(ge=1, le=PG_INT_MAX, description="Run id.")]
StepId = Annotated[int, Path(ge=1, le=PG_INT_MAX, description="Step id.")]
EventsBefore = Annotated[
    int | None,
    Query(
        ge=1,
        le=PG_INT_MAX,
        description="Only events with ids below this: the `events_next_before` of the page read "
        "last.",
    ),
]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=IDEMPOTENCY_KEY_MAX_CHARS,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="Any unique string (a UUID) the client keeps for this submit: sent again "
        "with the same body within AGENTQ_IDEMPOTENCY_WINDOW_S (24 h), it answers with the run "
        "the first request made, 201 with the body it had then and `Idempotent-Replayed: "
        "true`; with another body, 409. Keys are this token's own.",
    ),
]
REPLAYED_HEADER = "Idempotent-Replayed"  # Stripe's name for it
EventsLimit = Annotated[
    int, Query(ge=1, le=previews.EVENTS_PAGE_MAX, description="Events in the page, the newest.")
]


def visible_run(session: Session, run_id: int, principal: Principal) -> Run:
    """The run, if the principal may see it; `NotFound` alike for missing and not yours."""
    run = session.get(Run, run_id)
    if run is None or not principal.can_read_user(run.user_id):
        raise NotFound(f"run {run_id} does not exist")
    return run


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=SubmittedOut,
    summary="Submit a goal",
    responses={
        201: {
            "headers": {
                REPLAYED_HEADER: {
                    "description": "`true` on an Idempotency-Key's "
                    "replay: the run an earlier request made; nothing new was submitted.",
                    "schema": {"type": "string", "enum": ["true"]},
                }
            }
        },
        409: {"model": ErrorOut, **IDEMPOTENCY_REUSED},
        429: {"model": ErrorOut, **QUOTA_REFUSAL},
    },
)
def submit(
    body: RunSubmit,
    principal: Submitter,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> SubmittedOut:
    """Submit a goal, or an explicit plan (status `running`, no planning call), and start it
    in the same transaction (`models.engine.submissions`): the plan's first steps are `queued`, or a
    goal's run is `planning`, as far as the user's dispatch cap allows (else they wait, `ready`
    or `queued`); `notified` says whether their messages were sent after the commit.

    The plan is checked against the registered tools, their arguments and the pinned facts, and
    its steps' `after` must make a graph with no cycle whose references name steps waited for,
    before anything is written (400 naming the step and field). A user over a quota
    (`AGENTQ_USER_MAX_ACTIVE_RUNS`, `AGENTQ_USER_SUBMITS_PER_MINUTE`) gets 429 with
    `Retry-After`, and nothing is written. Submitter or admin; an explicit plan only from the
    roles in `AGENTQ_PLAN_SUBMIT_ROLES` (403 naming the setting), naming only enabled tools.

    `from_goal` shows the values the goal states (amounts, currencies, ISO dates, identifiers:
    `models.plans.goal_values`) and, with `pin_from_goal`, those the run pinned; `facts` win.

    With `Idempotency-Key` a retry is safe (`models.engine.idempotency`): the same key and body
    within the window answer with the first run (the same 201 body, `Idempotent-Replayed: true`),
    the same key with another body is a 409 (`IdempotencyKeyReused`), and concurrent requests with
    one key make one run. A refused submit keeps no key.
    """
    request = run_request(body, principal)
    if idempotency_key is None:
        submitted = commands.submit(request, describe=_submitted_detail)
        return submitted_out(submitted.seen, submitted)
    key = Key(f"token:{principal.token_id}", idempotency_key)
    once = commands.submit_once(request, key, describe=_run_json)
    if once.replayed:
        response.headers[REPLAYED_HEADER] = "true"
    return submitted_out(RunDetail.model_validate(once.seen), once)


def _submitted_detail(session: Session, run: Run) -> RunDetail:
    return run_detail(session, run, submitted=True)


def _run_json(session: Session, run: Run) -> dict[str, Any]:
    return _submitted_detail(session, run).model_dump(mode="json")


def run_request(body: RunSubmit, principal: Principal) -> RunRequest:
    """The run `body` asks for (a submit's, a schedule's), as `user` (or the submitter's own),
    its plan checked against the registered tools (`models.front.commands.checked_plan`), for a
    role that may send one (`check_plan_role`)."""
    plan = None
    if body.plan is not None:
        check_plan_role(principal)
        plan = commands.checked_plan(body.plan.model_dump(), facts=body.facts)
    budgets = body.budgets
    return RunRequest(
        user_id=principal.acting_for(body.user),
        goal=body.goal,
        facts=body.facts,
        plan=plan,
        replans=budgets.replans,
        tokens=budgets.tokens,
        cost_usd=budgets.cost_usd,
        wall_time_s=budgets.wall_time_s,
        success_criteria=body.success_criteria,
        replan_check=body.replan_check,
        pin_from_goal=body.pin_from_goal,
        approvals=body.approvals,
    )


def check_plan_role(principal: Principal) -> None:
    """403 unless `principal`'s role may submit an explicit plan (`AGENTQ_PLAN_SUBMIT_ROLES`;
    admin always may). A plan can call every enabled tool with any arguments; a goal alone lets
    only the planner choose."""
    allowed = {*get_settings().plan_submit_roles, "admin"}
    if principal.role not in allowed:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            detail=f"plan: role {principal.role!r} may not submit an explicit plan "
            f"(AGENTQ_PLAN_SUBMIT_ROLES allows {', '.join(sorted(allowed))}); submit the goal "
            "alone and the planner writes the plan",
        )


@router.get("", response_model=list[RunOut], summary="List runs, newest first", responses=LIMITED)
def list_runs(
    principal: AnyPrincipal,
    status_: Annotated[RunStatus | None, Query(alias="status")] = None,
    user: Annotated[
        str | None, Query(min_length=1, max_length=USER_ID_MAX_CHARS, pattern=NO_NUL_PATTERN)
    ] = None,
    before: Annotated[int | None, Query(ge=1, le=PG_INT_MAX, description="Ids below.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[RunOut]:
    """Runs newest first, filtered by `status` and `user`; page with `before` (the last id seen).

    A submitter token lists only its own user's runs (another `user` gives an empty list). A
    page over 100 runs is a costly read (429 beyond the token's
    `AGENTQ_COSTLY_READS_PER_MINUTE`).
    """
    charge_page(principal, limit, RUNS_PAGE_FREE)
    owner = (principal.user_id or "") if principal.role == "submitter" else None
    with session_scope() as session:
        runs = queries.newest_runs(
            session,
            limit=limit,
            status=status_,
            user_id=user,
            owner=owner,
            before=before,
            with_answer=False,  # a listed run has no answer
        )
        return [run_out(r) for r in runs]


@router.get("/{run_id}", response_model=RunDetail, summary="One run, whole", responses=LIMITED)
def read_run(
    run_id: RunId,
    principal: AnyPrincipal,
    events_before: EventsBefore = None,
    events_limit: EventsLimit = previews.EVENTS_PAGE_DEFAULT,
) -> RunDetail:
    """The run with its plan versions, steps, escalations and spend, and its newest
    `events_limit` events (below `events_before`; the response's `events_next_before` reads the
    page before). Args, results and details over 2 KiB are previews (`shortened` says which);
    `/runs/{run_id}/steps/{step_id}/result` has a whole result. 404 when the run does not exist
    or (for a submitter) is another user's. Recalled memory quoted by events is hidden from
    a token that may not read the user's memory (a reviewer: `api.memory.without_memory`).
    More than 200 events is a costly read (429 beyond `AGENTQ_COSTLY_READS_PER_MINUTE`)."""
    charge_page(principal, events_limit, EVENTS_PAGE_FREE)
    with session_scope() as session:
        run = visible_run(session, run_id, principal)
        detail = run_detail(session, run, events_before=events_before, events_limit=events_limit)
    return without_memory(detail, principal)


@router.get(
    "/{run_id}/steps/{step_id}/result",
    response_model=StepResultOut,
    summary="One step's whole result",
)
def read_step_result(run_id: RunId, step_id: StepId, principal: AnyPrincipal) -> StepResultOut:
    """The whole result of one step of the run (null until it has one; at most
    `AGENTQ_STEP_DATA_MAX_BYTES`). 404 as for the run, or when the run has no such step."""
    with session_scope() as session:
        visible_run(session, run_id, principal)
        step = previews.step_result(session, run_id, step_id)
        if step is None:
            raise NotFound(f"run {run_id} has no step {step_id}")
        return StepResultOut(
            run_id=run_id, step_id=step_id, name=step.name, status=step.status, result=step.result
        )


@router.post("/{run_id}/cancel", response_model=RunDetail, summary="Cancel a run")
def cancel(run_id: RunId, principal: Submitter) -> RunDetail:
    """Cancel an active run: it ends `cancelled`, its steps not yet running are cancelled (a
    running step finishes, and nothing follows it). 409 when the run has ended already, with
    nothing changed. Submitter (own runs) or admin."""
    done = commands.cancel(
        run_id,
        check=lambda session, _: visible_run(session, run_id, principal),
        describe=lambda session, run: run_detail(session, get_run(session, run.id or 0)),
    )
    return done.seen
