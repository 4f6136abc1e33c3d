"""Build one model call's request from rows: the working memory of that call.

`request_for(run_id, prompt)` reads the run state, pinned facts, the ledger of the current plan,
recalled procedures (`worker.phases.procedure_context`), recalled facts and episodes (none once a
reviewer's words are in the call: `worker.memory.withholding`), the rolling summary and the recent
turns, and assembles them with `worker.memory.context.assemble` under the budget
`AGENTQ_CONTEXT_WINDOW_TOKENS - RESERVED_OUTPUT_TOKENS - tool schemas`, less
`AGENTQ_CONTEXT_SAFETY_MARGIN`, in the server's tokens: divided by what the model's server counts
for each of ours (`calibration`, `models.engine.token_calibrations`). When the turns the summary
does not cover fill a summarize call and the context drops some of them, the oldest are folded
into a new summary (`worker.memory.folds`: a model call, charged to the run) before the request
is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlmodel import Session

from models.db import session_scope
from models.engine import events, token_calibrations
from models.engine.runs import get_run, pinned_by_author
from models.memory.erasures import may_write
from models.memory.memory_admin import Recalled, embeds_remotely, query_vector, recalls
from models.memory.messages import Message, RunSummary, latest_summary, turns
from models.memory.tokens import count_tokens, count_tool_schema_tokens
from models.plans.plans import current_steps
from models.settings import get_settings
from models.tables import Run, Step
from worker.memory import folds, ledger, withholding
from worker.memory.context import (
    Context,
    Layers,
    Piece,
    assemble,
    shorten,
    usable_budget,
)
from worker.model_calls.prompts import Prompt
from worker.model_calls.providers import ModelRequest
from worker.phases import adoption, procedure_context


def _piece(role: str, text: str, ref: int | None = None) -> Piece:
    return Piece(role, text, count_tokens(text, get_settings().model), ref)


def state_text(run: Run, facts: dict[str, str], by_reviewers: dict[str, str] | None = None) -> str:
    """The never-trimmed run state: goal and pinned facts (the user's, then those reviewers set,
    labelled as such: a reviewer's words are never the user's). The same on every call of a run
    until a fact is pinned; what changes per call is in `counters_text`."""
    pinned = "\n".join(f"- {k} = {v}" for k, v in facts.items()) or "- (none)"
    answered = "\n".join(f"- {k} = {v}" for k, v in (by_reviewers or {}).items())
    if answered:
        answered = f"Pinned by a reviewer (run state, not the user's statements):\n{answered}\n"
    return (
        f"Goal (from the user, verbatim): {run.goal}\n"
        f"Pinned facts (the user's own statements; keep them exactly):\n{pinned}\n{answered}"
    ).rstrip("\n")


def counters_text(run: Run) -> str:
    """The run's counters (never trimmed): status, plan version, replans and tokens spent.
    They change on every call, so the context places them just before the task
    (`worker.memory.context`)."""
    return (
        f"Run {run.id}: {run.status}, plan version {run.plan_version}; replans "
        f"{run.replans_used}/{run.replans_limit}, tokens {run.tokens_used}/{run.tokens_limit}"
    )


def recalled_pieces(recalled: Recalled) -> list[Piece]:
    """Recalled facts, then episodes, each most relevant first, as separate pieces."""
    pieces = [
        _piece(
            "user",
            f"Remembered fact ({f.item.category}, from {f.item.source}, "
            f"since {f.item.valid_from:%Y-%m-%d}): "
            f"{f.item.text}",
        )
        for f in recalled.facts
    ]
    pieces += [
        _piece("user", f"A past run (run {e.item.run_id}, {e.item.outcome}):\n{e.item.summary}")
        for e in recalled.episodes
    ]
    return pieces


def _layers(
    session: Session,
    run: Run,
    prompt: Prompt,
    recalled: Recalled,
    read: RunRead,
    procedures: list[Piece],
    *,
    own_words: bool = False,
) -> Layers:
    """`layers_of` from the run's rows; with `own_words`
    (`worker.memory.withholding.own_words_only`), without its turns and summary."""
    history = [] if own_words else turns(session, run.id or 0)
    summary = None if own_words else latest_summary(session, run.id or 0)
    return layers_of(run, prompt, recalled, read, history, summary, procedures=procedures)


def layers_of(
    run: Run,
    prompt: Prompt,
    recalled: Recalled,
    read: RunRead,
    history: list[Message],
    summary: RunSummary | None,
    *,
    procedures: Sequence[Piece] = (),
) -> Layers:
    """The layers of `prompt`'s context in run `run`, from rows already read: the run's turns
    (`history`, oldest first), its current summary and the recalled `procedures`
    (`worker.phases.procedure_context`). Each turn is shortened at
    `AGENTQ_TOOL_RESULT_MAX_TOKENS`; the ledger shows the key values of the steps whose turn is
    in `history` and can be folded (`worker.memory.ledger`)."""
    cap = get_settings().tool_result_max_tokens
    count = _counter()
    pieces = [
        shorten(
            Piece(m.role, m.content, m.token_count, m.id),
            max_tokens=cap,
            where=f"message {m.id}",
            count=count,
        )
        for m in history
    ]
    with_turns = {m.step_id for m in history if m.step_id is not None}
    entries = ledger.entries(read.steps, with_turns=with_turns, count=count, cap_tokens=cap)
    return Layers(
        instructions=_piece("system", prompt.instructions),
        state=_piece("user", state_text(run, read.by_user, read.by_reviewers)),
        ledger=ledger.render(entries, count),
        task=_piece("user", prompt.task),
        counters=_piece("user", counters_text(run)),
        recalled=recalled_pieces(recalled),
        procedures=tuple(procedures),
        summary=_piece("user", f"Summary of earlier turns:\n{summary.content}")
        if summary
        else None,
        summary_covers_through=summary.covers_through_id if summary else 0,
        turns=pieces,
        fold_ledger=lambda max_tokens: ledger.fold(entries, max_tokens, count),
    )


def _counter() -> Callable[[str], int]:
    model = get_settings().model
    return lambda text: count_tokens(text, model)


@dataclass(frozen=True)
class RunRead:
    """What every call's context reads of its run besides turns and recall, read once: the
    pinned facts, the user's (`by_user`) and those reviewers set (`by_reviewers`), key -> value,
    and the current plan version's steps, in order."""

    by_user: dict[str, str]
    by_reviewers: dict[str, str]
    steps: list[Step]

    @property
    def facts(self) -> dict[str, str]:
        """Every pinned fact, key -> value (keys are unique per run)."""
        return {**self.by_user, **self.by_reviewers}

    @classmethod
    def of(cls, session: Session, run: Run, steps: list[Step] | None = None) -> RunRead:
        """Read run `run`'s pinned facts (one statement) and, unless given, its current steps."""
        by_user, by_reviewers = pinned_by_author(session, run.id or 0)
        return cls(by_user, by_reviewers, current_steps(session, run) if steps is None else steps)


