"""Memory in the engine: runs write episodes and facts, later runs recall them, per user only,
and working memory keeps the rule and the ledger under the token budget."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine.runs import get_run
from models.memory import memory_admin
from models.memory.episodes import episodes_of
from models.memory.facts import facts_of
from models.memory.memory_admin import recall_for
from models.memory.messages import RunSummary, add_message
from models.memory.tokens import count_message_tokens, count_tokens
from models.plans.tools import catalog
from models.settings import get_settings
from models.tables import RunEvent
from tests.integration.conftest import run_steps, wait_for_run
from worker.memory import folds, working_memory
from worker.memory.context import Piece
from worker.model_calls.prompts import plan_prompt, step_prompt

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
GOAL = "File my Lisbon trip expense report"
FACTS = {"currency": "EUR", "cost_centre": "CC-4410", "trip": "lisbon-2026-10"}


def _user(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _tools_of_plan_v1(run_id: int) -> list[str | None]:
    return [s.tool for s in run_steps(run_id) if s.plan_version == 1]


def test_second_run_recalls_the_episode_and_plans_around_the_failure(make_run: MakeRun) -> None:
    ana = _user("ana")
    secret = {**FACTS, "nickname": "blue-heron-17"}
    first = wait_for_run(make_run(None, user=ana, goal=GOAL, facts=secret, replans=1), memory=True)
    assert first.status == "succeeded" and first.replans_used == 1
    with session_scope() as session:
        (episode,) = episodes_of(session, user_id=ana)
        texts = {f.text for f in facts_of(session, user_id=ana)}
    assert episode.run_id == first.id and episode.outcome == "succeeded"
    assert {"step": "rate", "tool": "live_rate", "fixed_by": "cached_rate"}.items() <= (
        episode.failures[0].items()
    )
    assert "The user's cost centre is CC-4410" in texts
    second = wait_for_run(make_run(None, user=ana, goal=GOAL, facts=FACTS, replans=1))
    assert second.status == "succeeded"
    assert _tools_of_plan_v1(second.id or 0)[1] == "cached_rate"  # planned from memory
    assert second.replans_used == 0 and second.plan_version == 1
    assert second.final_result and second.final_result["outputs"]["submit"]["total"] == 473.43

    bob = _user("bob")  # another user: none of ana's memory
    third = wait_for_run(make_run(None, user=bob, goal=GOAL, facts=FACTS, replans=1))
    assert _tools_of_plan_v1(third.id or 0)[1] == "live_rate"
    with session_scope() as session:
        seen = recall_for(session, user_id=bob, query="The user's cost centre is CC-4410")
    assert all(f.item.user_id == bob for f in seen.facts)
    assert all(e.item.user_id == bob for e in seen.episodes)
    assert all(e.item.run_id == third.id for e in seen.episodes)
    # nor does bob's working memory, even when asked about ana's words
    request = working_memory.request_for(
        third.id or 0, step_prompt("What is the user's nickname?", {})
    )
    assert "blue-heron" not in str(request.messages) + str(request.payload)
    own = working_memory.request_for(first.id or 0, step_prompt("What is the user's nickname?", {}))
    assert "blue-heron-17" in str(own.messages)  # the same question finds it for ana


def test_a_newer_fact_supersedes_and_forget_removes_everything(make_run: MakeRun) -> None:
    cara, dan = _user("cara"), _user("dan")
    noop = [{"name": "a", "kind": "tool", "tool": "noop"}]
    for user, currency in ((cara, "EUR"), (cara, "USD"), (dan, "EUR")):
        run = wait_for_run(make_run(noop, user=user, facts={"currency": currency}), memory=True)
        assert run.status == "succeeded"
    with session_scope() as session:
        current = facts_of(session, user_id=cara)
        history = facts_of(session, user_id=cara, include_history=True)
    assert [f.text for f in current if f.attribute == "currency"] == ["The user's currency is USD"]
    old = next(f for f in history if f.text == "The user's currency is EUR")
    new = next(f for f in current if f.attribute == "currency")
    assert old.valid_to is not None and old.superseded_by == new.id
    with session_scope() as session:
        counts = memory_admin.forget_user(session, user_id=cara)
    assert counts["facts"] == len(history) and counts["episodes"] == 2 and counts["messages"] >= 2
    with session_scope() as session:
        assert facts_of(session, user_id=cara, include_history=True) == []
        assert episodes_of(session, user_id=cara) == []
        assert [f.text for f in facts_of(session, user_id=dan)] == ["The user's currency is EUR"]


RULE = "RULE: always report totals in EUR with two decimals, and never round up."


def test_130k_tokens_of_history_keep_the_rule_and_the_ledger(make_run: MakeRun) -> None:
    run_id = make_run(
        [{"name": "proof", "kind": "tool", "tool": "echo", "args": {"value": "ledger-7731"}}],
        goal=f"Reconcile my receipts. {RULE}",
        user=_user("eve"),
    )
    wait_for_run(run_id)
    turn = " ".join(f"On day {i} the user filed receipt {i * 7} for the hotel." for i in range(30))
    with session_scope() as session:
        user = get_run(session, run_id).user_id
        total = 0
        for i in range(400):
            role = "user" if i % 2 else "tool"
            total += add_message(
                session, run_id=run_id, user_id=user, role=role, content=f"turn {i}: {turn}"
            ).token_count
    assert total > 130_000
    request = working_memory.request_for(run_id, step_prompt("Total the receipts", {}))
    budget = working_memory.budget(step_prompt("Total the receipts", {}))
    text = "\n".join(m["content"] for m in request.messages)
    assert count_message_tokens(request.messages, get_settings().model) <= budget
    assert RULE in text  # word for word
    assert 'proof [succeeded] tool echo -> {"value": "ledger-7731"}' in text
    assert "turn 399:" in text and "turn 0:" not in text  # newest kept, oldest summarized
    with session_scope() as session:
        summaries = session.exec(select(RunSummary).where(RunSummary.run_id == run_id)).all()
    assert summaries and summaries[-1].content.startswith("[offline]")
    # a second build sums stored counts: it encodes a small fraction of the history
    encoded: list[int] = []
    real = working_memory.count_tokens

    def counting(text: str, model: str | None = None) -> int:
        encoded.append(len(text))
        return real(text, model)

    working_memory.count_tokens = counting  # type: ignore[assignment]
    try:
        working_memory.request_for(run_id, step_prompt("Total the receipts", {}))
    finally:
        working_memory.count_tokens = real  # type: ignore[assignment]
    assert sum(encoded) < 0.05 * len(turn) * 400


def test_memory_events_are_recorded(make_run: MakeRun) -> None:
    run_id = make_run(
        [{"name": "a", "kind": "tool", "tool": "noop"}],
        user=_user("fay"),
        facts={"currency": "EUR"},
    )
    wait_for_run(run_id, memory=True)
    with session_scope() as session:
        kinds = session.exec(
            select(RunEvent.kind).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
        ).all()
    assert "memory.remembered" in kinds and "memory.failed" not in kinds
    # the run ends first; its memory is written after, off the hot path
    assert kinds.index("run.succeeded") < kinds.index("memory.remembered")


def test_a_40_step_run_with_400_token_results_fits_a_4k_window(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 12, item 5: such a run stopped with `context_overflow` in a 4k window, its ledger
    never trimmed and every result in it twice (ledger and turn). Built from the run's rows."""
    fares = [
        " ".join(f"receipt {i}.{j}: taxi fare {j}.40 EUR, Lyon to the airport;" for j in range(21))
        for i in range(40)
    ]
    steps = [
        {"name": f"fare_{i}", "kind": "tool", "tool": "echo", "args": {"value": fare}}
        for i, fare in enumerate(fares)
    ]
    run_id = make_run(steps, goal="Total my 40 taxi receipts", user=_user("gus"))
    assert wait_for_run(run_id, timeout_s=120).status == "succeeded"
    monkeypatch.setenv("AGENTQ_CONTEXT_WINDOW_TOKENS", "4096")
    monkeypatch.setenv("AGENTQ_RESERVED_OUTPUT_TOKENS", "512")
    # the default 800-token summary would not fit beside the ledger: a 4k window wants less
    monkeypatch.setenv("AGENTQ_SUMMARY_MAX_TOKENS", "400")
    get_settings.cache_clear()
    try:
        prompt = step_prompt("Add up the fares", {})
        request = working_memory.request_for(run_id, prompt)  # folds older turns (offline)
        budget = working_memory.budget(prompt)
        model = get_settings().model
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert all(count_tokens(json.dumps({"value": fare}), model) > 390 for fare in fares)
    assert count_message_tokens(request.messages, model) <= budget < 4096 - 512
    text = "\n".join(m["content"] for m in request.messages)
    # the last two turns, verbatim, before the run's counters and the task
    last = [m["content"] for m in request.messages[-4:-2]]
    assert [t.split(":")[0] for t in last] == ["step fare_38", "step fare_39"]
    assert fares[39] in last[1] and text.count(fares[39]) == 2  # its arguments and its result
    assert "(= steps.fare_39, row" in text and "earlier steps succeeded" in text
    assert "fare_0, fare_1" in text  # the oldest are named, their results in the summary
    with session_scope() as session:
        summaries = session.exec(select(RunSummary).where(RunSummary.run_id == run_id)).all()
    assert summaries and "Summary of earlier turns" in text


