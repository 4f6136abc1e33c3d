"""Folding older turns into the running summary (issue 31, item 5): when a fold is due, which
turns one summarize call takes, how many calls N turns cost, that pinned facts survive, and that a
plan call fits a 4k window."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from models.memory.memory_admin import Recalled
from models.memory.messages import Message, RunSummary
from models.memory.tokens import count_message_tokens, count_tokens
from models.plans.tools import catalog
from models.settings import get_settings
from models.tables import Run
from worker.memory import folds
from worker.memory.context import Context, Piece, assemble, shorten
from worker.memory.working_memory import RunRead, budget, layers_of
from worker.model_calls.offline import OfflineProvider
from worker.model_calls.prompts import plan_prompt, step_prompt, summarize_prompt
from worker.model_calls.providers import ModelRequest

PINNED = {"currency": "EUR", "cost_centre": "CC-4410"}


@pytest.fixture
def window_4k(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A 4k window with 512 tokens kept for the answer (`ops.local_model`'s setting), and the
    product's default tools (no test's own modules or MCP servers left in the environment by
    another test of this process)."""
    monkeypatch.delenv("AGENTQ_TOOL_MODULES", raising=False)
    monkeypatch.delenv("AGENTQ_MCP_SERVERS", raising=False)
    monkeypatch.setenv("AGENTQ_CONTEXT_WINDOW_TOKENS", "4096")
    monkeypatch.setenv("AGENTQ_RESERVED_OUTPUT_TOKENS", "512")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


def turn(i: int, words: int = 120) -> Piece:
    text = f"step day_{i}: " + " ".join(f"receipt {i}.{j} taxi 4.40 EUR;" for j in range(words))
    return Piece("tool", text, count_tokens(text), ref=1000 + i)


def context(unfolded: list[Piece], dropped: int) -> Context:
    """A context whose older turns are `unfolded`, the oldest `dropped` of them left out."""
    return Context([], 0, 3000, 0, 0, uncovered=unfolded[:dropped], unfolded=unfolded)


def test_the_summary_fits_a_small_window_and_keeps_its_setting_in_a_large_one(
    window_4k: None,
) -> None:
    fold_budget = folds.budget()
    assert fold_budget == 3404  # (4096 - 512) x 0.95
    assert folds.summary_tokens(fold_budget) == 408  # 12% of it, not the default 800
    assert folds.summary_tokens(1_000_000) == 512  # never more than the answer's limit


def test_a_large_window_keeps_the_summary_length_set() -> None:
    assert folds.summary_tokens(folds.budget()) == get_settings().summary_max_tokens == 800


def test_no_fold_while_every_turn_the_summary_misses_is_in_the_context(window_4k: None) -> None:
    many = [turn(i) for i in range(30)]
    assert (
        folds.due(context(many, 0), fold_budget=3404, previous_tokens=0, count=count_tokens) is None
    )


def test_dropped_turns_wait_until_they_fill_a_fold(window_4k: None) -> None:
    room = folds.capacity(3404, previous_tokens=0, length=408, count=count_tokens)
    few = [turn(i, words=20) for i in range(4)]
    assert sum(t.cost for t in few) < room
    assert (
        folds.due(context(few, 2), fold_budget=3404, previous_tokens=0, count=count_tokens) is None
    )


def test_a_fold_takes_the_oldest_turns_that_fit_one_call(window_4k: None) -> None:
    many = [turn(i) for i in range(30)]
    due = folds.due(context(many, 20), fold_budget=3404, previous_tokens=300, count=count_tokens)
    assert due is not None and due.summary_tokens == 408
    assert [t.ref for t in due.turns] == [t.ref for t in many[: len(due.turns)]]
    # shortened for the summarizer, they fill the call's input and the next one would not fit
    room = folds.capacity(3404, previous_tokens=300, length=408, count=count_tokens)
    mark = folds.mark_tokens(count_tokens)
    estimated = [folds.summarized_cost(t, 408, mark) for t in many]
    taken = len(due.turns)
    assert sum(estimated[:taken]) <= room < sum(estimated[: taken + 1])
    assert taken >= 5  # one per call before: each ~1,450 tokens, a batch half a budget (1,702)
    shortened = [shorten(t, max_tokens=408, where="m", count=count_tokens) for t in many]
    assert sum(t.cost for t in shortened[:taken]) <= sum(estimated[:taken])  # an upper estimate
    request = summarize_prompt("x " * 300, [t.text for t in shortened[:taken]], 1632)
    messages = [
        {"role": "system", "content": request.instructions},
        {"role": "user", "content": request.task},
    ]
    assert count_message_tokens(messages) <= 3404  # the call fits its window


