"""The tables: runs, plan versions, steps, step attempts, the tool journal, pinned facts,
escalations, run events.

Statuses are plain text columns; the allowed moves between them are in `models.states`, and the
only code that changes them is the guarded transitions (`models.engine.guards`, used by
`models.engine.run_transitions`, `models.engine.step_transitions`, `models.engine.transitions`) and
the hot SQL of `models.engine.leases`. All timestamps are timezone-aware (UTC).
JSON columns are wrapped in SQLAlchemy's `Mutable*` types so an in-place edit
(`row.detail["x"] = 1`) is tracked and saved on commit.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.mutable import MutableDict, MutableList
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def timestamp_field(nullable: bool = True) -> Any:
    """A timezone-aware timestamp column; NULL until set."""
    return Field(default=None, sa_type=sa.DateTime(timezone=True), nullable=nullable)


def created_field() -> Any:
    """A timezone-aware creation time, set by Python and by the database's `now()`."""
    return Field(
        default_factory=utcnow,
        sa_type=sa.DateTime(timezone=True),
        sa_column_kwargs={"server_default": sa.func.now()},
        nullable=False,
    )


def _json_dict(nullable: bool = False) -> Any:
    column_type = MutableDict.as_mutable(JSONB)
    if nullable:
        return Field(default=None, sa_type=column_type, nullable=True)
    return Field(default_factory=dict, sa_type=column_type, nullable=False)


class Run(SQLModel, table=True):
    """One submitted goal and everything the engine knows about its progress.

    Budgets are enforced in Postgres by `models.engine.budgets`: a model call reserves its largest
    possible spend before it is made and settles to the reported usage after it. `deferrals`
    counts the rate-limit deferrals of the current planning, replanning or synthesis task (reset
    when the phase starts); `updated_at` of a deferred run is when its task is due again.
    """

    __tablename__ = "runs"
    __table_args__ = (
        # Per-user quotas and dispatch (`models.engine.quotas`, `models.engine.dispatch`): a user's
        # runs not yet ended, and a user's runs by submit time.
        sa.Index(
            "ix_runs_user_active",
            "user_id",
            postgresql_where=sa.text("status NOT IN ('succeeded', 'failed', 'cancelled')"),
        ),
        sa.Index("ix_runs_user_created", "user_id", "created_at"),
        # The reconciler's ended runs that still wait for memory (`models.engine.held`).
        sa.Index(
            "ix_runs_finished", "finished_at", postgresql_where=sa.text("finished_at IS NOT NULL")
        ),
        # Runs whose phase (or memory task) a worker claimed: the reconciler looks for expired
        # leases (`scheduler.tasks`, `models.engine.held`).
        sa.Index(
            "ix_runs_phase_lease",
            "phase_lease_expires_at",
            postgresql_where=sa.text("phase_lease_expires_at IS NOT NULL"),
        ),
    )
    id: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(index=True, max_length=200)
    goal: str
    status: str = Field(default="queued", index=True, max_length=20)
    plan_version: int = 0
    provider: str = Field(default="offline", max_length=40)
    replans_limit: int = 2
    replans_used: int = 0
    tokens_limit: int = 200_000
    tokens_used: int = 0
    cost_limit_usd: float = 1.0
    cost_used_usd: float = 0.0
    wall_time_limit_s: float = 3600.0
    # Step data the run's steps hold, and its budget (`models.engine.storage`), bytes of compact
    # JSON.
    step_data_bytes: int = Field(default=0, sa_type=sa.BigInteger, nullable=False)
    step_data_limit_bytes: int = Field(default=8 << 20, sa_type=sa.BigInteger, nullable=False)
    deferrals: int = 0
    # The claim of the phase whose task is out (`models.engine.phases`): the attempts so far, the
    # live attempt's lease (None: no attempt holds the phase) and its worker.
    phase_attempt: int = 0
    phase_lease_expires_at: datetime | None = timestamp_field()
    phase_worker: str | None = Field(default=None, max_length=200)
    deadline_at: datetime | None = timestamp_field()
    final_result: dict[str, Any] | None = _json_dict(nullable=True)
    # What the run must achieve (`models.engine.goal_checks`): `{"text", "by"}` each, by "user" (at
    # submit) or "planner" (with plan version 1).
    success_criteria: list[dict[str, Any]] = Field(
        default_factory=list, sa_type=MutableList.as_mutable(JSONB), nullable=False
    )
    # Whether each step that succeeds asks if the rest of the plan still makes sense: "off" or
    # "model" (`models.plans.plan_checks`; `AGENTQ_REPLAN_CHECK` at submit).
    replan_check: str = Field(default="off", max_length=10)
    error: str | None = None
    # The W3C traceparent of the run's submit span (`models.engine.tracing`): every task of the run
    # joins that trace. None for runs submitted before migration 0028.
    traceparent: str | None = Field(default=None, max_length=55)
    created_at: datetime = created_field()
    updated_at: datetime = created_field()
    finished_at: datetime | None = timestamp_field()


