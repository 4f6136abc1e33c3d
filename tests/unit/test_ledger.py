"""The ledger of done steps: key values by reference, no result twice, folded oldest first; and a
40-step run with ~400-token results assembled in a 4k window (issue 12, item 5)."""

from __future__ import annotations

import json
from typing import Any

from models.memory.memory_admin import Recalled
from models.memory.messages import Message
from models.memory.tokens import count_message_tokens, count_tokens
from models.tables import Run, Step
from worker.execution.attempts import Outcome
from worker.execution.step_turns import turn_text
from worker.memory import ledger
from worker.memory.context import VERBATIM_TURNS, assemble, usable_budget
from worker.memory.working_memory import RunRead, layers_of
from worker.model_calls.prompts import step_prompt

WINDOW_TOKENS = 4096
RESERVED_OUTPUT_TOKENS = 512  # the README's local-model setting; the default 4096 is the window


def step(
    i: int, status: str = "succeeded", result: dict[str, Any] | None = None, **kw: Any
) -> Step:
    return Step(
        id=100 + i,
        run_id=1,
        plan_version=1,
        position=i,
        name=kw.pop("name", f"fare_{i}"),
        kind="tool",
        tool="echo",
        args=kw.pop("args", {}),
        status=status,
        result=result,
        **kw,
    )


def receipts(i: int) -> dict[str, Any]:
    """A ~400-token result: long text, a list, and scalars that later steps cite."""
    lines = " ".join(
        f"receipt {i}.{j}: taxi fare {j}.40 EUR, Lyon to the airport;" for j in range(16)
    )
    return {
        "text": lines,
        "total": 514.6 + i,
        "currency": "EUR",
        "ok": True,
        "items": list(range(25)),
    }


def test_key_values_keep_scalars_verbatim_and_name_the_reference() -> None:
    done = step(1, result={**receipts(1), "note": None, "by": {"a": 1, "b": 2}})
    (entry,) = ledger.entries(
        [done], with_turns={done.id or 0}, count=count_tokens, cap_tokens=1000
    )
    assert entry.full is None  # its turn holds the result
    assert '"total": 515.6' in entry.keys and '"currency": "EUR"' in entry.keys
    assert '"ok": true' in entry.keys and '"note": null' in entry.keys
    assert '"items": "<list of 25>"' in entry.keys and '"by": "<object of 2 keys>"' in entry.keys
    assert "receipt 1.0: taxi fare 0.40 EUR" in entry.keys  # a long string's head, verbatim
    assert "receipt 1.15" not in entry.keys and "chars)" in entry.keys  # ... and how much is cut
    assert entry.keys.endswith(f"(= steps.fare_1, row {done.id})")
    assert count_tokens(entry.keys) < count_tokens(json.dumps(done.result)) / 3


def test_a_step_with_no_turn_shows_its_whole_result_once() -> None:
    answered = step(1, result=receipts(1), name="answer")
    (entry,) = ledger.entries([answered], with_turns=set(), count=count_tokens, cap_tokens=1000)
    assert entry.full is not None and "receipt 1.15:" in entry.full
    assert "receipt 1.15:" in ledger.render([entry], count_tokens).text


def test_fields_past_the_cap_are_counted_not_shown() -> None:
    many = {f"k{i}": i for i in range(ledger.KEY_VALUES_MAX + 3)}
    text = ledger.key_values(many)
    assert f'"k{ledger.KEY_VALUES_MAX - 1}"' in text and f'"k{ledger.KEY_VALUES_MAX}"' not in text
    assert text.endswith("(+3 more fields)")