def test_folding_40_turns_in_a_4k_window_costs_a_few_calls_and_keeps_pinned_facts(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31, item 5: each dropped turn of ~1,000 tokens cost a summarize call of its own
    (half the budget per call), 39 calls for a 41-step run. Now a fold takes as many turns as
    one call's input holds, through the engine's rows and the offline summarizer."""
    run_id = make_run(
        [{"name": "a", "kind": "tool", "tool": "noop"}], user=_user("hal"), facts=FACTS
    )
    assert wait_for_run(run_id).status == "succeeded"
    with session_scope() as session:
        user = get_run(session, run_id).user_id
        rows = [
            add_message(
                session,
                run_id=run_id,
                user_id=user,
                role="tool",
                content=f"step day_{i}: "
                + " ".join(f"receipt {i}.{j}: taxi {j}.40 EUR;" for j in range(75)),
            )
            for i in range(40)
        ]
        history = [Piece(m.role, m.content, m.token_count, m.id) for m in rows]
    monkeypatch.setenv("AGENTQ_CONTEXT_WINDOW_TOKENS", "4096")
    monkeypatch.setenv("AGENTQ_RESERVED_OUTPUT_TOKENS", "512")
    get_settings.cache_clear()
    try:
        request = working_memory.request_for(run_id, step_prompt("Total the receipts", {}))
        prompt_budget = working_memory.budget(step_prompt("Total the receipts", {}))
        fold_budget = folds.budget()
        plan = plan_prompt(GOAL, catalog())
        fresh = make_run(None, user=_user("ida"), goal=GOAL, facts=FACTS, start=False)
        planning = working_memory.request_for(fresh, plan)  # no `context_overflow`
        plan_budget = working_memory.budget(plan)
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    with session_scope() as session:
        summaries = session.exec(
            select(RunSummary).where(RunSummary.run_id == run_id).order_by(col(RunSummary.id))
        ).all()
        calls = session.exec(
            select(RunEvent).where(RunEvent.run_id == run_id, col(RunEvent.kind) == "model.call")
        ).all()
    folded = [c for c in calls if c.detail["purpose"] == "summarize"]
    assert all(900 <= t.tokens <= 1100 for t in history) and len(summaries) == len(folded)
    # N turns cost at most their total over what one fold surely takes: the capacity beside
    # the longest previous summary, less the largest turn (the room a fold may leave unused)
    length = folds.summary_tokens(fold_budget)
    mark = folds.mark_tokens(count_tokens)
    costs = [folds.summarized_cost(t, length, mark) for t in history[:-2]]
    longest = max(s.token_count for s in summaries)
    room = folds.capacity(fold_budget, previous_tokens=longest, length=length, count=count_tokens)
    assert 1 <= len(folded) <= math.ceil(sum(costs) / (room - max(costs)))
    assert len(folded) <= 6  # a few calls, not one per turn
    covered = [s.covers_through_id for s in summaries]
    assert covered == sorted(set(covered))  # each fold moves the summary on
    assert all(c.detail["estimated_prompt_tokens"] <= fold_budget for c in folded)
    text = "\n".join(m["content"] for m in request.messages)
    assert count_message_tokens(request.messages, get_settings().model) <= prompt_budget
    assert "Summary of earlier turns" in text and "step day_39:" in text
    assert "- currency = EUR" in text and "- cost_centre = CC-4410" in text  # never folded
    plan_tokens = count_message_tokens(planning.messages, get_settings().model)
    assert plan_tokens <= plan_budget < 4096 - 512
    assert '"name":"submit_report"' in planning.messages[0]["content"]  # the whole catalogue