class PinnedFact(SQLModel, table=True):
    """A value that must reach every step of the run (currency=EUR): the user's statement, or a
    reviewer's answer (`set_by` is `user`, or `reviewer:<name>`). Only the user's own become
    memory when the run is remembered."""

    __tablename__ = "pinned_facts"
    __table_args__ = (sa.UniqueConstraint("run_id", "key"),)
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    key: str = Field(max_length=100)
    value: str
    set_by: str = Field(default="user", max_length=200, sa_column_kwargs={"server_default": "user"})


class PlanVersion(SQLModel, table=True):
    """One version of a run's plan: the ordered ids of its steps, and what each waits for.

    `after` maps each step id (as text: a JSON key) to the ids of the steps it waits for
    (`models.plans.graph`; migration 0012 gave older versions the chain their order meant).
    `replaces_step_id` is the failed step this version answers (a replan, a reviewer's edit or
    answer): its dependents wait for the steps put in its place instead, and the coordinator
    treats that failure as handled.
    """

    __tablename__ = "plan_versions"
    __table_args__ = (sa.UniqueConstraint("run_id", "version"),)
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    version: int
    step_ids: list[int] = Field(
        default_factory=list,
        sa_type=MutableList.as_mutable(JSONB),
    )
    after: dict[str, list[int]] = Field(
        default_factory=dict,
        sa_type=MutableDict.as_mutable(JSONB),
        sa_column_kwargs={"server_default": "{}"},
    )
    created_by: str = Field(max_length=20)  # submitter | planner | replanner | reviewer
    reason: str = ""
    replaces_step_id: int | None = None
    created_at: datetime = created_field()


class Step(SQLModel, table=True):
    """One step of a plan: a tool call, a model call, or a reviewer's answer (`human`).

    `position` is the step's index in the newest plan version that holds it; `plan_version` is
    the version that created it. `attempt` counts claims, `deferrals` the claims that ended in
    a rate-limit deferral (not failures: `attempt - deferrals` is what `max_attempts` bounds); the
    lease is `lease_expires_at`. `queued_at` is when the step became `ready`, then `queued`;
    a deferred step's is when it is due. `tokens_used` and `cost_used_usd` are what the step's
    own model calls were charged.
    """

    __tablename__ = "steps"
    __table_args__ = (
        # Steps by status, oldest first: the dispatch's ready steps (`models.engine.dispatch`) read
        # in id order and stop at the free slots, however long a user's backlog; every lookup by
        # status alone uses it too. It replaces an index on `status` alone, with which a planner
        # that had no statistics yet (a new database filling fast) joined every ready step to
        # every run of the user (migration 0013).
        sa.Index("ix_steps_status_id", "status", "id"),
        # A run's steps not yet ended: the dispatch counts running runs with none (0013).
        sa.Index(
            "ix_steps_unfinished",
            "run_id",
            postgresql_where=sa.text("status IN ('pending', 'ready', 'queued', 'running')"),
        ),
        # The steps a taken step's message was handed over to (`models.engine.handovers`, 0035).
        sa.Index("ix_steps_wake_via", "wake_via", postgresql_where=sa.text("wake_via IS NOT NULL")),
    )
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    plan_version: int
    position: int
    name: str = Field(max_length=100)
    instruction: str = ""
    kind: str = Field(max_length=10)  # tool | model | human
    tool: str | None = Field(default=None, max_length=100)
    args: dict[str, Any] = _json_dict()
    # A model step's tools: the names of the registered tools it may call (function calling).
    tools: list[str] = Field(
        default_factory=list,
        sa_type=MutableList.as_mutable(JSONB),
    )
    # Checks of the step's result, as `models.plans.expectations.stored` writes them (issue 12).
    expect: list[dict[str, Any]] = Field(
        default_factory=list,
        sa_type=MutableList.as_mutable(JSONB),
    )
    # A model step's typed answer fields, name -> type (`models.plans.step_outputs`; issue 12); None
    # for a step that declares none (a model step's result is then its text).
    output: dict[str, str] | None = Field(default=None, sa_type=JSONB, nullable=True)
    status: str = Field(default="pending", max_length=20)
    attempt: int = 0
    max_attempts: int = 3
    deferrals: int = 0
    tokens_used: int = 0
    cost_used_usd: float = 0.0
    lease_expires_at: datetime | None = timestamp_field()
    queued_at: datetime | None = timestamp_field()
    started_at: datetime | None = timestamp_field()
    finished_at: datetime | None = timestamp_field()
    result: dict[str, Any] | None = _json_dict(nullable=True)
    error: str | None = None
    # The step whose broker message wakes a worker for this one, which was queued without its own:
    # that step was taken before its message came (`models.engine.handovers`).
    wake_via: int | None = None


