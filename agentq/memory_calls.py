"""The memory and procedure methods of `agentq.client.Client` (`MemoryCalls`) and `AsyncClient`
(`AsyncMemoryCalls`): `/api/v1/memory` (a user's facts, search, deleting and forgetting) and
`/api/v1/procedures` (procedural memory). Each sends one `agentq.routes` call; bodies are the
API's request models, so a bad argument raises pydantic's `ValidationError`, naming the field,
before anything is sent. Refusals raise `ApiError` (403 for another user's memory from a
submitter token, 404 for a row the token may not see, 409 for an edit that lost a race)."""

from __future__ import annotations

import builtins
from typing import Any, TypeVar

from agentq import routes
from api.responses import DeletedOut, FactOut, ForgetOut, ProcedureDetail, ProcedureOut, SearchOut

T = TypeVar("T")


class MemoryCalls:
    """`Client`'s memory and procedure methods."""

    def _call(self, call: routes.Call[T]) -> T:
        raise NotImplementedError  # `Client._call`

    def facts(self, *, user: str | None = None, history: bool = False) -> builtins.list[FactOut]:
        """The user's current facts (a submitter token's own user when `user` is None), oldest
        first; with `history`, every version."""
        return self._call(routes.facts(user, history))

    def search_memory(self, query: str, *, user: str | None = None) -> SearchOut:
        """Hybrid recall over the user's facts and episodes, each list highest `score` first."""
        return self._call(routes.search_memory(query, user))

    def forget(self, **fields: Any) -> ForgetOut:
        """Delete all of a user's memory; `fields`: `user`, `cancel_runs`, `runs` (the API's
        `Forget`). Final."""
        return self._call(routes.forget(**fields))

    def delete_fact(self, fact_id: int) -> DeletedOut:
        """Delete one fact with the versions it superseded."""
        return self._call(routes.delete_fact(fact_id))

    def delete_episode(self, episode_id: int) -> DeletedOut:
        return self._call(routes.delete_episode(episode_id))

    def procedures(
        self, *, scope: str | None = None, user: str | None = None
    ) -> builtins.list[ProcedureOut]:
        """The procedures the token may read, newest first; `scope`: everyone, user or tool."""
        return self._call(routes.procedures(scope, user))

    def add_procedure(self, **fields: Any) -> ProcedureOut:
        """Add a procedure: `title`, `when_to_use`, `scope` (everyone, user, tool), `body`
        and/or `plan_template` (`{"steps": [...]}`), `user` (scope user) or `tool` (scope
        tool)."""
        return self._call(routes.add_procedure(fields))

    def procedure(self, procedure_id: int) -> ProcedureDetail:
        """One procedure with every version, oldest first."""
        return self._call(routes.procedure(procedure_id))

    def edit_procedure(
        self, procedure_id: int, *, expected_version: int | None = None, **changes: Any
    ) -> ProcedureOut:
        """Write a new version with `changes` (`ProcedureChange`'s fields; None clears
        `plan_template`, `user` or `tool`); `ApiError` 409 unless at `expected_version`."""
        return self._call(routes.edit_procedure(procedure_id, expected_version, changes))

    def delete_procedure(self, procedure_id: int) -> ProcedureOut:
        return self._call(routes.delete_procedure(procedure_id))

    def save_procedure(self, run_id: int, **fields: Any) -> ProcedureOut:
        """A succeeded run's final plan as a procedure; `fields`: `title`, `scope`, `tool`."""
        return self._call(routes.save_procedure(run_id, **fields))


class AsyncMemoryCalls:
    """`AsyncClient`'s memory and procedure methods: as `MemoryCalls`, each a coroutine."""

    async def _call(self, call: routes.Call[T]) -> T:
        raise NotImplementedError  # `AsyncClient._call`

    async def facts(
        self, *, user: str | None = None, history: bool = False
    ) -> builtins.list[FactOut]:
        return await self._call(routes.facts(user, history))

    async def search_memory(self, query: str, *, user: str | None = None) -> SearchOut:
        return await self._call(routes.search_memory(query, user))

    async def forget(self, **fields: Any) -> ForgetOut:
        return await self._call(routes.forget(**fields))

    async def delete_fact(self, fact_id: int) -> DeletedOut:
        return await self._call(routes.delete_fact(fact_id))

    async def delete_episode(self, episode_id: int) -> DeletedOut:
        return await self._call(routes.delete_episode(episode_id))

    async def procedures(
        self, *, scope: str | None = None, user: str | None = None
    ) -> builtins.list[ProcedureOut]:
        return await self._call(routes.procedures(scope, user))

    async def add_procedure(self, **fields: Any) -> ProcedureOut:
        return await self._call(routes.add_procedure(fields))

    async def procedure(self, procedure_id: int) -> ProcedureDetail:
        return await self._call(routes.procedure(procedure_id))

    async def edit_procedure(
        self, procedure_id: int, *, expected_version: int | None = None, **changes: Any
    ) -> ProcedureOut:
        return await self._call(routes.edit_procedure(procedure_id, expected_version, changes))

    async def delete_procedure(self, procedure_id: int) -> ProcedureOut:
        return await self._call(routes.delete_procedure(procedure_id))

    async def save_procedure(self, run_id: int, **fields: Any) -> ProcedureOut:
        return await self._call(routes.save_procedure(run_id, **fields))
