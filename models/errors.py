"""The one exception tree of agentq.

Every error agentq raises on purpose is an `AgentqError`. A subclass's docstring is its default
message (the pattern of procrastinate/exceptions.py), so `raise StepNotFound()` still says
something useful, and `raise StepNotFound("step 7 of run 3")` says more.
"""

from __future__ import annotations


class AgentqError(Exception):
    """agentq failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigurationError(AgentqError):
    """A setting is invalid."""


class NotFound(AgentqError):
    """The row does not exist."""


class IllegalTransition(AgentqError):
    """A guarded state transition found the row in another state and changed nothing."""

    def __init__(self, table: str, row_id: int, found: str | None, expected: str) -> None:
        self.table, self.row_id, self.found, self.expected = table, row_id, found, expected
        noun = _ROW_NOUNS.get(table, table)
        state = "does not exist" if found is None else f"is {found!r}"
        super().__init__(f"{noun} {row_id} {state}, not {expected}; nothing was changed")


_ROW_NOUNS = {"runs": "run", "steps": "step", "escalations": "escalation", "api_tokens": "token"}


class StepNotDue(IllegalTransition):
    """A queued step's message arrived before the step is due (`steps.queued_at`, set by a retry's
    backoff or a rate limit's retry-after): the broker redelivered it early (kombu#337), or the
    clocks differ. Nothing changed; send it again after `due_in_s` seconds."""

    def __init__(self, step_id: int, *, due_in_s: float) -> None:
        super().__init__("steps", step_id, "queued", f"due for {due_in_s:.1f} s more")
        self.due_in_s = due_in_s


class ClaimedByAnother(AgentqError):
    """Another reviewer has claimed this escalation."""

    holder: str | None = (
        None  # who holds the claim, when the raiser looked (`models.front.commands`)
    )


class Conflict(AgentqError):
    """The request is valid but conflicts with the current state of the rows; nothing was
    changed (an HTTP 409)."""


class NotAllowed(AgentqError):
    """The caller may not do this (its role, or not for this user); nothing was changed."""


class InvalidInput(AgentqError):
    """A value given to agentq is not allowed; the message names the field and what is."""


class UserQuotaExceeded(AgentqError):
    """The user's quota refuses this submission for now; nothing was written.

    `setting` names the limit (`AGENTQ_USER_MAX_ACTIVE_RUNS`, `AGENTQ_USER_SUBMITS_PER_MINUTE`)
    and `retry_after_s` (whole seconds, at least 1) is when trying again may pass: the HTTP API
    answers 429 with it as `Retry-After`. Not `QuotaExhausted`, which is the model provider's.
    """

    def __init__(self, message: str | None = None, *, setting: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.setting = setting
        self.retry_after_s = retry_after_s


class TokenLimitExceeded(AgentqError):
    """The token has reached a limit of the API for now (its open event streams, or its costly
    reads a minute); nothing was done.

    `setting` names the limit (`AGENTQ_STREAM_MAX_PER_TOKEN`, `AGENTQ_COSTLY_READS_PER_MINUTE`)
    and `retry_after_s` (whole seconds, at least 1) is when trying again may pass: the HTTP API
    answers 429 with it as `Retry-After`.
    """

    def __init__(self, message: str | None = None, *, setting: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.setting = setting
        self.retry_after_s = retry_after_s


class BrokerUnavailable(AgentqError):
    """The message broker could not be reached; Postgres still holds the truth."""


class DatabaseError(AgentqError):
    """The database refused or failed a statement.

    `dropped`: the connection itself was lost (a server restart, a proxy's idle timeout), so
    the transaction rolled back and the same unit of work may be run again
    (`models.db.retry_dropped`)."""

    def __init__(self, message: str | None = None, *, dropped: bool = False) -> None:
        super().__init__(message)
        self.dropped = dropped


class DatabaseUnavailable(DatabaseError):
    """The database could not be used at all for now: the connection was refused, dropped, or
    the server is starting up or shutting down (`models.db.unavailable`). Nothing of the unit of
    work that met it was committed, unless the connection dropped during its COMMIT; a task
    sends itself again rather than be acknowledged as done
    (`models.engine.queue.OUTAGE_RETRIES`)."""


class BudgetExhausted(AgentqError):
    """A run's budget has no room left for this charge."""

    reason = "budget_spent"  # the escalation reason when this ends a run's progress


class TokenBudgetSpent(BudgetExhausted):
    """A run's token budget has no room left for this model call."""

    reason = "token_budget_spent"


class CostBudgetSpent(BudgetExhausted):
    """A run's cost budget has no room left for this model call."""

    reason = "cost_budget_spent"


class StepDataBudgetSpent(BudgetExhausted):
    """A run's step-data budget has no room left for this step's data (`models.engine.storage`)."""

    reason = "step_data_budget_spent"


class UserStepDataSpent(BudgetExhausted):
    """A user's runs hold all the step data they may (`AGENTQ_USER_STEP_DATA_MAX_BYTES`)."""

    reason = "user_step_data_spent"


class InvalidPlan(AgentqError):
    """A plan (from a model, a reviewer or a user) does not validate."""


class PlanConflict(InvalidPlan):
    """A plan is valid in itself but clashes with the run's state: a new step takes the name of
    a step that already succeeded (an HTTP 409, where a plan wrong in itself is a 400)."""


class ToolError(AgentqError):
    """A tool failed; retrying the same call will not help."""


class RetryableToolError(ToolError):
    """A tool failed in a way that may pass on a later attempt (a timeout, a 503)."""


class ToolArgumentsError(ToolError):
    """A tool was called with arguments that do not match its signature."""


class ToolNotEnabled(ToolError):
    """The tool is not one this process offers (`AGENTQ_TOOL_MODULES`); it never runs."""


class ToolCrashed(ToolError):
    """A tool raised something other than agentq's own tool errors (a bug, an `OSError`).

    The message names only the tool and the exception's type: the exception's own text can hold
    host paths or other internals, so it goes to the worker's log (with the traceback) only.
    """

    def __init__(self, tool: str, exc: BaseException) -> None:
        super().__init__(
            f"tool {tool!r} failed with an internal error ({type(exc).__name__}); "
            "see the worker log"
        )


class McpServerUnavailable(RetryableToolError):
    """An MCP server (`AGENTQ_MCP_SERVERS`) could not be started or reached, initialized and
    listed; its tool did not run. Retried: a server being restarted may answer later."""


class McpConnectionLost(RetryableToolError):
    """The connection to an MCP server closed during a call (the server crashed, or went away):
    the call may or may not have taken effect. Retried, with the same idempotency key in its
    `_meta`, on a new session."""


class McpCallTimedOut(RetryableToolError):
    """An MCP tool did not answer within the time its step had left; it may have taken effect.
    Retried, with the same idempotency key in its `_meta`."""


class McpToolFailed(ToolError):
    """An MCP tool answered with an error (`isError`), or its server refused the call (a
    JSON-RPC error) or answered what cannot be read. Not retried: the same call would get the
    same answer."""


class StepDataTooLarge(ToolError):
    """A step's resolved arguments or its result are larger than `AGENTQ_STEP_DATA_MAX_BYTES`.

    Not retryable: the same step would build the same data again.
    """


class InvalidStepOutput(ToolError):
    """A model step's answer does not fit the fields its plan declares (`output`); nothing of it
    was stored. Not retried as it is: the model is re-asked with the reason, a bounded number of
    times, then the step fails and the coordinator replans or escalates."""


class InvalidToolCalls(ToolError):
    """A model kept calling tools with arguments that are not JSON or do not match the tool's
    schema; the tool never ran on them. `raw` holds the last calls as the model wrote them."""

    reason = "invalid_tool_call"

    def __init__(self, message: str | None = None, *, raw: str = "") -> None:
        super().__init__(message)
        self.raw = raw


class ProviderError(AgentqError):
    """The model provider failed."""


class ProviderUnavailable(ProviderError):
    """The model provider failed in a way that may pass on a later attempt (a timeout, a 5xx, a
    dropped connection)."""


class RateLimited(ProviderError):
    """The model provider refused the request for now (HTTP 429); try again after `retry_after_s`.

    Never waited out in a worker: the task is sent again with a countdown of `retry_after_s`.
    """

    def __init__(self, message: str | None = None, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QuotaExhausted(ProviderError):
    """The model provider's account has no quota left (HTTP 429 `insufficient_quota`); retrying
    will not help until a person acts, so the run escalates."""

    reason = "quota_exhausted"


class ContextTooLong(ProviderError):
    """The model server refused the request as longer than its context window (an HTTP 400, sent
    before anything was generated, so nothing is charged).

    `server_message` is the server's own words; `context_tokens` (the window) and `prompt_tokens`
    (the prompt, in the server's tokens) are what it said of them, None when it did not. Never
    retried as it was: the request is rebuilt smaller once, and a second refusal is a context
    overflow (`worker.model_calls.refits`)."""

    def __init__(
        self,
        message: str | None = None,
        *,
        server_message: str = "",
        context_tokens: int | None = None,
        prompt_tokens: int | None = None,
    ) -> None:
        super().__init__(message)
        self.server_message = server_message
        self.context_tokens = context_tokens
        self.prompt_tokens = prompt_tokens


class ContextOverflow(AgentqError):
    """The never-trimmed layers (instructions, run state, task, the last turns, the ledger at
    its smallest) exceed the budget (`worker.memory.context`), or the server refused the request as
    too long again after one smaller rebuild (`worker.model_calls.refits`)."""

    reason = "context_overflow"  # the escalation reason when this ends a run's progress


class StackError(AgentqError):
    """The embedded local stack (Postgres, Redis, Celery workers) could not start."""


class PhaseNotDue(AgentqError):
    """A deferred phase's task arrived before the phase is due again (`models.engine.phases`): the
    broker redelivered it early, or clocks differ. Send it again after `due_in_s` seconds."""

    def __init__(self, run_id: int, *, due_in_s: float) -> None:
        super().__init__(f"run {run_id}: its phase is due in {due_in_s:.1f} s")
        self.due_in_s = due_in_s


class IdempotencyKeyReused(Conflict):
    """This Idempotency-Key was sent before with another request; nothing was written. Send a
    new key with a new request (`models.engine.idempotency`)."""
