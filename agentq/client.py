"""A Python client of agentq's HTTP API, on httpx: `Client` (sync) and `AsyncClient` (asyncio).

    from agentq.client import Client

    with Client("http://127.0.0.1:8765", token) as agentq:
        run = agentq.submit("Summarise the expense policy", facts={"currency": "EUR"}).run
        done = agentq.wait(run.id, timeout_s=120)
        print(done.status, done.final_result)

`token` is an API token (`agentq token create --name NAME --role submitter --user USER`); the
base URL is the server's (what `agentq up` prints; a trailing `/api/v1` is allowed). Answers are
the API's own response models (`api.responses`); a refusal raises `ApiError` with the HTTP
status and the API's message. `events` and `review_events` follow the server-sent event streams
(`api.streams`), resuming with `Last-Event-ID` after a dropped connection and when the server
ends a stream at its lifetime (`event: reconnect`), so a caller sees one stream with no event
missed or repeated. README, "Python client", has the whole tour.
"""

from __future__ import annotations

import asyncio
import builtins
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any, Final, Self, TypeVar

import httpx
from httpx_sse import aconnect_sse, connect_sse

from agentq import routes
from agentq.memory_calls import AsyncMemoryCalls, MemoryCalls
from agentq.routes import API_PREFIX, ApiError, ReviewOrder, ReviewStatus, StreamItem
from agentq.run_calls import AsyncRunCalls, RunCalls
from agentq.schedule_calls import AsyncScheduleCalls, ScheduleCalls  # issue 32, item 2
from agentq.stream_state import STREAM_READ_TIMEOUT_S, TIMEOUT_S, StreamState, settled
from api.responses import (
    DecisionOut,
    PrincipalOut,
    ReviewOut,
    RunDetail,
    RunOut,
    StepResultOut,
    StreamEventOut,
    SubmittedOut,
)
from api.schemas import Approve, Reject, Respond

__all__ = ["ApiError", "AsyncClient", "Client", "StreamItem"]
T = TypeVar("T")
STATUS_ONLY: Final = 2**31 - 1  # `wait` resumes after the highest id: only status messages


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url.removesuffix(API_PREFIX)


