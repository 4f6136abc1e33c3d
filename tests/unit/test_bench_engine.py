"""The pure helpers of the engine benchmark: percentiles, ratios, medians of rounds, the CPU
accounting's arithmetic, the conninfo the LangGraph peer connects with, the round order."""

from __future__ import annotations

import numpy as np
import pytest
from psycopg import conninfo

from ops.bench import cpu
from ops.bench.figures import Figures, Round, cpu_model, percentile, ratio, summary
from ops.bench.harness import libpq_conninfo
from ops.bench.rounds import rotation

SOCKET_URL = "postgresql+psycopg://postgres@/postgres?host=%2Ftmp%2Fagentq%20bench%2Fpgdata"


def test_percentile_matches_numpy_linear() -> None:
    values = [float(v) for v in np.random.default_rng(0).exponential(size=31)]
    for q in (0, 50, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([3.0], 99) == 3.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_ratio_is_printed_to_two_significant_digits_below_one() -> None:
    assert ratio(1.0, 14.0) == "0.071"
    assert ratio(3.0, 2.0) == "1.5"
    assert ratio(250.0, 10.0) == "25"
    assert ratio(1.0, 0.0) == "n/a"


def test_figures_take_the_median_round() -> None:
    rounds = (Round(2.0, {"worker": 1.0}), Round(4.0, {"worker": 3.0}), Round(10.0, {"a": 9.0}))
    f = Figures("agentq", 100, rounds)
    assert f.seconds == 4.0
    assert f.rate == 25.0
    assert f.cpu_ms_per_step == pytest.approx(30.0)  # median of 1, 3, 9 CPU s over 100 steps
    assert f.cpu_ms_per_step_of("worker") == pytest.approx(10.0)  # median of 1, 3, 0


def test_summary_names_each_rate_and_both_ratios() -> None:
    one = (Round(1.0, {"w": 0.5}),)
    systems = [Figures("agentq", 50, one), Figures("raw", 500, one), Figures("lg", 100, one)]
    line = summary("10 x 5", 2, systems)
    assert "agentq 50.0/s (10.0 CPU ms)" in line
    assert "agentq/raw 0.1x" in line and "agentq/lg 0.5x" in line


def test_cpu_model_reads_the_first_model_name() -> None:
    text = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: other\n"
    assert cpu_model(text) == "AMD EPYC 7B13"
    assert cpu_model("processor : 0\n") == "unknown"


def test_conninfo_drops_the_driver_and_keeps_the_socket_dir() -> None:
    parsed = conninfo.conninfo_to_dict(libpq_conninfo(SOCKET_URL))
    assert parsed == {"user": "postgres", "dbname": "postgres", "host": "/tmp/agentq bench/pgdata"}
    tcp = conninfo.conninfo_to_dict(libpq_conninfo("postgresql://u:p@db:5433/x"))
    assert tcp == {"user": "u", "password": "p", "host": "db", "port": "5433", "dbname": "x"}


def test_conninfo_with_a_schema_sets_the_search_path() -> None:
    parsed = conninfo.conninfo_to_dict(libpq_conninfo(SOCKET_URL, schema="langgraph"))
    assert parsed["options"] == "-c search_path=langgraph"
    assert parsed["host"] == "/tmp/agentq bench/pgdata"
    again = conninfo.conninfo_to_dict(libpq_conninfo(libpq_conninfo(SOCKET_URL), schema="lg"))
    assert again["options"] == "-c search_path=lg"
    assert again["host"] == "/tmp/agentq bench/pgdata"


def test_cpu_spent_counts_growth_new_processes_and_subtracts_the_gone_ones_past() -> None:
    before = {(1, 0.0): ("postgres", 10.0), (2, 0.0): ("postgres", 4.0), (3, 0.0): ("w", 1.0)}
    # Backend 2 ended and was reaped: the postmaster's reaped times grew by its whole life (5 s),
    # 1 s of which fell within the round. Process 4 is new; 3 grew by 0.5 s.
    after = {(1, 0.0): ("postgres", 15.5), (3, 0.0): ("w", 1.5), (4, 9.0): ("w", 0.25)}
    assert cpu.spent(before, after) == pytest.approx({"postgres": 1.5, "w": 0.75})


def test_cpu_spent_tells_a_reused_pid_from_the_process_that_had_it() -> None:
    before = {(1, 0.0): ("w", 10.0), (7, 1.0): ("w", 3.0)}
    # Pid 7 ran 0.2 s more, ended and was reaped by 1 (+3.2 s, and 1's own 0.3 s); a new
    # process then got pid 7 and ran 0.5 s: 1.0 s in all.
    after = {(1, 0.0): ("w", 13.5), (7, 2.0): ("w", 0.5)}
    assert cpu.spent(before, after) == pytest.approx({"w": 1.0})


def test_cpu_groups_by_command_line() -> None:
    assert cpu.group_of(["python", "-P", "-m", "celery", "-A", "worker.app", "worker"]) == "worker"
    assert cpu.group_of(["python", "-m", "celery", "-A", "scheduler.app"]) == "coordinator"
    assert cpu.group_of(["/x/redis-server", "/d/redis/redis.conf"]) == "redis"
    assert cpu.group_of(["python", "-c", "from multiprocessing.spawn import spawn_main"]) == (
        "bench children"
    )
    assert cpu.group_of(["sh"]) == "other"


def test_rounds_rotate_the_order() -> None:
    names = ["agentq", "raw", "lg"]
    assert [rotation(names, i) for i in range(4)] == [
        ["agentq", "raw", "lg"],
        ["raw", "lg", "agentq"],
        ["lg", "agentq", "raw"],
        ["agentq", "raw", "lg"],
    ]
