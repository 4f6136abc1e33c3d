"""`/metrics` over the real stack (issue 15): a run through real worker processes, then a scrape
of the API (uvicorn, a child of the engine, reading the processes' multiprocess directory)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import func, select

from models.db import session_scope
from models.tables import Escalation, Run
from tests.api.conftest import Client, noop
from tests.integration.conftest import wait_for_run

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(client: Client, who: str = "reviewer") -> Samples:
    """Every sample of `/metrics`: (name, sorted labels) -> value."""
    response = client(who).get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_run_moves_the_step_counter_and_histograms(client: Client) -> None:
    before = scrape(client)
    body = {"goal": "count me", "user": "metrics", "plan": {"steps": [noop(n) for n in "abc"]}}
    response = client("admin").post("/api/v1/runs", json=body)
    assert response.status_code == 201, response.text
    assert wait_for_run(response.json()["run"]["id"]).status == "succeeded"
    after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("agentq_steps_total", status="succeeded", tool="noop") == 3
    assert moved("agentq_step_duration_seconds_count", tool="noop") == 3
    assert moved("agentq_step_duration_seconds_sum", tool="noop") > 0
    # The first step came through the broker; the others were chained by its worker.
    assert moved("agentq_step_dispatch_latency_seconds_count", tool="noop") >= 1
    assert moved(
        "agentq_model_call_duration_seconds_count", provider="offline", purpose="synthesize"
    )


def test_the_gauges_are_the_rows(client: Client, escalated: Callable[..., tuple[int, int]]) -> None:
    escalated()
    samples = scrape(client)
    with session_scope() as session:
        waiting = session.exec(
            select(func.count()).select_from(Run).where(Run.status == "waiting_review")
        ).one()
        open_ = session.exec(
            select(func.count()).select_from(Escalation).where(Escalation.status == "open")
        ).one()
    assert value(samples, "agentq_runs", status="waiting_review") == waiting >= 1
    assert value(samples, "agentq_escalations_open", status="open") == open_ >= 1
    assert value(samples, "agentq_escalation_oldest_age_seconds") > 0
    assert ("agentq_queue_depth", (("queue", "steps"),)) in samples


def test_metrics_take_a_reviewer_or_admin_token(client: Client) -> None:
    assert client(None).get("/metrics").status_code == 401
    assert client("alice").get("/metrics").status_code == 403
    assert scrape(client, "admin")