class Client(MemoryCalls, RunCalls, ScheduleCalls):
    """A synchronous client. `timeout_s` bounds each request; a stream may stay silent for
    `stream_read_timeout_s` (the server sends a keep-alive every 15 s by default) before it is
    reconnected. `transport` is httpx's (tests pass one). Use it as a context manager, or call
    `close`. The memory and procedure methods are `agentq.memory_calls.MemoryCalls`', `fork` is
    `agentq.run_calls.RunCalls`'."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = TIMEOUT_S,
        stream_read_timeout_s: float = STREAM_READ_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.stream_read_timeout_s = stream_read_timeout_s
        self._http = httpx.Client(
            base_url=_base(base_url),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            transport=transport,
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, call: routes.Call[T]) -> T:
        return call.answer(self._http.send(call.request(self._http)))

    def me(self) -> PrincipalOut:
        """Who the token acts as."""
        return self._call(routes.me())

    def submit(
        self, goal: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> SubmittedOut:
        """Submit a goal; `fields` are the API's `RunSubmit` fields: `user`, `facts` (key ->
        value), `budgets` (`{"replans", "tokens", "cost_usd", "wall_time_s"}`), `plan`
        (`{"steps": [...]}`), `success_criteria`, `replan_check`, `pin_from_goal`, `approvals`.
        Raises pydantic's `ValidationError` (naming the field) before sending a bad one.

        Sent with an `Idempotency-Key` (`idempotency_key`, else a new UUID 4), and sent again
        after a connection error, a timeout or a 502/503/504 (`routes.sends_again`): the server
        answers a retry with the run the first attempt made. The last error is raised."""
        call, attempt = routes.submit(goal, idempotency_key or str(uuid.uuid4()), **fields), 1
        while True:
            try:
                response = self._http.send(call.request(self._http))
                if not routes.sends_again(attempt, response):
                    return call.answer(response)
            except httpx.TransportError:
                if not routes.sends_again(attempt):
                    raise
            time.sleep(routes.retry_delay_s(attempt))
            attempt += 1

    def get(
        self, run_id: int, *, events_limit: int | None = None, events_before: int | None = None
    ) -> RunDetail:
        """One run whole, with its newest `events_limit` events (the server's default: 200)
        below event id `events_before` (its `events_next_before` reads the page before)."""
        return self._call(routes.get_run(run_id, events_limit, events_before))

    def step_result(self, run_id: int, step_id: int) -> StepResultOut:
        """One step's whole result (a run detail's results over 2 KiB are previews)."""
        return self._call(routes.step_result(run_id, step_id))

    def list(
        self,
        *,
        status: str | None = None,
        user: str | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> builtins.list[RunOut]:
        """Runs newest first (ids below `before`), in `status`, of `user`."""
        return self._call(routes.list_runs(status=status, user=user, before=before, limit=limit))

    def cancel(self, run_id: int) -> RunDetail:
        """Cancel an active run; `ApiError` 409 when it has ended already."""
        return self._call(routes.cancel(run_id))

    def wait(self, run_id: int, *, timeout_s: float = 600, or_review: bool = False) -> RunDetail:
        """Follow the run's stream until its status is final (or, with `or_review`, waiting for
        review) and return the run; `TimeoutError` after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        for item in self._stream(f"/runs/{run_id}/events/stream", STATUS_ONLY, deadline):
            if settled(item, or_review):
                break
        return self.get(run_id)

    def events(self, run_id: int, *, after: int | None = None) -> Iterator[StreamItem]:
        """The run's stream: its status, then each event (ids above `after`, else from the
        first) as it is written, until the run is final."""
        return self._stream(f"/runs/{run_id}/events/stream", after, None)

    def review_events(self, *, after: int | None = None) -> Iterator[StreamEventOut]:
        """Every `escalation.*` event from now on (or after `after`); it never ends by itself."""
        for item in self._stream("/reviews/stream", after, None):
            if isinstance(item, StreamEventOut):
                yield item

    def _stream(self, path: str, after: int | None, deadline: float | None) -> Iterator[Any]:
        state = StreamState(after, deadline)
        while True:
            last = ""  # the event of the last message before the server closed the stream
            try:
                with connect_sse(
                    self._http,
                    "GET",
                    API_PREFIX + path,
                    headers=routes.resume_headers(state.last_id),
                    timeout=state.timeout(self.stream_read_timeout_s),
                ) as source:
                    if not source.response.is_success:
                        source.response.read()
                        raise ApiError.of(source.response)
                    for sse in source.iter_sse():
                        if (item := state.seen(sse)) is not None:
                            yield item
                        last = sse.event
                        if last in ("end", "reconnect"):
                            break
            except httpx.TransportError as exc:
                time.sleep(state.failed(exc))
                continue
            wait_s = state.ended(last)
            if wait_s is None:
                return
            time.sleep(wait_s)

    def reviews(
        self,
        *,
        status: ReviewStatus = "undecided",
        mine: bool = False,
        limit: int = 100,
        order: ReviewOrder = "oldest",
    ) -> builtins.list[ReviewOut]:
        """The review queue, oldest first unless `order="newest"` (reviewer or admin)."""
        return self._call(routes.reviews(status, mine, limit, order))

    def review(self, escalation_id: int) -> ReviewOut:
        return self._call(routes.review(escalation_id))

    def claim(self, escalation_id: int | None = None) -> ReviewOut | None:
        """Claim this escalation, or the oldest open one (None when the queue is empty)."""
        return self._call(routes.claim(escalation_id))

    def release(self, escalation_id: int) -> ReviewOut:
        return self._call(routes.release(escalation_id))

    def approve(self, escalation_id: int, **fields: Any) -> DecisionOut:
        """Retry the failed step once more (or re-plan, or carry on); `fields`: `comment`,
        `budget` (the new limits, `{"tokens": N, ...}`; the answer's `said` states them)."""
        return self._call(routes.decide(escalation_id, Approve.model_validate(fields)))

    def reject(self, escalation_id: int, *, comment: str) -> DecisionOut:
        """End the run `failed`, with the comment."""
        return self._call(routes.decide(escalation_id, Reject(comment=comment)))

    def respond(self, escalation_id: int, answer: Any, **fields: Any) -> DecisionOut:
        """Answer in the failed step's place; `fields`: `comment`, `remember`."""
        return self._call(routes.decide(escalation_id, Respond(answer=answer, **fields)))

    def edit(
        self, escalation_id: int, plan: dict[str, Any] | None = None, **fields: Any
    ) -> DecisionOut:
        """Replace the steps not run yet with `plan` (`{"steps": [...]}`), or, for an
        `approval_required` escalation, the gated call's arguments with `arguments={...}`;
        `fields`: `arguments`, `comment`."""
        return self._call(routes.decide(escalation_id, routes.edit_body(plan, fields)))


