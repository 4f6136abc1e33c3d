"""`/api/v1/procedures`: procedural memory. Add, list, show, edit and delete procedures, and save
a succeeded run's final plan as one (`POST /procedures/from-run/{run_id}`).

The same model-layer functions as `agentq procedure ...` (`models.memory.procedure_admin`). Who may
do what is `models.memory.procedures.Actor`'s rule: any token reads everyone's and tool procedures;
a user's own are read and written by that user's submitter tokens and admins only (another's is a
404, as one that does not exist); reviewers write everyone's and tool procedures, submitters
only their own user's (403 otherwise). An edit makes a new version (`?expected_version=` refuses
it with 409 unless the procedure is still at that version).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, status

from api.auth import AnyPrincipal, Principal
from api.responses import (
    ProcedureDetail,
    ProcedureOut,
    ProcedureOutcomeOut,
    ProcedureVersionOut,
)
from api.schemas import (
    PG_INT_MAX,
    NewProcedure,
    ProcedureChange,
    SaveFromRun,
    ToolProcedure,
    UserId,
    UserProcedure,
)
from models.memory import procedure_admin
from models.memory.procedures import Actor, Procedure, Scope
from models.plans.plans import PlanSpec

router = APIRouter(prefix="/procedures", tags=["procedures"])
RowId = Annotated[int, Path(ge=1, le=PG_INT_MAX)]


def actor_of(principal: Principal) -> Actor:
    """The procedure actor of an API token: its role and user, recorded as `token:<name>`."""
    return Actor(f"token:{principal.name}", principal.role, principal.user_id)


def _template(plan: PlanSpec | None) -> dict[str, Any] | None:
    return None if plan is None else plan.model_dump(mode="json", exclude_defaults=True)


def _out(row: Procedure) -> ProcedureOut:
    return ProcedureOut.model_validate(row)


@router.get("", response_model=list[ProcedureOut], summary="List procedures")
def listing(
    principal: AnyPrincipal,
    scope: Annotated[Scope | None, Query(description="Only this scope.")] = None,
    user: Annotated[UserId | None, Query(description="Only this user's.")] = None,
) -> list[ProcedureOut]:
    """The procedures the token may read, newest first."""
    rows = procedure_admin.listing(actor_of(principal), scope=scope, user_id=user)
    return [_out(p) for p in rows]


@router.post(
    "", response_model=ProcedureOut, status_code=status.HTTP_201_CREATED, summary="Add one"
)
def add(principal: AnyPrincipal, body: NewProcedure) -> ProcedureOut:
    """Add a procedure (version 1), embedded for recall. 403 for a scope the token may not
    write, or a model step in a shared template from a token that is not an admin's; 400
    naming the field for what the schema cannot say (a tool not enabled, a plan
    template whose graph does not hold)."""
    data: dict[str, Any] = body.model_dump(include={"title", "when_to_use", "body", "scope"})
    data["plan_template"] = _template(body.plan_template)
    if isinstance(body, UserProcedure):
        data["user_id"] = principal.acting_for(body.user)
    if isinstance(body, ToolProcedure):
        data["tool"] = body.tool
    return _out(procedure_admin.add(actor_of(principal), data))


@router.get("/{procedure_id}", response_model=ProcedureDetail, summary="Show one")
def show(procedure_id: RowId, principal: AnyPrincipal) -> ProcedureDetail:
    """The procedure and its versions; 404 when the token may not read it."""
    found = procedure_admin.show(actor_of(principal), procedure_id)
    versions = [ProcedureVersionOut.model_validate(v) for v in found.versions]
    outcomes = [ProcedureOutcomeOut.model_validate(o) for o in found.outcomes]
    return ProcedureDetail(
        **_out(found.procedure).model_dump(), versions=versions, outcomes=outcomes
    )


@router.patch("/{procedure_id}", response_model=ProcedureOut, summary="Edit one")
def edit(
    procedure_id: RowId,
    principal: AnyPrincipal,
    body: ProcedureChange,
    expected_version: Annotated[
        int | None, Query(ge=1, le=PG_INT_MAX, description="Refuse (409) unless at this version.")
    ] = None,
) -> ProcedureOut:
    """Write a new version with the fields given changed (version + 1); 409 when the result is
    not a valid procedure or another edit came first."""
    given = body.model_dump(exclude_unset=True)
    changes = {("user_id" if k == "user" else k): v for k, v in given.items()}
    if "plan_template" in changes:
        changes["plan_template"] = _template(body.plan_template)
    actor = actor_of(principal)
    row = procedure_admin.edit(actor, procedure_id, changes, expected_version=expected_version)
    return _out(row)


@router.delete("/{procedure_id}", response_model=ProcedureOut, summary="Delete one")
def delete(procedure_id: RowId, principal: AnyPrincipal) -> ProcedureOut:
    """Delete the procedure with its versions (the runs that used it keep their record)."""
    return _out(procedure_admin.remove(actor_of(principal), procedure_id))


@router.post(
    "/from-run/{run_id}",
    response_model=ProcedureOut,
    status_code=status.HTTP_201_CREATED,
    summary="Save a run's plan as one",
)
def save_from_run(
    run_id: RowId, principal: AnyPrincipal, body: SaveFromRun | None = None
) -> ProcedureOut:
    """The run's final plan as a procedure: title and when-to-use from its goal, the plan
    template from the steps that did not fail. 409 unless the run succeeded; 404 for another
    user's run (a submitter token); 403 for a reviewer saving it as the user's own (the user's
    memory, which a reviewer can neither read nor delete)."""
    body = body or SaveFromRun()
    actor = actor_of(principal)
    row = procedure_admin.save_from_run(
        actor, run_id, title=body.title, scope=body.scope, tool=body.tool
    )
    return _out(row)
