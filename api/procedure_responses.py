"""The answers of `/api/v1/procedures` (pydantic), re-exported by `api.responses` (the module
the Python client reads them from), which they would take over its 400 lines."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from models.memory.procedures import Scope


class ProcedureOut(BaseModel):
    """A procedure's current version."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    version: int
    scope: Scope
    user_id: str | None
    tool: str | None
    title: str
    when_to_use: str
    body: str
    plan_template: dict[str, Any] | None
    source_run_id: int | None = Field(description="The run it was saved from, if any.")
    created_by: str
    updated_by: str
    written_as: str | None = Field(
        description="The role the current version was written with (submitter, reviewer, "
        "admin; null: unknown, acts as a reviewer's): whose rights an adopted template acts with."
    )
    origin: str = Field(
        description="Who wrote the current version: person, or learned (by agentq, from the run "
        "source_run_id, which succeeded after a replan or a reviewer's answer or edit)."
    )
    failures: int = Field(
        description="Runs in a row whose adopted plan of this version then needed a replan or "
        "failed; each halves its recall score."
    )
    retired_at: datetime | None = Field(
        description="When that many failures retired it (kept, never recalled); null: active."
    )
    created_at: datetime
    updated_at: datetime
    embedding_model: str


class ProcedureVersionOut(BaseModel):
    """One version of a procedure, as written."""

    model_config = ConfigDict(from_attributes=True)
    version: int
    scope: Scope
    user_id: str | None
    tool: str | None
    title: str
    when_to_use: str
    body: str
    plan_template: dict[str, Any] | None
    written_by: str
    written_as: str | None = Field(description="The role it was written with (null: unknown).")
    origin: str = Field(description="person, or learned (by agentq, from a run).")
    written_at: datetime


class ProcedureOutcomeOut(BaseModel):
    """How one run that adopted the procedure's plan template turned out."""

    model_config = ConfigDict(from_attributes=True)
    run_id: int
    version: int = Field(description="The version the run adopted.")
    outcome: str = Field(description="held, replanned or failed.")
    detail: str
    created_at: datetime


class ProcedureDetail(ProcedureOut):
    """A procedure with every version, and the outcomes of the runs that adopted it, oldest
    first."""

    versions: list[ProcedureVersionOut]
    outcomes: list[ProcedureOutcomeOut]
