"""The pure helpers of the memory scale benchmark: recall@k, percentiles, the synthetic corpus
(topics per user, shares, query sources) and the COPY rows it loads."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from models.memory.facts import content_hash
from ops.bench import memory_scale as bench

MakeCorpus = Callable[..., bench.Corpus]


@pytest.fixture
def make_corpus() -> MakeCorpus:
    def make(facts: int = 2_000, users: int = 10, seed: int = 1) -> bench.Corpus:
        return bench.make_corpus(np.random.default_rng(seed), facts, users)

    return make


def test_recall_at_k_counts_the_exact_top_k_found_in_the_top_k() -> None:
    exact = list(range(10))
    assert bench.recall_at_k(exact, exact) == 1.0
    assert bench.recall_at_k([*range(5), *range(100, 105)], exact) == 0.5
    assert bench.recall_at_k(list(reversed(exact)), exact) == 1.0  # order within top k is free
    assert bench.recall_at_k([*range(100, 110), *exact], exact) == 0.0  # found past k: no credit


def test_recall_at_k_with_fewer_exact_rows_than_k() -> None:
    assert bench.recall_at_k([3, 1], [1, 3, 2], k=10) == pytest.approx(2 / 3)
    assert bench.recall_at_k([], []) == 1.0


def test_percentile_matches_numpy_linear() -> None:
    values = [float(v) for v in np.random.default_rng(0).exponential(size=57)]
    for q in (1, 50, 95, 99):
        assert bench.percentile(values, q) == pytest.approx(np.percentile(values, q))
    assert bench.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


def test_percentile_needs_two_values() -> None:
    with pytest.raises(ValueError):  # statistics.StatisticsError is a ValueError
        bench.percentile([1.0], 50)


def test_words_are_distinct_made_up_syllables() -> None:
    words = [bench.word(i) for i in range(bench.CENTRES * bench.TOPIC_WORDS)]
    assert len(set(words)) == len(words)
    assert bench.word(0) == "bababa" and bench.word(1) == "bababe"


def test_noisy_rows_have_unit_norm_and_the_expected_cosine() -> None:
    rng = np.random.default_rng(3)
    centre = bench.noisy(rng, np.zeros((1, bench.DIM), np.float32), 1.0)
    facts = bench.noisy(rng, np.repeat(centre, 2_000, axis=0), bench.FACT_NOISE)
    assert np.allclose(np.linalg.norm(facts, axis=1), 1.0, atol=1e-5)
    assert float(np.mean(facts @ centre[0])) == pytest.approx(1 / np.sqrt(2), abs=0.02)


def test_corpus_gives_each_user_an_equal_share_of_its_own_topics(make_corpus: MakeCorpus) -> None:
    corpus = make_corpus()
    assert np.bincount(corpus.users).tolist() == [200] * 10
    for u in range(10):
        assert set(corpus.topics[corpus.users == u]) <= set(corpus.user_topics[u])
    assert corpus.users[:10].tolist() != sorted(corpus.users[:10].tolist())  # shuffled heap
    cosines = corpus.centres @ corpus.centres.T
    off_diagonal = cosines[~np.eye(len(cosines), dtype=bool)]
    assert float(off_diagonal.mean()) == pytest.approx(0.11, abs=0.03)


def test_sources_are_own_rows_then_rows_of_topics_the_user_lacks(make_corpus: MakeCorpus) -> None:
    corpus = make_corpus()
    sources = bench.pick_sources(np.random.default_rng(2), corpus, 10)
    assert len({u for u, _ in sources}) == 10
    for n, (u, row) in enumerate(sources):
        if n < 5:
            assert corpus.users[row] == u
        else:
            assert corpus.topics[row] not in corpus.user_topics[u]


def test_fact_rows_match_the_copy_columns_and_are_unique(make_corpus: MakeCorpus) -> None:
    corpus = make_corpus()
    vector = np.zeros(bench.DIM, np.float32)
    rows = [bench.fact_row(corpus, i, vector) for i in range(len(corpus.users))]
    assert all(len(row) == len(bench.COPY_TYPES) for row in rows)
    assert len({(row[0], row[4]) for row in rows}) == len(rows)  # the unique current-content index
    user, subject, category, text, digest = rows[7][:5]
    assert user == f"user-{corpus.users[7]:04d}" and text.endswith("note 7")
    assert digest == content_hash(subject=subject, attribute=None, category=category, text=text)
