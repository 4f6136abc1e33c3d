"""Hostile model servers against the real engine: a second embedded stack whose workers talk to a
misbehaving OpenAI-compatible server (`ops.fake_provider`) through the `openai` provider.

The workers run one pool process (`worker_concurrency=1`), so another run completing while a
rate-limited step waits proves the worker was free. Each test marks its prompts with its own
marker, and the fake server misbehaves only for requests carrying that marker. For every case the
tests check the run's final state, the number of model calls (the server's log and the
`model.call` events), the budget charged, and the events recorded.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import budgets, queue, transitions
from models.engine.queue import TASK_COORDINATE
from models.engine.runs import submit_run
from models.engine.token_calibrations import (
    CALIBRATION_MIN_TOKENS,
    CALIBRATION_RATIO_MAX,
    CALIBRATION_RATIO_MIN,
    plausible,
)
from models.errors import TokenBudgetSpent
from models.plans.plans import parse_plan
from models.plans.tools import load_tool_modules
from models.settings import ModelPrice, get_settings
from models.tables import (
    Escalation,
    Run,
    RunEvent,
    StepAttempt,
    TokenCalibration,
    ToolJournalEntry,
)
from ops.fake_provider import (
    COMPLETION_TOKENS,
    PROMPT_TOKENS,
    FakeOpenAI,
    Reply,
    context_too_long,
    never_answers,
    ok,
    quota_exhausted,
    rate_limited,
    server_error,
    tool_calls,
    truncated_json,
    whitespace_until_length,
    wrong_shape_plan,
)
from ops.stack import LocalStack
from tests.integration.conftest import (
    TEST_ENV,
    fake_model_env,
    other_engine,
    run_steps,
    wait_for_run,
)

pytestmark = pytest.mark.integration

GPT_4O_MINI = ModelPrice(input=0.15, output=0.60)
ANSWER_TOKENS = PROMPT_TOKENS + COMPLETION_TOKENS
REQUEST_TIMEOUT_S = float(TEST_ENV["AGENTQ_MODEL_REQUEST_TIMEOUT_S"])  # 1 s, 2 attempts
RETRY_BACKOFF_S = 1.0  # AGENTQ_MODEL_RETRY_BACKOFF_S's default: one wait between the 2 attempts
MAX_DEFERRALS = 2


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def faulty_engine(fake: FakeOpenAI) -> Iterator[LocalStack]:
    """An engine whose one worker process calls `fake`; this process talks to it until the
    module ends, then to whatever it talked to before."""
    env = fake_model_env(fake.url, AGENTQ_MODEL_MAX_DEFERRALS=str(MAX_DEFERRALS))
    # This process parses plans with the test-only tools as well, whether or not the session's
    # engine (which puts TEST_ENV here) was started before this module.
    saved = os.environ.get("AGENTQ_TOOL_MODULES")
    os.environ["AGENTQ_TOOL_MODULES"] = TEST_ENV["AGENTQ_TOOL_MODULES"]
    try:
        with other_engine(env) as stack:
            load_tool_modules(get_settings().tool_modules)
            yield stack
    finally:
        if saved is None:
            os.environ.pop("AGENTQ_TOOL_MODULES", None)
        else:
            os.environ["AGENTQ_TOOL_MODULES"] = saved


@pytest.fixture
def mark(faulty_engine: LocalStack) -> str:
    """A marker for this test's prompts."""
    return f"MARK-{uuid.uuid4().hex[:10]}"


def submit(
    steps: list[dict[str, Any]] | None,
    *,
    goal: str,
    tokens: int | None = None,
    cost_usd: float | None = None,
    user_id: str = "faults",
) -> int:
    from models.plans.tools import configured_tool_names

    plan = None if steps is None else parse_plan({"steps": steps}, tools=configured_tool_names())
    with session_scope() as session:
        run = submit_run(
            session,
            settings=get_settings(),
            user_id=user_id,
            goal=goal,
            plan=plan,
            tokens=tokens,
            cost_usd=cost_usd,
        )
        run_id = run.id or 0
    queue.send(TASK_COORDINATE, run_id)
    return run_id


def model_step(instruction: str, name: str = "think") -> dict[str, Any]:
    return {"name": name, "kind": "model", "instruction": instruction}


def events(run_id: int, kind: str, step_id: int | None = None) -> list[RunEvent]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == kind)
        if step_id is not None:
            stmt = stmt.where(RunEvent.step_id == step_id)
        return list(session.exec(stmt.order_by(col(RunEvent.id))))


def wait_for_event(run_id: int, kind: str, timeout_s: float = 60) -> RunEvent:
    deadline = time.monotonic() + timeout_s
    while not (found := events(run_id, kind)):
        assert time.monotonic() < deadline, f"run {run_id}: no {kind} event in {timeout_s} s"
        time.sleep(0.2)
    return found[0]


def attempts(step_id: int) -> list[StepAttempt]:
    with session_scope() as session:
        stmt = select(StepAttempt).where(StepAttempt.step_id == step_id)
        return list(session.exec(stmt.order_by(col(StepAttempt.attempt))))


