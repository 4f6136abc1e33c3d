"""Settings for every agentq process, read from the environment and `.env`.

Every variable is `AGENTQ_<NAME>` (for example `AGENTQ_PROVIDER=openai`); the two connection URLs
are also read from the conventional `DATABASE_URL` and `BROKER_URL`, and the key from
`OPENAI_API_KEY`. With nothing set, agentq uses the embedded local stack (see `ops/stack.py`).
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from pathlib import Path
from typing import Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_settings import SettingsConfigDict, SettingsError

from models.errors import ConfigurationError
from models.settings_approvals import ApprovalSettings
from models.settings_children import ChildRunSettings
from models.settings_client import ClientSettings
from models.settings_connections import ConnectionSettings
from models.settings_console import ConsoleSettings
from models.settings_errors import describe_parse_error, describe_settings_error
from models.settings_mcp import McpSettings
from models.settings_memory import MemorySettings
from models.settings_operations import OperationsSettings
from models.settings_provider import ProviderSettings
from models.settings_schedules import ScheduleSettings  # issue 32, item 2
from models.settings_storage import StepDataSettings
from models.settings_variables import given_names, warn_unknown

OFFLINE_MODEL = "offline"  # the offline provider's model name, and its (zero) price's key


class ModelPrice(BaseModel):
    """What one chat model costs, USD per million tokens of prompt (`input`) and answer."""

    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0)
    output: float = Field(ge=0)


# gpt-4o-mini: USD 0.15 per million input tokens and 0.60 per million output tokens, from
# OpenAI's API pricing page (https://openai.com/api/pricing/) and the model's launch post of
# 18 July 2024 (https://openai.com/index/gpt-4o-mini-advancing-cost-efficient-intelligence/).
# Cached-input and Batch API discounts are not modelled: the price charged is the list price.
DEFAULT_MODEL_PRICES_USD_PER_MTOK: dict[str, ModelPrice] = {
    "gpt-4o-mini": ModelPrice(input=0.15, output=0.60),
    OFFLINE_MODEL: ModelPrice(input=0.0, output=0.0),
}


class Settings(
    ConnectionSettings,
    ProviderSettings,
    OperationsSettings,
    ConsoleSettings,
    MemorySettings,
    StepDataSettings,
    ApprovalSettings,
    McpSettings,
    ClientSettings,
    ScheduleSettings,
    ChildRunSettings,
):
    """All of agentq's configuration; each field's default is the documented default."""

    model_config = SettingsConfigDict(env_prefix="AGENTQ_", env_file=".env", extra="ignore")

    # The database's and the broker's URLs: `models.settings_connections`.
    home: Path = Field(default=Path.home() / ".agentq", description="Data directory.")
    reviewer: str | None = Field(
        default=None,
        description="Who the CLI records for its review claims and decisions; unset: the login "
        "name.",
    )

    # The timeout ladder (DESIGN.md, invariant 8), all in seconds.
    step_time_limit_s: float = Field(
        default=90.0,
        gt=0,
        description="Time limit of one step, s, enforced inside it: the step stops at it (and is "
        "tried again) or at its run's wall-time deadline if that comes first (the run escalates).",
    )
    soft_time_limit_s: float = Field(
        default=120.0, gt=0, description="Celery soft time limit, s (the step fails, may retry)."
    )
    hard_time_limit_s: float = Field(
        default=150.0, gt=0, description="Celery hard time limit, s (the pool process is killed)."
    )
    visibility_timeout_s: float = Field(
        default=3600.0,
        gt=0,
        description="The broker redelivers an unacknowledged message after, s.",
    )
    lease_s: float = Field(
        default=10.0, gt=0, description="A running step's or phase's lease, renewed every beat."
    )
    heartbeat_s: float = Field(default=3.0, gt=0, description="How often a lease is renewed.")

    step_max_attempts: int = Field(
        default=3, ge=1, le=20, description="Attempts per step (retryable errors, lost leases)."
    )
    retry_backoff_s: float = Field(
        default=1.0, ge=0, description="A step's first retry delay; doubles per attempt, s."
    )
    plan_max_attempts: int = Field(
        default=3,
        ge=1,
        le=10,
        description="Model calls to get a valid plan (or valid extracted facts, or a model step's "
        "answer that fits its `output`) before escalating (or failing the step), each charged.",
    )
    model_step_max_calls: int = Field(
        default=8, ge=1, le=50, description="Model calls in one model step's tool-calling loop."
    )
    tool_call_max_invalid: int = Field(
        default=2, ge=0, le=10, description="Invalid tool-call answers re-asked in one step."
    )
    queued_stale_s: float = Field(default=60.0, gt=0, description="Re-send a queued step after.")
    # A worker runs the next step of its run itself when it is the only one that can start
    # (issue 10); after this many in one task the next goes back to the queue, so one long plan
    # cannot keep a worker from the others' runs. 20 no-op steps take about 60 ms.
    chain_max_steps: int = Field(
        default=20, ge=1, le=1000, description="Steps one execute-step task runs in a row."
    )
    # ... and for at most this long (issue 27: 20 x 60 s held a worker 20 min; a hop costs ms).
    chain_max_s: float = Field(default=10.0, gt=0, le=3600, description="Seconds chained, at most.")
    # Fair order's time slice (`models.engine.fair_queue`, issue 29), a scheduler's minimum
    # granularity (Linux CFS): 20 ms is 5-10 no-op steps, far below one model call.
    fair_slice_s: float = Field(
        default=0.02,
        ge=0,
        le=10,
        description="Worker seconds a user may run ahead of a waiting user before a free worker "
        "turns to the other's work; 0: after every step.",
    )
    phase_stale_s: float = Field(default=120.0, gt=0, description="Re-send plan/synthesize after.")
    reconcile_interval_s: float = Field(
        default=10.0, gt=0, description="How often beat runs the reconciler, s."
    )

    default_replan_budget: int = Field(default=2, ge=0, description="Replans per run.")
    default_token_budget: int = Field(default=200_000, ge=0, description="Model tokens per run.")
    default_cost_budget_usd: float = Field(default=1.0, ge=0, description="Cost per run, USD.")
    default_wall_time_budget_s: float = Field(
        default=3600.0, gt=0, description="Wall time per run, s."
    )
    # The most a submitter may ask for (`models.engine.runs.run_budgets`): budgets are what an
    # operator pays for, so the operator sets their ceiling (a user test submitted 2^31 replans,
    # 2^31 tokens and $1M; one run replanned 663 times). Five times the defaults, and a week.
    max_replan_budget: int = Field(
        default=10, ge=0, description="The most replans a submit may ask for (more: refused, 400)."
    )
    max_token_budget: int = Field(
        default=1_000_000, ge=1, description="The most tokens a submit may ask for."
    )
    max_cost_budget_usd: float = Field(
        default=5.0, ge=0, description="The most cost a submit may ask for, USD."
    )
    max_wall_time_budget_s: float = Field(
        default=7 * 86_400.0, gt=0, description="The most wall time a submit may ask for, s."
    )
    model_prices_usd_per_mtok: dict[str, ModelPrice] = Field(
        default_factory=lambda: dict(DEFAULT_MODEL_PRICES_USD_PER_MTOK),
        description="USD per million prompt (`input`) and answer (`output`) tokens, by model; "
        "the `openai` provider's model must be listed (0 for a free local model).",
    )
    model_max_deferrals: int = Field(default=10, ge=0, le=1000, description="Per step or phase.")
    # After each step that succeeds, ask whether the rest of its plan still makes sense
    # (`models.plans.plan_checks`); a run may say otherwise at submit.
    replan_check: Literal["off", "model"] = Field(
        default="off",
        description="`model`: after each step that succeeds, ask whether the rest of the plan "
        "still makes sense (one charged call; a no is a replan under the replan budget).",
    )

    # A day: an escalation opened after hours is still seen during the next working day in any
    # time zone before its deadline passes; a shorter one would pass on every overnight
    # escalation, a longer one lets a forgotten escalation sit unnoticed for days.
    escalation_timeout_s: float = Field(
        default=86_400.0,
        gt=0,
        le=365 * 86_400.0,
        description="How long an escalation waits for a decision before its deadline, s.",
    )
    # "wait" by default: a rejection fails the run for good (`failed` is final), and the deadline
    # passing says only that nobody looked, not that the work is wrong; waiting costs nothing but
    # a run parked in `waiting_review`, and the timeline event plus warning make the miss visible.
    # "reject" is for deployments where a stale answer is worse than none.
    escalation_deadline_action: Literal["reject", "wait"] = Field(
        default="wait",
        description="At an escalation's deadline: reject it (the run fails) or wait and notify.",
    )

    # Fairness and quotas per user (issue 9, finding 3; `models.engine.quotas`,
    # `models.engine.dispatch`). 0 turns a limit off. 20 active runs and 60 submits a minute are far
    # above what a person does by hand and stop a script from flooding the queue (the finding: 200
    # submits in 7 s). 4 tasks in flight is twice the default worker pool: one user alone still
    # keeps every worker busy, and another user's step waits behind at most 4 of theirs in the
    # broker.
    user_max_active_runs: int = Field(
        default=20, ge=0, description="Runs of one user not yet ended; more are refused (429)."
    )
    user_submits_per_minute: int = Field(
        default=60, ge=0, description="Runs one user may submit in any 60 s; more get 429."
    )
    user_max_running_steps: int = Field(
        default=4,
        ge=0,
        description="Tasks of one user (steps, plans, replans, syntheses) queued or running.",
    )

    # The review console's sessions, and the API's Swagger UI: `models.settings_console`.
    # Tools and step data (issue 9: tools are explicit configuration; size caps).
    tool_modules: list[str] = Field(
        default=["worker.tools.builtin", "worker.tools.expenses"],
        description="Modules whose tools the stack offers (JSON list); none of the default ones "
        "takes a host path or reaches the network.",
    )
    plan_submit_roles: list[Literal["submitter", "admin"]] = Field(
        default=["submitter", "admin"],
        description="Roles that may submit an explicit plan over the API; admin always may.",
    )
    # Step data per step, run and user: `models.settings_storage`; MCP servers:
    # `models.settings_mcp`.

    def price_of(self, model: str) -> ModelPrice:
        """The price of `model` (`AGENTQ_MODEL_PRICES_USD_PER_MTOK`); the offline model is free.

        Raises `ConfigurationError` for a model with no price: a cost budget cannot be enforced
        for calls whose cost is unknown (DESIGN.md, invariant 4).
        """
        if model == OFFLINE_MODEL:
            return self.model_prices_usd_per_mtok.get(model, ModelPrice(input=0.0, output=0.0))
        try:
            return self.model_prices_usd_per_mtok[model]
        except KeyError:
            raise ConfigurationError(
                f"AGENTQ_MODEL_PRICES_USD_PER_MTOK has no price for model {model!r}; add it, for "
                f'example {{"{model}": {{"input": 0.15, "output": 0.6}}}} (USD per million tokens'
                ", 0 for a free local server)"
            ) from None

    @model_validator(mode="after")
    def _check_timeout_ladder(self) -> Settings:
        check_timeout_ladder(self)
        if self.provider == "openai":
            self.price_of(self.model)
        check_budget_ceilings(self)
        if self.reserved_output_tokens >= self.context_window_tokens:
            raise ConfigurationError(
                f"AGENTQ_RESERVED_OUTPUT_TOKENS ({self.reserved_output_tokens}) must be less than "
                f"AGENTQ_CONTEXT_WINDOW_TOKENS ({self.context_window_tokens})"
            )
        if self.recall_share + self.context_procedure_share > 1:
            raise ConfigurationError(
                f"AGENTQ_RECALL_SHARE ({self.recall_share:g}) plus AGENTQ_CONTEXT_PROCEDURE_SHARE "
                f"({self.context_procedure_share:g}) must be at most 1: both are shares of the "
                "same room"
            )
        return self


BUDGET_CEILINGS: Final = (
    ("replans", "default_replan_budget", "max_replan_budget"),
    ("tokens", "default_token_budget", "max_token_budget"),
    ("cost_usd", "default_cost_budget_usd", "max_cost_budget_usd"),
    ("wall_time_s", "default_wall_time_budget_s", "max_wall_time_budget_s"),
)
"""Each budget of a run: its name, its default's field and its ceiling's field."""


def setting_name(field: str) -> str:
    """The environment variable of a `Settings` field: `AGENTQ_<FIELD>`."""
    return f"AGENTQ_{field.upper()}"


def check_budget_ceilings(s: Settings) -> None:
    """Refuse a default budget over its ceiling; raises `ConfigurationError` naming both."""
    for _, default, ceiling in BUDGET_CEILINGS:
        if getattr(s, default) > getattr(s, ceiling):
            raise ConfigurationError(
                f"{setting_name(default)} ({getattr(s, default):g}) must not be more than "
                f"{setting_name(ceiling)} ({getattr(s, ceiling):g})"
            )


def model_retry_delay_s(s: Settings, attempt: int) -> float:
    """The wait after failed model attempt `attempt` (1-based) before the next one, s:
    `AGENTQ_MODEL_RETRY_BACKOFF_S` x 2^(attempt - 1), at most `AGENTQ_MODEL_RETRY_MAX_S`."""
    return float(min(s.model_retry_backoff_s * 2 ** (attempt - 1), s.model_retry_max_s))


def model_call_max_s(s: Settings) -> float:
    """The longest one model call can hold a worker, s: every attempt timing out, plus the waits
    between attempts (a rate limit is never waited out in a worker; see
    `worker.model_calls.calls`)."""
    waits = sum(model_retry_delay_s(s, n) for n in range(1, s.model_max_attempts))
    return s.model_request_timeout_s * s.model_max_attempts + waits


def check_timeout_ladder(s: Settings) -> None:
    """Refuse settings that break DESIGN.md invariant 8.

    model request timeout x attempts + retry waits < step time limit < soft time limit < hard
    time limit < broker visibility timeout, and 2 x heartbeat < lease < visibility timeout. The
    lease is a running step's and a paid phase's (plan, replan, synthesis, fact extraction:
    `models.engine.phases`) alike; the worker renews it every `AGENTQ_HEARTBEAT_S`
    (`worker.execution.heartbeats`), so a live attempt keeps its step or phase through two missed
    renewals, and a killed one's is taken back within about a lease (issue 11, item 6: with a
    lease above the hard time limit that took minutes, and a phase's took the hard limit plus a
    lease, 160 s). The lease has no rung against the time limits: it is renewed, not outlived.
    Raises `ConfigurationError` naming the first pair out of order.
    """
    rungs = [
        (
            "AGENTQ_MODEL_REQUEST_TIMEOUT_S x AGENTQ_MODEL_MAX_ATTEMPTS + retry waits "
            "(AGENTQ_MODEL_RETRY_BACKOFF_S doubling, at most AGENTQ_MODEL_RETRY_MAX_S)",
            model_call_max_s(s),
        ),
        ("AGENTQ_STEP_TIME_LIMIT_S", s.step_time_limit_s),
        ("AGENTQ_SOFT_TIME_LIMIT_S", s.soft_time_limit_s),
        ("AGENTQ_HARD_TIME_LIMIT_S", s.hard_time_limit_s),
        ("AGENTQ_VISIBILITY_TIMEOUT_S", s.visibility_timeout_s),
    ]
    leases = [
        ("2 x AGENTQ_HEARTBEAT_S", 2 * s.heartbeat_s),
        ("AGENTQ_LEASE_S", s.lease_s),
        ("AGENTQ_VISIBILITY_TIMEOUT_S", s.visibility_timeout_s),
    ]
    for ladder in (rungs, leases):
        for (low_name, low), (high_name, high) in itertools.pairwise(ladder):
            if not low < high:
                raise ConfigurationError(
                    f"timeout ladder broken: {low_name} ({low:g} s) must be less than "
                    f"{high_name} ({high:g} s)"
                )


# Values this process was given other than by its environment (`use_settings`).
_overrides: dict[str, object] = {}


def use_settings(**values: object) -> Settings:
    """Make `values` (by field name: `database_url="postgresql://..."`) this process's settings
    over what the environment and `.env` say, for every later `get_settings` (clearing its
    cache keeps them); returns the settings. For a process told its configuration otherwise
    than by its environment: the CLI, by the running `agentq up`'s stack file. Raises
    `ConfigurationError` as `get_settings` does."""
    _overrides.update(values)
    get_settings.cache_clear()
    return get_settings()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once (`read_settings`). Raises `ConfigurationError` on an
    invalid value."""
    return read_settings()


def read_settings() -> Settings:
    """The settings as the environment and `.env` say now, `use_settings`' values over them, not
    cached (a new Celery client's broker URL must see a change). Raises `ConfigurationError`.
    Warns on stderr of an `AGENTQ_` variable that is no setting (`warn_unknown`)."""
    warn_unknown(given_names(Settings.model_config.get("env_file")), Settings.model_fields)
    try:
        return Settings(**_overrides)  # type: ignore[arg-type]  # checked by Settings itself
    except ConfigurationError:
        raise
    except ValidationError as exc:
        raise ConfigurationError(describe_settings_error(exc)) from exc
    except SettingsError as exc:  # a value that is not JSON where JSON is expected
        raise ConfigurationError(describe_parse_error(exc, Settings.model_fields)) from exc
