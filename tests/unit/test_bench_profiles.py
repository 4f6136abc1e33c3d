"""The benchmarks' profile summaries and run timelines (ops/bench/profiles.py,
ops/bench/run_timeline.py): pure functions over collapsed stacks and phase timings."""

from __future__ import annotations

from pathlib import Path

from ops.bench.profiles import frame_name, shares, summary
from ops.bench.run_timeline import phase_rows

STACKS = [
    "main (celery/bin/worker.py:10);execute_step (/work/main/worker/app.py:150);"
    "finish (/work/main/worker/execution/steps.py:270);wait (psycopg/connection.py:479) 6",
    "main (celery/bin/worker.py:10);execute_step (/work/main/worker/app.py:150);"
    "embed (/work/main/models/memory/embedders.py:90) 3",
    "main (celery/bin/worker.py:10);poll (kombu/utils/eventio.py:80) 1",
]


def test_a_frame_is_named_by_its_file_and_function() -> None:
    assert frame_name("finish (/work/main/worker/execution/steps.py:270)") == (
        "worker/execution/steps.py:finish"
    )
    assert frame_name("x (/venv/lib/python3.11/site-packages/psycopg/cursor.py:9)") == (
        "psycopg/cursor.py:x"
    )
    assert frame_name("<shape of its own>") == "<shape of its own>"


def test_own_frames_count_inclusively_and_leaves_by_self_time() -> None:
    total, inclusive, leaves = shares(STACKS)
    assert total == 10
    assert inclusive["worker/app.py:execute_step"] == 9
    assert inclusive["worker/execution/steps.py:finish"] == 6
    assert "celery/bin/worker.py:main" not in inclusive  # not agentq's own
    assert leaves["psycopg/connection.py:wait"] == 6 and leaves["kombu/utils/eventio.py:poll"] == 1


def test_the_summary_merges_a_groups_files(tmp_path: Path) -> None:
    (tmp_path / "worker-11.txt").write_text("\n".join(STACKS[:2]) + "\n")
    (tmp_path / "worker-12.txt").write_text(STACKS[2] + "\n")
    lines = summary(tmp_path, top=2)
    assert lines[0] == "\nworker: 10 samples; agentq's frames, inclusive:"
    assert "   90.0%  worker/app.py:execute_step" in lines


def test_phase_rows_give_medians_in_ms_and_per_step_where_it_means_something() -> None:
    rows = phase_rows({"steps": [0.010, 0.020, 0.030], "memory": [], "synthesis": [0.004]}, 5)
    assert rows[0] == ["steps", "20.0", "28.0", "4.0"]
    assert rows[1] == ["memory", "-", "-", "-"]
    assert rows[2] == ["synthesis", "4.0", "4.0", ""]
