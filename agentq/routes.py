"""The HTTP API's routes as data: what `agentq.client.Client` and `AsyncClient` send, and how
each answer is read.

Each function builds one `Call`: its method, path (under `/api/v1`), query, body (made with
the API's own request models, `api.schemas`, so a bad argument fails here with pydantic's
message naming the field) and the parser of its answer (the API's response models,
`api.responses`). The two clients only send calls, so the sync and async ones cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter

from api.responses import (
    DecisionOut,
    DeletedOut,
    FactOut,
    ForgetOut,
    PrincipalOut,
    ProcedureDetail,
    ProcedureOut,
    ReviewOut,
    RunDetail,
    RunOut,
    RunStatusOut,
    SearchOut,
    StepResultOut,
    StreamEventOut,
    SubmittedOut,
)
from api.schemas import (
    Approve,
    Edit,
    Forget,
    NewProcedure,
    ProcedureChange,
    Reject,
    Respond,
    RunFork,
    RunSubmit,
    SaveFromRun,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
API_PREFIX = "/api/v1"
FINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})  # models.states.RUN_TERMINAL
ReviewStatus = Literal["undecided", "open", "claimed", "decided", "all"]
ReviewOrder = Literal["oldest", "newest"]
# A submit is sent again, with the same Idempotency-Key, after a connection error, a timeout or
# one of these answers (the server or a proxy in front of it could not answer: 503 is also the
# API's "database busy"), at most SUBMIT_ATTEMPTS times in all.
SUBMIT_ATTEMPTS = 3
RETRY_STATUSES = frozenset({502, 503, 504})
StreamItem = RunStatusOut | StreamEventOut
"""What a run's stream yields: a `RunStatusOut` first and at each change of status (the last one
final), and a `StreamEventOut` for each timeline event."""
NEW_PROCEDURE: TypeAdapter[NewProcedure] = TypeAdapter(NewProcedure)
# Every operation of the API (its OpenAPI method and path, under API_PREFIX) -> the method of
# `Client` and `AsyncClient` that sends it. tests/unit/test_client_routes.py checks it against
# the served spec both ways, so an operation added to the API without a client method fails.
OPERATIONS: dict[tuple[str, str], str] = {
    ("GET", "/me"): "me",
    ("POST", "/runs"): "submit",
    ("GET", "/runs"): "list",
    ("GET", "/runs/{run_id}"): "get",
    ("GET", "/runs/{run_id}/steps/{step_id}/result"): "step_result",
    ("POST", "/runs/{run_id}/cancel"): "cancel",
    ("POST", "/runs/{run_id}/fork"): "fork",
    ("GET", "/runs/{run_id}/events/stream"): "events",  # `wait` follows it too
    ("GET", "/reviews"): "reviews",
    ("GET", "/reviews/{escalation_id}"): "review",
    ("POST", "/reviews/claim"): "claim",  # claim() with no id: the oldest open one
    ("POST", "/reviews/{escalation_id}/claim"): "claim",
    ("POST", "/reviews/{escalation_id}/release"): "release",
    ("POST", "/reviews/{escalation_id}/approve"): "approve",
    ("POST", "/reviews/{escalation_id}/reject"): "reject",
    ("POST", "/reviews/{escalation_id}/respond"): "respond",
    ("POST", "/reviews/{escalation_id}/edit"): "edit",
    ("GET", "/reviews/stream"): "review_events",
    ("GET", "/memory/facts"): "facts",
    ("GET", "/memory/search"): "search_memory",
    ("POST", "/memory/forget"): "forget",
    ("DELETE", "/memory/facts/{fact_id}"): "delete_fact",
    ("DELETE", "/memory/episodes/{episode_id}"): "delete_episode",
    ("GET", "/procedures"): "procedures",
    ("POST", "/procedures"): "add_procedure",
    ("GET", "/procedures/{procedure_id}"): "procedure",
    ("PATCH", "/procedures/{procedure_id}"): "edit_procedure",
    ("DELETE", "/procedures/{procedure_id}"): "delete_procedure",
    ("POST", "/procedures/from-run/{run_id}"): "save_procedure",
    # goals on a schedule: agentq.schedule_calls
    ("POST", "/schedules"): "add_schedule",
    ("GET", "/schedules"): "schedules",
    ("GET", "/schedules/{schedule_id}"): "schedule",
    ("POST", "/schedules/{schedule_id}/pause"): "pause_schedule",
    ("POST", "/schedules/{schedule_id}/resume"): "resume_schedule",
    ("DELETE", "/schedules/{schedule_id}"): "remove_schedule",
}


class ApiError(Exception):
    """The API refused a request: `status` is the HTTP status, `detail` the API's message (for
    a 422, FastAPI's list of field errors), `error` its kind (`NotFound`, `IllegalTransition`,
    ...; empty when the answer was not the API's JSON)."""

    def __init__(self, status: int, detail: Any, error: str = "") -> None:
        super().__init__(f"{status} {error or 'error'}: {detail}")
        self.status, self.detail, self.error = status, detail, error

    @classmethod
    def of(cls, response: httpx.Response) -> ApiError:
        """The error of a refused response."""
        try:
            body = response.json()
        except json.JSONDecodeError:
            return cls(response.status_code, response.text)
        if isinstance(body, dict) and "detail" in body:
            return cls(response.status_code, body["detail"], str(body.get("error", "")))
        return cls(response.status_code, body)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer (`parse` gets a 2xx response)."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    body: BaseModel | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        """The request, built on `http` (its base URL, token and timeouts)."""
        content = None if self.body is None else self.body.model_dump_json(exclude_unset=True)
        headers = {"Content-Type": "application/json", **self.headers} if content else None
        params = {k: v for k, v in self.params.items() if v is not None}
        return http.build_request(
            self.method, API_PREFIX + self.path, params=params, content=content, headers=headers
        )

    def answer(self, response: httpx.Response) -> T:
        """The parsed answer; raises `ApiError` unless the status is 2xx."""
        if not response.is_success:
            raise ApiError.of(response)
        return self.parse(response)


def model(kind: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: kind.model_validate_json(response.content)


def models(kind: type[M]) -> Callable[[httpx.Response], list[M]]:
    adapter = TypeAdapter(list[kind])  # type: ignore[valid-type]
    return lambda response: list(adapter.validate_json(response.content))


def review_or_none(response: httpx.Response) -> ReviewOut | None:
    """204: the queue had nothing to claim."""
    return None if response.status_code == 204 else ReviewOut.model_validate_json(response.content)


def submit(goal: str, idempotency_key: str, **fields: Any) -> Call[SubmittedOut]:
    """`POST /runs` with `Idempotency-Key: idempotency_key`: `fields` are `RunSubmit`'s (user,
    facts, budgets, plan, success_criteria, replan_check, pin_from_goal, approvals)."""
    body = RunSubmit(goal=goal, **fields)
    headers = {"Idempotency-Key": idempotency_key}
    return Call("POST", "/runs", model(SubmittedOut), body=body, headers=headers)


def fork(run_id: int, from_step: str, **fields: Any) -> Call[SubmittedOut]:
    """`POST /runs/{run_id}/fork`: `fields` are `RunFork`'s (plan, facts)."""
    body = RunFork(from_step=from_step, **fields)
    return Call("POST", f"/runs/{run_id}/fork", model(SubmittedOut), body=body)