def budget(prompt: Prompt, factor: float = 1.0) -> int:
    """The prompt budget of this call, in tokens: `prompt.budget_tokens` when a refusal set it
    (`worker.model_calls.refits`: measured against the server's own count), else the window less the
    reserved output and schemas, less the margin, divided by `factor` (`calibration`)."""
    if prompt.budget_tokens is not None:
        return prompt.budget_tokens
    s = get_settings()
    room = usable_budget(
        context_window=s.context_window_tokens,
        reserved_output=s.reserved_output_tokens,
        tool_schema_tokens=schema_tokens(prompt),
        safety_margin=s.context_safety_margin,
    )
    return room if factor == 1.0 else int(room / factor)


def calibration(session: Session) -> float:
    """What the configured model's server counts for each of our tokens, with a margin
    (`models.engine.token_calibrations.factor`); 1 for the offline provider, which reads nothing."""
    s = get_settings()
    if s.provider == "offline":
        return 1.0
    return token_calibrations.factor(token_calibrations.ratio_of(session, s.model))


def schema_tokens(prompt: Prompt) -> int:
    """Tokens the answer's JSON schema and the tool definitions of `prompt` cost (an estimate,
    see `models.memory.tokens.count_tool_schema_tokens`); 0 when it has neither."""
    schemas = [prompt.json_schema] if prompt.json_schema else []
    return count_tool_schema_tokens([*schemas, *prompt.tools]) if schemas or prompt.tools else 0


def recalls_remotely(prompt: Prompt) -> bool:
    """Whether assembling `prompt`'s context would call a remote embedder: then it must not be
    assembled inside a transaction (DESIGN.md, invariant 11) until `with_query_vector`."""
    recalling = recalls() or procedure_context.recalls_procedures()
    return bool(prompt.query) and prompt.query_vector is None and recalling and embeds_remotely()


def with_query_vector(prompt: Prompt) -> Prompt:
    """`prompt` with its recall query embedded, when the embedder is remote (`recalls_remotely`):
    called before any transaction, so no transaction waits on the embedding server (issue 11,
    item 8: with a 5 s endpoint, transactions sat idle for 5.5 s). Else `prompt` unchanged."""
    if not recalls_remotely(prompt) or prompt.query is None:
        return prompt
    return replace(prompt, query_vector=tuple(query_vector(prompt.query)))


@dataclass(frozen=True)
class Built:
    """One assembled context (`build`): its messages and what was left out, the payload its
    request carries, and the fold due before it is sent (`worker.memory.folds.due`; None:
    none)."""

    context: Context
    payload: dict[str, Any]
    fold: folds.Fold | None


