"""The pure rules of memory: add/duplicate/supersede, content hashing, RRF fusion, recency, and the
checks that keep model names and dimensions out of DDL unless they are safe."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from models.errors import ConfigurationError
from models.memory import memory_admin, retrieval
from models.memory.facts import FACTS, Fact, FactWrite, content_hash, decide, normalise
from models.memory.retrieval import Hit, Search, fuse, recency_weight, rrf, tied_ranks

NOW = datetime(2026, 1, 1, tzinfo=UTC)
H = content_hash(subject="user", attribute="preferred_currency", category="preference", text="EUR")


def fact(
    id: int, digest: str = "other", model: str = "m", expires_at: datetime | None = None
) -> Fact:
    return Fact(id=id, content_hash=digest, embedding_model=model, expires_at=expires_at)


def query(**overrides: object) -> Search:
    fields: dict[str, object] = {
        "source": FACTS,
        "user_id": "u",
        "model": "m",
        "query_text": "q",
        "embedding": [1.0, 0.0],
        "k": 5,
        "now": NOW,
    }
    return Search(**{**fields, **overrides})  # type: ignore[arg-type]


def hit(id: int, distance: float, text_rank: float = 0.0, age_days: float = 0.0) -> Hit:
    born = NOW - timedelta(days=age_days)
    return Hit(id=id, born=born, distance=distance, text_rank=text_rank, text_match=text_rank > 0)


# --- add / duplicate / supersede -------------------------------------------------------------


def test_no_candidates_means_add() -> None:
    assert decide([], content_hash=H, embedding_model="m", now=NOW) == FactWrite()


def test_same_content_and_model_is_a_duplicate_and_nothing_is_superseded() -> None:
    decision = decide([fact(1, H), fact(2)], content_hash=H, embedding_model="m", now=NOW)
    assert decision.duplicate_of == 1
    assert decision.supersede == ()


def test_other_content_for_the_same_attribute_is_superseded() -> None:
    decision = decide([fact(7)], content_hash=H, embedding_model="m", now=NOW)
    assert decision.duplicate_of is None
    assert decision.supersede == (7,)


def test_same_content_of_another_model_is_re_embedded_not_a_duplicate() -> None:
    decision = decide([fact(3, H, model="old")], content_hash=H, embedding_model="m", now=NOW)
    assert decision.duplicate_of is None
    assert decision.supersede == (3,)


def test_an_expired_duplicate_is_closed_and_the_fact_added_again() -> None:
    stale = fact(4, H, expires_at=NOW - timedelta(seconds=1))
    decision = decide([stale], content_hash=H, embedding_model="m", now=NOW)
    assert decision.duplicate_of is None
    assert decision.expired == (4,)
    assert decision.supersede == ()


def test_a_fact_expiring_later_is_still_live() -> None:
    live = fact(5, H, expires_at=NOW + timedelta(seconds=1))
    assert decide([live], content_hash=H, embedding_model="m", now=NOW).duplicate_of == 5


# --- content hash ----------------------------------------------------------------------------


def test_hash_ignores_case_and_spacing() -> None:
    a = content_hash(subject="User", attribute=None, category="profile", text="Lives in  Lisbon")
    b = content_hash(subject="user", attribute="", category="profile", text=" lives in lisbon ")
    assert a == b
    assert normalise("  Prefers\tEUR ") == "prefers eur"


def test_hash_is_unambiguous_where_a_pipe_join_is_not() -> None:
    a = content_hash(subject="a|b", attribute="c", category="k", text="t")
    b = content_hash(subject="a", attribute="b|c", category="k", text="t")
    assert a != b
    assert len(a) == 64


# --- fusion ----------------------------------------------------------------------------------


def test_tied_values_share_the_best_rank() -> None:
    found = [hit(i, d) for i, d in zip([10, 11, 12, 13], [0.1, 0.2, 0.2, 0.5], strict=True)]
    assert tied_ranks(found, [h.distance for h in found]) == {10: 1, 11: 2, 12: 2, 13: 4}
    assert tied_ranks([], []) == {}


def test_rrf_is_the_sum_over_the_lists_holding_the_item() -> None:
    assert rrf([1, None]) == pytest.approx(1 / 61)
    assert rrf([1, 3]) == pytest.approx(1 / 61 + 1 / 63)
    assert rrf([None, None]) == 0.0


def test_an_item_found_by_both_paths_beats_one_found_by_a_single_path() -> None:
    ranked = fuse([hit(1, 0.1), hit(2, 0.2)], [hit(2, 0.2, text_rank=0.5)], query())
    assert [r.item for r in ranked] == [2, 1]
    assert ranked[0].relevance == pytest.approx(1 / 62 + 1 / 61)


def test_far_rows_without_a_text_match_are_dropped_but_text_matches_kept() -> None:
    far, far_but_named = hit(1, 0.95), hit(2, 0.99, text_rank=0.1)
    ranked = fuse([far, far_but_named], [far_but_named], query(min_similarity=0.2))
    assert [r.item for r in ranked] == [2]
    assert ranked[0].similarity == pytest.approx(0.01)


def test_of_two_equally_similar_rows_the_newer_ranks_first() -> None:
    old, new = hit(1, 0.3, age_days=90), hit(2, 0.3, age_days=1)
    ranked = fuse([old, new], [], query())
    assert [r.item for r in ranked] == [2, 1]
    assert ranked[0].relevance == ranked[1].relevance
    assert ranked[0].recency > ranked[1].recency


def test_fuse_returns_at_most_k() -> None:
    hits = [hit(i, i / 100) for i in range(1, 30)]
    assert [r.item for r in fuse(hits, [], query(k=3))] == [1, 2, 3]


def test_recency_weight_is_bounded_and_halves_its_loss_per_half_life() -> None:
    day = 86_400.0
    assert recency_weight(0, half_life_days=30) == pytest.approx(1.0)
    assert recency_weight(30 * day, half_life_days=30) == pytest.approx(0.9)
    assert recency_weight(1e12, half_life_days=30) == pytest.approx(0.8)
    assert recency_weight(1e12, half_life_days=None) == 1.0
    assert recency_weight(-day, half_life_days=30) == pytest.approx(1.0)


# --- checks before SQL and DDL ---------------------------------------------------------------


@pytest.mark.parametrize("model", ["", "x'; DROP TABLE facts; --", "a b", "-lead", "é"])
def test_unsafe_model_names_are_refused(model: str) -> None:
    with pytest.raises(ConfigurationError, match="embedding_model"):
        retrieval.check_model(model)


@pytest.mark.parametrize("model", ["hash-384", "text-embedding-3-small", "org/all-MiniLM-L6-v2"])
def test_ordinary_model_names_pass(model: str) -> None:
    assert retrieval.check_model(model) == model


@pytest.mark.parametrize("dim", [0, -1, 2001, 3.0, True, "384"])
def test_index_dimensions_outside_1_to_2000_are_refused(dim: object) -> None:
    with pytest.raises(ConfigurationError, match="dim"):
        retrieval.check_dim(dim)  # type: ignore[arg-type]


def test_index_names_are_short_and_keep_similar_models_apart() -> None:
    long = retrieval.vector_index_name("episodes", "x" * 200, 2000)
    assert len(long) <= 63
    a, b = (retrieval.vector_index_name("facts", m, 8) for m in ("a-b", "a_b"))
    assert a != b
    assert a.startswith("facts_embedding_a_b_8_")


@pytest.mark.parametrize(
    "overrides",
    [
        {"k": 0},
        {"k": 251},
        {"now": datetime(2026, 1, 1)},
        {"embedding": []},
        {"embedding": [math.nan, 1.0]},
        {"model": "bad model"},
    ],
)
def test_bad_searches_are_refused(overrides: dict[str, object]) -> None:
    with pytest.raises((ValueError, ConfigurationError)):
        query(**overrides)


def test_search_sql_takes_the_dimension_from_the_embedding() -> None:
    sql = query(embedding=[0.1] * 7).sql(retrieval.NEAREST_INDEXED)
    assert "ORDER BY embedding::vector(7) <=> CAST(:q AS vector(7))" in sql
    assert "valid_to IS NULL" in sql
    assert "valid_to IS NULL" not in query(include_history=True).sql(retrieval.NEAREST_INDEXED)


def test_a_search_answers_each_list_highest_score_first_ties_in_recall_order() -> None:
    def hit(name: str, score: float) -> retrieval.Scored[str]:
        return retrieval.Scored(name, 0.5, 0.0, False, score, 1.0, score)

    grouped = [hit("turn", 0.9), hit("from the turn", 0.2), hit("b", 0.5), hit("c", 0.5)]
    ordered = memory_admin.by_score(memory_admin.Recalled(facts=grouped, episodes=grouped[::-1]))
    assert [h.item for h in ordered.facts] == ["turn", "b", "c", "from the turn"]
    assert [h.item for h in ordered.episodes] == ["turn", "c", "b", "from the turn"]
