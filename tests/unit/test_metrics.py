"""The metric definitions (`models.operations.metrics`), recording after commit, and
multiprocess mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import Histogram
from sqlalchemy import create_engine, text
from sqlmodel import Session

from models.operations import metrics
from models.operations.metrics_export import metrics_dir
from models.settings import Settings

LABELS = {
    "agentq_steps": ("status", "tool"),
    "agentq_step_duration_seconds": ("tool",),
    "agentq_step_dispatch_latency_seconds": ("tool",),
    "agentq_model_tokens": ("model", "kind"),
    "agentq_model_cost_usd": ("model",),
    "agentq_model_call_duration_seconds": ("provider", "purpose"),
    "agentq_model_call_errors": ("provider", "kind"),
    "agentq_reconciler_repairs": ("kind",),
}


def test_every_metric_is_named_documented_and_labelled() -> None:
    found = {m._name: m._labelnames for m in metrics.ALL}
    assert found == LABELS
    for metric in metrics.ALL:
        assert metric._documentation.strip()
        # Labels are what lets a process switch to multiprocess mode after importing this
        # module: an unlabelled metric would hold a value made before the switch.
        assert metric._labelnames
        if isinstance(metric, Histogram):
            assert metric._upper_bounds[-2] >= 60  # the last bound before +Inf


def _session() -> Session:
    return Session(create_engine("sqlite://"))


def test_a_record_runs_once_its_transaction_commits_and_never_after_a_rollback() -> None:
    ran: list[str] = []
    with _session() as session:
        session.execute(text("SELECT 1"))
        metrics.on_commit(session, lambda: ran.append("committed"))
        assert ran == []
        session.commit()
        assert ran == ["committed"]
        session.execute(text("SELECT 1"))
        metrics.on_commit(session, lambda: ran.append("rolled back"))
        session.rollback()
        session.commit()
    assert ran == ["committed"]


def test_a_step_is_counted_with_its_tool_or_kind() -> None:
    steps = metrics.STEPS.labels(status="succeeded", tool="model")
    before = steps._value.get()
    with _session() as session:
        session.execute(text("SELECT 1"))
        metrics.step_ended(session, "model", None, "succeeded", started_at=None, now=None)  # type: ignore[arg-type]
        session.commit()
    assert steps._value.get() == before + 1


def test_the_metrics_dir_defaults_under_the_home(tmp_path: Path) -> None:
    assert (
        metrics_dir(Settings(home=tmp_path, metrics_dir=None)) == (tmp_path / "metrics").resolve()
    )
    assert metrics_dir(Settings(home=tmp_path, metrics_dir=tmp_path / "m")) == tmp_path / "m"


def test_forked_processes_write_their_own_files_and_a_scrape_adds_them_up(
    tmp_path: Path,
) -> None:
    """In a fresh interpreter, as a worker's main process: switch after import, fork twice."""
    script = f"""
import json, os
from pathlib import Path
from models.operations import metrics
from models.operations.metrics_export import record_in, registry
from models.settings import Settings
from prometheus_client import generate_latest
record_in(Path({str(tmp_path)!r}))
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        metrics.repaired({{"steps_resent": 2, "dispatched": 0}})
        os._exit(0)
    os.waitpid(pid, 0)
print(json.dumps({{
    "files": sorted(p.name.split("_")[0] for p in Path({str(tmp_path)!r}).glob("*.db")),
    "text": generate_latest(registry(Settings(metrics_dir={str(tmp_path)!r}), database=False))
    .decode(),
}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["files"] == ["counter", "counter"]  # one per forked process
    assert 'agentq_reconciler_repairs_total{kind="steps_resent"} 4.0' in out["text"]
    assert 'kind="dispatched"' not in out["text"]  # nothing repaired: no sample


@pytest.mark.parametrize("port", [0, 70000])
def test_a_metrics_port_out_of_range_is_refused_naming_the_setting(
    port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from models.errors import ConfigurationError
    from models.settings import read_settings

    monkeypatch.setenv("AGENTQ_METRICS_PORT", str(port))
    with pytest.raises(ConfigurationError, match="AGENTQ_METRICS_PORT"):
        read_settings()


def test_containers_sharing_a_directory_write_apart_though_their_pids_repeat(
    tmp_path: Path,
) -> None:
    """docker-compose.yml shares one metrics volume between containers, whose pids repeat (pid 7
    in each): each process's files are named by host name and pid, so two containers' processes
    never open the same file, and a scrape adds both up."""
    script = f"""
import os, socket, sys
from pathlib import Path
socket.gethostname = lambda: sys.argv[1]  # the container's host name
os.getpid = lambda: 7  # the same pid in every container
from models.operations import metrics
from models.operations.metrics_export import record_in
record_in(Path({str(tmp_path)!r}))
metrics.repaired({{"steps_resent": 2}})
"""
    for host in ("c0ffee000001", "c0ffee000002"):
        done = subprocess.run(
            [sys.executable, "-c", script, host],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    from prometheus_client import generate_latest

    from models.operations.metrics_export import registry
    from models.settings import Settings

    names = sorted(p.name for p in tmp_path.glob("*.db"))
    assert names == ["counter_c0ffee000001-7.db", "counter_c0ffee000002-7.db"]
    text = generate_latest(registry(Settings(metrics_dir=tmp_path), database=False)).decode()
    assert 'agentq_reconciler_repairs_total{kind="steps_resent"} 4.0' in text
