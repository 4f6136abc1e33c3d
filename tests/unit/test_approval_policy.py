"""The approval policy's form and rule (`models.approval_policy`, issue 30, item 1): pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.approval_policy import parse, required
from models.errors import InvalidInput
from models.review.call_decisions import diff

PAY = {"pay": {"when": [{"arg": "amount", "gt": 500}, {"arg": "to", "not_endswith": "@acme.com"}]}}


def test_a_rule_over_the_arguments_asks_when_any_condition_holds() -> None:
    operator = parse(PAY, field="AGENTQ_TOOL_APPROVALS")
    assert required("pay", {"amount": 100, "to": "a@acme.com"}, operator=operator) is None
    over = required("pay", {"amount": 900, "to": "a@acme.com"}, operator=operator)
    assert over is not None and over.text == "the operator's policy: pay: amount 900 gt 500.0"
    outside = required("pay", {"amount": 1, "to": "x@evil.example"}, operator=operator)
    assert outside is not None and 'to "x@evil.example" not_endswith' in outside.why


def test_an_absent_argument_does_not_hold_and_a_wrong_type_asks() -> None:
    operator = parse(PAY, field="AGENTQ_TOOL_APPROVALS")
    assert required("pay", {}, operator=operator) is None
    unsure = required("pay", {"amount": "lots"}, operator=operator)
    assert unsure is not None and "cannot be compared" in unsure.why
    assert required("pay", {"amount": True}, operator=operator) is not None  # a bool is no number


def test_nested_arguments_are_reached_by_a_dotted_path() -> None:
    rule = {"mail": {"when": [{"arg": "to.domain", "in": ["evil.example"]}]}}
    operator = parse(rule, field="p")
    assert required("mail", {"to": {"domain": "evil.example"}}, operator=operator) is not None
    assert required("mail", {"to": "evil.example"}, operator=operator) is None


def test_exact_names_win_over_patterns_and_longer_patterns_over_shorter() -> None:
    operator = parse(
        {"mcp__*": "always", "mcp__docs__*": "never", "mcp__docs__delete": "always"}, field="p"
    )
    assert required("mcp__docs__read", {}, operator=operator) is None
    assert required("mcp__docs__delete", {}, operator=operator) is not None
    assert required("mcp__crm__read", {}, operator=operator) is not None


def test_unnamed_mcp_tools_need_approval_unless_read_only() -> None:
    empty = parse({}, field="p")
    assert required("mcp__crm__send", {}, operator=empty) is not None
    assert required("mcp__crm__send", {}, operator=empty, annotations={"readOnlyHint": False})
    assert (
        required("mcp__crm__find", {}, operator=empty, annotations={"readOnlyHint": True}) is None
    )
    assert required("echo", {}, operator=empty) is None  # agentq's Python tools: never by default
    told = parse({"mcp__crm__send": "never"}, field="p")
    assert required("mcp__crm__send", {}, operator=told) is None  # the operator's word wins


@given(
    operator_rule=st.sampled_from(["always", "never", None]),
    run_rule=st.sampled_from(["always", None]),
    amount=st.integers(-10, 10),
)
def test_a_run_only_ever_adds_approvals(
    operator_rule: str | None, run_rule: str | None, amount: int
) -> None:
    operator = parse({"t": operator_rule} if operator_rule else {}, field="p")
    run = parse({"t": run_rule} if run_rule else {}, field="approvals", run=True)
    alone = required("t", {"amount": amount}, operator=operator)
    tightened = required("t", {"amount": amount}, operator=operator, run=run)
    if alone is not None:
        assert tightened is not None
    assert (tightened is not None) == (operator_rule == "always" or run_rule == "always")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"pay": "sometimes"}, 'AGENTQ_TOOL_APPROVALS.pay: "sometimes" is not a rule'),
        ({"pay": {"when": []}}, "AGENTQ_TOOL_APPROVALS.pay.when: List should have at least 1"),
        ({"pay": {"when": [{"arg": "a", "gt": 1, "lt": 2}]}}, "exactly one comparison"),
        ({"pay": {"when": [{"arg": "a", "gt": "x"}]}}, "AGENTQ_TOOL_APPROVALS.pay.when.0.gt"),
        ({"pay": {"if": []}}, "AGENTQ_TOOL_APPROVALS.pay.when: Field required"),
        ([1], "AGENTQ_TOOL_APPROVALS: an object from tool names to rules, not list"),
        ("{", "AGENTQ_TOOL_APPROVALS: not JSON"),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse(value, field="AGENTQ_TOOL_APPROVALS")


def test_a_run_may_not_say_never() -> None:
    with pytest.raises(InvalidInput, match=r"^approvals\.pay: a run may only require approval"):
        parse({"pay": "never"}, field="approvals", run=True)


def test_an_edits_diff_names_what_changed_was_added_and_removed() -> None:
    before = {"amount": 900, "to": "a", "note": "x"}
    after = {"amount": 450, "to": "a", "memo": "half"}
    assert diff(before, after) == {
        "changed": {"amount": [900, 450]},
        "added": {"memo": "half"},
        "removed": ["note"],
    }
    assert diff(before, before) == {}


def test_the_operators_policy_is_refused_at_start_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from models.errors import ConfigurationError
    from models.settings import get_settings

    monkeypatch.setenv("AGENTQ_TOOL_APPROVALS", '{"pay": "sometimes"}')
    get_settings.cache_clear()
    try:
        with pytest.raises(ConfigurationError) as refused:
            get_settings()
        assert 'AGENTQ_TOOL_APPROVALS: pay: "sometimes" is not a rule' in str(refused.value)
        assert "\n" not in str(refused.value)
        monkeypatch.setenv("AGENTQ_TOOL_APPROVALS", '{"pay": "always"}')
        get_settings.cache_clear()
        assert get_settings().approval_policy.rule_for("pay") == ("pay", "always")
    finally:
        monkeypatch.delenv("AGENTQ_TOOL_APPROVALS")
        get_settings.cache_clear()