class StepAttempt(SQLModel, table=True):
    """One claim of a step by a worker; `(step_id, attempt)` is unique (DESIGN.md, invariant 2)."""

    __tablename__ = "step_attempts"
    __table_args__ = (sa.UniqueConstraint("step_id", "attempt"),)
    id: int | None = Field(default=None, primary_key=True)
    step_id: int = Field(foreign_key="steps.id", ondelete="CASCADE")  # the unique pair indexes it
    attempt: int
    worker: str = Field(default="", max_length=200)
    started_at: datetime = created_field()
    finished_at: datetime | None = timestamp_field()
    # succeeded | failed | retry | deferred | lease_expired
    outcome: str | None = Field(default=None, max_length=20)
    error: str | None = None


class ToolJournalEntry(SQLModel, table=True):
    """One tool call a model step made, journaled once its tool returned
    (`models.engine.tool_journal`; DESIGN.md, invariant 9): a replayed loop of the step (after a
    deferral, a retry, a lost lease) reuses `result` or `error` instead of running the tool again.

    `call_key` is `<tool>#<occurrence>:<sha256 of the canonical arguments>`: what stays the same
    when the model is asked again (the provider's call id does not); `attempt` is the step's
    attempt that ran the tool.
    """

    __tablename__ = "tool_journal"
    __table_args__ = (sa.UniqueConstraint("step_id", "call_key"),)
    id: int | None = Field(default=None, primary_key=True)
    step_id: int = Field(foreign_key="steps.id", ondelete="CASCADE")
    call_key: str = Field(max_length=200)
    tool: str = Field(max_length=100)
    arguments: dict[str, Any] = _json_dict()
    result: dict[str, Any] | None = _json_dict(nullable=True)
    error: str | None = None
    attempt: int
    created_at: datetime = created_field()


class Escalation(SQLModel, table=True):
    """An entry of the human-review queue. At most one open per run and plan version.

    `deadline_at` is when the escalation's safe default applies (opened +
    `AGENTQ_ESCALATION_TIMEOUT_S`; NULL only for rows decided before deadlines existed);
    `deadline_passed_at` is when the scheduler's beat applied that default, set once, so a `wait`
    deadline is announced once (`models.review.reviews.pass_deadline`).
    """

    __tablename__ = "escalations"
    __table_args__ = (
        sa.Index(
            "escalations_one_open_per_run_version",
            "run_id",
            "plan_version",
            unique=True,
            postgresql_where=sa.text("status <> 'decided'"),
        ),
        sa.Index(
            "ix_escalations_deadline_due",
            "deadline_at",
            postgresql_where=sa.text("status <> 'decided' AND deadline_passed_at IS NULL"),
        ),
    )
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    plan_version: int
    step_id: int | None = None
    reason: str = Field(max_length=40)
    detail: dict[str, Any] = _json_dict()
    status: str = Field(default="open", index=True, max_length=20)  # open | claimed | decided
    claimed_by: str | None = None
    # The API token that claimed (NULL for the CLI, which acts as $AGENTQ_REVIEWER with no
    # token): only that token decides or releases the claim through the API or the console.
    claimed_by_token_id: int | None = None
    claimed_at: datetime | None = timestamp_field()
    decision: str | None = Field(default=None, max_length=20)  # approve|edit|reject|respond
    decided_by: str | None = None
    decided_by_token_id: int | None = None  # the API token that decided; NULL: CLI or agentq
    decided_at: datetime | None = timestamp_field()
    comment: str | None = None
    answer: dict[str, Any] | None = _json_dict(nullable=True)
    # The reviewer asked that the answer be remembered: a fact of the run's user, written when
    # the run is remembered (source `reviewer:<decided_by>`); otherwise it is run state only.
    remember_answer: bool = Field(default=False, sa_column_kwargs={"server_default": sa.false()})
    # The budgets an approval set (`models.engine.budget_grants`), by name: `{"tokens": {"used",
    # "limit_before", "limit", "chosen": "reviewer" | "default"}}`; NULL when it set none.
    granted: dict[str, Any] | None = _json_dict(nullable=True)
    created_at: datetime = created_field()
    deadline_at: datetime | None = timestamp_field()
    deadline_passed_at: datetime | None = timestamp_field()


