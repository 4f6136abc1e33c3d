"""`agentq memory search` (and `GET /api/v1/memory/search`, the same `memory_admin.search`):
one list of the user's facts and episodes, highest score first, each with its score."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from models.db import session_scope
from models.memory import memory_admin
from models.memory.episodes import record_episode
from models.memory.facts import remember
from ops.memory_commands import memory_app

pytestmark = pytest.mark.integration
QUERY = "invoice currency for travel reports"
FACTS = (
    "Invoices for travel reports are paid in EUR currency",
    "The travel budget is reviewed in March",
    "Reports go to the finance team",
)
SCORE_ROW = re.compile(r"^│\s*(\d\.\d{4})\s*│\s*(fact|episode)\s*│", re.MULTILINE)


def store(user: str, run_id: int) -> None:
    model = memory_admin.embedder()
    with session_scope() as session:
        for i, text in enumerate(FACTS):
            remember(
                session,
                user_id=user,
                subject="user",
                attribute=f"a{i}",
                category="preference",
                text=text,
                embedding=model.embed([text])[0],
                embedding_model=model.model,
            )
        summary = "Goal: convert travel invoice currency for the reports"
        record_episode(
            session,
            user_id=user,
            run_id=run_id,
            goal="convert travel invoices",
            plan=[],
            failures=[],
            outcome="succeeded",
            final_answer="done",
            summary=summary,
            embedding=model.embed([summary])[0],
            embedding_model=model.model,
        )


def test_memory_search_lists_facts_and_episodes_highest_score_first(
    make_run: Callable[..., int],
) -> None:
    user = f"searcher-{uuid.uuid4().hex[:8]}"
    store(user, make_run(None, user=user, start=False))
    found = memory_admin.search(user_id=user, query=QUERY)
    for hits in (found.facts, found.episodes):
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    shown = CliRunner().invoke(memory_app, ["search", QUERY, "--user", user])
    assert shown.exit_code == 0, shown.output
    rows = SCORE_ROW.findall(shown.output)
    scores = [float(score) for score, _ in rows]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1, shown.output
    assert {kind for _, kind in rows} == {"fact", "episode"}, shown.output
    expected = sorted([*found.facts, *found.episodes], key=lambda h: -h.score)
    assert scores == [round(h.score, 4) for h in expected]
