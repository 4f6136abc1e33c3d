"""The user's-path benchmark's harness (ops/bench/up_stack.py, api_users.py, run_timeline.py,
cpu.py): the real `agentq up` as a subprocess, users submitting over its HTTP API, each run's
phases read back from the rows, and the CPU of each of the stack's processes by what it is."""

from __future__ import annotations

import pytest

from ops.bench.agentq_peer import plan_of
from ops.bench.api_users import ApiUsers
from ops.bench.cpu import CpuMeter
from ops.bench.harness import BenchError, settings_here
from ops.bench.run_timeline import PHASES, phases_of
from ops.bench.up_stack import UpStack

pytestmark = pytest.mark.integration
RUNS, STEPS = 4, 2


@pytest.mark.timeout(300)
def test_users_submit_over_the_api_of_agentq_up_and_each_runs_phases_are_read() -> None:
    """And a submit the API refuses fails the round, naming the status and the API's message."""
    with UpStack(1, env={"AGENTQ_EMBEDDING_PROVIDER": "hash"}) as stack:
        urls = {"AGENTQ_DATABASE_URL": stack.database_url, "AGENTQ_BROKER_URL": stack.broker_url}
        with settings_here(urls):
            users = ApiUsers(stack.api_url, 2, prefix="path-user")
            try:
                _measure(users, CpuMeter(stack.pgdata))
            finally:
                users.close()


def _measure(users: ApiUsers, meter: CpuMeter) -> None:
    meter.start()
    seconds = users.round(RUNS, plan_of(STEPS))
    spent = meter.stop()
    found = users.last
    assert 0 < seconds < 120
    assert len(found.run_ids) == RUNS and len(found.latencies_s) == RUNS
    phases = phases_of(found.run_ids)
    assert set(phases) == set(PHASES)
    for phase in ("submit → first start", "steps", "synthesis", "total"):
        assert len(phases[phase]) == RUNS, phase
    assert all(total > 0 for total in phases["total"])
    assert {"api", "worker", "postgres"} <= set(spent)
    assert spent["api"] > 0 and spent["worker"] > 0
    with pytest.raises(BenchError, match=r"API submits failed; first: 400 .*no_such_tool"):
        users.submit_all(1, plan_of(1, tool="no_such_tool"))
