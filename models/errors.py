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


class ClaimedByAnother(AgentqError):
    """Another reviewer has claimed this escalation."""


class InvalidInput(AgentqError):
    """A value given to agentq is not allowed; the message names the field and what is."""


class BrokerUnavailable(AgentqError):
    """The message broker could not be reached; Postgres still holds the truth."""


class DatabaseError(AgentqError):
    """The database refused or failed a statement."""


class BudgetExhausted(AgentqError):
    """A run's budget has no room left for this charge."""

    reason = "budget_spent"  # the escalation reason when this ends a run's progress


class TokenBudgetSpent(BudgetExhausted):
    """A run's token budget has no room left for this model call."""

    reason = "token_budget_spent"


class CostBudgetSpent(BudgetExhausted):
    """A run's cost budget has no room left for this model call."""

    reason = "cost_budget_spent"


class InvalidPlan(AgentqError):
    """A plan (from a model, a reviewer or a user) does not validate."""


class ToolError(AgentqError):
    """A tool failed; retrying the same call will not help."""


class RetryableToolError(ToolError):
    """A tool failed in a way that may pass on a later attempt (a timeout, a 503)."""


class ToolArgumentsError(ToolError):
    """A tool was called with arguments that do not match its signature."""


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


class StackError(AgentqError):
    """The embedded local stack (Postgres, Redis, Celery workers) could not start."""
