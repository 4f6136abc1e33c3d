"""Calls of one run share their context up to the run's counters, so a server's prompt cache
(llama.cpp's prefix match, OpenAI's cached input) reads it once (issue 31, item 6: two calls of
one model step shared 75 tokens, up to the tokens spent written in the run state)."""

from __future__ import annotations

from models.memory.memory_admin import Recalled
from models.memory.messages import Message
from models.memory.tokens import count_tokens
from models.tables import Run
from worker.memory.context import assemble
from worker.memory.working_memory import RunRead, layers_of
from worker.model_calls.prompts import step_prompt

PINNED = {"currency": "EUR", "cost_centre": "CC-4410"}


def turn(i: int) -> Message:
    text = f"receipt {i}: taxi from the airport, 23.{i:02d} EUR, paid by card"
    row = Message(id=i + 1, run_id=1, user_id="ana", role="tool", content=text)
    row.token_count = count_tokens(text)
    return row


def messages(run: Run, history: list[Message]) -> list[dict[str, str]]:
    prompt = step_prompt("Add up the receipts", {})
    layers = layers_of(run, prompt, Recalled(), RunRead(dict(PINNED), {}, []), history, None)
    return assemble(layers, budget=100_000).messages


def shared_tokens(a: list[dict[str, str]], b: list[dict[str, str]]) -> int:
    """Tokens of the longest common prefix of the two prompts' texts, as sent in order."""
    first, second = ("\n".join(m["content"] for m in x) for x in (a, b))
    pairs = enumerate(zip(first, second, strict=False))
    n = next((i for i, (x, y) in pairs if x != y), min(len(first), len(second)))
    return count_tokens(first[:n])


def a_run(tokens_used: int) -> Run:
    goal = "Total my taxi receipts in EUR."
    run = Run(id=1, user_id="ana", goal=goal, status="running", plan_version=1)
    run.tokens_used, run.tokens_limit = tokens_used, 50_000
    return run


def test_a_later_call_of_the_run_repeats_the_earlier_one_up_to_its_counters() -> None:
    history = [turn(i) for i in range(6)]
    before = messages(a_run(1_204), history)
    later = messages(a_run(2_977), [*history, turn(6)])
    # every message of the earlier call but its counters and task opens the later one
    assert later[: len(before) - 2] == before[:-2]
    assert before[-2]["content"].startswith("Run 1: running, plan version 1")
    assert "tokens 1204/50000" in before[-2]["content"]
    assert "tokens" not in "".join(m["content"] for m in before[:-2])
    shared = shared_tokens(before, later)
    total = count_tokens("\n".join(m["content"] for m in before))
    assert shared > 0.8 * total  # was the instructions, goal and pinned facts alone


def test_the_counters_are_never_trimmed() -> None:
    run = Run(id=7, user_id="ana", goal="Total my taxi receipts in EUR.", status="running")
    history = [turn(i) for i in range(40)]
    prompt = step_prompt("Add up the receipts", {})
    layers = layers_of(run, prompt, Recalled(), RunRead(dict(PINNED), {}, []), history, None)
    small = assemble(layers, budget=600)
    texts = [m["content"] for m in small.messages]
    assert texts[-1].startswith("Do this step") and texts[-2].startswith("Run 7: running")
    assert len([t for t in texts if t.startswith("receipt")]) < 40  # older turns were dropped