def retry_delay_s(attempt: int) -> float:
    """The wait after failed submit attempt `attempt` (1-based): 0.5 s, doubling."""
    return 0.5 * float(2 ** (attempt - 1))


def sends_again(attempt: int, response: httpx.Response | None = None) -> bool:
    """Whether submit attempt `attempt` (1-based), which got no answer (`response` None: a
    connection error or a timeout) or `response`, is sent again: when it got no answer or one
    of `RETRY_STATUSES`, and fewer than `SUBMIT_ATTEMPTS` were sent."""
    failed = response is None or response.status_code in RETRY_STATUSES
    return failed and attempt < SUBMIT_ATTEMPTS


def get_run(
    run_id: int, events_limit: int | None = None, events_before: int | None = None
) -> Call[RunDetail]:
    params = {"events_limit": events_limit, "events_before": events_before}
    return Call("GET", f"/runs/{run_id}", model(RunDetail), params)


def step_result(run_id: int, step_id: int) -> Call[StepResultOut]:
    return Call("GET", f"/runs/{run_id}/steps/{step_id}/result", model(StepResultOut))


def list_runs(**params: Any) -> Call[list[RunOut]]:
    return Call("GET", "/runs", models(RunOut), params)


def cancel(run_id: int) -> Call[RunDetail]:
    return Call("POST", f"/runs/{run_id}/cancel", model(RunDetail))


def me() -> Call[PrincipalOut]:
    return Call("GET", "/me", model(PrincipalOut))


def reviews(
    status: ReviewStatus, mine: bool, limit: int, order: ReviewOrder = "oldest"
) -> Call[list[ReviewOut]]:
    params = {"status": status, "mine": str(mine).lower(), "limit": limit, "order": order}
    return Call("GET", "/reviews", models(ReviewOut), params)


