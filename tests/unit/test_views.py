"""The CLI's renderings of rows: user text is shown literally, nothing is cut at 80 columns."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

from rich.console import Console, RenderableType

from models.engine.goal_reports import report
from models.tables import Escalation, Run, Step, utcnow
from ops import escalation_views, views

GOAL = "Fix the [/] bracket [bold]now[/bold] and [offline]"
USER = "[/]"
REGEX_ERROR = r"ToolError: key must match ^[a-z][a-z0-9_]{0,99}$ [red]"


def render(renderable: RenderableType, width: int = 200) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue()


def make_run(**overrides: Any) -> Run:
    now = utcnow()
    fields: dict[str, Any] = {
        "id": 7,
        "user_id": USER,
        "goal": GOAL,
        "status": "waiting_review",
        "plan_version": 1,
        "created_at": now,
        "wall_time_limit_s": 3600.0,
        "deadline_at": now + timedelta(seconds=3600),
    }
    return Run(**{**fields, **overrides})


def make_step(**overrides: Any) -> Step:
    fields: dict[str, Any] = {
        "id": 3,
        "run_id": 7,
        "plan_version": 1,
        "position": 0,
        "name": "[b]lookup",
        "kind": "tool",
        "tool": "noop",
        "status": "failed",
        "attempt": 3,
        "error": REGEX_ERROR,
    }
    return Step(**{**fields, **overrides})


def make_escalation(**overrides: Any) -> Escalation:
    fields: dict[str, Any] = {
        "id": 5,
        "run_id": 7,
        "plan_version": 1,
        "step_id": 3,
        "reason": "replan_budget_spent",
        "detail": {"step": "[b]lookup", "error": REGEX_ERROR, "tool": "noop"},
        "created_at": utcnow() - timedelta(minutes=5),
    }
    return Escalation(**{**fields, **overrides})


def test_run_panel_shows_markup_like_text_literally() -> None:
    ok = make_step(id=4, name="ok", status="succeeded", error=None, result={"note": "[offline]"})
    run = make_run(error=REGEX_ERROR)
    out = render(
        views.render_run(
            run,
            facts={"tag": "[/bold]"},
            steps=[make_step(), ok],
            escalation=make_escalation(),
        )
    )
    for text in (GOAL, "│ user          [/]", REGEX_ERROR, "tag=[/bold]", "[offline]", "[b]lookup"):
        assert text in out, out


def test_run_panel_tells_why_the_run_waits_for_review() -> None:
    """`run show` of an escalated run: the reason in a reviewer's words, the failed step, its
    error, the detail's other values and the command to decide it (was the reason code alone)."""
    esc = make_escalation(detail={"step": "[b]lookup", "tool": "noop", "raw_output": "{no json"})
    out = render(views.render_run(make_run(), facts={}, steps=[make_step()], escalation=esc))
    said = "escalation 5 (open)  replan_budget_spent: A step failed and the run has no replans"
    assert said in out, out
    assert "failed step          [b]lookup (noop)" in out, out
    assert f"error                {REGEX_ERROR}" in out, out  # the step's, literally
    assert "raw_output           {no json" in out and "agentq review show 5" in out, out


def test_run_panel_names_the_failed_step_of_the_detail_when_not_in_the_plan_shown() -> None:
    esc = make_escalation(
        step_id=None,
        reason="goal_not_met",
        detail={"step": "report", "tool": "echo", "error": "lacks CC-4410", "missing": ["CC"]},
    )
    out = render(views.render_run(make_run(), facts={}, steps=[], escalation=esc))
    assert "goal_not_met: The steps finished, but what the run delivered fails" in out, out
    assert "failed step          report (echo)" in out and "lacks CC-4410" in out, out
    assert "missing              CC" in out, out
    unknown = make_escalation(reason="new_reason", detail={})
    out = render(views.render_run(make_run(), facts={}, steps=[], escalation=unknown))
    (line,) = [ln.strip("│ ") for ln in out.splitlines() if "escalation 5" in ln]
    assert line == "escalation 5 (open)  new_reason", out  # an unknown reason: its code alone
    labels = {ln.strip("│ ").split("  ")[0] for ln in out.splitlines()}
    assert "error" not in labels and "failed step" not in labels, out


def test_run_panel_shows_the_wall_time_budget_and_deadline() -> None:
    run = make_run(status="running")
    out = render(views.render_run(run, facts={}, steps=[], escalation=None))
    assert "wall time     3600 s, deadline " in out, out
    assert views.utc(run.deadline_at or utcnow()) in out
    assert "(in 59m)" in out


def test_runs_table_keeps_user_text_and_the_status_whole_at_80_columns() -> None:
    runs = [
        make_run(tokens_used=1234, tokens_limit=200_000),
        make_run(id=12345, user_id="someone-with-a-long-login-name", goal=GOAL * 3),
    ]
    out = render(views.runs_table(runs), width=80)
    assert out.count("waiting_review") == 2, out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "[/]" in out and "1.2k/200k" in out
    assert "Fix the [/]" in render(views.runs_table(runs))