def escalation(run_id: int) -> Escalation:
    with session_scope() as session:
        return session.exec(select(Escalation).where(Escalation.run_id == run_id)).one()


def cost(prompt_tokens: int, completion_tokens: int) -> float:
    return budgets.cost_usd(
        GPT_4O_MINI, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
    )


def check_charges(run: Run) -> list[RunEvent]:
    """The run's spend is the sum of its answered calls' usage and cost; returns the calls."""
    calls = events(run.id or 0, "model.call")
    answered = [e.detail for e in calls if e.detail["outcome"] == "ok"]
    tokens = sum(d["prompt_tokens"] + d["completion_tokens"] for d in answered)
    assert run.tokens_used == tokens
    assert run.cost_used_usd == pytest.approx(sum(d["cost_usd"] for d in answered))
    for d in answered:
        assert d["cost_usd"] == pytest.approx(cost(d["prompt_tokens"], d["completion_tokens"]))
    return calls


def seconds(at: datetime | None) -> float:
    assert at is not None
    return at.timestamp()


def cancel(run_id: int) -> None:
    with session_scope() as session:
        transitions.cancel_run(session, run_id)


# -- rate limits ----------------------------------------------------------------------------------


def test_rate_limited_step_is_deferred_and_the_worker_is_free(fake: FakeOpenAI, mark: str) -> None:
    fake.script(rate_limited("90"), when=mark)
    limited = submit([model_step(f"{mark}: summarise the receipts")], goal="rate limited")
    deferred = wait_for_event(limited, "step.deferred")
    # The only worker process is free: another run's model step completes meanwhile.
    other = wait_for_run(submit([model_step("say hello")], goal="meanwhile"), memory=True)
    assert other.status == "succeeded"
    (step,) = run_steps(limited)
    assert (step.status, step.attempt, step.deferrals) == ("queued", 1, 1)
    assert deferred.detail["retry_after_s"] == 90
    assert seconds(step.queued_at) - seconds(deferred.at) >= 90 - 0.5  # due in 90 s, not sooner
    (request,) = fake.received(mark)
    (attempt,) = attempts(step.id or 0)
    assert attempt.outcome == "deferred"
    assert seconds(attempt.finished_at) - request.at < REQUEST_TIMEOUT_S  # no sleeping on it
    (call,) = events(limited, "model.call")
    assert (call.detail["outcome"], call.detail["retry_after_s"]) == ("rate_limited", 90)
    with session_scope() as session:
        run = session.get(Run, limited)
        assert run is not None and run.status == "running"
    assert (run.tokens_used, run.cost_used_usd, step.tokens_used) == (0, 0, 0)  # released
    assert seconds(other.finished_at) < seconds(step.queued_at)
    check_charges(other)
    cancel(limited)


def test_rate_limited_step_runs_again_after_the_wait(fake: FakeOpenAI, mark: str) -> None:
    fake.script(rate_limited("1"), when=mark)
    run = wait_for_run(submit([model_step(f"{mark}: count")], goal="short wait"), memory=True)
    assert run.status == "succeeded"
    first, second = fake.received(mark)
    assert second.at - first.at >= 1.0
    (step,) = run_steps(run.id or 0)
    assert (step.attempt, step.deferrals, step.tokens_used) == (2, 1, ANSWER_TOKENS)
    assert step.cost_used_usd == pytest.approx(cost(PROMPT_TOKENS, COMPLETION_TOKENS))
    assert [a.outcome for a in attempts(step.id or 0)] == ["deferred", "succeeded"]
    step_calls = events(run.id or 0, "model.call", step.id)
    assert [c.detail["outcome"] for c in step_calls] == ["rate_limited", "ok"]
    check_charges(run)


def test_a_step_deferred_too_often_counts_a_failed_attempt(fake: FakeOpenAI, mark: str) -> None:
    fake.script(*[rate_limited("0.2")] * (MAX_DEFERRALS + 1), when=mark)
    run = wait_for_run(submit([model_step(f"{mark}: persist")], goal="many waits"), memory=True)
    assert run.status == "succeeded"
    (step,) = run_steps(run.id or 0)
    outcomes = [a.outcome for a in attempts(step.id or 0)]
    assert outcomes == ["deferred"] * MAX_DEFERRALS + ["retry", "succeeded"]
    assert (step.attempt, step.deferrals) == (MAX_DEFERRALS + 2, MAX_DEFERRALS)
    assert len(fake.received(mark)) == MAX_DEFERRALS + 2
    check_charges(run)