def review(escalation_id: int) -> Call[ReviewOut]:
    return Call("GET", f"/reviews/{escalation_id}", model(ReviewOut))


def claim(escalation_id: int | None) -> Call[ReviewOut | None]:
    """Claim this escalation, or (None) the oldest open one: None when there is none."""
    path = "/reviews/claim" if escalation_id is None else f"/reviews/{escalation_id}/claim"
    return Call("POST", path, review_or_none)


def release(escalation_id: int) -> Call[ReviewOut]:
    return Call("POST", f"/reviews/{escalation_id}/release", model(ReviewOut))


def decide(escalation_id: int, body: Approve | Reject | Respond | Edit) -> Call[DecisionOut]:
    """A decision; its route is named by the body's kind (`Approve` -> `/approve`)."""
    action = type(body).__name__.lower()
    return Call("POST", f"/reviews/{escalation_id}/{action}", model(DecisionOut), body=body)


def edit_body(plan: dict[str, Any] | None, fields: dict[str, Any]) -> Edit:
    """An edit's body: `plan` (None: left out, for `fields["arguments"]`, a gated call's new
    arguments) and `fields` (`arguments`, `comment`); pydantic's `ValidationError` unless exactly
    one of plan and arguments is given."""
    return Edit.model_validate(fields if plan is None else {"plan": plan, **fields})


def facts(user: str | None, history: bool) -> Call[list[FactOut]]:
    params = {"user": user, "history": str(history).lower()}
    return Call("GET", "/memory/facts", models(FactOut), params)


def search_memory(query: str, user: str | None) -> Call[SearchOut]:
    return Call("GET", "/memory/search", model(SearchOut), {"q": query, "user": user})


def forget(**fields: Any) -> Call[ForgetOut]:
    """`fields`: `Forget`'s (user, cancel_runs, runs)."""
    return Call("POST", "/memory/forget", model(ForgetOut), body=Forget(**fields))


def delete_fact(fact_id: int) -> Call[DeletedOut]:
    return Call("DELETE", f"/memory/facts/{fact_id}", model(DeletedOut))


def delete_episode(episode_id: int) -> Call[DeletedOut]:
    return Call("DELETE", f"/memory/episodes/{episode_id}", model(DeletedOut))


def procedures(scope: str | None, user: str | None) -> Call[list[ProcedureOut]]:
    return Call("GET", "/procedures", models(ProcedureOut), {"scope": scope, "user": user})


def add_procedure(fields: dict[str, Any]) -> Call[ProcedureOut]:
    """`fields`: a `NewProcedure`'s, its kind named by `scope` (everyone, user, tool)."""
    body = NEW_PROCEDURE.validate_python(fields)
    return Call("POST", "/procedures", model(ProcedureOut), body=body)


def procedure(procedure_id: int) -> Call[ProcedureDetail]:
    return Call("GET", f"/procedures/{procedure_id}", model(ProcedureDetail))


def edit_procedure(
    procedure_id: int, expected_version: int | None, changes: dict[str, Any]
) -> Call[ProcedureOut]:
    """`changes`: `ProcedureChange`'s fields (None clears plan_template, user or tool)."""
    body = ProcedureChange.model_validate(changes)
    params = {"expected_version": expected_version}
    return Call("PATCH", f"/procedures/{procedure_id}", model(ProcedureOut), params, body)


def delete_procedure(procedure_id: int) -> Call[ProcedureOut]:
    return Call("DELETE", f"/procedures/{procedure_id}", model(ProcedureOut))


def save_procedure(run_id: int, **fields: Any) -> Call[ProcedureOut]:
    """`fields`: `SaveFromRun`'s (title, scope, tool)."""
    body = SaveFromRun(**fields)
    return Call("POST", f"/procedures/from-run/{run_id}", model(ProcedureOut), body=body)


def stream_item(event: str, data: str) -> StreamItem | None:
    """A stream's message as a model: `status` and `end` as `RunStatusOut`, `timeline` as
    `StreamEventOut`; None for a message of another kind (a newer server's)."""
    if event in ("status", "end"):
        return RunStatusOut.model_validate_json(data)
    if event == "timeline":
        return StreamEventOut.model_validate_json(data)
    return None


def stream_params(after: int | None) -> dict[str, Any]:
    return {} if after is None else {"after": after}


def resume_headers(last_id: str | None) -> dict[str, str]:
    """The header that resumes a stream after the last event seen (the SSE spec's)."""
    return {} if last_id is None else {"Last-Event-ID": last_id}
