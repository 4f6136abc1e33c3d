"""Working memory: the context of one model call, assembled from rows under a token budget.

Layers, highest priority first (the prompt places them as instructions, run state, ledger,
recalled memory, summary, older turns, the last turns, the run's counters, task):

1. the instructions (system);
2. the run state: goal and pinned facts, and the run's counters (status, plan version, replans
   and tokens spent; never trimmed). The counters change on every call, so they sit just before
   the task: what comes before them is the same from one call of a run to the next as far as the
   run's rows are, and a server's prompt cache (llama.cpp's prefix match, OpenAI's cached input)
   reads it once (issue 31, item 6: two calls of one step shared 75 tokens, up to the tokens
   spent);
3. the task: what this call must do now (never trimmed);
4. the last `VERBATIM_TURNS` turns, verbatim (never trimmed: issue 12, "the last two exchanges
   always stay verbatim");
5. the ledger: the plan with every step's status and what done steps found (`worker.memory.ledger`),
   in at most `ledger_share` of the room left, folded oldest first when it needs more (never
   dropped);
6. recalled procedures (how-tos and plan templates, `models.memory.procedure_recall`), most relevant
   first, only what fits within `procedure_share` of the room left after layers 1-5; the most
   relevant one alone may also take what layer 7 left unused of its share, rather than be
   skipped for a smaller, less relevant one;
7. recalled facts and episodes, most relevant first, only what fits within `recall_share` of
   the same room (each share is its own: procedures never crowd out facts, nor the reverse);
8. the rolling summary of older turns;
9. the older turns, verbatim, newest first until the budget is spent.

Long tool results are shortened before anything else (`shorten`). Layers 1-4 never shrink, and
the ledger only as far as its fold goes: if they overflow the budget, `ContextOverflow` is raised
and nothing is sent. Token counts come from the rows (counted once with tiktoken when written);
per-message overhead follows OpenAI's cookbook ("How to count tokens with tiktoken": 3 per
message plus the role's own tokens, 3 to prime the reply), so the estimate equals
`models.memory.tokens.count_message_tokens`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from models.errors import ContextOverflow

TOKENS_PER_MESSAGE: Final = 3
ROLE_TOKENS: Final = 1  # "system", "user", "assistant" are one token each in o200k and cl100k
REPLY_PRIMING_TOKENS: Final = 3
VERBATIM_TURNS: Final = 2  # issue 12: "the last two exchanges always stay verbatim"
# The most of the room left after layers 1-4 the ledger may take before it is folded: half, so
# recalled memory, the summary and older turns keep the other half (the ledger outranks them:
# it is rebuilt from rows, and its key values are what later steps cite).
LEDGER_SHARE: Final = 0.5
SHORTENED_MARK: Final = (
    "\n… [shortened: {dropped} of {total} tokens left out; full text in {where}] …\n"
)

# What a rebuilt prompt keeps of the trimmable part of a prompt a server refused as too long, when
# the server did not say by how much: o200k counted 24% fewer tokens than SmolLM2's own tokenizer
# for agentq's prompts (issue 12), so a context filled to the budget is ~1.24 times as long to the
# server; 1 / 1.24 is 0.81, and a quarter less also covers a tokenizer somewhat further off.
REFIT_SHARE: Final = 0.75


@dataclass(frozen=True)
class Piece:
    """One message-to-be: its role, text and token count (without per-message overhead).

    `ref` is the id of the row it came from (a turn's message id), when it has one.
    """

    role: str
    text: str
    tokens: int
    ref: int | None = None

    @property
    def cost(self) -> int:
        """Tokens this piece costs as a message: text, role and per-message overhead."""
        return self.tokens + ROLE_TOKENS + TOKENS_PER_MESSAGE


@dataclass(frozen=True)
class Layers:
    """Everything a call could carry, before the budget decides. `fold_ledger(max_tokens)`
    gives a smaller ledger (`worker.memory.ledger.fold`) when `ledger` needs more than its share;
    None: the ledger cannot shrink."""

    instructions: Piece
    state: Piece
    ledger: Piece
    task: Piece
    counters: Piece | None = None  # the run's counters, placed just before the task
    recalled: Sequence[Piece] = ()
    procedures: Sequence[Piece] = ()  # each `ref` is the procedure's id
    summary: Piece | None = None
    summary_covers_through: int = 0
    turns: Sequence[Piece] = ()
    fold_ledger: Callable[[int], Piece] | None = None


@dataclass(frozen=True)
class Context:
    """The assembled messages and what was left out.

    `unfolded` are the older turns (all but the last `VERBATIM_TURNS`) newer than the summary's
    coverage, oldest first, whether the context holds them or not; `uncovered` are those of them it
    dropped. When a fold is due (`worker.memory.folds.due`) the caller folds the oldest into a new
    summary and assembles again.
    """

    messages: list[dict[str, str]]
    tokens: int
    budget: int
    recalled_used: int
    turns_used: int
    uncovered: list[Piece] = field(default_factory=list)
    unfolded: list[Piece] = field(default_factory=list)
    procedures_used: list[int] = field(default_factory=list)  # their ids, in context order


def usable_budget(
    *, context_window: int, reserved_output: int, tool_schema_tokens: int, safety_margin: float
) -> int:
    """Tokens the prompt may use: the window minus reserved output and tool schemas, less a margin.

    The margin covers the difference between our count and the server's (a chat template's own
    tokens, tool-schema formatting). Raises `ContextOverflow` when nothing is left.
    """
    room = int((context_window - reserved_output - tool_schema_tokens) * (1 - safety_margin))
    if room <= 0:
        raise ContextOverflow(
            f"no room for a prompt: window {context_window}, reserved output {reserved_output}, "
            f"tool schemas {tool_schema_tokens}, margin {safety_margin:.0%}"
        )
    return room


def refit_budget(
    *,
    sent_tokens: int,
    fixed_tokens: int,
    output_tokens: int,
    safety_margin: float,
    context_tokens: int | None = None,
    prompt_tokens: int | None = None,
) -> int:
    """The prompt budget to rebuild a request with after the server refused it as too long.

    `sent_tokens` is our count of the refused prompt, `fixed_tokens` the part of it a rebuild
    cannot shrink (schemas, the later messages of an exchange), `output_tokens` the answer's
    limit; `context_tokens` and `prompt_tokens` are what the server said of its window and of
    the prompt in its own tokens (None: it did not say). When it said both, the budget is the
    window less the answer, turned into our tokens by the ratio the two counts measured
    (`sent_tokens / prompt_tokens`), less the fixed part and `safety_margin`; when it said less,
    or that would not shrink the trimmable part, it is `REFIT_SHARE` of the trimmable part.
    Raises `ContextOverflow` when no room is left.
    """
    trimmable = sent_tokens - fixed_tokens
    room = int(trimmable * REFIT_SHARE)
    if context_tokens and prompt_tokens:
        ours = (context_tokens - output_tokens) * sent_tokens / prompt_tokens
        measured = int((ours - fixed_tokens) * (1 - safety_margin))
        room = measured if measured < trimmable else room
    if room <= 0:
        raise ContextOverflow(
            f"no room for a prompt the server accepts: window {context_tokens}, its count of the "
            f"refused prompt {prompt_tokens} (ours {sent_tokens}, {fixed_tokens} never trimmed), "
            f"answer {output_tokens}"
        )
    return room


def shorten(piece: Piece, *, max_tokens: int, where: str, count: Callable[[str], int]) -> Piece:
    """`piece` cut to about `max_tokens` (its head and tail kept), or unchanged if it fits.

    Only the shortened text is re-counted; the marker says how much was left out and where the
    full text lives (a row), so nothing is lost, only kept out of this prompt.
    """
    if piece.tokens <= max_tokens:
        return piece
    keep_chars = max(1, len(piece.text) * max_tokens // (2 * piece.tokens))
    dropped = piece.tokens - max_tokens
    mark = SHORTENED_MARK.format(dropped=dropped, total=piece.tokens, where=where)
    text = piece.text[:keep_chars] + mark + piece.text[-keep_chars:]
    return Piece(piece.role, text, count(text), piece.ref)


def assemble(
    layers: Layers,
    *,
    budget: int,
    recall_share: float = 0.3,
    procedure_share: float = 0.15,
    ledger_share: float = LEDGER_SHARE,
) -> Context:
    """Fit `layers` into `budget` tokens (see the module docstring for the order). Raises
    `ContextOverflow` when the layers that never shrink do not fit."""
    last = list(layers.turns[-VERBATIM_TURNS:])
    older = layers.turns[: len(layers.turns) - len(last)]
    counters = [layers.counters] if layers.counters else []
    fixed = [layers.instructions, layers.state, *counters, layers.task, *last]
    used = REPLY_PRIMING_TOKENS + sum(p.cost for p in fixed)
    if used > budget:
        raise ContextOverflow(
            f"instructions, run state, task and the last {len(last)} turns need {used} tokens; "
            f"the budget is {budget}"
        )
    ledger = _ledger_within(layers, int((budget - used) * ledger_share))
    used += ledger.cost
    if used > budget:
        raise ContextOverflow(
            f"instructions, run state, task, the last {len(last)} turns and the ledger "
            f"({ledger.tokens} tokens at its smallest) need {used} tokens; the budget is {budget}"
        )
    room = budget - used
    recall_room = int(room * recall_share)
    recalled = _take_in_order(layers.recalled, recall_room)
    spare = recall_room - sum(p.cost for p in recalled)
    procedures = _procedures_within(layers.procedures, int(room * procedure_share), spare)
    used += sum(p.cost for p in [*procedures, *recalled])
    summary = layers.summary if layers.summary and used + layers.summary.cost <= budget else None
    used += summary.cost if summary else 0
    recent = _newest_that_fit(older, budget - used)
    used += sum(p.cost for p in recent)
    dropped = list(older[: len(older) - len(recent)])
    ordered = [layers.instructions, layers.state, ledger, *procedures, *recalled]
    ordered += [summary] if summary else []
    ordered += [*recent, *last, *counters, layers.task]
    return Context(
        messages=[_message(p) for p in ordered],
        tokens=used,
        budget=budget,
        recalled_used=len(recalled),
        turns_used=len(recent) + len(last),
        uncovered=[p for p in dropped if (p.ref or 0) > layers.summary_covers_through],
        unfolded=[p for p in older if (p.ref or 0) > layers.summary_covers_through],
        procedures_used=[p.ref or 0 for p in procedures],
    )


def _ledger_within(layers: Layers, room: int) -> Piece:
    """The ledger, folded when it costs more than `room` and it can be."""
    if layers.ledger.cost <= room or layers.fold_ledger is None:
        return layers.ledger
    return layers.fold_ledger(room - (layers.ledger.cost - layers.ledger.tokens))


def _procedures_within(procedures: Sequence[Piece], room: int, spare: int) -> list[Piece]:
    """The procedures that fit `room`, most relevant first; the most relevant one, when it alone
    is larger than `room`, may also take `spare` (what recalled memory left of its share), so it
    is not lost to size while a smaller, less relevant one takes its place (SmolLM2's zurich goal,
    issue 31: its own learned procedure, 427 tokens, lost to another city's how-to)."""
    if procedures and room < procedures[0].cost <= room + spare:
        return [procedures[0], *_take_in_order(procedures[1:], room + spare - procedures[0].cost)]
    return _take_in_order(procedures, room)


def _take_in_order(pieces: Sequence[Piece], room: int) -> list[Piece]:
    taken: list[Piece] = []
    for piece in pieces:
        if piece.cost > room:
            continue  # a smaller, less relevant item may still fit
        taken.append(piece)
        room -= piece.cost
    return taken


def _newest_that_fit(turns: Sequence[Piece], room: int) -> list[Piece]:
    kept: list[Piece] = []
    for piece in reversed(turns):
        if piece.cost > room:
            break  # keep the recent window contiguous
        kept.append(piece)
        room -= piece.cost
    return kept[::-1]


def _message(piece: Piece) -> dict[str, str]:
    # Chat APIs accept `tool` messages only as answers to tool calls; results go in as user text.
    role = "user" if piece.role == "tool" else piece.role
    return {"role": role, "content": piece.text}
