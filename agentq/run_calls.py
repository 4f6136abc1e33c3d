"""The run-management methods of `agentq.client.Client` (`RunCalls`) and `AsyncClient`
(`AsyncRunCalls`) beyond submit, read and cancel: forking a run from a step
(`POST /api/v1/runs/{id}/fork`). Bodies are the API's request models, so a bad argument raises
pydantic's `ValidationError`, naming the field, before anything is sent; refusals raise `ApiError`
(400 naming `from_step`, 404 for a run the token may not see, 429 over a quota)."""

from __future__ import annotations

from typing import Any, TypeVar

from agentq import routes
from api.responses import SubmittedOut

T = TypeVar("T")


class RunCalls:
    """`Client`'s run-management methods."""

    def _call(self, call: routes.Call[T]) -> T:
        raise NotImplementedError  # `Client._call`

    def fork(self, run_id: int, from_step: str, **fields: Any) -> SubmittedOut:
        """Fork run `run_id` from its step `from_step`: a new run whose steps before it keep
        their results and whose `from_step` and every step waiting for it run anew. `fields`
        are `plan` (`{"steps": [...]}`, replacing them) and `facts` (pinned over the run's)."""
        return self._call(routes.fork(run_id, from_step, **fields))


class AsyncRunCalls:
    """`AsyncClient`'s run-management methods, as `RunCalls`'."""

    async def _call(self, call: routes.Call[T]) -> T:
        raise NotImplementedError  # `AsyncClient._call`

    async def fork(self, run_id: int, from_step: str, **fields: Any) -> SubmittedOut:
        """As `RunCalls.fork`."""
        return await self._call(routes.fork(run_id, from_step, **fields))