def test_rate_limited_planning_waits_in_its_phase(fake: FakeOpenAI, mark: str) -> None:
    fake.script(rate_limited("90"), when=mark)
    run_id = submit(None, goal=f"{mark}: plan my week")
    deferred = wait_for_event(run_id, "run.deferred")
    assert deferred.detail["phase"] == "planning"
    assert deferred.detail["retry_after_s"] == 90
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None and (run.status, run.deferrals, run.tokens_used) == (
            "planning",
            1,
            0,
        )
        # the reconciler's quiet-run clock starts when the task is due again
        assert seconds(run.updated_at) - seconds(deferred.at) >= 90 - 0.5
    assert [r.reply for r in fake.received(mark)] == ["rate_limited"]
    cancel(run_id)


def test_rate_limited_planning_goes_on_after_the_wait(fake: FakeOpenAI, mark: str) -> None:
    fake.script(rate_limited("0.5"), when=mark)
    run = wait_for_run(submit(None, goal=f"{mark}: plan and answer"), memory=True)
    assert run.status == "succeeded"
    (deferred,) = events(run.id or 0, "run.deferred")
    assert (deferred.detail["phase"], deferred.detail["retry_after_s"]) == ("planning", 0.5)
    first, second = fake.received(mark)[:2]
    assert (first.purpose, first.reply, second.purpose, second.reply) == (
        "plan",
        "rate_limited",
        "plan",
        "ok",
    )
    assert second.at - first.at >= 0.5
    calls = check_charges(run)
    assert [c.detail["purpose"] for c in calls][:2] == ["plan", "plan"]


def test_rate_limited_replanning_is_sent_again(fake: FakeOpenAI, mark: str) -> None:
    fake.script(rate_limited("0.5"), when=mark)
    failing = {"name": "a", "kind": "tool", "tool": "always_fails"}
    run = wait_for_run(submit([failing], goal=f"{mark}: replan me"), memory=True)
    assert (run.status, run.replans_used) == ("succeeded", 1)
    (deferred,) = events(run.id or 0, "run.deferred")
    assert (deferred.detail["phase"], deferred.detail["retry_after_s"]) == ("replanning", 0.5)
    first, second = fake.received(mark)[:2]
    assert (first.purpose, first.reply, second.purpose) == ("replan", "rate_limited", "replan")
    check_charges(run)


def test_rate_limited_synthesis_is_sent_again(fake: FakeOpenAI, mark: str) -> None:
    fake.script(rate_limited("0.5"), when=mark)
    noop = {"name": "a", "kind": "tool", "tool": "noop"}
    run = wait_for_run(submit([noop], goal=f"{mark}: tools only"), memory=True)
    assert run.status == "succeeded"
    (deferred,) = events(run.id or 0, "run.deferred")
    assert (deferred.detail["phase"], deferred.detail["retry_after_s"]) == ("synthesizing", 0.5)
    calls = check_charges(run)
    assert [c.detail["purpose"] for c in calls][:2] == ["synthesize", "synthesize"]


def test_planning_deferred_too_often_escalates(fake: FakeOpenAI, mark: str) -> None:
    fake.script(*[rate_limited("0.2")] * (MAX_DEFERRALS + 1), when=mark)
    run = wait_for_run(submit(None, goal=f"{mark}: never planned"), memory=True)
    assert run.status == "waiting_review"
    esc = escalation(run.id or 0)
    assert esc.reason == "rate_limited" and "rate_limit_exceeded" in esc.detail["error"]
    assert len(events(run.id or 0, "run.deferred")) == MAX_DEFERRALS
    assert len(fake.received(mark)) == MAX_DEFERRALS + 1
    assert run.tokens_used == 0


# -- quota ----------------------------------------------------------------------------------------


def test_quota_in_a_step_escalates_after_one_call(fake: FakeOpenAI, mark: str) -> None:
    fake.script(quota_exhausted(), when=mark)
    run = wait_for_run(submit([model_step(f"{mark}: spend")], goal="no credit"), memory=True)
    assert run.status == "waiting_review"
    esc = escalation(run.id or 0)
    assert esc.reason == "quota_exhausted"
    assert "insufficient_quota" in esc.detail["error"]
    (step,) = run_steps(run.id or 0)
    assert (step.status, esc.step_id, run.replans_used) == ("failed", step.id, 0)
    assert len(fake.received(mark)) == 1
    (call,) = check_charges(run)
    assert call.detail["outcome"] == "quota_exhausted"
    assert (run.tokens_used, run.cost_used_usd) == (0, 0)
    assert [e.detail["reason"] for e in events(run.id or 0, "escalation.opened")] == [
        "quota_exhausted"
    ]


def test_quota_in_planning_escalates_after_one_call(fake: FakeOpenAI, mark: str) -> None:
    fake.script(quota_exhausted(), when=mark)
    run = wait_for_run(submit(None, goal=f"{mark}: plan without credit"), memory=True)
    assert (run.status, run.plan_version) == ("waiting_review", 0)
    esc = escalation(run.id or 0)
    assert esc.reason == "quota_exhausted" and "insufficient_quota" in esc.detail["error"]
    assert len(fake.received(mark)) == 1
    assert [c.detail["outcome"] for c in check_charges(run)] == ["quota_exhausted"]


# -- context too long -----------------------------------------------------------------------------


