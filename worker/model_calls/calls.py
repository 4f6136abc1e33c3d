"""Model calls made on behalf of a run: reserve the budget, send, retry what is transient, settle.

A call first reserves the most it can spend in Postgres (`models.engine.budgets.reserve`: its prompt
estimate plus `max_output_tokens`, at the model's price), so a run never starts a call its token
or cost budget cannot pay for (DESIGN.md, invariant 4). Transient failures (timeouts, dropped
connections, 5xx) are tried again after a short wait, `AGENTQ_MODEL_MAX_ATTEMPTS` attempts in all;
the ladder (`models.settings.model_call_max_s`) keeps that under the step time limit. A rate
limit is never waited out here: `RateLimited` goes up to the task, which frees the worker and is
sent again with a countdown. Every attempt records a `model.call` event; the reservation is then
settled to the usage the provider reported, or released when the provider refused or failed.

A call interrupted while its request may be out (the soft time limit, any other exception raised
inside `ChatProvider.complete`) may still be answered and billed by the provider, so it keeps
its whole reservation, charged to the run and its step, and records a `model.call` event with
outcome `cut_off` in a transaction of its own before the exception goes up (issue 11).

The outcomes of `model.call` events: `ok` (charged the reported usage), `rate_limited`,
`quota_exhausted`, `context_too_long` (refused before generating: `worker.model_calls.refits`),
`unavailable` and `error` (charged nothing), `cut_off` (charged its reservation:
`reserved_tokens` and `cost_usd`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import structlog
from sqlmodel import Session

from models.db import session_scope, wait_out_outage
from models.engine import budgets, events, token_calibrations
from models.errors import (
    ContextTooLong,
    ProviderError,
    ProviderUnavailable,
    QuotaExhausted,
    RateLimited,
)
from models.memory.tokens import count_message_tokens, count_tool_schema_tokens
from models.operations import metrics
from models.settings import OFFLINE_MODEL, ModelPrice, get_settings, model_retry_delay_s
from worker.model_calls.provider_choice import make_provider
from worker.model_calls.providers import ChatProvider, Completion, ModelRequest

log = structlog.get_logger("agentq.worker")
# How long an answered call waits for Postgres to settle it before giving up (then `cut_off`,
# and the task's outage retry asks the model again). A restart of the postmaster took 2-6 s in
# the fault suite (`python -m ops.chaos --scenario postgres-restart`); the step's soft time limit
# still cuts a longer wait short.
SETTLE_OUTAGE_WAIT_S = 30.0
P = ParamSpec("P")
T = TypeVar("T")


@functools.lru_cache(maxsize=1)
def provider() -> ChatProvider:
    """The configured provider (`AGENTQ_PROVIDER`), built once per process."""
    s = get_settings()
    return make_provider(
        s.provider,
        model=s.model,
        base_url=s.openai_base_url,
        api_key=s.openai_api_key,
        request_timeout_s=s.model_request_timeout_s,
        structured_output=s.structured_output,
        max_tokens_field=s.max_tokens_field,
        temperature=s.model_temperature,
    )


def priced_model(chat: ChatProvider) -> str:
    """The name `chat`'s calls are priced under: `offline` for the offline provider, else the
    configured `AGENTQ_MODEL` (what was asked for, whatever dated name the server answers with)."""
    return OFFLINE_MODEL if chat.name == OFFLINE_MODEL else get_settings().model


@dataclass(frozen=True)
class Call:
    """A model call under way: its request, the run (and step) it is charged to, the provider,
    the prompt estimate it reserved for, and the reservation it holds until it settles."""

    run_id: int
    request: ModelRequest
    step_id: int | None
    chat: ChatProvider
    price: ModelPrice
    prompt_tokens: int
    held: budgets.Reservation


def call_model(run_id: int, request: ModelRequest, *, step_id: int | None = None) -> Completion:
    """Make one model call for run `run_id` (and step `step_id`), charged to its budgets: reserve
    (one transaction), send, settle (another).

    Raises, before anything is sent, `TokenBudgetSpent` or `CostBudgetSpent` when the run cannot pay
    for the call's largest possible spend, and `NotFound` for an unknown run; after sending,
    `RateLimited` (the caller defers), `QuotaExhausted`, `ProviderUnavailable` (every attempt
    failed) or `ProviderError` (a failure retrying will not fix). Whatever interrupts the call once
    its request may be out (the soft time limit) goes up after the call is recorded `cut_off`, its
    reservation kept (`cut_off`). An answer whose settlement meets a database outage waits for
    Postgres (`waits_out_outages`) rather than going up, so the task's retry does not ask the model
    again (issue 11); past that wait it goes up as `DatabaseUnavailable`, recorded `cut_off` like
    any other unsettled answer.
    """
    with session_scope() as session:
        call = reserve(session, run_id, request, step_id=step_id)
    completion, attempt = send(call)
    try:
        _settle_alone(call, completion, attempt)
    except BaseException as exc:  # answered, but not settled: rolled back, still reserved
        cut_off(call, attempt, exc)
        raise
    return completion


def waits_out_outages(unit: Callable[P, T]) -> Callable[P, T]:
    """`unit` (whole transactions) waiting out a database outage for up to
    `SETTLE_OUTAGE_WAIT_S` (`models.db.wait_out_outage`) rather than raising it: for the work
    that keeps what a paid model call answered (its settlement, the plan, answer, facts or tool
    journal written from it). Only this process has the answer, and the task's outage retry
    would find the phase still claimed, or ask the model again (issue 11). A commit whose
    acknowledgement was lost runs again: writes guarded by the claim `unit` holds change nothing
    the second time, but a settlement (`settle`) is counted twice, the run charged more than it
    spent, never less. Raises what `unit` raises, and `DatabaseUnavailable` once the wait is
    spent."""

    @functools.wraps(unit)
    def waiting(*args: P.args, **kwargs: P.kwargs) -> T:
        return wait_out_outage(
            lambda: unit(*args, **kwargs), within_s=SETTLE_OUTAGE_WAIT_S, what=unit.__qualname__
        )

    return waiting


@waits_out_outages
def _settle_alone(call: Call, completion: Completion, attempt: int) -> None:
    with session_scope() as session:
        settle(session, call, completion, attempt)


def reserve(
    session: Session, run_id: int, request: ModelRequest, *, step_id: int | None = None
) -> Call:
    """Hold the call's largest spend in the caller's transaction: the prompt estimate plus every
    output token allowed, at the configured provider's price. Raises `TokenBudgetSpent`,
    `CostBudgetSpent` or `NotFound` (`models.engine.budgets.reserve`), holding nothing."""
    chat = provider()
    price = get_settings().price_of(priced_model(chat))
    prompt = request.estimated_prompt_tokens
    if prompt is None:
        prompt = estimate_prompt_tokens(request)
    output = request.max_output_tokens
    cost = budgets.cost_usd(price, prompt_tokens=prompt, completion_tokens=output)
    held = budgets.reserve(session, run_id, tokens=prompt + output, cost=cost)
    return Call(run_id, request, step_id, chat, price, prompt, held)


@dataclass
class Attempt:
    """The attempt whose request may be out and is not recorded yet (None: none is)."""

    number: int | None = None


def send(call: Call) -> tuple[Completion, int]:
    """Send a reserved call (no transaction is open): the completion and the attempt that got it.

    When no answer comes, what goes up is settled first, in a transaction of its own: after a
    provider's refusal or failure (each attempt already recorded) the reservation is released;
    when the call was interrupted with a request out (the soft time limit, say), it is kept and
    the attempt is recorded as `cut_off` (see `cut_off`)."""
    out = Attempt()
    try:
        return _send(call, out)
    except BaseException as exc:  # a soft time limit too: settle before it goes up
        if out.number is None:
            _release(call)
        else:
            cut_off(call, out.number, exc)
        raise


def _release(call: Call) -> None:
    with session_scope() as session:
        budgets.settle(session, call.held, tokens=0, cost=0.0)


def cut_off(call: Call, attempt: int, exc: BaseException) -> None:
    """Record attempt `attempt` of `call`, interrupted by `exc` with its request perhaps out (or
    its answer not yet settled), in a transaction of its own: its reservation stays charged to
    the run and is added to its step, and its `model.call` event (outcome `cut_off`) says what
    was held (`reserved_tokens`, `cost_usd`). Only `exc`'s type is recorded (its text may hold
    host paths; the worker log has it). A failure to record is logged, not raised, so `exc` is
    what goes up; the reservation then stays charged anyway."""
    held, error = call.held, f"interrupted by {type(exc).__name__}"
    try:
        with session_scope() as session:
            budgets.settle(
                session, held, tokens=held.tokens, cost=held.cost_usd, step_id=call.step_id
            )
            _record(
                session,
                call.run_id,
                call.request,
                call.step_id,
                attempt=attempt,
                outcome="cut_off",
                error=error,
                prompt_tokens=0,
                estimated_prompt_tokens=call.prompt_tokens,
                completion_tokens=0,
                reserved_tokens=held.tokens,
                cost_usd=held.cost_usd,
            )
            metrics.model_failed(session, provider=call.chat.name, kind="cut_off")
            metrics.model_spent(
                session,
                model=priced_model(call.chat),
                tokens={"reserved": held.tokens},
                cost_usd=held.cost_usd,
            )
    except Exception:
        log.exception("model.call.unrecorded", run_id=call.run_id, attempt=attempt, error=error)
        return
    log.warning("model.call.cut_off", run_id=call.run_id, attempt=attempt, error=repr(exc))


def settle(session: Session, call: Call, completion: Completion, attempt: int) -> None:
    """In the caller's transaction: replace the call's reservation with the usage the provider
    reported, and record its `model.call` event (outcome `ok`)."""
    tokens = completion.prompt_tokens + completion.completion_tokens
    cost = budgets.cost_usd(
        call.price,
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
    )
    budgets.settle(
        session,
        call.held,
        tokens=tokens,
        cost=cost,
        provider=call.chat.name,
        step_id=call.step_id,
        calibration=_sample(call, completion.prompt_tokens if completion.usage_reported else None),
    )
    _record(
        session,
        call.run_id,
        call.request,
        call.step_id,
        attempt=attempt,
        outcome="ok",
        model=completion.model,
        offline=completion.offline,
        prompt_tokens=completion.prompt_tokens,
        estimated_prompt_tokens=call.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        finish_reason=completion.finish_reason,
        reserved_tokens=call.held.tokens,
        cost_usd=cost,
    )
    metrics.model_spent(
        session,
        model=priced_model(call.chat),
        tokens={"prompt": completion.prompt_tokens, "completion": completion.completion_tokens},
        cost_usd=cost,
    )
    purpose = call.request.purpose
    log.info("model.call", run_id=call.run_id, purpose=purpose, tokens=tokens, cost_usd=cost)


def _sample(call: Call, theirs: int | None) -> token_calibrations.Sample | None:
    """What the server's count `theirs` of `call`'s prompt says of the configured model's
    tokens (`models.engine.token_calibrations`); None for the offline provider, which has no
    server."""
    if call.chat.name == OFFLINE_MODEL:
        return None
    return token_calibrations.Sample.of(
        get_settings().model, ours=call.prompt_tokens, theirs=theirs
    )


def estimate_prompt_tokens(request: ModelRequest) -> int:
    """Our tiktoken count of what `request` sends: its messages, plus the JSON schema of the
    answer and the tool definitions (`models.memory.tokens.count_tool_schema_tokens`, an
    estimate)."""
    model = get_settings().model
    schemas = [request.json_schema] if request.json_schema else []
    extra = count_tool_schema_tokens([*schemas, *request.tools]) if schemas or request.tools else 0
    return count_message_tokens(request.messages, model) + extra


def _send(call: Call, out: Attempt) -> tuple[Completion, int]:
    """The completion and the attempt that got it; transient failures are tried again after
    `models.settings.model_retry_delay_s`, the last one is raised. `out` names the attempt
    whose request may be out and is not recorded yet."""
    attempts = get_settings().model_max_attempts
    for attempt in range(1, attempts + 1):
        out.number = attempt
        try:
            return _timed(call), attempt
        except ProviderError as exc:
            _record_failure(call, attempt, exc)
            out.number = None
            if not isinstance(exc, ProviderUnavailable) or attempt == attempts:
                raise
        time.sleep(model_retry_delay_s(get_settings(), attempt))
    raise AssertionError("unreachable: the last attempt returns or raises")


def _timed(call: Call) -> Completion:
    """`call`'s request sent once, its duration observed whether it answers or raises."""
    started = time.monotonic()
    try:
        return call.chat.complete(call.request)
    finally:
        seconds = time.monotonic() - started
        metrics.model_answered(
            provider=call.chat.name, purpose=call.request.purpose, seconds=seconds
        )


