"""The pure rules of escalation deadlines: time waiting and left, how the CLI shows them, and the
settings that configure them."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from rich.console import Console, RenderableType

from models.review.escalations import deadline_comment, deadline_left_s, waiting_s
from models.settings import Settings
from models.settings_errors import describe_settings_error
from models.tables import Escalation
from ops import escalation_views, views

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def make_escalation(**overrides: Any) -> Escalation:
    fields: dict[str, Any] = {
        "id": 5,
        "run_id": 7,
        "plan_version": 1,
        "reason": "replan_budget_spent",
        "detail": {"step": "lookup"},
        "created_at": NOW - timedelta(hours=3),
        "deadline_at": NOW + timedelta(hours=21),
    }
    return Escalation(**{**fields, **overrides})


def render(renderable: RenderableType, width: int = 200) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(renderable)
    return out.getvalue()


def test_deadline_left_counts_down_and_goes_negative_once_passed() -> None:
    esc = make_escalation()
    assert deadline_left_s(esc, NOW) == 21 * 3600
    assert deadline_left_s(esc, NOW + timedelta(hours=23)) == -2 * 3600


@pytest.mark.parametrize(
    "overrides",
    [{"status": "decided", "decided_at": NOW}, {"deadline_at": None}],
)
def test_no_deadline_left_once_decided_or_without_one(overrides: dict[str, Any]) -> None:
    assert deadline_left_s(make_escalation(**overrides), NOW) is None


def test_waiting_stops_at_the_decision() -> None:
    assert waiting_s(make_escalation(), NOW) == 3 * 3600
    decided = make_escalation(status="decided", decided_at=NOW - timedelta(hours=1))
    assert waiting_s(decided, NOW + timedelta(days=2)) == 2 * 3600


def test_the_queue_shows_time_waiting_and_left_at_80_columns() -> None:
    late = make_escalation(
        id=6, claimed_by="someone", status="claimed", deadline_at=NOW - timedelta(hours=2)
    )
    out = render(escalation_views.escalations_table([make_escalation(), late], now=NOW), width=80)
    assert "deadline" in out and "in 21h" in out and "passed 2h ago" in out, out
    assert out.count("3h") >= 2, out
    assert max(len(line) for line in out.splitlines()) <= 80, out


def test_the_escalation_panel_shows_the_deadline_until_decided() -> None:
    shown = render(
        escalation_views.render_escalation(make_escalation(), run=None, step=None, facts={})
    )
    assert "deadline" in shown and views.utc(NOW + timedelta(hours=21)) in shown, shown
    assert "waiting" in shown and f"(opened {views.utc(NOW - timedelta(hours=3))})" in shown
    decided = make_escalation(status="decided", decision="reject", decided_at=NOW)
    assert "deadline " not in render(
        escalation_views.render_escalation(decided, run=None, step=None, facts={})
    )


def test_claim_with_nothing_open_says_who_holds_the_claims() -> None:
    assert str(escalation_views.nothing_to_claim({})) == "the review queue is empty"
    said = str(escalation_views.nothing_to_claim({"alice": 2, "bob": 1}))
    assert "3 claimed by alice (2), bob (1)" in said and "agentq review release" in said


def test_the_deadline_comment_gives_both_times() -> None:
    said = deadline_comment(make_escalation())
    assert "2026-05-01 09:00:00 UTC" in said and "2026-05-02 09:00:00 UTC" in said
    assert "AGENTQ_ESCALATION_DEADLINE_ACTION" in said


def test_deadline_settings_default_to_a_day_and_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGENTQ_ESCALATION_TIMEOUT_S", "AGENTQ_ESCALATION_DEADLINE_ACTION"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert settings.escalation_timeout_s == 86_400
    assert settings.escalation_deadline_action == "wait"


def test_an_unknown_deadline_action_is_refused_by_name() -> None:
    with pytest.raises(ValidationError) as info:
        Settings(escalation_deadline_action="approve")  # type: ignore[arg-type]
    said = describe_settings_error(info.value)
    assert "AGENTQ_ESCALATION_DEADLINE_ACTION" in said and "'reject' or 'wait'" in said