def build(
    session: Session,
    run: Run,
    prompt: Prompt,
    *,
    steps: list[Step] | None = None,
    read: RunRead | None = None,
) -> Built:
    """Assemble the context of `prompt` in run `run` once, in the caller's transaction (`steps`:
    the current version's steps when the caller has read them already; `read`: its pinned facts
    too, `RunRead.of`), with the payload (the
    run's goal unless the prompt's own says it, with what memory recalled, and the procedures the
    context carried: `procedures`, `worker.phases.procedure_context.entries`) and the fold it
    needs first. Raises `ContextOverflow`."""
    read = read or RunRead.of(session, run, steps)
    own_words = withholding.own_words_only(session, run, prompt)
    if own_words:
        read = RunRead(read.by_user, {}, [])
    found = procedure_context.recalled(session, run, prompt, read.steps)
    theirs = procedure_context.reviewers_procedure(found)
    if theirs is not None:  # the user's own procedures are the user's memory
        found = [f for f in found if f.item.scope != "user"]
    recalled = withholding.recall_or_withhold(session, run, prompt, read.facts, words=theirs)
    pieces = [_piece("user", procedure_context.text_of(f, prompt), f.item.id) for f in found]
    s = get_settings()
    factor = calibration(session)
    layers = _layers(session, run, prompt, recalled, read, pieces, own_words=own_words)
    context = assemble(
        layers,
        budget=budget(prompt, factor),
        recall_share=s.recall_share,
        procedure_share=s.context_procedure_share,
    )
    fold = folds.due(
        context,
        fold_budget=folds.budget(factor),
        previous_tokens=layers.summary.tokens if layers.summary else 0,
        count=_counter(),
    )
    _record_recall(session, run, prompt, recalled)
    payload = {
        "goal": run.goal,  # in every call's run state: the offline provider reads it too
        **prompt.payload,
        "facts": read.facts,
        "recalled_facts": [f.item.text for f in recalled.facts],
        "procedures": procedure_context.entries(found, context.procedures_used),
        "episodes": [
            {
                "run_id": e.item.run_id,
                "goal": e.item.goal,
                "outcome": e.item.outcome,
                "failures": e.item.failures,
            }
            for e in recalled.episodes
        ],
    }
    return Built(context, payload, fold)


def _record_recall(session: Session, run: Run, prompt: Prompt, recalled: Recalled) -> None:
    # the event quotes the user's memory: a forget racing this call must not leave it behind
    run_id = run.id or 0
    quoted = recalled.facts or recalled.episodes
    if quoted and may_write(session, run_id=run_id, user_id=run.user_id, what="recall event"):
        events.record_event(
            session,
            run_id,
            "memory.recalled",
            purpose=prompt.purpose,
            facts=[f.item.text for f in recalled.facts],
            episodes=[e.item.run_id for e in recalled.episodes],
        )


def request_in(
    session: Session,
    run: Run,
    prompt: Prompt,
    *,
    steps: list[Step] | None = None,
    read: RunRead | None = None,
) -> ModelRequest | None:
    """The request for `prompt`, assembled in the caller's transaction (`read`: the run's
    pinned facts and steps when the caller has read them, as `build`); None when turns must
    first be folded into the summary (model calls: `request_for` does it outside any
    transaction). Raises `ContextOverflow`."""
    built = build(session, run, prompt, steps=steps, read=read)
    return None if built.fold else _request(prompt, built)


def request_for(run_id: int, prompt: Prompt) -> ModelRequest:
    """The request for `prompt` in run `run_id`, its context assembled from rows, after the
    folds it needs (at most `worker.memory.folds.MAX_FOLDS_PER_CALL`).

    Raises `models.errors.ContextOverflow` when the never-trimmed layers alone exceed the budget.
    """
    prompt = with_query_vector(prompt)
    built = _built(run_id, prompt)
    for _ in range(folds.MAX_FOLDS_PER_CALL):
        if built.fold is None:
            break
        folds.fold(run_id, built.fold, count=_counter())
        built = _built(run_id, prompt)
    return _request(prompt, built)


def _built(run_id: int, prompt: Prompt) -> Built:
    with session_scope() as session:
        return build(session, get_run(session, run_id), prompt)


def _request(prompt: Prompt, built: Built) -> ModelRequest:
    context, payload = built.context, built.payload
    return ModelRequest(
        purpose=prompt.purpose,
        messages=context.messages,
        payload=payload,
        json_schema=adoption.schema(prompt.purpose, prompt.json_schema, payload),
        estimated_prompt_tokens=context.tokens + schema_tokens(prompt),
        tools=prompt.tools,
        # the answer never takes more than the room the budget kept free for it
        max_output_tokens=folds.answer_tokens(),
    )
