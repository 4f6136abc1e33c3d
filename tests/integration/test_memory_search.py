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


SUMMARY = "Goal: convert travel invoice currency for the reports"


def store(user: str, make_run: Callable[..., int]) -> None:
    """The three facts and an episode of a run that is only inserted. Everything is embedded
    first: the run stays `queued`, and a run quiet for `AGENTQ_QUEUED_STALE_S` (5 s here) is sent
    by the reconciler, whose memory task would store that run's own episode before this one (a
    first model load on a busy CI machine can take that long)."""
    model = memory_admin.embedder()
    vectors = model.embed([*FACTS, SUMMARY])
    run_id = make_run(None, user=user, start=False)
    with session_scope() as session:
        for i, text in enumerate(FACTS):
            remember(
                session,
                user_id=user,
                subject="user",
                attribute=f"a{i}",
                category="preference",
                text=text,
                embedding=vectors[i],
                embedding_model=model.model,
            )
        record_episode(
            session,
            user_id=user,
            run_id=run_id,
            goal="convert travel invoices",
            plan=[],
            failures=[],
            outcome="succeeded",
            final_answer="done",
            summary=SUMMARY,
            embedding=vectors[-1],
            embedding_model=model.model,
        )


def test_memory_search_lists_facts_and_episodes_highest_score_first(
    make_run: Callable[..., int],
) -> None:
    user = f"searcher-{uuid.uuid4().hex[:8]}"
    store(user, make_run)
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
