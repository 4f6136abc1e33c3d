"""agentq on a real local model: llama-cpp-python's OpenAI-compatible server running
SmolLM2-135M-Instruct (`tests.support.llama_server`), reached through agentq's own `openai`
provider with `AGENTQ_STRUCTURED_OUTPUT=json_object` and `AGENTQ_MAX_TOKENS_FIELD=max_tokens`.

A 135M-parameter model plans badly; these tests check what agentq guarantees whatever the model
says: constrained answers are JSON, the answer's token limit holds, the server's usage is charged,
and a whole run ends in a final state or an open escalation. Only the built-in tools are offered,
so the plan prompt stays about 1,000 tokens (the expense tools' catalogue triples it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import queue
from models.engine.queue import TASK_COORDINATE
from models.engine.runs import submit_run
from models.errors import ProviderError
from models.plans.plans import StepSpec, parse_plan
from models.plans.tools import catalog, load_tool_modules
from models.settings import get_settings
from models.tables import Escalation, Run, RunEvent
from ops.llama_server import MODEL_ALIAS, LlamaServer
from ops.stack import LocalStack
from tests.integration.conftest import other_engine, run_steps, wait_for_run
from worker.model_calls.prompts import plan_prompt
from worker.model_calls.providers import ModelRequest, OpenAIProvider, StructuredOutput

pytestmark = pytest.mark.integration

TOOL_MODULES = ["worker.tools.builtin"]
# On 2 busy cores SmolLM2-135M reads a prompt at about 80-100 tokens/s and writes 20-40 tokens/s:
# a 1,000-token plan prompt takes 10-15 s, and an answer of 256 tokens up to 13 s.
REQUEST_TIMEOUT_S = 100
ANSWER_MAX_TOKENS = 256  # AGENTQ_RESERVED_OUTPUT_TOKENS: each answer's token limit
SCHEMA_ANSWERS = ("plan.invalid", "replan.invalid", "extract_facts.invalid")
LOCAL_ENV = {
    "AGENTQ_PROVIDER": "openai",
    "AGENTQ_MODEL": MODEL_ALIAS,
    "OPENAI_API_KEY": "local",  # the SDK wants one; the server checks none
    "AGENTQ_STRUCTURED_OUTPUT": "json_object",
    "AGENTQ_MAX_TOKENS_FIELD": "max_tokens",
    "AGENTQ_MODEL_PRICES_USD_PER_MTOK": json.dumps({MODEL_ALIAS: {"input": 0, "output": 0}}),
    "AGENTQ_EMBEDDING_PROVIDER": "hash",
    "AGENTQ_TOOL_MODULES": json.dumps(TOOL_MODULES),
    "AGENTQ_CONTEXT_WINDOW_TOKENS": "8192",  # the server's --n_ctx
    "AGENTQ_RESERVED_OUTPUT_TOKENS": str(ANSWER_MAX_TOKENS),
    # The ladder for a slow model: 100 x 1 < 110 < 120 < 130 < lease 140 < visibility 600.
    "AGENTQ_MODEL_REQUEST_TIMEOUT_S": str(REQUEST_TIMEOUT_S),
    "AGENTQ_MODEL_MAX_ATTEMPTS": "1",
    "AGENTQ_STEP_TIME_LIMIT_S": "110",
    "AGENTQ_SOFT_TIME_LIMIT_S": "120",
    "AGENTQ_HARD_TIME_LIMIT_S": "130",
    "AGENTQ_LEASE_S": "140",
    "AGENTQ_VISIBILITY_TIMEOUT_S": "600",
    "AGENTQ_QUEUED_STALE_S": "300",  # one worker process: a queued step waits for the model
    "AGENTQ_PHASE_STALE_S": "300",
    "NO_PROXY": "127.0.0.1,localhost",
}


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    with LlamaServer() as server:
        yield server


@pytest.fixture(scope="module")
def local_engine(llama: LlamaServer) -> Iterator[LocalStack]:
    """An engine whose one worker process plans, runs and answers with the local model."""
    with other_engine({**LOCAL_ENV, "AGENTQ_OPENAI_BASE_URL": llama.url}) as stack:
        yield stack


def provider(llama: LlamaServer, structured_output: StructuredOutput) -> OpenAIProvider:
    return OpenAIProvider(
        model=MODEL_ALIAS,
        base_url=llama.url,
        api_key="local",
        request_timeout_s=REQUEST_TIMEOUT_S,
        structured_output=structured_output,
        max_tokens_field="max_tokens",
    )


def plan_request(goal: str) -> ModelRequest:
    """What the planner asks, without the rows a run would add (state, ledger, memory)."""
    load_tool_modules(TOOL_MODULES)
    prompt = plan_prompt(goal, [t for t in catalog() if t["name"] in {"echo", "noop", "sleep"}])
    messages = [
        {"role": "system", "content": prompt.instructions},  # instructions and catalogue
        {"role": "user", "content": f"Goal: {goal}"},
        {"role": "user", "content": prompt.task},
    ]
    return ModelRequest(
        purpose="plan",
        messages=messages,
        payload=prompt.payload,
        json_schema=prompt.json_schema,
        max_output_tokens=ANSWER_MAX_TOKENS,
    )


def test_a_constrained_plan_answer_is_json_of_the_plan_schema(
    llama: LlamaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grammar admits only JSON of the plan schema: a finished answer parses as a plan's
    shape; one cut off at the token limit (SmolLM2 can loop writing `expect` entries until it
    is: 256 tokens on 2026-12-03, deterministically) is a prefix of such JSON, which agentq
    refuses as cut off (`worker.model_calls.structured.ask`), never free text."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    completion = provider(llama, "json_object").complete(plan_request("Say hello to Ana"))
    assert completion.text.lstrip().startswith("{"), completion.text
    assert completion.model == MODEL_ALIAS and completion.offline is False
    assert 0 < completion.completion_tokens <= ANSWER_MAX_TOKENS
    assert completion.prompt_tokens > 500  # the server's count of the whole chat prompt
    if completion.finish_reason == "length":
        assert completion.completion_tokens == ANSWER_MAX_TOKENS
        assert '"steps"' in completion.text[:40], completion.text
        return
    assert completion.finish_reason == "stop", completion.text
    plan = json.loads(completion.text)  # the grammar admits nothing else
    assert {"steps"} <= set(plan) <= {"steps", "success_criteria"} and plan["steps"]
    for step in plan["steps"]:
        assert {"name", "kind"} <= set(step) <= set(StepSpec.model_fields)
        assert step["kind"] in ("tool", "model")


def test_the_answer_token_limit_holds(llama: LlamaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    story = ModelRequest(
        purpose="step",
        messages=[{"role": "user", "content": "Write a long story about a dragon."}],
        payload={},
        max_output_tokens=12,
    )
    completion = provider(llama, "json_object").complete(story)
    assert (completion.finish_reason, completion.completion_tokens) == ("length", 12)


def test_the_server_refuses_openai_structured_outputs(
    llama: LlamaServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why `AGENTQ_STRUCTURED_OUTPUT=json_object` exists: llama-cpp-python 0.3.36 accepts only
    `text` and `json_object` as `response_format.type` (an HTTP 500 names the rule)."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with pytest.raises(ProviderError, match="json_object"):
        provider(llama, "json_schema").complete(plan_request("Say hello to Ana"))


def events(run_id: int, kinds: tuple[str, ...]) -> list[RunEvent]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, col(RunEvent.kind).in_(kinds))
        return list(session.exec(stmt.order_by(col(RunEvent.id))))


def submit(goal: str, steps: list[dict[str, Any]] | None = None) -> int:
    plan = None if steps is None else parse_plan({"steps": steps}, tools=[])
    with session_scope() as session:
        run = submit_run(
            session, settings=get_settings(), user_id="local", goal=goal, plan=plan, replans=0
        )
        run_id = run.id or 0
    queue.send(TASK_COORDINATE, run_id)
    return run_id


def check_settled_on_the_local_model(run_id: int) -> Run:
    """The run ended (or waits on an open escalation); every answered call carries the server's
    usage, within the answer's token limit, charged to the run; no schema answer was not JSON."""
    run = wait_for_run(run_id, timeout_s=240, memory=True)  # its extraction call charged too
    assert run.status in ("succeeded", "failed", "waiting_review")
    if run.status == "waiting_review":
        with session_scope() as session:
            escalation = session.exec(select(Escalation).where(Escalation.run_id == run_id)).one()
        assert escalation.status == "open"
    calls = [e.detail for e in events(run_id, ("model.call",))]
    answered = [d for d in calls if d["outcome"] == "ok"]
    assert answered, calls
    for d in answered:
        assert d["model"] == MODEL_ALIAS and d["offline"] is False
        assert d["prompt_tokens"] > 0 and 0 < d["completion_tokens"] <= ANSWER_MAX_TOKENS
        assert d["cost_usd"] == 0
    # the server's own counts (SmolLM2's tokenizer), not agentq's tiktoken estimate
    assert [d["prompt_tokens"] for d in answered] != [
        d["estimated_prompt_tokens"] for d in answered
    ]
    assert run.tokens_used == sum(d["prompt_tokens"] + d["completion_tokens"] for d in answered)
    invalid = [e.detail["error"] for e in events(run_id, SCHEMA_ANSWERS)]
    assert not [error for error in invalid if "not JSON" in error], invalid
    return run


def test_a_run_planned_by_the_local_model(local_engine: LocalStack) -> None:
    run = check_settled_on_the_local_model(submit("Say hello to Ana"))
    purposes = [e.detail["purpose"] for e in events(run.id or 0, ("model.call",))]
    assert purposes[0] == "plan"


def test_a_run_of_a_model_step_on_the_local_model(local_engine: LocalStack) -> None:
    greet = {"name": "greet", "kind": "model", "instruction": "Write a one-line greeting for Ana."}
    run = check_settled_on_the_local_model(submit("Greet Ana", [greet]))
    (step,) = run_steps(run.id or 0)
    assert step.status == "succeeded" and step.result is not None
    assert (step.result["model"], step.result["offline"]) == (MODEL_ALIAS, False)
    purposes = {e.detail["purpose"] for e in events(run.id or 0, ("model.call",))}
    assert {"step", "synthesize"} <= purposes
