"""Procedural memory's pure rules: recall ranking within scope, the layer's own token share,
validation, who may write what, a run's plan as a template, and how a procedure reads."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from models.errors import ConfigurationError, InvalidInput
from models.memory.procedure_admin import template_from
from models.memory.procedure_recall import PROCEDURES, hidden_detail, rank
from models.memory.procedures import Actor, Procedure, checked
from models.memory.rerank import Candidate
from models.memory.retrieval import Scored, Search
from models.memory.tokens import count_tokens
from models.plans.tools import DEFAULT_TOOL_MODULES, load_tool_modules
from models.settings import Settings
from models.tables import Step
from worker.memory.context import Layers, Piece, assemble
from worker.model_calls.offline import OfflineProvider
from worker.model_calls.prompts import plan_prompt, step_prompt
from worker.model_calls.providers import ModelRequest
from worker.phases.adoption import ADOPT_NOTE, offered
from worker.phases.procedure_context import EXAMPLE_NOTE, entries, template_lines, text_of

load_tool_modules(DEFAULT_TOOL_MODULES)
NOW = datetime(2026, 1, 1, tzinfo=UTC)
TOOLS = ["echo", "noop", "live_rate", "cached_rate"]
TEMPLATE = {"steps": [{"name": "tally", "kind": "tool", "tool": "echo", "args": {"value": 1}}]}


def query(k: int = 3, min_similarity: float = 0.2) -> Search:
    return Search(PROCEDURES, "u", "m", "q", [1.0, 0.0], k, NOW, min_similarity, None)


def hit(id_: int, distance: float, text_rank: float = 0.0, every_word: bool = False) -> Candidate:
    return Candidate(id_, NOW, distance, text_rank, every_word)


# --- recall ranking ----------------------------------------------------------------------------


def test_recall_ranks_by_similarity_and_relative_bm25_and_drops_the_irrelevant() -> None:
    # 1 nearest with no word in common; 2 a little farther with the best BM25 (+0.5); 3
    # unrelated (similarity 0.05 < 0.2) though one word matches; 4 as far, every word matching
    found = [hit(1, 0.1), hit(2, 0.3, 2.0), hit(3, 0.95, 1.0), hit(4, 0.95, 1.0, every_word=True)]
    ranked = rank(found, query(k=4), dict.fromkeys(range(1, 5), "everyone"))
    assert [r.item for r in ranked] == [2, 1, 4]
    assert ranked[0].similarity == pytest.approx(0.7) and ranked[0].score == pytest.approx(1.2)
    assert ranked[2].score == pytest.approx(0.05 + 0.25)  # half the best BM25: half the weight


def test_bm25_is_relative_to_the_best_candidate_so_its_scale_does_not_matter() -> None:
    small = rank([hit(1, 0.4, 0.02), hit(2, 0.3, 0.01)], query(), {1: "user", 2: "user"})
    large = rank([hit(1, 0.4, 200.0), hit(2, 0.3, 100.0)], query(), {1: "user", 2: "user"})
    assert [r.item for r in small] == [r.item for r in large] == [1, 2]
    assert [r.score for r in small] == pytest.approx([r.score for r in large])


def test_a_procedure_that_failed_ranks_below_an_equal_one_that_did_not() -> None:
    found = [hit(1, 0.2, 1.0), hit(2, 0.2, 1.0)]
    ranked = rank(found, query(), {1: "user", 2: "user"}, failures={2: 1})
    assert [r.item for r in ranked] == [1, 2] and ranked[1].score == pytest.approx(
        ranked[0].score / 2
    )


def test_equal_scores_put_the_narrower_scope_first_and_k_cuts_after() -> None:
    # the same distance and words: equal scores, and the scope decides
    found = [hit(1, 0.2), hit(2, 0.2), hit(3, 0.2)]
    scopes = {1: "everyone", 2: "user", 3: "tool"}
    assert [r.item for r in rank(found, query(), scopes)] == [2, 3, 1]
    assert [r.item for r in rank(found, query(k=1), scopes)] == [2]  # not the lowest id


# --- the layer's own token share ---------------------------------------------------------------


def piece(text: str, ref: int | None = None) -> Piece:
    return Piece("user", text, count_tokens(text), ref)


def layers(procedures: list[Piece], recalled: list[Piece]) -> Layers:
    return Layers(
        instructions=piece("You are the planner."),
        state=piece("Goal: tally the receipts."),
        ledger=piece("Plan: none yet."),
        task=piece("Write the plan."),
        recalled=recalled,
        procedures=procedures,
    )


def test_procedures_take_at_most_their_share_most_relevant_first() -> None:
    small = [piece(f"Procedure {i}: " + "step " * 20, ref=10 + i) for i in range(3)]
    big = piece("Procedure big: " + "step " * 400, ref=99)
    facts = [piece(f"Remembered fact {i}: " + "detail " * 20) for i in range(3)]
    ctx = assemble(layers([small[0], big, small[1], small[2]], facts), budget=1000)
    bare = layers([], [])
    fixed = [bare.instructions, bare.state, bare.ledger, bare.task]
    room = 1000 - sum(p.cost for p in fixed) - 3  # 3: the reply's priming
    kept = [p for p in [small[0], big, *small[1:]] if p.ref in ctx.procedures_used]
    assert sum(p.cost for p in kept) <= int(room * 0.15)
    assert ctx.procedures_used[0] == 10 and 99 not in ctx.procedures_used  # too big: skipped
    assert ctx.recalled_used == 3  # facts keep their own share


def test_procedures_sit_after_the_ledger_and_before_recalled_facts() -> None:
    ctx = assemble(layers([piece("Procedure A", 1)], [piece("Remembered fact B")]), budget=5000)
    texts = [m["content"] for m in ctx.messages]
    assert texts.index("Plan: none yet.") < texts.index("Procedure A")
    assert texts.index("Procedure A") < texts.index("Remembered fact B")
    assert ctx.procedures_used == [1]


def test_shares_too_small_for_a_procedure_keep_every_procedure_out() -> None:
    # The most relevant procedure may take what recalled memory leaves of its share: both tiny.
    tiny = {"procedure_share": 0.001, "recall_share": 0.001}
    ctx = assemble(layers([piece("Procedure A " * 10, 1)], []), budget=5000, **tiny)
    assert ctx.procedures_used == [] and "Procedure A" not in str(ctx.messages)


def test_the_two_shares_may_not_add_up_to_more_than_the_room() -> None:
    with pytest.raises(ConfigurationError, match="AGENTQ_CONTEXT_PROCEDURE_SHARE"):
        Settings(recall_share=0.9, context_procedure_share=0.2)


# --- validation and who may write --------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"title": "t", "when_to_use": "w", "body": "b", "scope": "user"}, "user_id"),
        ({"title": "t", "when_to_use": "w", "body": "b", "scope": "tool", "tool": "x"}, "tool"),
        ({"title": "t", "when_to_use": "w", "scope": "everyone"}, "body, plan_template"),
        ({"title": " ", "when_to_use": "w", "body": "b", "scope": "everyone"}, "title"),
        ({"title": "t", "when_to_use": "w", "scope": "galaxy", "body": "b"}, "scope"),
        (
            {"title": "t", "when_to_use": "w", "scope": "everyone", "plan_template": {"steps": []}},
            "plan_template",
        ),
    ],
)
def test_bad_input_names_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        checked(data, tools=TOOLS)


def test_a_template_is_validated_as_a_plan_and_stored_normalised() -> None:
    spec = checked(
        {
            "title": "t",
            "when_to_use": "w",
            "scope": "tool",
            "tool": "echo",
            "plan_template": TEMPLATE,
        },
        tools=TOOLS,
    )
    assert spec.plan_template == TEMPLATE
    unknown = {"steps": [{"name": "a", "kind": "tool", "tool": "rm_rf"}]}
    with pytest.raises(InvalidInput, match=r"plan_template: .*unknown tool 'rm_rf'"):
        checked(
            {"title": "t", "when_to_use": "w", "scope": "everyone", "plan_template": unknown},
            tools=TOOLS,
        )


def test_who_may_read_and_write_each_scope() -> None:
    ana = Actor("ana-token", "submitter", "ana")
    reviewer, admin = Actor("rev", "reviewer"), Actor("root", "admin")
    assert ana.may_write("user", "ana") and not ana.may_write("user", "bob")
    assert not ana.may_write("everyone", None) and not ana.may_write("tool", None)
    assert reviewer.may_write("everyone", None) and not reviewer.may_write("user", "ana")
    assert ana.may_read("everyone", None) and not ana.may_read("user", "bob")
    assert not reviewer.may_read("user", "ana") and admin.may_read("user", "ana")
    assert admin.may_write("user", "bob")


# --- a run's plan as a template ----------------------------------------------------------------


def step(id_: int, name: str, status: str = "succeeded", kind: str = "tool") -> Step:
    return Step(
        id=id_,
        run_id=1,
        plan_version=1,
        position=0,
        name=name,
        kind=kind,
        tool="echo" if kind == "tool" else None,
        status=status,
        args={"value": name} if kind == "tool" else {},
    )


def test_the_template_keeps_what_did_not_fail_with_its_after_by_name() -> None:
    steps = [step(1, "a"), step(2, "rate", "failed"), step(3, "rate"), step(4, "ask", kind="human")]
    steps.append(step(5, "total"))
    after = {1: (), 2: (1,), 3: (1,), 4: (3,), 5: (3, 4, 2)}
    plan = template_from(steps, after)
    assert [s["name"] for s in plan["steps"]] == ["a", "rate", "total"]
    assert [s["after"] for s in plan["steps"]] == [[], ["a"], ["rate"]]
    assert checked(
        {"title": "t", "when_to_use": "w", "scope": "everyone", "plan_template": plan}, tools=TOOLS
    ).plan_template


# --- how a recalled procedure reads, and the offline planner ----------------------------------


def procedure(**fields: object) -> Procedure:
    base: dict[str, object] = {
        "id": 7,
        "scope": "user",
        "user_id": "ana",
        "title": "Tally receipts",
        "when_to_use": "A trip's receipts must be totalled",
        "body": "Total them in EUR.",
        "plan_template": TEMPLATE,
        "version": 2,
        "written_as": "submitter",
    }
    return Procedure(**{**base, **fields})


def scored(p: Procedure) -> Scored[Procedure]:
    return Scored(p, 0.9, 0.0, False, 0.03, 1.0, 0.03)


def test_a_plan_call_sees_the_template_as_a_worked_example_a_step_does_not() -> None:
    found = scored(procedure())
    planning = text_of(found, plan_prompt("Tally my receipts", []))
    assert EXAMPLE_NOTE in planning and "version 2" in planning
    assert "\n1. tally: echo(value=1)\n" in planning
    assert ADOPT_NOTE % 7 in planning and planning.startswith("Procedure 7 ")
    step = text_of(found, step_prompt("Tally them", {}))
    assert "How to: Total them in EUR." in step
    assert EXAMPLE_NOTE not in step and ADOPT_NOTE % 7 not in step
    assert entries([found], [7])[0] == {
        "id": 7,
        "version": 2,
        "title": "Tally receipts",
        "scope": "user",
        "plan_template": TEMPLATE,
        "written_as": "submitter",
        "origin": "person",
    }
    assert entries([found], []) == []  # what the budget left out is not listed


def test_a_learned_template_is_a_plan_only_for_the_goal_it_was_learned_for() -> None:
    learned = procedure(title="File the expense claim for my Zurich trip", origin="learned")
    london, zurich = "File the expense claim for my London trip", "File my Zurich trip's claim"
    elsewhere = text_of(scored(learned), plan_prompt(london, []))
    assert "How to: Total them in EUR." in elsewhere  # the lesson still reads
    assert EXAMPLE_NOTE not in elsewhere and ADOPT_NOTE % 7 not in elsewhere
    again = text_of(
        scored(learned), plan_prompt("Please file the expense claim for my Zurich trip", [])
    )
    assert EXAMPLE_NOTE in again and ADOPT_NOTE % 7 in again
    listed = entries([scored(learned)], [7])
    assert offered({"goal": london, "procedures": listed}) == []
    assert [p["id"] for p in offered({"goal": zurich + " expense", "procedures": listed})] == [7]
    # a person's template is offered wherever recall found it
    person = entries([scored(procedure(title="File the expense claim for my Zurich trip"))], [7])
    assert [p["id"] for p in offered({"goal": london, "procedures": person})] == [7]


def test_the_offline_planner_follows_a_recalled_template_it_can() -> None:
    tools = [{"name": name} for name in TOOLS]
    needs_fact = {"steps": [{**TEMPLATE["steps"][0], "args": {"value": "${facts.trip}"}}]}
    payload = {
        "goal": "Tally my Porto receipts",
        "facts": {},
        "tools": tools,
        "procedures": [
            {"id": 1, "title": "Tally receipts", "plan_template": needs_fact},
            {"id": 3, "title": "Send an invoice reminder", "plan_template": TEMPLATE},
            {"id": 2, "title": "Tally receipts", "plan_template": TEMPLATE},
        ],
    }
    request = ModelRequest(purpose="plan", messages=[], payload=payload)
    # the first needs a fact, the second is about another goal; the third is adopted by
    # reference (worker.phases.adoption)
    assert json.loads(OfflineProvider().complete(request).text) == {"procedure": 2}


def test_a_template_reads_as_numbered_steps_with_what_each_waits_for() -> None:
    template = {
        "steps": [
            {"name": "get", "kind": "tool", "tool": "echo", "args": {"value": {"a": 1}}},
            {
                "name": "sum",
                "kind": "model",
                "instruction": "Add them up.",
                "tools": ["echo"],
                "output": {"total": "number"},
                "after": ["get"],
            },
            {"name": "say", "kind": "tool", "tool": "echo", "args": {"value": "x"}, "after": []},
        ],
        "success_criteria": ["A total is given."],
    }
    assert template_lines(template).splitlines() == [
        '1. get: echo(value={"a": 1})',
        '2. sum: model: Add them up. [tools: echo] -> {"total": "number"} (after get)',
        "3. say: echo(value=x) (after nothing)",
        "success criterion: A total is given.",
    ]


def test_a_reader_without_the_users_memory_sees_no_title_of_the_users_own() -> None:
    detail = {
        "procedures": [
            {"id": 1, "scope": "user", "title": "Mine"},
            {"id": 2, "scope": "everyone", "title": "Shared"},
        ]
    }
    titles = [p["title"] for p in hidden_detail(detail)["procedures"]]
    assert titles[1] == "Shared" and "Mine" not in titles
