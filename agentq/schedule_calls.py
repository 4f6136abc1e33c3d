"""The schedule methods of `agentq.client.Client` (`ScheduleCalls`) and `AsyncClient`
(`AsyncScheduleCalls`): `/api/v1/schedules`, goals on a schedule. Each sends one
`agentq.routes.Call`; the body is the API's `ScheduleCreate`, so a bad argument raises
pydantic's `ValidationError`, naming the field, before anything is sent. Refusals raise `ApiError`
(400 for a cron expression, time zone or interval not allowed, 404 for a schedule the token may
not see, 409 for a name taken or a pause of a paused schedule)."""

from __future__ import annotations

import builtins
from typing import Any, TypeVar

from agentq import routes
from agentq.routes import Call, model, models
from api.responses import ScheduleOut
from api.schemas import ScheduleCreate

T = TypeVar("T")


def add_schedule(name: str, goal: str, fields: dict[str, Any]) -> Call[ScheduleOut]:
    """`POST /schedules`: `fields` are `ScheduleCreate`'s (cron, timezone, every_s, overlap,
    catch_up, and `RunSubmit`'s: user, facts, budgets, plan, success_criteria, ...)."""
    body = ScheduleCreate(name=name, goal=goal, **fields)
    return Call("POST", "/schedules", model(ScheduleOut), body=body)


def schedules(user: str | None) -> Call[list[ScheduleOut]]:
    return Call("GET", "/schedules", models(ScheduleOut), {"user": user})


def schedule(schedule_id: int, action: str = "") -> Call[ScheduleOut]:
    """`GET /schedules/{id}`, or `POST .../{action}` (pause, resume)."""
    path = f"/schedules/{schedule_id}" + (f"/{action}" if action else "")
    return Call("POST" if action else "GET", path, model(ScheduleOut))


def remove_schedule(schedule_id: int) -> Call[ScheduleOut]:
    return Call("DELETE", f"/schedules/{schedule_id}", model(ScheduleOut))


class ScheduleCalls:
    """`Client`'s schedule methods."""

    def _call(self, call: routes.Call[T]) -> T:
        raise NotImplementedError  # `Client._call`

    def add_schedule(self, name: str, goal: str, **fields: Any) -> ScheduleOut:
        """Put `goal` on a schedule named `name`: `cron` (with `timezone`) or `every_s`, and
        any field of a submit (`user`, `facts`, `budgets`, `plan`, ...), `overlap` (`skip` or
        `allow`), `catch_up`."""
        return self._call(add_schedule(name, goal, fields))

    def schedules(self, *, user: str | None = None) -> builtins.list[ScheduleOut]:
        """The schedules the token may see, each with its next due time and newest fires."""
        return self._call(schedules(user))

    def schedule(self, schedule_id: int) -> ScheduleOut:
        return self._call(schedule(schedule_id))

    def pause_schedule(self, schedule_id: int) -> ScheduleOut:
        return self._call(schedule(schedule_id, "pause"))

    def resume_schedule(self, schedule_id: int) -> ScheduleOut:
        """Fires again from its first due time after now (no burst)."""
        return self._call(schedule(schedule_id, "resume"))

    def remove_schedule(self, schedule_id: int) -> ScheduleOut:
        return self._call(remove_schedule(schedule_id))


class AsyncScheduleCalls:
    """`AsyncClient`'s schedule methods: as `ScheduleCalls`, each a coroutine."""

    async def _call(self, call: routes.Call[T]) -> T:
        raise NotImplementedError  # `AsyncClient._call`

    async def add_schedule(self, name: str, goal: str, **fields: Any) -> ScheduleOut:
        return await self._call(add_schedule(name, goal, fields))

    async def schedules(self, *, user: str | None = None) -> builtins.list[ScheduleOut]:
        return await self._call(schedules(user))

    async def schedule(self, schedule_id: int) -> ScheduleOut:
        return await self._call(schedule(schedule_id))

    async def pause_schedule(self, schedule_id: int) -> ScheduleOut:
        return await self._call(schedule(schedule_id, "pause"))

    async def resume_schedule(self, schedule_id: int) -> ScheduleOut:
        return await self._call(schedule(schedule_id, "resume"))

    async def remove_schedule(self, schedule_id: int) -> ScheduleOut:
        return await self._call(remove_schedule(schedule_id))
