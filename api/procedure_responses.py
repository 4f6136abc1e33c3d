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
    written_at: datetime


class ProcedureDetail(ProcedureOut):
    """A procedure with every version, oldest first."""

    versions: list[ProcedureVersionOut]
