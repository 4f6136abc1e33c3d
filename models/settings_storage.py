"""Settings for how much step data agentq stores: per step, per run, per user.

`models.settings.Settings` inherits these fields, so they are read like every other setting
(`AGENTQ_<NAME>`, `.env`) and reached as `settings.<name>`. Step data is what a run's steps store
and a user (or a model they steer) controls the size of: results, journaled tool calls and
reviewers' answers (`models.plans.step_data`, `models.engine.storage`).

Issue 27, item 5: with only the per-step cap, a 68 KB request made 49 steps of 240 KB each,
11.8 MB of results (25 MB of database growth); at 60 submits a minute one user could grow the
database by about 1.5 GB a minute. So a run has a step-data budget and a user a total.
"""

from __future__ import annotations

import itertools
from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings

from models.errors import ConfigurationError

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


class StepDataSettings(BaseSettings):
    """Fields of `Settings` that cap step data (issue 9, finding 2; issue 27, item 5)."""

    # 256 KiB: a quarter of the API's request body limit (api.limits.BODY_MAX_BYTES, 1 MiB) and
    # about 64,000 tokens of text, far more than a model is shown of one result
    # (AGENTQ_TOOL_RESULT_MAX_TOKENS); the demo's largest result is under 1 KiB. Issue 9 saw
    # 300 references to one 60,000-character value build an 18 MB result.
    step_data_max_bytes: int = Field(
        default=256 * KIB,
        ge=KIB,
        le=64 * MIB,
        description="Largest resolved arguments or result of one step, bytes of compact JSON.",
    )
    # 8 MiB: 32 results at the per-step cap, while a plan has at most 50 steps; the demo's run
    # stores under 10 KiB. The 49 x 240 KB (11.8 MB) is refused at its 35th step.
    run_step_data_max_bytes: int = Field(
        default=8 * MIB,
        ge=KIB,
        le=1024 * GIB,
        description="Step data one run may store (its budget, set at submit), bytes.",
    )
    # 1 GiB: 128 runs at the run budget, or ten thousand runs of 100 KiB; at the rate
    # (1.5 GB a minute) a user stops within a minute instead of filling the disk. Runs purged by
    # retention (AGENTQ_RUN_RETENTION_DAYS) or erased by `forget --runs` give their bytes back.
    user_step_data_max_bytes: int = Field(
        default=GIB,
        ge=0,
        le=1024**5,
        description="Step data all runs of one user may hold together, bytes; 0: no limit.",
    )

    @model_validator(mode="after")
    def _check_step_data_caps(self) -> Self:
        check_step_data_caps(self)
        return self


def check_step_data_caps(s: StepDataSettings) -> None:
    """Refuse caps that cannot all hold: one step's data must fit a run's budget, and a run's
    budget a user's total (unless that is off, 0). Raises `ConfigurationError` naming both."""
    pairs = [
        ("AGENTQ_STEP_DATA_MAX_BYTES", s.step_data_max_bytes),
        ("AGENTQ_RUN_STEP_DATA_MAX_BYTES", s.run_step_data_max_bytes),
    ]
    if s.user_step_data_max_bytes:
        pairs.append(("AGENTQ_USER_STEP_DATA_MAX_BYTES", s.user_step_data_max_bytes))
    for (low_name, low), (high_name, high) in itertools.pairwise(pairs):
        if low > high:
            raise ConfigurationError(
                f"{low_name} ({low}) must not be more than {high_name} ({high}): a step's data "
                "that fits the one could never be stored under the other"
            )
