"""The running summary of a run's older turns: when a call's context folds turns into it, and how.

A context keeps the last turns verbatim and as many older ones as fit its budget
(`worker.memory.context.assemble`); what the dropped turns said is kept by the run's rolling
summary. A fold is one summarize call (a model call, charged to the run) that writes a new summary
from the previous one and a batch of turns, recorded as a `run_summaries` row that says which turns
it covers (`covers_through_id`).

Issue 31, item 5: each call folded the turns it dropped at once, at most half its own budget per
summarize call, so a 41-step run in a 4k window made a summarize call for nearly every model call
(19 for 11 contexts, 41,743 tokens). Now:

- a fold is due (`due`) when the context drops a turn the summary does not cover and the turns the
  summary does not cover (but the last `VERBATIM_TURNS`) fill one summarize call; until then the
  dropped ones wait, less than one fold's worth, their key values in the ledger
  (`worker.memory.ledger`) and their rows whole;
- a fold takes the oldest of those turns, as many as fit one summarize call's input (`capacity`:
  its budget less its instructions, the previous summary and the frame of its task), so N turns
  cost about their total over the capacity in calls, not one call per model call;
- each turn is shortened for the summarizer to the summary's own length (a summary cannot keep
  more of one turn than its whole length; the row keeps the turn whole);
- the summary is at most `AGENTQ_SUMMARY_MAX_TOKENS`, `SUMMARY_SHARE` of the budget and the
  answer's limit (`summary_tokens`), so a small window's context has room for it beside the ledger.

Pinned facts are run state, never turns (`worker.memory.working_memory.state_text`): no fold
reads or replaces them (DESIGN.md, invariant 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from models.db import session_scope
from models.engine.runs import get_run
from models.errors import ContextOverflow, ContextTooLong
from models.memory.messages import latest_summary, save_summary
from models.settings import get_settings
from worker.memory.context import (
    REPLY_PRIMING_TOKENS,
    SHORTENED_MARK,
    Context,
    Piece,
    shorten,
    usable_budget,
)
from worker.memory.ledger import Count
from worker.model_calls.calls import call_model
from worker.model_calls.prompts import summarize_prompt
from worker.model_calls.providers import MAX_OUTPUT_TOKENS, ModelRequest

# The most of a summarize call's budget the summary may take: about 400 tokens of a 4k window's
# 3,404, what fits beside the ledger of a 40-step run (issue 12, item 5); 800 from a 7k budget up.
SUMMARY_SHARE: Final = 0.12
CHARS_PER_TOKEN: Final = 4  # the summary's length is asked for in characters
MAX_FOLDS_PER_CALL: Final = 20  # a bound on one context's summarize calls, not a budget
CUT_TOKENS: Final = 2  # a shortened turn's two cuts may each split a token


@dataclass(frozen=True)
class Fold:
    """One summarize call due before a context is sent: `turns` to fold, oldest first, as the
    context holds them, and `summary_tokens`, the new summary's length, tokens."""

    turns: list[Piece]
    summary_tokens: int


def budget(factor: float = 1.0) -> int:
    """A summarize call's prompt budget, tokens: the window less the answer and the margin (it
    sends no schema), divided by `factor` (`worker.memory.working_memory.calibration`)."""
    s = get_settings()
    room = usable_budget(
        context_window=s.context_window_tokens,
        reserved_output=s.reserved_output_tokens,
        tool_schema_tokens=0,
        safety_margin=s.context_safety_margin,
    )
    return int(room / factor)


def answer_tokens() -> int:
    """A summarize call's answer limit, tokens: as every call's, `MAX_OUTPUT_TOKENS` or
    `AGENTQ_RESERVED_OUTPUT_TOKENS` when less."""
    return min(MAX_OUTPUT_TOKENS, get_settings().reserved_output_tokens)


def summary_tokens(fold_budget: int) -> int:
    """The summary's length, tokens: `AGENTQ_SUMMARY_MAX_TOKENS`, at most `SUMMARY_SHARE` of
    `fold_budget` (`budget`) and the answer's limit (`answer_tokens`)."""
    share = int(fold_budget * SUMMARY_SHARE)
    return max(1, min(get_settings().summary_max_tokens, share, answer_tokens()))