def test_escalation_panel_shows_the_failed_steps_error_literally() -> None:
    out = render(
        escalation_views.render_escalation(
            make_escalation(), run=make_run(), step=make_step(), facts={"a": "[x]"}
        )
    )
    assert REGEX_ERROR in out and GOAL in out and "a=[x]" in out, out
    assert "[b]lookup (noop), 3 tries" in out


def test_escalation_without_a_step_shows_the_stored_error_and_no_empty_detail() -> None:
    esc = make_escalation(
        step_id=None,
        reason="invalid_plan",
        detail={"error": "ProviderError: openai provider: Missing credentials", "raw_output": ""},
    )
    out = render(
        escalation_views.render_escalation(esc, run=make_run(plan_version=0), step=None, facts={})
    )
    assert "ProviderError: openai provider: Missing credentials" in out, out
    assert "raw_output" not in out


def test_decided_escalation_shows_answer_and_comment_and_stops_waiting() -> None:
    created = utcnow() - timedelta(hours=3)
    esc = make_escalation(
        status="decided",
        decision="respond",
        decided_by="[/]rita",
        decided_at=created + timedelta(minutes=2),
        answer={"rate": 0.95},
        comment="from the [bold] bank",
        created_at=created,
    )
    out = render(
        escalation_views.render_escalation(esc, run=make_run(), step=make_step(), facts={})
    )
    assert "respond by [/]rita at " in out, out
    assert '{"rate":0.95}' in out and "from the [bold] bank" in out
    table = render(escalation_views.escalations_table([esc]))
    assert "│ 2m " in table, table


def test_compact_and_span() -> None:
    assert [views.compact(n) for n in (950, 1234, 200_000, 3_400_000)] == [
        "950",
        "1.2k",
        "200k",
        "3.4M",
    ]
    assert [views.span(s) for s in (5, 61, 7200, 90_000)] == ["5s", "1m", "2h", "1d"]


def test_the_plan_shows_each_steps_wave_and_what_it_waits_for_at_80_columns() -> None:
    """a and b wait for nothing (wave 1, together), join waits for both (wave 2)."""
    steps = [
        make_step(id=1, name="a", status="succeeded", error=None, result={"n": 1}),
        make_step(id=2, name="b", status="running", error=None),
        make_step(id=3, name="join", kind="model", tool=None, status="pending", error=None),
    ]
    out = render(views.steps_table(steps, {1: (), 2: (), 3: (1, 2)}), width=80)
    lines = {line.split("│")[3].strip(): line for line in out.splitlines() if line.count("│") > 8}
    assert [lines[n].split("│")[2].strip() for n in ("a", "b", "join")] == ["1", "1", "2"], out
    assert lines["join"].split("│")[4].strip() == "a, b" and "│ model " in lines["join"], out
    assert lines["a"].split("│")[4].strip() == "-"
    assert "steps of one wave can run together" in out
    assert max(len(line) for line in out.splitlines()) <= 80, out


def test_a_plain_list_reads_as_before_one_step_per_wave() -> None:
    steps = [make_step(id=1, name="a", status="succeeded", error=None), make_step(id=2, name="b")]
    out = render(views.steps_table(steps))  # no graph given: each step after the one before
    assert "can run together" not in out
    row_b = next(line for line in out.splitlines() if "│ b " in line)
    assert [c.strip() for c in row_b.split("│")[1:5]] == ["2", "2", "b", "a"], out


def test_run_panel_tells_the_goal_check_with_the_pinned_values_put_in() -> None:
    """Issue 31, item 5: the verdict in words, never `${facts.KEY}` (the row was the criteria
    as written, and the verdict only a timeline event)."""
    run = make_run(success_criteria=[{"text": "Filed in ${facts.currency} [b]", "by": "user"}])
    facts = {"currency": "EUR"}
    out = render(views.render_run(run, facts=facts, steps=[], escalation=None))
    assert "goal check    Not checked yet: the goal is checked once the steps finish" in out, out
    assert "criteria      Filed in EUR [b]" in out and "${facts" not in out, out
    verdict = {"plan_version": 1, "met": False, "source": "rules", "reason": "1 value missing"}
    goal = report(run, {**verdict, "missing": ["a", "b"]}, pinned=facts)
    out = render(views.render_run(run, facts=facts, steps=[], escalation=None, goal=goal))
    lines = [" ".join(ln.strip("│ ").split()) for ln in out.splitlines()]
    start = lines.index(f"goal check {goal.summary}")
    assert lines[start + 1 : start + 5] == [
        "criteria Filed in EUR [b]",
        "why 1 value missing",
        "missing - a",
        "- b",
    ], out


def test_a_goal_checks_missing_lines_read_as_text_not_json() -> None:
    """A new user's trial: `missing` was printed as JSON, its quotes escaped."""
    missing = ["'The note mentions \"platform\"': nothing the run delivered holds it", "a total"]
    detail = {"step": "note", "reason": "not met", "missing": missing, "checked_by": "rules"}
    esc = make_escalation(step_id=None, reason="goal_not_met", detail=detail)
    out = render(
        escalation_views.render_escalation(esc, run=make_run(), step=None, facts={}), width=300
    )
    assert "'The note mentions \"platform\"': nothing the run delivered holds it; a total" in out
    assert '\\"' not in out and '["' not in out
