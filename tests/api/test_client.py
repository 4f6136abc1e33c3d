"""`agentq.client` against a live API (uvicorn over the test database): sync and async, runs,
streams, the review actions, and the API's refusals as `ApiError`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pydantic
import pytest

from agentq.client import ApiError, AsyncClient, Client, StreamItem
from api.responses import RunStatusOut, StreamEventOut
from tests.api.conftest import noop, open_escalation

pytestmark = pytest.mark.integration


def sleepy(seconds: float) -> dict[str, object]:
    return {"name": "s", "kind": "tool", "tool": "sleep", "args": {"seconds": seconds}}


def event_ids(items: Iterable[StreamItem]) -> list[int]:
    return [i.id for i in items if isinstance(i, StreamEventOut)]


def test_the_sync_client_submits_waits_lists_and_reads_a_run(
    api_url: str, tokens: dict[str, str]
) -> None:
    with Client(api_url + "/api/v1/", tokens["alice"]) as agentq:
        me = agentq.me()
        submitted = agentq.submit(
            "two no-ops", facts={"currency": "EUR"}, plan={"steps": [noop("a"), noop("b")]}
        )
        run_id = submitted.run.id
        done = agentq.wait(run_id, timeout_s=60)
        assert done.status == "succeeded" and done.user_id == me.user_id
        assert done.pinned_facts == {"currency": "EUR"}
        assert [s.name for s in done.steps] == ["a", "b"]
        assert run_id in [r.id for r in agentq.list(status="succeeded", limit=100)]
        assert agentq.get(run_id).final_result is not None


def test_the_sync_client_streams_a_runs_events_in_order_and_ends(
    api_url: str, tokens: dict[str, str]
) -> None:
    with Client(api_url, tokens["alice"]) as agentq:
        run_id = agentq.submit("stream me", plan={"steps": [noop("a"), noop("b")]}).run.id
        items = list(agentq.events(run_id))
    statuses = [i.status for i in items if isinstance(i, RunStatusOut)]
    events = [i for i in items if isinstance(i, StreamEventOut)]
    assert statuses[-1] == "succeeded" and statuses[0] in ("running", "succeeded")
    assert [e.id for e in events] == sorted({e.id for e in events})  # in order, none twice
    assert {e.run_id for e in events} == {run_id}
    kinds = [e.kind for e in events]
    assert kinds[0] == "run.submitted" and "run.succeeded" in kinds


def test_a_stream_resumes_after_the_last_event_id(api_url: str, tokens: dict[str, str]) -> None:
    with Client(api_url, tokens["alice"]) as agentq:
        run_id = agentq.submit("resume", plan={"steps": [noop("a")]}).run.id
        agentq.wait(run_id, timeout_s=60)
        every = event_ids(agentq.events(run_id))
        later = event_ids(agentq.events(run_id, after=every[1]))
    assert len(every) > 2 and later == every[2:]


def test_refusals_are_api_errors_with_the_apis_message(
    api_url: str, tokens: dict[str, str]
) -> None:
    with Client(api_url, tokens["alice"]) as alice, Client(api_url, tokens["bob"]) as bob:
        run_id = alice.submit("slow", plan={"steps": [sleepy(2), noop("after")]}).run.id
        with pytest.raises(ApiError) as hidden:
            bob.get(run_id)
        assert (hidden.value.status, hidden.value.error) == (404, "NotFound")
        assert f"run {run_id} does not exist" in str(hidden.value.detail)
        with pytest.raises(ApiError) as streamed:
            list(bob.events(run_id))
        assert streamed.value.status == 404
        assert alice.cancel(run_id).status == "cancelled"
        with pytest.raises(ApiError) as again:
            alice.cancel(run_id)
        assert again.value.status == 409 and "cancelled" in str(again.value.detail)
        with pytest.raises(ApiError) as reviewer_only:
            alice.reviews()
        assert reviewer_only.value.status == 403
    with Client(api_url, "aq_not-a-token") as nobody, pytest.raises(ApiError) as unknown:
        nobody.me()
    assert unknown.value.status == 401
    with pytest.raises(pydantic.ValidationError, match="goal"):
        Client(api_url, tokens["alice"]).submit("")  # refused before it is sent


def test_a_reviewer_claims_and_answers_an_escalation_through_the_client(
    api_url: str, tokens: dict[str, str]
) -> None:
    failing = {"name": "x", "kind": "tool", "tool": "always_fails", "args": {}}
    with Client(api_url, tokens["admin"]) as admin, Client(api_url, tokens["reviewer"]) as rita:
        run_id = admin.submit(
            "escalate", user="client-reviewed", plan={"steps": [failing]}, budgets={"replans": 0}
        ).run.id
        assert admin.wait(run_id, timeout_s=60, or_review=True).status == "waiting_review"
        esc_id = open_escalation(run_id)
        assert esc_id in [r.escalation.id for r in rita.reviews()]
        claimed = rita.claim(esc_id)
        assert claimed is not None and claimed.escalation.claimed_by == "rita"
        assert rita.release(esc_id).escalation.status == "open"
        rita.claim(esc_id)
        decided = rita.respond(esc_id, {"ok": True}, comment="done by hand")
        assert decided.escalation.decision == "respond" and decided.escalation.decided_by == "rita"
        assert rita.review(esc_id).escalation.status == "decided"
        assert admin.wait(run_id, timeout_s=60).status == "succeeded"


def test_the_async_client_does_the_same_over_asyncio(api_url: str, tokens: dict[str, str]) -> None:
    async def scenario() -> tuple[str, list[str], list[str]]:
        async with AsyncClient(api_url, tokens["alice"]) as agentq:
            first = (await agentq.submit("async a", plan={"steps": [noop("a")]})).run.id
            second = (await agentq.submit("async b", plan={"steps": [noop("b")]})).run.id
            waited = await asyncio.gather(agentq.wait(first), agentq.wait(second))
            kinds = [i.kind async for i in agentq.events(first) if isinstance(i, StreamEventOut)]
            listed = [r.goal for r in await agentq.list(limit=10)]
            return ",".join(r.status for r in waited), kinds, listed

    statuses, kinds, listed = asyncio.run(scenario())
    assert statuses == "succeeded,succeeded"
    assert kinds[0] == "run.submitted" and "run.succeeded" in kinds
    assert {"async a", "async b"} <= set(listed)