def long_turn_then(mark: str) -> list[dict[str, Any]]:
    """A tool step whose ~450-token result becomes a conversation turn of twice that (its
    arguments and its result), two small steps (the last two turns, which always stay), then a
    model step carrying `mark`. The ledger keeps the result's key values (never dropped); a
    smaller budget drops the long turn, which waits for a fold's worth of turns
    (`worker.memory.folds.due`)."""
    lines = " ".join(f"receipt {i}: taxi fare {i}.40 EUR, Lyon to the airport;" for i in range(30))
    echo = {"name": "fetch", "kind": "tool", "tool": "echo", "args": {"value": lines}}
    small = [{"name": n, "kind": "tool", "tool": "noop", "args": {}} for n in ("check", "sort")]
    return [echo, *small, model_step(f"{mark}: total the receipts")]


@pytest.mark.parametrize(
    ("server", "wording"),
    [
        ("llama.cpp", "exceeds the available context size"),
        ("openai", "context_length_exceeded"),
    ],
)
def test_a_context_the_server_refuses_as_too_long_is_rebuilt_smaller(
    fake: FakeOpenAI, mark: str, server: str, wording: str
) -> None:
    """Issue 12: a context filled to agentq's budget was refused by llama.cpp's server as longer
    than its window, and the step failed as on a provider error. The refusal's count of the
    prompt, and every answer's that a tokenizer could give, calibrate the model's token counts:
    the refused prompt is ~1,300 tokens of ours, so the server's 2,400 is a ratio of ~1.85, in
    the band (`token_calibrations.plausible`)."""
    calibrated = calibration_samples()
    fake.script(context_too_long(server, context_tokens=3000, prompt_tokens=2400), when=mark)
    run_id = submit(long_turn_then(mark), goal="total my receipts", user_id=f"ctx-{mark}")
    run = wait_for_run(run_id, memory=True)
    assert run.status == "succeeded"
    refused, answered = fake.received(mark)[:2]
    assert (refused.reply, answered.reply) == ("context_too_long", "ok")
    assert len(answered.text) < len(refused.text)  # a smaller prompt, not the same one again
    # the dropped turn is less than a fold's worth: it waits, its key values in the ledger
    assert "Summary of earlier turns" not in answered.text + refused.text
    # the ledger keeps the step's key values; the turn that held the whole result was dropped
    assert answered.text.count("receipt 0:") == 1 < refused.text.count("receipt 0:")
    assert "(= steps.fetch, row" in answered.text
    fetch, *_, total = run_steps(run_id)
    assert (fetch.status, total.status) == ("succeeded", "succeeded")
    assert [a.outcome for a in attempts(total.id or 0)] == ["succeeded"]  # retried in the call
    step_calls = events(run_id, "model.call", total.id)
    assert [c.detail["outcome"] for c in step_calls] == ["context_too_long", "ok"]
    assert (step_calls[0].detail["cost_usd"], step_calls[0].detail["prompt_tokens"]) == (0, 0)
    assert wording in step_calls[0].detail["error"]
    assert total.tokens_used == ANSWER_TOKENS  # the refused attempt charged nothing
    charged = check_charges(run)
    assert "summarize" not in [c.detail["purpose"] for c in charged]
    samples = [c for c in charged if c.detail["outcome"] == "ok" and is_sample(c)]
    assert calibration_samples() >= calibrated + len(samples) + 1  # + 1: the refusal's


def calibration() -> tuple[int, float | None]:
    """How many calls have calibrated the fake engine's model, and its ratio
    (`models.engine.token_calibrations`)."""
    with session_scope() as session:
        found = session.get(TokenCalibration, "gpt-4o-mini", populate_existing=True)
    return (found.samples, found.ratio) if found else (0, None)


def calibration_samples() -> int:
    """How many calls have calibrated the fake engine's model."""
    return calibration()[0]


def is_sample(call: RunEvent) -> bool:
    """Whether a `model.call` event's counts make a calibration sample: ours long enough, and
    the server's count one a tokenizer gives (`token_calibrations.plausible`)."""
    ours = call.detail.get("estimated_prompt_tokens") or 0
    theirs = call.detail["prompt_tokens"]
    return ours >= CALIBRATION_MIN_TOKENS and theirs > 0 and plausible(ours, theirs)


def test_a_cached_prompts_count_is_charged_but_calibrates_nothing(
    fake: FakeOpenAI, mark: str
) -> None:
    """Issue 31, item 6: Ollama reports a prompt it served from its cache as a few tokens (3 of
    our 1,277). The call is charged what the server said; the model's ratio does not move."""
    samples, ratio = calibration()
    fake.script(ok(prompt_tokens=3), when=mark)
    instruction = f"{mark}: " + "add up the taxi receipts of the Lyon trip. " * 30
    run = wait_for_run(submit([model_step(instruction)], goal="cached prompt"), memory=True)
    assert run.status == "succeeded"
    (step,) = run_steps(run.id or 0)
    (cached,) = events(run.id or 0, "model.call", step.id)
    assert cached.detail["prompt_tokens"] == 3  # what the server said, and was charged
    assert cached.detail["estimated_prompt_tokens"] >= CALIBRATION_MIN_TOKENS  # a sample's size
    assert step.tokens_used == 3 + COMPLETION_TOKENS
    taken = [c for c in check_charges(run) if c.detail["outcome"] == "ok" and is_sample(c)]
    assert cached.id not in [c.id for c in taken]
    after, now = calibration()
    assert after == samples + len(taken)
    assert taken or now == ratio  # the fake's default count (100) is refused as well
    assert now is None or CALIBRATION_RATIO_MIN <= now <= CALIBRATION_RATIO_MAX


