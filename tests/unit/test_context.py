"""Working-memory assembly: priorities, the budget, shortening, and what the summary must cover."""

from __future__ import annotations

from dataclasses import replace

import pytest

from models.memory.tokens import count_message_tokens, count_tokens
from worker.memory.context import (
    REFIT_SHARE,
    ContextOverflow,
    Layers,
    Piece,
    assemble,
    refit_budget,
    shorten,
    usable_budget,
)


def piece(role: str, text: str, ref: int | None = None) -> Piece:
    return Piece(role, text, count_tokens(text), ref)


def layers(turns: int = 50, recalled: int = 5, summary_through: int = 0) -> Layers:
    return Layers(
        instructions=piece("system", "You carry out one step."),
        state=piece("user", "Goal: file the report. Pinned: currency = EUR"),
        ledger=piece("user", '1. receipts [succeeded] -> {"total": 514.6}'),
        task=piece("user", "Do this step: convert"),
        recalled=[
            piece("user", f"Remembered fact {i}: " + "detail " * 20) for i in range(recalled)
        ],
        summary=piece("user", "Summary: earlier turns were about receipts.")
        if summary_through
        else None,
        summary_covers_through=summary_through,
        turns=[piece("tool", f"turn {i}: " + "words " * 40, ref=i + 1) for i in range(turns)],
    )


def test_everything_fits_when_the_budget_allows() -> None:
    ctx = assemble(layers(turns=5, recalled=2), budget=10_000)
    assert ctx.turns_used == 5 and ctx.recalled_used == 2 and ctx.uncovered == []
    assert ctx.tokens == count_message_tokens(ctx.messages)  # the estimate is the real count
    assert ctx.messages[0]["role"] == "system" and ctx.messages[-1]["content"].startswith("Do this")


@pytest.mark.parametrize("budget", [400, 800, 1500, 3000])
def test_fixed_layers_always_present_and_budget_respected(budget: int) -> None:
    ctx = assemble(layers(), budget=budget)
    text = "\n".join(m["content"] for m in ctx.messages)
    assert "Pinned: currency = EUR" in text and '{"total": 514.6}' in text
    assert count_message_tokens(ctx.messages) <= budget


def test_newest_turns_are_kept_and_dropped_ones_are_reported() -> None:
    ctx = assemble(layers(turns=50), budget=1500)
    kept = [m["content"] for m in ctx.messages if m["content"].startswith("turn ")]
    assert kept and kept[-1].startswith("turn 49:")
    first_kept = int(kept[0].split(":")[0].split()[1])
    assert [p.ref for p in ctx.uncovered] == list(range(1, first_kept + 1))


def test_summary_coverage_is_not_reported_again() -> None:
    ctx = assemble(layers(turns=50, summary_through=30), budget=1500)
    assert all((p.ref or 0) > 30 for p in ctx.uncovered)
    assert any(m["content"].startswith("Summary:") for m in ctx.messages)


def test_recalled_memory_takes_at_most_its_share() -> None:
    ctx = assemble(layers(turns=0, recalled=40), budget=2000, recall_share=0.3)
    recalled = [m for m in ctx.messages if m["content"].startswith("Remembered")]
    fixed = count_message_tokens(ctx.messages[:3] + ctx.messages[-1:])
    assert 0 < len(recalled) < 40
    assert count_message_tokens(recalled) - 3 <= 0.3 * (2000 - fixed)


def test_overflowing_fixed_layers_are_refused_not_trimmed() -> None:
    with pytest.raises(ContextOverflow, match="instructions, run state, task and the last 2 turns"):
        assemble(layers(), budget=30)


def test_long_tool_result_is_shortened_with_a_pointer() -> None:
    long = piece("tool", "x " * 5000)
    short = shorten(long, max_tokens=100, where="step 7", count=count_tokens)
    assert short.tokens < 150 and "full text in step 7" in short.text
    assert shorten(piece("tool", "small"), max_tokens=100, where="s", count=count_tokens).text == (
        "small"
    )


def test_budget_arithmetic() -> None:
    assert (
        usable_budget(
            context_window=8000, reserved_output=1000, tool_schema_tokens=200, safety_margin=0.1
        )
        == 6120
    )
    with pytest.raises(ContextOverflow, match="no room"):
        usable_budget(
            context_window=1000, reserved_output=1000, tool_schema_tokens=0, safety_margin=0
        )