class RunEvent(SQLModel, table=True):
    """The append-only timeline of a run: every transition and decision, in order."""

    __tablename__ = "run_events"
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True, ondelete="CASCADE")
    step_id: int | None = None
    at: datetime = created_field()
    kind: str = Field(max_length=40)
    detail: dict[str, Any] = _json_dict()


class ApiToken(SQLModel, table=True):
    """A bearer token of the HTTP API, with its role; only the token's sha256 hash is stored.

    Tokens are `aq_` plus 32 random bytes (`secrets.token_urlsafe(32)`, 256 bits), so a fast
    unsalted hash is right: slow, salted hashes defend guessable passwords against brute force,
    and nothing can brute-force 256 random bits; a fast hash also lets a request find its token
    by an indexed lookup. `user_id` is the agentq user a submitter token acts for (NULL for
    reviewer and admin tokens); a revoked token (`revoked_at` set) authenticates nothing.
    """

    __tablename__ = "api_tokens"
    __table_args__ = (
        # Live token names are unique whatever their case (`models.access.api_tokens`; migration
        # 0010).
        sa.Index(
            "ux_api_tokens_live_lower_name",
            sa.text("lower(name)"),
            unique=True,
            postgresql_where=sa.text("revoked_at IS NULL"),
        ),
    )
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=200)
    role: str = Field(max_length=20)  # submitter | reviewer | admin
    user_id: str | None = Field(default=None, max_length=200)
    token_hash: str = Field(max_length=64, unique=True, index=True)
    created_at: datetime = created_field()
    revoked_at: datetime | None = timestamp_field()
    last_used_at: datetime | None = timestamp_field()


class ConsoleSession(SQLModel, table=True):
    """A signed-in review console session (`models.access.ui_sessions`); the browser's cookie holds
    only its random id, of which this row keeps the sha256 (as `ApiToken` keeps a token's).

    Deleted at sign-out and when its token is revoked; refused after `AGENTQ_UI_SESSION_IDLE_S`
    without a request (`last_seen_at`) or `AGENTQ_UI_SESSION_MAX_AGE_S` after `created_at`.
    `flashes` are the one-time messages the next page shows (`[{"message", "tone"}]`).
    """

    __tablename__ = "console_sessions"
    id: int | None = Field(default=None, primary_key=True)
    session_hash: str = Field(max_length=64, unique=True, index=True)
    token_id: int = Field(foreign_key="api_tokens.id", index=True, ondelete="CASCADE")
    csrf_token: str = Field(max_length=100)
    flashes: list[dict[str, Any]] = Field(
        default_factory=list, sa_type=MutableList.as_mutable(JSONB), nullable=False
    )
    created_at: datetime = created_field()
    last_seen_at: datetime = created_field()


class TokenCalibration(SQLModel, table=True):
    """How a model server counts prompts against our tiktoken estimate, per model
    (`models.engine.token_calibrations`): `ratio` is the running mean of the server's prompt tokens
    over ours, across `samples` calls (the newest `CALIBRATION_WINDOW_CALLS` weigh equally)."""

    __tablename__ = "token_calibrations"
    model: str = Field(primary_key=True, max_length=200)
    ratio: float
    samples: int
    updated_at: datetime = created_field()