def test_a_context_refused_twice_escalates_as_context_overflow(fake: FakeOpenAI, mark: str) -> None:
    refusal = context_too_long("vllm", context_tokens=8192, prompt_tokens=9000)
    fake.script(refusal, refusal, when=mark)
    run_id = submit(long_turn_then(mark), goal="total my receipts", user_id=f"ctx-{mark}")
    run = wait_for_run(run_id)
    assert run.status == "waiting_review"
    esc = escalation(run_id)
    assert esc.reason == "context_overflow"  # not a provider failure, and not retried
    assert "refused the request as too long again" in esc.detail["error"]
    assert "maximum context length is 8192" in esc.detail["error"]
    refused = fake.received(mark)
    assert [r.reply for r in refused] == ["context_too_long", "context_too_long"]
    assert len(refused[1].text) < len(refused[0].text)
    *_, total = run_steps(run_id)
    assert (total.status, total.attempt, esc.step_id) == ("failed", 1, total.id)
    step_calls = events(run_id, "model.call", total.id)
    assert [c.detail["outcome"] for c in step_calls] == ["context_too_long"] * 2
    assert total.tokens_used == 0
    check_charges(run)


# -- transient failures ---------------------------------------------------------------------------


def test_server_error_then_success_is_retried_in_the_call(fake: FakeOpenAI, mark: str) -> None:
    fake.script(server_error(), ok("recovered"), when=mark)
    run = wait_for_run(submit([model_step(f"{mark}: try")], goal="flaky server"), memory=True)
    assert run.status == "succeeded"
    first, second = fake.received(mark)
    assert (first.reply, second.reply) == ("server_error", "ok")
    assert second.at - first.at >= RETRY_BACKOFF_S
    (step,) = run_steps(run.id or 0)
    assert step.result is not None and step.result["text"] == "recovered"
    assert [a.outcome for a in attempts(step.id or 0)] == ["succeeded"]
    step_calls = events(run.id or 0, "model.call", step.id)
    assert [(c.detail["outcome"], c.detail["attempt"]) for c in step_calls] == [
        ("unavailable", 1),
        ("ok", 2),
    ]
    assert step.tokens_used == ANSWER_TOKENS
    check_charges(run)


def test_a_request_that_never_answers_times_out_and_is_retried(fake: FakeOpenAI, mark: str) -> None:
    fake.script(never_answers(), never_answers(), ok("late but fine"), when=mark)
    run = wait_for_run(submit([model_step(f"{mark}: wait")], goal="silent server"), memory=True)
    assert run.status == "succeeded"
    first, second, third = fake.received(mark)
    # each request timed out after the request timeout, then waited the backoff
    assert second.at - first.at >= REQUEST_TIMEOUT_S + RETRY_BACKOFF_S
    (step,) = run_steps(run.id or 0)
    failed, succeeded = attempts(step.id or 0)
    assert (failed.outcome, succeeded.outcome) == ("retry", "succeeded")
    assert "timed out" in (failed.error or "")
    blocked = seconds(failed.finished_at) - first.at
    # never longer than timeout x attempts + the wait between them (2 x 1 + 1 s), with slack
    assert 2 * REQUEST_TIMEOUT_S <= blocked < 2 * REQUEST_TIMEOUT_S + RETRY_BACKOFF_S + 1.5
    assert third.at >= seconds(failed.finished_at)
    step_calls = events(run.id or 0, "model.call", step.id)
    outcomes = [c.detail["outcome"] for c in step_calls]
    assert outcomes == ["unavailable", "unavailable", "ok"]
    assert step.tokens_used == ANSWER_TOKENS
    check_charges(run)


# -- hostile output -------------------------------------------------------------------------------


def _check_invalid_plan(run: Run, fake: FakeOpenAI, mark: str, raw: str) -> None:
    plan_attempts = get_settings().plan_max_attempts
    assert (run.status, run.plan_version) == ("waiting_review", 0)
    esc = escalation(run.id or 0)
    assert esc.reason == "invalid_plan"
    assert esc.detail["raw_output"] == raw  # the last answer, as it came
    assert len(fake.received(mark)) == plan_attempts
    calls = check_charges(run)
    assert len(calls) == plan_attempts
    assert all(c.detail["outcome"] == "ok" and c.detail["cost_usd"] > 0 for c in calls)
    assert len(events(run.id or 0, "plan.invalid")) == plan_attempts
    assert run_steps(run.id or 0) == []