def test_folding_collapses_the_oldest_and_keeps_failures_and_pending_steps() -> None:
    steps = [step(i, result=receipts(i)) for i in range(10)]
    steps += [step(10, "failed", error="rate service down " * 50), step(11, "pending")]
    found = ledger.entries(
        steps, with_turns={s.id or 0 for s in steps[:9]}, count=count_tokens, cap_tokens=1000
    )
    whole = ledger.render(found, count_tokens)
    assert whole.text.count("receipt 9.15:") == 1  # no turn: verbatim, once
    folded = ledger.fold(found, 400, count_tokens)
    assert folded.tokens <= 400 < whole.tokens
    assert folded.tokens == count_tokens(folded.text)
    lines = folded.text.splitlines()
    collapsed = next(line for line in lines if "earlier steps succeeded" in line)
    assert collapsed.startswith(f"{collapsed.split()[0]} earlier steps succeeded")
    assert "fare_0" in collapsed  # the oldest went first
    assert "12. fare_11 [pending]" in folded.text
    assert "11. fare_10 [failed] tool echo -> failed: rate service down" in folded.text
    assert '10. fare_9 [succeeded] tool echo -> {"text"' in folded.text  # newest keeps its keys
    assert "receipt 9.15:" not in folded.text  # ... once its verbatim result went


def test_a_fold_that_cannot_fit_is_the_smallest_one() -> None:
    steps = [step(i, result=receipts(i)) for i in range(5)]
    found = ledger.entries(steps, with_turns=set(), count=count_tokens, cap_tokens=1000)
    smallest = ledger.fold(found, 1, count_tokens)
    assert smallest.text.splitlines() == [
        ledger.HEADER,
        ledger.COLLAPSED.format(n=5, names=", ".join(s.name for s in steps)),
    ]


def forty_step_run() -> tuple[Run, list[Step], list[Message]]:
    """A run of 40 done steps, each with a ~400-token result, and the turns they wrote."""
    run = Run(id=1, user_id="ana", goal="Total my 40 taxi receipts in EUR.", status="running")
    steps, history = [], []
    for i in range(40):
        done = step(i, result=receipts(i), args={"value": f"batch {i}"})
        content = turn_text(done, Outcome("succeeded", result=done.result))
        history.append(
            Message(
                id=1000 + i,
                run_id=1,
                user_id="ana",
                step_id=done.id,
                role="tool",
                content=content,
                token_count=count_tokens(content),
            )
        )
        steps.append(done)
    return run, steps, history


def test_forty_steps_with_400_token_results_fit_a_4k_window() -> None:
    run, steps, history = forty_step_run()
    assert all(390 <= count_tokens(json.dumps(s.result)) <= 450 for s in steps)
    prompt = step_prompt("Add up the totals of all batches", {})
    budget = usable_budget(
        context_window=WINDOW_TOKENS,
        reserved_output=RESERVED_OUTPUT_TOKENS,
        tool_schema_tokens=0,
        safety_margin=0.05,
    )
    read = RunRead(by_user={"currency": "EUR"}, by_reviewers={}, steps=steps)
    layers = layers_of(run, prompt, Recalled(), read, history, summary=None)
    # the whole results fill nearly four windows; even their key values are over the budget
    assert sum(count_tokens(json.dumps(s.result)) for s in steps) > 3 * WINDOW_TOKENS
    assert layers.ledger.tokens > budget
    ctx = assemble(layers, budget=budget)
    assert count_message_tokens(ctx.messages) == ctx.tokens <= budget
    text = "\n".join(m["content"] for m in ctx.messages)
    # the last two exchanges verbatim, just before the run's counters and the task
    assert [m["content"] for m in ctx.messages[-2 - VERBATIM_TURNS : -2]] == [
        m.content for m in history[-VERBATIM_TURNS:]
    ]
    # every step is in the ledger: the newest with key values, the oldest by name
    assert '"total": 553.6' in text and "(= steps.fare_39, row 139)" in text
    assert "earlier steps succeeded" in text and "fare_0, fare_1" in text
    assert "Pinned facts" in text and "currency = EUR" in text
    assert ctx.uncovered  # the older turns wait for the summary
    assert ctx.uncovered[-1].ref == history[-1 - ctx.turns_used].id