class AsyncClient(AsyncMemoryCalls, AsyncRunCalls, AsyncScheduleCalls):
    """`Client` for asyncio: the same methods, each a coroutine (`events` and `review_events`
    are async iterators). Use it as an async context manager, or await `aclose`."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = TIMEOUT_S,
        stream_read_timeout_s: float = STREAM_READ_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.stream_read_timeout_s = stream_read_timeout_s
        self._http = httpx.AsyncClient(
            base_url=_base(base_url),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, call: routes.Call[T]) -> T:
        return call.answer(await self._http.send(call.request(self._http)))

    async def me(self) -> PrincipalOut:
        return await self._call(routes.me())

    async def submit(
        self, goal: str, *, idempotency_key: str | None = None, **fields: Any
    ) -> SubmittedOut:
        """As `Client.submit`, retries included."""
        call, attempt = routes.submit(goal, idempotency_key or str(uuid.uuid4()), **fields), 1
        while True:
            try:
                response = await self._http.send(call.request(self._http))
                if not routes.sends_again(attempt, response):
                    return call.answer(response)
            except httpx.TransportError:
                if not routes.sends_again(attempt):
                    raise
            await asyncio.sleep(routes.retry_delay_s(attempt))
            attempt += 1

    async def get(
        self, run_id: int, *, events_limit: int | None = None, events_before: int | None = None
    ) -> RunDetail:
        return await self._call(routes.get_run(run_id, events_limit, events_before))

    async def step_result(self, run_id: int, step_id: int) -> StepResultOut:
        return await self._call(routes.step_result(run_id, step_id))

    async def list(
        self,
        *,
        status: str | None = None,
        user: str | None = None,
        before: int | None = None,
        limit: int = 50,
    ) -> builtins.list[RunOut]:
        call = routes.list_runs(status=status, user=user, before=before, limit=limit)
        return await self._call(call)

    async def cancel(self, run_id: int) -> RunDetail:
        return await self._call(routes.cancel(run_id))

    async def wait(
        self, run_id: int, *, timeout_s: float = 600, or_review: bool = False
    ) -> RunDetail:
        """As `Client.wait`."""
        deadline = time.monotonic() + timeout_s
        async for item in self._stream(f"/runs/{run_id}/events/stream", STATUS_ONLY, deadline):
            if settled(item, or_review):
                break
        return await self.get(run_id)

    def events(self, run_id: int, *, after: int | None = None) -> AsyncIterator[StreamItem]:
        """As `Client.events`."""
        return self._stream(f"/runs/{run_id}/events/stream", after, None)

    async def review_events(self, *, after: int | None = None) -> AsyncIterator[StreamEventOut]:
        """As `Client.review_events`."""
        async for item in self._stream("/reviews/stream", after, None):
            if isinstance(item, StreamEventOut):
                yield item

    async def _stream(
        self, path: str, after: int | None, deadline: float | None
    ) -> AsyncIterator[Any]:
        state = StreamState(after, deadline)
        while True:
            last = ""  # the event of the last message before the server closed the stream
            try:
                async with aconnect_sse(
                    self._http,
                    "GET",
                    API_PREFIX + path,
                    headers=routes.resume_headers(state.last_id),
                    timeout=state.timeout(self.stream_read_timeout_s),
                ) as source:
                    if not source.response.is_success:
                        await source.response.aread()
                        raise ApiError.of(source.response)
                    async for sse in source.aiter_sse():
                        if (item := state.seen(sse)) is not None:
                            yield item
                        last = sse.event
                        if last in ("end", "reconnect"):
                            break
            except httpx.TransportError as exc:
                await asyncio.sleep(state.failed(exc))
                continue
            wait_s = state.ended(last)
            if wait_s is None:
                return
            await asyncio.sleep(wait_s)

    async def reviews(
        self,
        *,
        status: ReviewStatus = "undecided",
        mine: bool = False,
        limit: int = 100,
        order: ReviewOrder = "oldest",
    ) -> builtins.list[ReviewOut]:
        return await self._call(routes.reviews(status, mine, limit, order))

    async def review(self, escalation_id: int) -> ReviewOut:
        return await self._call(routes.review(escalation_id))

    async def claim(self, escalation_id: int | None = None) -> ReviewOut | None:
        return await self._call(routes.claim(escalation_id))

    async def release(self, escalation_id: int) -> ReviewOut:
        return await self._call(routes.release(escalation_id))

    async def approve(self, escalation_id: int, **fields: Any) -> DecisionOut:
        return await self._call(routes.decide(escalation_id, Approve.model_validate(fields)))

    async def reject(self, escalation_id: int, *, comment: str) -> DecisionOut:
        return await self._call(routes.decide(escalation_id, Reject(comment=comment)))

    async def respond(self, escalation_id: int, answer: Any, **fields: Any) -> DecisionOut:
        return await self._call(routes.decide(escalation_id, Respond(answer=answer, **fields)))

    async def edit(
        self, escalation_id: int, plan: dict[str, Any] | None = None, **fields: Any
    ) -> DecisionOut:
        return await self._call(routes.decide(escalation_id, routes.edit_body(plan, fields)))