def test_hostile_plans_are_reasked_then_escalated(fake: FakeOpenAI, mark: str) -> None:
    fake.script(whitespace_until_length(), truncated_json(), wrong_shape_plan(), when=mark)
    run = wait_for_run(submit(None, goal=f"{mark}: plan badly"), memory=True)
    requests = fake.received(mark)
    _check_invalid_plan(run, fake, mark, str(wrong_shape_plan().content))
    errors = [e.detail["error"] for e in events(run.id or 0, "plan.invalid")]
    assert "cut off at the token limit" in errors[0]
    assert "invalid plan" in errors[1] or "JSON" in errors[1]
    assert "steps" in errors[2]
    # the cut-off answer was charged its whole max_output_tokens
    first = events(run.id or 0, "model.call")[0].detail
    assert first["completion_tokens"] == requests[0].body["max_completion_tokens"]
    # each re-ask carries the refused answer and the reason
    assert requests[1].body["messages"][-1]["content"].startswith("That answer is invalid")


@pytest.mark.parametrize(
    "reply", [whitespace_until_length(), truncated_json(), wrong_shape_plan()], ids=lambda r: r.kind
)
def test_the_same_hostile_plan_every_time_is_escalated(
    fake: FakeOpenAI, mark: str, reply: Reply
) -> None:
    fake.script(*[reply] * get_settings().plan_max_attempts, when=mark)
    run = wait_for_run(submit(None, goal=f"{mark}: plan badly again"), memory=True)
    _check_invalid_plan(run, fake, mark, str(reply.content))


# -- tool calls inside a model step ---------------------------------------------------------------


def marker_step(mark: str) -> dict[str, Any]:
    """A model step that may call `append_marker`, which leaves a line on disk per run of it."""
    instruction = f"{mark}: file the receipt"
    return {"name": "file", "kind": "model", "instruction": instruction, "tools": ["append_marker"]}


def test_tool_arguments_that_are_not_json_are_reasked_and_never_run(
    fake: FakeOpenAI, mark: str
) -> None:
    target = Path(tempfile.mkdtemp()) / "markers.txt"
    good = json.dumps({"path": str(target), "marker": "receipt"})
    cut = good[:-1]  # the JSON cut off before its closing brace
    fake.script(
        tool_calls(("append_marker", cut)),
        tool_calls(("append_marker", good)),
        ok("filed"),
        when=mark,
    )
    run = wait_for_run(submit([marker_step(mark)], goal="tool call"), memory=True)
    assert run.status == "succeeded"
    assert target.read_text() == "receipt\n"  # ran once, on the valid arguments only
    (invalid,) = events(run.id or 0, "step.tool_call.invalid")
    assert invalid.detail["raw_arguments"] == cut
    assert "not valid JSON" in invalid.detail["error"]
    (called,) = events(run.id or 0, "step.tool_call")
    assert called.detail["arguments"] == json.loads(good)
    assert called.detail["result"] == {"lines": 1}
    first, reask, last = fake.received(mark)
    assert first.body["tools"][0]["function"]["name"] == "append_marker"
    # the re-ask carries the refused call as written and why it was refused
    assert reask.body["messages"][-2]["tool_calls"][0]["function"]["arguments"] == cut
    assert reask.body["messages"][-1]["role"] == "tool"
    assert "did not run" in reask.body["messages"][-1]["content"]
    assert json.loads(last.body["messages"][-1]["content"]) == {"lines": 1}
    (step,) = run_steps(run.id or 0)
    assert step.result is not None and step.result["text"] == "filed"
    assert step.result["tool_calls"] == [
        {"tool": "append_marker", "arguments": json.loads(good), "result": {"lines": 1}}
    ]
    assert (step.attempt, step.tokens_used) == (1, 3 * ANSWER_TOKENS)  # every call charged
    assert len(events(run.id or 0, "model.call", step.id)) == 3
    check_charges(run)


def test_non_finite_numbers_in_tool_arguments_are_reasked_and_never_run(
    fake: FakeOpenAI, mark: str
) -> None:
    """Issue 11: `{"value": NaN}` parsed, the tool ran, and Postgres then refused the JSON."""
    fake.script(
        tool_calls(("echo", '{"value": NaN}')),
        tool_calls(("echo", '{"value": -Infinity}')),
        tool_calls(("echo", '{"value": 1.5}')),
        ok("echoed"),
        when=mark,
    )
    step = {"name": "think", "kind": "model", "instruction": f"{mark}: echo", "tools": ["echo"]}
    run = wait_for_run(submit([step], goal="non-finite arguments"), memory=True)
    assert run.status == "succeeded"
    invalid = events(run.id or 0, "step.tool_call.invalid")
    assert [e.detail["raw_arguments"] for e in invalid] == [
        '{"value": NaN}',
        '{"value": -Infinity}',
    ]
    assert all("value: numbers must be finite" in e.detail["error"] for e in invalid)
    (called,) = events(run.id or 0, "step.tool_call")  # the echo ran on 1.5 only
    assert called.detail["arguments"] == {"value": 1.5}
    (row,) = run_steps(run.id or 0)
    assert row.result is not None and row.result["text"] == "echoed"
    assert len(fake.received(mark)) == 4