def history_of(turns: int) -> tuple[Run, RunRead, list[Message]]:
    run = Run(id=1, user_id="ana", goal="Total my taxi receipts in EUR.", status="running")
    messages = []
    for i in range(turns):
        piece = turn(i)
        row = Message(id=piece.ref, run_id=1, user_id="ana", role="tool", content=piece.text)
        row.token_count = piece.tokens
        messages.append(row)
    return run, RunRead(dict(PINNED), {}, []), messages


def fold_until_done(
    run: Run, read: RunRead, history: list[Message]
) -> tuple[Context, list[RunSummary]]:
    """Assemble a step's context in a 4k window, folding as `request_for` does (the offline
    summarizer writes each summary), until no fold is due."""
    prompt, summaries = step_prompt("Add up the receipts", {}), list[RunSummary]()
    while True:
        summary = summaries[-1] if summaries else None
        layers = layers_of(run, prompt, Recalled(), read, history, summary)
        ctx = assemble(layers, budget=budget(prompt))
        due = folds.due(
            ctx,
            fold_budget=folds.budget(),
            previous_tokens=layers.summary.tokens if layers.summary else 0,
            count=count_tokens,
        )
        if due is None:
            return ctx, summaries
        length = due.summary_tokens
        texts = [
            shorten(t, max_tokens=length, where="m", count=count_tokens).text for t in due.turns
        ]
        asked = summarize_prompt(summary.content if summary else None, texts, length * 4)
        written = OfflineProvider().complete(ModelRequest("summarize", [], asked.payload)).text
        covers = due.turns[-1].ref or 0
        row = RunSummary(id=len(summaries) + 1, run_id=1, user_id="ana", content=written)
        row.covers_through_id, row.token_count = covers, count_tokens(written)
        summaries.append(row)


@pytest.mark.parametrize("turns", [12, 40, 90])
def test_n_turns_cost_at_most_their_total_over_the_fold_capacity_in_calls(
    window_4k: None, turns: int
) -> None:
    run, read, history = history_of(turns)
    ctx, summaries = fold_until_done(run, read, history)
    older = [Piece("tool", m.content, m.token_count, m.id) for m in history[:-2]]
    fold_budget, mark = folds.budget(), folds.mark_tokens(count_tokens)
    length = folds.summary_tokens(fold_budget)
    costs = [folds.summarized_cost(t, length, mark) for t in older]
    # what one fold surely takes: the capacity beside the longest previous summary, less the
    # largest turn (the room a fold may leave unused)
    longest = max(s.token_count for s in summaries)
    room = folds.capacity(fold_budget, previous_tokens=longest, length=length, count=count_tokens)
    assert 1 <= len(summaries) <= math.ceil(sum(costs) / (room - max(costs)))
    assert len(summaries) < turns / 4  # a call per turn before
    covered = [s.covers_through_id for s in summaries]
    assert covered == sorted(set(covered))  # each fold moves the summary on
    # less than one fold's worth waits unfolded
    last = summaries[-1].token_count
    left = folds.capacity(fold_budget, previous_tokens=last, length=length, count=count_tokens)
    assert sum(folds.summarized_cost(t, length, mark) for t in ctx.unfolded) < left
    text = "\n".join(m["content"] for m in ctx.messages)
    assert "Summary of earlier turns" in text
    assert count_message_tokens(ctx.messages) == ctx.tokens <= ctx.budget


def test_pinned_facts_survive_folding(window_4k: None) -> None:
    run, read, history = history_of(60)
    said = "the user: report in EUR against cost centre CC-4410"
    history[0].content, history[0].token_count = said, count_tokens(said)
    ctx, summaries = fold_until_done(run, read, history)
    assert len(summaries) >= 3 and summaries[0].covers_through_id >= (history[0].id or 0)
    text = "\n".join(m["content"] for m in ctx.messages)
    assert said not in text  # the turn that stated them is folded away
    state = next(m["content"] for m in ctx.messages if m["content"].startswith("Goal"))
    assert "- currency = EUR" in state and "- cost_centre = CC-4410" in state  # run state


def test_a_plan_call_fits_a_4k_window(window_4k: None) -> None:
    """Issue 31, item 5: the plan call needed 2,623 tokens of a 2,337-token budget, its tool
    catalogue indented JSON in the never-trimmed instructions."""
    prompt = plan_prompt("File my Lisbon trip expense report", catalog())
    run = Run(id=1, user_id="ana", goal="File my Lisbon trip expense report", status="planning")
    layers = layers_of(run, prompt, Recalled(), RunRead(dict(PINNED), {}, []), [], None)
    ctx = assemble(layers, budget=budget(prompt))
    assert count_message_tokens(ctx.messages) == ctx.tokens <= ctx.budget == budget(prompt)
    assert all(f'"name":"{t["name"]}"' in prompt.instructions for t in catalog())
    assert ctx.tokens < 0.8 * ctx.budget  # room left for the ledger and recalled memory
