"""Settings of steps that are goals of their own: child runs (`models.engine.children`, issue 32,
item 3). `models.settings.Settings` inherits these fields."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class ChildRunSettings(BaseSettings):
    """Fields of `Settings` for child runs."""

    # A plan that delegates without end (a child whose plan delegates the same goal again) is a
    # fork bomb that a budget alone stops late: depth and fan-out are bounded up front, as
    # Temporal bounds pending child workflows per workflow (2,000) and Hatchet its spawn depth.
    child_run_max_depth: int = Field(
        default=3,
        ge=0,
        le=20,
        description="How deep runs may delegate: a run submitted by a user is at depth 0, its "
        "child runs at 1; a step of kind `run` that would start a child deeper fails. 0: no "
        "child runs.",
    )
    child_runs_max: int = Field(
        default=10,
        ge=0,
        le=1000,
        description="Child runs one run may start in all (every plan version counted); past it "
        "a step of kind `run` fails.",
    )