def test_tool_calls_that_stay_invalid_escalate_with_the_raw_calls(
    fake: FakeOpenAI, mark: str
) -> None:
    target = Path(tempfile.mkdtemp()) / "markers.txt"
    wrong = json.dumps({"path": str(target), "marker": 5, "force": True})
    answers = get_settings().tool_call_max_invalid + 1
    fake.script(*[tool_calls(("append_marker", wrong))] * answers, when=mark)
    run = wait_for_run(submit([marker_step(mark)], goal="bad tool calls"), memory=True)
    assert run.status == "waiting_review"
    assert not target.exists()  # the tool never ran on guessed arguments
    esc = escalation(run.id or 0)
    assert esc.reason == "invalid_tool_call"
    assert json.loads(esc.detail["raw_output"]) == [{"tool": "append_marker", "arguments": wrong}]
    invalid = events(run.id or 0, "step.tool_call.invalid")
    assert [e.detail["raw_arguments"] for e in invalid] == [wrong] * answers
    assert all("marker" in e.detail["error"] and "force" in e.detail["error"] for e in invalid)
    assert len(fake.received(mark)) == answers
    (step,) = run_steps(run.id or 0)
    assert (step.status, step.attempt, esc.step_id) == ("failed", 1, step.id)
    assert step.tokens_used == answers * ANSWER_TOKENS
    check_charges(run)


def test_a_tool_that_ran_before_a_deferral_is_not_run_again(fake: FakeOpenAI, mark: str) -> None:
    """Issue 11, item 3: the step deferred after its tool call ran asked the model again from
    the start, the model asked for the same call (with a new id), and the tool ran twice."""
    target = Path(tempfile.mkdtemp()) / "markers.txt"
    arguments = json.dumps({"path": str(target), "marker": "receipt"})
    fake.script(
        tool_calls(("append_marker", arguments)),
        rate_limited("1"),  # the step defers after its tool ran
        tool_calls(("append_marker", arguments)),  # the replayed loop: the same call again
        ok("filed"),
        when=mark,
    )
    run = wait_for_run(submit([marker_step(mark)], goal="tool call, then a wait"), memory=True)
    assert run.status == "succeeded"
    assert target.read_text() == "receipt\n"  # the tool ran once
    (step,) = run_steps(run.id or 0)
    assert [a.outcome for a in attempts(step.id or 0)] == ["deferred", "succeeded"]
    replies = fake.received(mark)
    assert [r.reply for r in replies] == ["tool_calls", "rate_limited", "tool_calls", "ok"]
    # the replayed loop answered the model with the result the first attempt recorded
    assert json.loads(replies[-1].body["messages"][-1]["content"]) == {"lines": 1}
    assert step.result is not None and step.result["text"] == "filed"
    assert step.result["tool_calls"] == [
        {"tool": "append_marker", "arguments": json.loads(arguments), "result": {"lines": 1}}
    ]
    (called,) = events(run.id or 0, "step.tool_call")
    (replayed,) = events(run.id or 0, "step.tool_call.replayed")
    assert (replayed.detail["tool"], replayed.detail["ran_in_attempt"]) == ("append_marker", 1)
    assert replayed.detail["result"] == called.detail["result"] == {"lines": 1}
    with session_scope() as session:
        journal = select(ToolJournalEntry).where(ToolJournalEntry.step_id == step.id)
        (entry,) = session.exec(journal).all()
    assert (entry.tool, entry.attempt, entry.result) == ("append_marker", 1, {"lines": 1})
    assert entry.arguments == json.loads(arguments) and entry.error is None
    assert entry.call_key.startswith("append_marker#1:")
    check_charges(run)


def test_cancelling_a_run_stops_its_tool_calling_loop(fake: FakeOpenAI, mark: str) -> None:
    fake.script(
        tool_calls(("sleep", '{"seconds": 3}')),
        *[tool_calls(("noop", "{}"))] * 5,
        when=mark,
    )
    tools = ["sleep", "noop"]
    loop = {"name": "loop", "kind": "model", "instruction": f"{mark}: loop", "tools": tools}
    run_id = submit([loop], goal="cancel the loop")
    wait_for_event(run_id, "step.running")
    time.sleep(1.0)  # the first tool call (a 3 s sleep) is running
    cancel(run_id)
    deadline = time.monotonic() + 30
    while (step := run_steps(run_id)[0]).status == "running":
        assert time.monotonic() < deadline, "the step never stopped"
        time.sleep(0.2)
    assert step.status == "failed" and "its run is cancelled" in (step.error or "")
    assert len(fake.received(mark)) == 1  # no model call after the cancel
    (called,) = events(run_id, "step.tool_call")
    assert called.detail["tool"] == "sleep"


