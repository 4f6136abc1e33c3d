"""The LoCoMo benchmark's pure parts: evidence parsing, recall@k, percentiles, turn texts."""

from __future__ import annotations

from collections import Counter
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from ops.bench.figures import percentile
from ops.bench.locomo_recall import (
    DEFAULT_DATA,
    REPO_ROOT,
    load_conversation,
    parse_args,
    parse_evidence,
    recall_at,
    session_date,
)


@pytest.mark.parametrize(
    ("entries", "ids", "malformed"),
    [
        (["D1:3"], ["D1:3"], 0),
        (["D8:6; D9:17"], ["D8:6", "D9:17"], 0),
        ([" D2 : 8 ", "D2:8"], ["D2:8"], 0),
        (["D1:18", "D", "D1:20"], ["D1:18", "D1:20"], 1),
        (["D:11:26", ""], [], 2),
        ([], [], 0),
    ],
)
def test_parse_evidence(entries: list[str], ids: list[str], malformed: int) -> None:
    assert parse_evidence(entries) == (ids, malformed)


def test_recall_at_counts_evidence_in_the_first_n_results() -> None:
    ranked = [["D1:1"], ["D1:2", "D1:3"], ["D2:1"], ["D3:4"]]
    assert recall_at(ranked, {"D1:3", "D3:4"}, 2) == 0.5
    assert recall_at(ranked, {"D1:3", "D3:4"}, 4) == 1.0
    assert recall_at(ranked, {"D9:9"}, 10) == 0.0
    assert recall_at([], {"D1:1"}, 5) == 0.0


def test_recall_at_refuses_empty_evidence() -> None:
    with pytest.raises(ValueError, match="evidence"):
        recall_at([["D1:1"]], set(), 5)


@pytest.mark.parametrize("q", [0, 25, 50, 90, 95, 100])
def test_percentile_matches_numpy(q: float) -> None:
    values = [12.0, 3.5, 7.25, 0.5, 9.0, 3.5, 40.0]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_one_value_and_bad_input() -> None:
    assert percentile([4.0], 95) == 4.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_load_conversation_formats_turns_and_counts_skips() -> None:
    item = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_2_date_time": "9 May, 2023",
            "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "Bye"}],
            "session_1_date_time": "8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi", "blip_caption": "a dog"},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Hello"},
            ],
        },
        "qa": [
            {"question": "q1", "answer": "a", "evidence": ["D1:2; D7:1", "D"], "category": 4},
            {"question": "q2", "adversarial_answer": "a", "evidence": [], "category": 5},
        ],
    }
    skips: Counter[str] = Counter()
    conv = load_conversation(item, skips)
    assert conv.dia_ids == ["D1:1", "D1:2", "D2:1"]
    assert conv.texts[0] == "Ann (8 May, 2023): Hi [image: a dog]"
    assert conv.texts[2] == "Bo (9 May, 2023): Bye"
    assert [(q.text, q.category, q.evidence) for q in conv.questions] == [
        ("q1", 4, frozenset({"D1:2"}))
    ]
    assert skips == Counter(malformed=1, unknown=1, questions=1)
    assert all(n > 0 for n in conv.tokens)


def test_the_data_is_found_beside_the_repository_and_a_missing_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert REPO_ROOT.parent / "shared" / "data" / "locomo-dev.json" == DEFAULT_DATA
    assert (REPO_ROOT / "ops" / "bench" / "locomo_recall.py").is_file()
    missing = tmp_path / "nope.json"
    with pytest.raises(SystemExit) as exited:
        parse_args(["--data", str(missing)])
    assert exited.value.code == 2
    assert f"--data: {missing} is not a file" in capsys.readouterr().err
    given = tmp_path / "given.json"
    given.write_text("[]")
    assert parse_args(["--data", str(given)]).data == given


def test_turns_are_stored_with_their_time_expressions_resolved_by_session_date() -> None:
    item = {
        "sample_id": "conv-d",
        "conversation": {
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I ran yesterday"}],
        },
        "qa": [],
    }
    resolved = load_conversation(item, Counter())
    assert resolved.texts == ["Ann (1:56 pm on 8 May, 2023): I ran yesterday (7 May 2023)"]
    kept = load_conversation(item, Counter(), resolve_dates=False)
    assert kept.texts == ["Ann (1:56 pm on 8 May, 2023): I ran yesterday"]


def test_session_dates_are_read_from_the_end_of_the_date_time() -> None:
    assert session_date("1:56 pm on 8 May, 2023") == date(2023, 5, 8)
    assert session_date("31 December 2022") == date(2022, 12, 31)
    with pytest.raises(ValueError, match="session date 'yesterday'"):
        session_date("yesterday")