def test_recalled_facts_about_pinned_keys_are_left_out() -> None:
    from types import SimpleNamespace

    from models.memory.memory_admin import Recalled
    from worker.memory.withholding import without_pinned

    def fact(subject: str, attribute: str | None) -> object:
        return SimpleNamespace(item=SimpleNamespace(subject=subject, attribute=attribute))

    recalled = Recalled(
        facts=[
            fact("user", "currency"),
            fact("user", "city"),  # type: ignore[list-item]
            fact("tool:x", "currency"),
        ]
    )
    kept = without_pinned(recalled, {"currency": "USD"})
    assert [(f.item.subject, f.item.attribute) for f in kept.facts] == [
        ("user", "city"),
        ("tool:x", "currency"),
    ]


def refit(
    *, sent: int = 2000, fixed: int = 0, window: int | None = None, prompt: int | None = None
) -> int:
    return refit_budget(
        sent_tokens=sent,
        fixed_tokens=fixed,
        output_tokens=1024,
        safety_margin=0.05,
        context_tokens=window,
        prompt_tokens=prompt,
    )


def test_a_refusal_the_server_sized_scales_by_the_two_counts() -> None:
    """Issue 12: o200k counted 24% low for SmolLM2, so a context filled to the budget of an
    8,192-token window was refused; the rebuilt one, counted by the server, fits with its answer."""
    budget = usable_budget(
        context_window=8192, reserved_output=1024, tool_schema_tokens=0, safety_margin=0.05
    )
    server_count = int(budget * 1.24)
    smaller = refit(sent=budget, window=8192, prompt=server_count)
    assert smaller * 1.24 + 1024 <= 8192
    assert smaller == int((8192 - 1024) * budget / server_count * 0.95)


def test_a_refusal_that_names_no_sizes_keeps_the_refit_share() -> None:
    assert refit() == int(2000 * REFIT_SHARE)
    assert refit(window=8192) == int(2000 * REFIT_SHARE)  # the prompt's size unsaid


def test_what_a_rebuild_cannot_shrink_is_left_out_of_the_budget() -> None:
    assert refit(fixed=400) == int(1600 * REFIT_SHARE)
    sized = refit(fixed=400, window=2048, prompt=2500)
    assert sized == int(((2048 - 1024) * 2000 / 2500 - 400) * 0.95)


def test_sizes_that_would_not_shrink_the_prompt_keep_the_refit_share() -> None:
    """A window far larger than the prompt (a vLLM refusal of the answer's length, say) does not
    explain the refusal: the prompt still shrinks."""
    assert refit(window=128_000, prompt=2100) == int(2000 * REFIT_SHARE)


def test_a_window_with_no_room_for_the_answer_overflows() -> None:
    with pytest.raises(ContextOverflow, match="no room for a prompt the server accepts"):
        refit(window=1000, prompt=2100)


def procedures_and_recall(recalled: int) -> Layers:
    """`layers` with no turns, `recalled` facts of about 120 tokens, and one large, most relevant
    procedure (about 400 tokens) before a small, less relevant one."""
    return replace(
        layers(turns=0, recalled=0),
        recalled=[
            piece("user", f"Remembered fact {i}: " + "detail " * 60) for i in range(recalled)
        ],
        procedures=[
            piece("user", "How to file a Zurich claim: " + "step " * 400, ref=1),
            piece("user", "How to file a Lisbon claim: read the rate.", ref=2),
        ],
    )


def test_the_most_relevant_procedure_takes_what_recall_left_rather_than_lose_to_size() -> None:
    ctx = assemble(procedures_and_recall(recalled=1), budget=3000, procedure_share=0.1)
    assert ctx.procedures_used[0] == 1  # 400 tokens > 10% of the room, kept all the same
    assert ctx.recalled_used == 1  # and the fact it shares the room with stays
    assert count_message_tokens(ctx.messages) <= 3000


def test_a_procedure_never_takes_room_recalled_memory_uses() -> None:
    ctx = assemble(procedures_and_recall(recalled=20), budget=3000, procedure_share=0.1)
    assert ctx.procedures_used == [2]  # the share is full of facts: the large one waits
    alone = assemble(procedures_and_recall(recalled=20), budget=3000, procedure_share=0.0)
    assert ctx.recalled_used == alone.recalled_used  # the facts kept are the same as without it