def failure_outcome(exc: ProviderError) -> str:
    """The `outcome` of a failed attempt's `model.call` event."""
    if isinstance(exc, RateLimited):
        return "rate_limited"
    if isinstance(exc, QuotaExhausted):
        return "quota_exhausted"
    if isinstance(exc, ContextTooLong):
        return "context_too_long"
    return "unavailable" if isinstance(exc, ProviderUnavailable) else "error"


def _record_failure(call: Call, attempt: int, exc: ProviderError) -> None:
    """Record the failed `attempt` of `call`; a refusal as too long that says the server's count
    of the prompt is also a calibration sample (`models.engine.token_calibrations`)."""
    extra = {"retry_after_s": exc.retry_after_s} if isinstance(exc, RateLimited) else {}
    refused = exc.prompt_tokens if isinstance(exc, ContextTooLong) else None
    sample = _sample(call, refused) if refused else None
    with session_scope() as session:
        _record(
            session,
            call.run_id,
            call.request,
            call.step_id,
            attempt=attempt,
            outcome=failure_outcome(exc),
            error=str(exc)[:1000],
            prompt_tokens=0,
            completion_tokens=0,
            cost_usd=0.0,
            **extra,
        )
        metrics.model_failed(session, provider=call.chat.name, kind=failure_outcome(exc))
        if sample is not None:
            token_calibrations.record(session, sample)
    log.warning("model.call.failed", run_id=call.run_id, attempt=attempt, error=str(exc))


def _record(
    session: Session, run_id: int, request: ModelRequest, step_id: int | None, **detail: Any
) -> None:
    events.record_event(
        session, run_id, "model.call", step_id=step_id, purpose=request.purpose, **detail
    )