def capacity(fold_budget: int, *, previous_tokens: int, length: int, count: Count) -> int:
    """Tokens of turns one summarize call takes (each turn at its `Piece.cost`): `fold_budget`
    less the call's instructions, the previous summary (`previous_tokens`) and its task's frame
    for a summary of `length` tokens (`worker.model_calls.prompts.summarize_prompt`)."""
    frame = summarize_prompt(None, [], length * CHARS_PER_TOKEN)
    fixed = [Piece("system", frame.instructions, count(frame.instructions))]
    fixed.append(Piece("user", frame.task, count(frame.task) + previous_tokens))
    return fold_budget - REPLY_PRIMING_TOKENS - sum(p.cost for p in fixed)


def due(context: Context, *, fold_budget: int, previous_tokens: int, count: Count) -> Fold | None:
    """The fold `context` needs before it is sent, or None: one is due when the context drops
    a turn the summary does not cover (`Context.uncovered`) and the turns the summary does not
    cover (`Context.unfolded`), shortened for the summarizer, fill one call (`capacity`). The
    fold takes the oldest of them that fit one call (at least one)."""
    if not context.uncovered:
        return None
    length = summary_tokens(fold_budget)
    room = capacity(fold_budget, previous_tokens=previous_tokens, length=length, count=count)
    mark = mark_tokens(count)
    costs = [summarized_cost(p, length, mark) for p in context.unfolded]
    if sum(costs) < room:
        return None
    return Fold(oldest_that_fit(context.unfolded, costs, room), length)


def mark_tokens(count: Count) -> int:
    """Tokens of the marker `worker.memory.context.shorten` puts in a turn it cuts, at most
    (for turns of up to a million tokens, rows of up to 10^12)."""
    return count(SHORTENED_MARK.format(dropped=10**6, total=10**6, where=f"message {10**12}"))


def summarized_cost(turn: Piece, max_tokens: int, mark_tokens: int) -> int:
    """What `turn` costs in a summarize call's input once shortened at `max_tokens`, the marker
    costing at most `mark_tokens` (an upper estimate of `worker.memory.context.shorten`'s
    result, which is counted only when the turn is folded)."""
    if turn.tokens <= max_tokens:
        return turn.cost
    return turn.cost - turn.tokens + max_tokens + mark_tokens + CUT_TOKENS


def oldest_that_fit(turns: Sequence[Piece], costs: Sequence[int], room: int) -> list[Piece]:
    """The oldest of `turns` (with their `costs`) whose costs sum to at most `room`; the oldest
    one alone when even it does not fit (each fold moves the summary on)."""
    taken: list[Piece] = []
    for turn, cost in zip(turns, costs, strict=True):
        if taken and cost > room:
            break
        taken.append(turn)
        room -= cost
    return taken


def fold(run_id: int, due_fold: Fold, *, count: Count) -> None:
    """Make the summarize call of `due_fold` and write the new summary of run `run_id`: the
    current summary extended with the fold's turns, each shortened at the summary's length
    (`count` counts a shortened turn and the summary), covering through the last of them. Turns
    a summary written since covers are left out (no call when none is left). Raises
    `ContextOverflow` when the server refuses the request as too long."""
    with session_scope() as session:
        current = latest_summary(session, run_id)
        user_id = get_run(session, run_id).user_id
    covered = current.covers_through_id if current else 0
    turns = [t for t in due_fold.turns if (t.ref or 0) > covered]
    if not turns:
        return
    length = due_fold.summary_tokens
    texts = [
        shorten(t, max_tokens=length, where=f"message {t.ref}", count=count).text for t in turns
    ]
    prompt = summarize_prompt(current.content if current else None, texts, length * CHARS_PER_TOKEN)
    messages = [
        {"role": "system", "content": prompt.instructions},
        {"role": "user", "content": prompt.task},
    ]
    request = ModelRequest("summarize", messages, prompt.payload, max_output_tokens=answer_tokens())
    try:
        completion = call_model(run_id, request)
    except ContextTooLong as exc:  # the batch fits our count, not the server's window
        raise ContextOverflow(f"the summary of earlier turns was refused: {exc}") from exc
    with session_scope() as session:
        save_summary(
            session,
            run_id=run_id,
            user_id=user_id,
            covers_through_id=turns[-1].ref or 0,
            content=completion.text,
            token_count=count(completion.text),
        )
