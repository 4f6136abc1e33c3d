"""A model call cut off by the step's time limit is recorded and charged (issue 11, item 7).

An engine of its own whose one worker process calls a fake OpenAI-compatible server
(`ops.fake_provider`) with a request timeout long enough for the step's time limit to strike
while a request is out: the ladder stays valid (6 s x 1 attempt < step 8 s < soft 10 s), but a
model step that first runs a 6 s tool has only 2 s of its limit left for its next request. The
limit is raised inside the step (`worker.execution.time_limits`), as Celery's soft time limit is
(issue 27, item 14), and a call it cuts off is settled as one the soft limit cuts off.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from models.db import session_scope
from models.engine import budgets
from models.settings import get_settings
from models.tables import Run
from ops.fake_provider import FakeOpenAI, never_answers, tool_calls
from ops.stack import LocalStack
from tests.integration.conftest import (
    TEST_ENV,
    fake_model_env,
    other_engine,
    run_steps,
    wait_for_run,
)
from tests.integration.test_model_faults import attempts, events, seconds, submit

pytestmark = pytest.mark.integration

REQUEST_TIMEOUT_S = 6.0  # one attempt: 6 < AGENTQ_STEP_TIME_LIMIT_S (8) < soft limit (10)
TOOL_SLEEP_S = 6.0  # then 2 s of the step's time limit are left for the next request
STEP_TIME_LIMIT_S = float(TEST_ENV["AGENTQ_STEP_TIME_LIMIT_S"])


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def slow_engine(fake: FakeOpenAI) -> Iterator[LocalStack]:
    env = fake_model_env(
        fake.url,
        AGENTQ_MODEL_REQUEST_TIMEOUT_S=str(REQUEST_TIMEOUT_S),
        AGENTQ_MODEL_MAX_ATTEMPTS="1",
    )
    with other_engine(env) as stack:
        yield stack


def charged_tokens(detail: dict[str, object]) -> int:
    """What one `model.call` event charged: the usage of an answer, the reservation of a call
    cut off, nothing for a failure."""
    if detail["outcome"] == "ok":
        return int(str(detail["prompt_tokens"])) + int(str(detail["completion_tokens"]))
    return int(str(detail["reserved_tokens"])) if detail["outcome"] == "cut_off" else 0


def test_a_request_cut_off_by_the_step_time_limit_is_recorded_and_charged(
    fake: FakeOpenAI, slow_engine: LocalStack
) -> None:
    mark = "MARK-cut-off"
    fake.script(
        tool_calls(("sleep", f'{{"seconds": {TOOL_SLEEP_S:g}}}')),
        never_answers(60),  # outlasts the request timeout: the step's time limit comes first
        when=mark,
    )
    loop = {"name": "slow", "kind": "model", "instruction": f"{mark}: wait", "tools": ["sleep"]}
    run = wait_for_run(submit([loop], goal="cut off"), memory=True)
    assert run.status == "succeeded"  # the step's second attempt got an answer
    (step,) = run_steps(run.id or 0)
    cut, answered = attempts(step.id or 0)
    assert (cut.outcome, answered.outcome) == ("retry", "succeeded")
    assert cut.error == "step exceeded its time limit (8 s, AGENTQ_STEP_TIME_LIMIT_S)"
    first, hung, again = fake.received(mark)[:3]
    assert (first.reply, hung.reply, again.reply) == ("tool_calls", "never_answers", "ok")
    # the step's time limit, not the request timeout, ended the hung request
    assert seconds(cut.finished_at) - hung.at < REQUEST_TIMEOUT_S
    assert seconds(cut.finished_at) - first.at < STEP_TIME_LIMIT_S + 1.0
    # every request the server received has its model.call event
    calls = [e.detail for e in events(run.id or 0, "model.call")]
    assert len(calls) == len(fake.received())
    step_calls = [e.detail for e in events(run.id or 0, "model.call", step.id)]
    assert [c["outcome"] for c in step_calls] == ["ok", "cut_off", "ok"]
    cut_call = step_calls[1]
    assert (cut_call["purpose"], cut_call["attempt"]) == ("step", 1)
    assert cut_call["error"] == "interrupted by StepTimeLimitExceeded"
    price = get_settings().price_of("gpt-4o-mini")
    reserved = budgets.cost_usd(
        price,
        prompt_tokens=cut_call["estimated_prompt_tokens"],
        completion_tokens=cut_call["reserved_tokens"] - cut_call["estimated_prompt_tokens"],
    )
    assert cut_call["reserved_tokens"] > cut_call["estimated_prompt_tokens"] > 0
    assert cut_call["cost_usd"] == pytest.approx(reserved) and reserved > 0
    # the run and the step are charged the reservation of the call cut off
    with session_scope() as session:
        spent = session.get(Run, run.id)
        assert spent is not None
    assert spent.tokens_used == sum(charged_tokens(c) for c in calls)
    assert spent.cost_used_usd == pytest.approx(sum(float(c["cost_usd"]) for c in calls))
    assert step.tokens_used == sum(charged_tokens(c) for c in step_calls)
    assert step.tokens_used >= cut_call["reserved_tokens"]