# -- budgets --------------------------------------------------------------------------------------


def test_a_call_the_token_budget_cannot_pay_for_is_never_made(fake: FakeOpenAI, mark: str) -> None:
    run = wait_for_run(submit([model_step(f"{mark}: big")], goal="few tokens", tokens=500))
    assert run.status == "waiting_review"
    esc = escalation(run.id or 0)
    assert esc.reason == "token_budget_spent" and "token budget spent" in esc.detail["error"]
    assert fake.received(mark) == []
    assert events(run.id or 0, "model.call") == []
    assert (run.tokens_used, run.cost_used_usd) == (0, 0)
    (step,) = run_steps(run.id or 0)
    assert step.status == "failed"


def test_a_call_the_cost_budget_cannot_pay_for_is_never_made(fake: FakeOpenAI, mark: str) -> None:
    run = wait_for_run(submit([model_step(f"{mark}: dear")], goal="no money", cost_usd=1e-5))
    assert run.status == "waiting_review"
    esc = escalation(run.id or 0)
    assert esc.reason == "cost_budget_spent" and "cost budget spent" in esc.detail["error"]
    assert fake.received(mark) == []
    assert (run.tokens_used, run.cost_used_usd) == (0, 0)


def test_a_spent_budget_in_planning_escalates_with_its_reason(fake: FakeOpenAI, mark: str) -> None:
    run = wait_for_run(submit(None, goal=f"{mark}: plan cheaply", tokens=300), memory=True)
    assert (run.status, escalation(run.id or 0).reason) == ("waiting_review", "token_budget_spent")
    assert fake.received(mark) == []


def test_a_spent_budget_at_synthesis_escalates_with_its_reason(fake: FakeOpenAI, mark: str) -> None:
    """A tool step spends nothing; the synthesis's call cannot be paid for, which its first
    transaction finds with the claim in it (that path once raised `UnboundLocalError`)."""
    noop = {"name": "only", "kind": "tool", "tool": "noop"}
    run = wait_for_run(submit([noop], goal=f"{mark}: answer cheaply", tokens=300))
    assert run.status == "waiting_review"
    esc = escalation(run.id or 0)
    assert esc.reason == "token_budget_spent" and "token budget spent" in esc.detail["error"]
    assert fake.received(mark) == []
    assert [step.status for step in run_steps(run.id or 0)] == ["succeeded"]
    with session_scope() as session:  # the escalation ended the phase: no claim is left
        ended = session.get(Run, run.id)
        assert ended is not None and ended.phase_lease_expires_at is None


def _race(run_id: int, tokens: int) -> list[str]:
    """Two threads reserve `tokens` of run `run_id` at the same moment; what each got."""
    barrier = threading.Barrier(2)
    results: list[str] = []

    def take() -> None:
        barrier.wait()
        try:
            with session_scope() as session:
                budgets.reserve(session, run_id, tokens=tokens, cost=0.0)
            results.append("reserved")
        except TokenBudgetSpent:
            results.append("refused")

    threads = [threading.Thread(target=take) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_reservations_never_share_the_last_tokens(faulty_engine: LocalStack) -> None:
    """Sibling calls race for a budget with room for one of them: exactly one gets it."""
    for _ in range(10):
        with session_scope() as session:
            run = submit_run(
                session, settings=get_settings(), user_id="race", goal="race", tokens=1000
            )
            run_id = run.id or 0
        assert sorted(_race(run_id, 600)) == ["refused", "reserved"]
        with session_scope() as session:
            row = session.get(Run, run_id)
            assert row is not None and row.tokens_used == 600


def test_settling_replaces_the_reservation_with_the_usage(faulty_engine: LocalStack) -> None:
    plan = parse_plan({"steps": [model_step("x")]}, tools=[])
    with session_scope() as session:
        run = submit_run(
            session, settings=get_settings(), user_id="s", goal="settle", plan=plan, tokens=1000
        )
        run_id = run.id or 0
    (step,) = run_steps(run_id)
    with session_scope() as session:
        held = budgets.reserve(session, run_id, tokens=900, cost=0.5)
    with session_scope() as session:
        budgets.settle(session, held, tokens=120, cost=0.01, provider="openai", step_id=step.id)
    with session_scope() as session:
        row = session.get(Run, run_id)
        assert row is not None
        assert (row.tokens_used, row.provider) == (120, "openai")
        assert row.cost_used_usd == pytest.approx(0.01)
        held = budgets.reserve(session, run_id, tokens=880, cost=0.0)  # exactly what is left
    with session_scope() as session:
        budgets.settle(session, held, tokens=0, cost=0.0)  # released: no answer came
    with session_scope() as session:
        row = session.get(Run, run_id)
        assert row is not None and row.tokens_used == 120
    (step,) = run_steps(run_id)
    assert (step.tokens_used, step.cost_used_usd) == (120, pytest.approx(0.01))
