"""The ledger of a call's context: the plan with every step's status and what each done step found.

A done step's whole result is already in the run's conversation: the step's turn, written when
its attempt ended (`models.engine.leases.WITH_TURN`), kept verbatim while it is recent and folded
into the rolling summary after. So the ledger does not repeat it (issue 12: results appeared both in
the ledger and as turns, and a 40-step run with ~400-token results overflowed a 4k window). Each
step with a turn gets its key values instead: every top-level scalar of its result, verbatim up
to `KEY_VALUE_MAX_CHARS` characters, a list or object named by its size, at most
`KEY_VALUES_MAX` fields, and the reference that reads the whole value from its row
(`${steps.NAME.KEY}`, `models.plans.references`). A step with no turn (a reviewer's answer, a user
who was forgotten) shows its result verbatim, shortened at `AGENTQ_TOOL_RESULT_MAX_TOKENS`.

When the ledger does not fit the room `worker.memory.context.assemble` gives it, `fold` shrinks it,
oldest steps first and deterministically (no model call): verbatim results become key values,
then succeeded steps collapse into one line naming them ("N earlier steps succeeded: ..."). A
failed step's line, and those of steps not done, always stay: they are what a replan reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

from models.tables import Step
from worker.memory.context import Piece, shorten

KEY_VALUE_MAX_CHARS: Final = 80  # of one field's value; a model step's text is one field
KEY_VALUES_MAX: Final = 8  # fields of one result; the rest are counted, and read by reference
ERROR_MAX_CHARS: Final = 300  # of a failed step's error in the ledger (the row has it whole)
NEWLINE_TOKENS: Final = 1  # what joining two lines adds, at most, in o200k and cl100k
HEADER: Final = "Plan (in order):"
COLLAPSED: Final = (
    "{n} earlier steps succeeded (their results are in their rows and the summary of earlier "
    "turns; `${{steps.NAME.KEY}}` reads one): {names}"
)


@dataclass(frozen=True)
class Entry:
    """One step's ledger line at each of its levels: `full` (its result verbatim, only for a
    step whose result no turn holds), `keys` (its key values), and whether it may be collapsed
    into the line of earlier succeeded steps (`collapsible`)."""

    name: str
    keys: str
    full: str | None = None
    collapsible: bool = False


Count = Callable[[str], int]


def entries(
    steps: Sequence[Step], *, with_turns: Collection[int], count: Count, cap_tokens: int
) -> list[Entry]:
    """The ledger entries of `steps` (the current plan, in order); `with_turns` are the ids of
    the steps whose turn is in the conversation, `cap_tokens` shortens a verbatim result
    (`worker.memory.context.shorten`)."""
    found = []
    for number, step in enumerate(steps, start=1):
        head = f"{number}. {step.name} [{step.status}] " + (
            f"tool {step.tool}" if step.tool else step.kind
        )
        if step.status == "succeeded":
            full = None if step.id in with_turns else _verbatim(step, head, count, cap_tokens)
            keys = f"{head} -> {key_values(step.result or {})} (= steps.{step.name}, row {step.id})"
            found.append(Entry(step.name, keys, full, collapsible=True))
        elif step.status == "failed":
            found.append(Entry(step.name, f"{head} -> failed: {_clip(str(step.error))}"))
        else:
            found.append(Entry(step.name, head))
    return found


def _verbatim(step: Step, head: str, count: Count, cap_tokens: int) -> str:
    text = json.dumps(step.result, ensure_ascii=False)
    piece = Piece("tool", text, count(text))
    short = shorten(piece, max_tokens=cap_tokens, where=f"step {step.id}", count=count)
    return f"{head} -> {short.text}"


def key_values(result: dict[str, Any]) -> str:
    """`result`'s key values as compact JSON: each top-level scalar verbatim (a string over
    `KEY_VALUE_MAX_CHARS` cut, saying how much is left out), a list or object by its size, at
    most `KEY_VALUES_MAX` fields and then how many more there are."""
    shown: dict[str, Any] = {}
    for key, value in list(result.items())[:KEY_VALUES_MAX]:
        if isinstance(value, str):
            shown[key] = _clip(value, KEY_VALUE_MAX_CHARS)
        elif isinstance(value, list):
            shown[key] = f"<list of {len(value)}>"
        elif isinstance(value, dict):
            shown[key] = f"<object of {len(value)} keys>"
        else:
            shown[key] = value
    text = json.dumps(shown, ensure_ascii=False)
    more = len(result) - KEY_VALUES_MAX
    return text + (f" (+{more} more fields)" if more > 0 else "")


def _clip(text: str, max_chars: int = ERROR_MAX_CHARS) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}… (+{len(text) - max_chars} chars)"


def render(found: Sequence[Entry], count: Count) -> Piece:
    """The whole ledger, every entry at its richest level."""
    if not found:
        return _ledger(["Plan: none yet."], count)
    return _ledger([HEADER, *(e.full or e.keys for e in found)], count)


def fold(found: Sequence[Entry], max_tokens: int, count: Count) -> Piece:
    """The ledger of `found` in at most `max_tokens` tokens if it can be: oldest entries first,
    verbatim results become key values, then succeeded steps collapse into one line. Each line
    is counted once, and their sum chooses the fold (a line break adds at most
    `NEWLINE_TOKENS`); the chosen text is counted once more to check it. When no fold is small
    enough, the smallest: the collapsed line and the lines that never collapse."""
    if not found:
        return render(found, count)
    sizes = _Sizes.of(found, count)
    folds = _folds(found)
    for keyed, gone in folds:
        if sizes.estimate(found, keyed, gone) > max_tokens:
            continue
        exact = _ledger(_lines(found, keyed, gone), count)
        if exact.tokens <= max_tokens:
            return exact
    return _ledger(_lines(found, *folds[-1]), count)


@dataclass(frozen=True)
class _Sizes:
    """Tokens of each entry's line at each level, of its name in the collapsed line, and of the
    parts every ledger has."""

    full: list[int]
    keys: list[int]
    names: list[int]
    header: int
    collapsed: int

    @classmethod
    def of(cls, found: Sequence[Entry], count: Count) -> _Sizes:
        keys = [count(e.keys) + NEWLINE_TOKENS for e in found]
        full = [
            count(e.full) + NEWLINE_TOKENS if e.full else k
            for e, k in zip(found, keys, strict=True)
        ]
        names = [count(f", {e.name}") for e in found]
        empty = COLLAPSED.format(n=len(found), names="")
        return cls(full, keys, names, count(HEADER), count(empty) + NEWLINE_TOKENS)

    def estimate(self, found: Sequence[Entry], keyed: int, gone: int) -> int:
        """Tokens of the fold `(keyed, gone)` (see `_folds`), at most."""
        total = self.header + (self.collapsed if gone else 0)
        for i, entry in enumerate(found):
            if entry.collapsible and i < gone:
                total += self.names[i]
            else:
                total += self.keys[i] if i < keyed else self.full[i]
        return total


def _folds(found: Sequence[Entry]) -> list[tuple[int, int]]:
    """Every fold, largest first, as `(keyed, gone)`: the entries before index `keyed` show key
    values rather than their verbatim result, and the collapsible ones before index `gone` are
    collapsed. Only folds that change a line are listed."""
    n = len(found)
    folds = [(k, 0) for k in range(n + 1) if k == 0 or found[k - 1].full]
    folds += [(n, g) for g in range(1, n + 1) if found[g - 1].collapsible]
    return folds


def _lines(found: Sequence[Entry], keyed: int, gone: int) -> list[str]:
    names = [e.name for i, e in enumerate(found) if e.collapsible and i < gone]
    lines = [HEADER]
    if names:
        lines.append(COLLAPSED.format(n=len(names), names=", ".join(names)))
    for i, entry in enumerate(found):
        if not (entry.collapsible and i < gone):
            lines.append(entry.keys if i < keyed or entry.full is None else entry.full)
    return lines


def _ledger(lines: list[str], count: Count) -> Piece:
    text = "\n".join(lines)
    return Piece("user", text, count(text))
