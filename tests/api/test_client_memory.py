"""`agentq.client` against a live API for what tests/api/test_client.py does not cover: a
step's whole result, event pages, the review queue's order, a user's memory and procedures."""

from __future__ import annotations

import asyncio
import uuid

import pydantic
import pytest

from agentq.client import ApiError, AsyncClient, Client
from models.db import session_scope
from models.memory import memory_admin
from models.memory.episodes import record_episode
from tests.api.conftest import MakeToken, noop
from tests.api.test_memory import store

pytestmark = pytest.mark.integration
TEMPLATE = {"steps": [noop("first"), {**noop("second"), "after": ["first"]}]}


def episode(user: str, run_id: int) -> int:
    model, summary = memory_admin.embedder(), "Goal: tally the receipts"
    with session_scope() as session:
        row = record_episode(
            session,
            user_id=user,
            run_id=run_id,
            goal="tally",
            plan=[],
            failures=[],
            outcome="succeeded",
            final_answer="42",
            summary=summary,
            embedding=model.embed([summary])[0],
            embedding_model=model.model,
        )
        assert row is not None and row.id is not None
        return row.id


def test_the_client_reads_a_steps_result_and_pages_events(
    api_url: str, tokens: dict[str, str]
) -> None:
    with Client(api_url, tokens["alice"]) as alice, Client(api_url, tokens["bob"]) as bob:
        run_id = alice.submit("results", plan={"steps": [noop("a"), noop("b")]}).run.id
        done = alice.wait(run_id, timeout_s=60)
        step = done.steps[0]
        whole = alice.step_result(run_id, step.id)
        assert (whole.run_id, whole.step_id, whole.name) == (run_id, step.id, "a")
        assert whole.status == "succeeded" and whole.result == step.result
        with pytest.raises(ApiError) as missing:
            alice.step_result(run_id, 2_000_000_000)
        assert missing.value.status == 404
        with pytest.raises(ApiError) as hidden:
            bob.step_result(run_id, step.id)
        assert hidden.value.status == 404
        page = alice.get(run_id, events_limit=2)
        assert len(page.events) == 2 and page.events_next_before is not None
        before = alice.get(run_id, events_limit=2, events_before=page.events_next_before)
        assert max(e.id for e in before.events) < min(e.id for e in page.events)


def test_the_client_lists_the_review_queue_newest_first(
    api_url: str, tokens: dict[str, str]
) -> None:
    with Client(api_url, tokens["reviewer"]) as rita:
        newest = [r.escalation.id for r in rita.reviews(status="all", order="newest", limit=20)]
        oldest = [r.escalation.id for r in rita.reviews(status="all", order="oldest", limit=20)]
    assert newest == sorted(newest, reverse=True) and oldest == sorted(oldest)


def test_the_client_reads_searches_deletes_and_forgets_a_users_memory(
    api_url: str, tokens: dict[str, str], make_token: MakeToken
) -> None:
    user = f"dana-{uuid.uuid4().hex[:8]}"
    store(user, "Dana's reports are in EUR", "currency")
    store(user, "Dana's reports are in CHF", "currency")  # supersedes the EUR one
    store(user, "Dana flies from Zurich", "airport")
    with Client(api_url, make_token("submitter", user=user)) as dana:
        assert {f.text for f in dana.facts()} == {
            "Dana's reports are in CHF",
            "Dana flies from Zurich",
        }
        assert len(dana.facts(history=True)) == 3
        run_id = dana.submit("tally", plan={"steps": [noop("a")]}).run.id
        assert dana.wait(run_id, timeout_s=60).status == "succeeded"
        episode_id = episode(user, run_id)
        found = dana.search_memory("reports CHF")
        assert found.facts[0].fact.text == "Dana's reports are in CHF"
        assert [f.score for f in found.facts] == sorted(
            (f.score for f in found.facts), reverse=True
        )
        with pytest.raises(ApiError) as other:
            Client(api_url, tokens["alice"]).delete_fact(found.facts[0].fact.id)
        assert other.value.status == 404
        deleted = dana.delete_fact(found.facts[0].fact.id)
        assert deleted.user_id == user and deleted.deleted["facts"] == 2  # with its history
        assert [f.text for f in dana.facts(history=True)] == ["Dana flies from Zurich"]
        assert dana.delete_episode(episode_id).deleted["episodes"] == 1
        assert all(e.episode.id != episode_id for e in dana.search_memory("tally").episodes)
        with pytest.raises(ApiError) as refused:
            dana.facts(user="someone-else")
        assert refused.value.status == 403
        forgot = dana.forget()
        assert forgot.user_id == user and forgot.deleted["facts"] == 1
        assert dana.facts(history=True) == []


def test_the_client_adds_edits_saves_and_deletes_procedures(
    api_url: str, tokens: dict[str, str]
) -> None:
    with Client(api_url, tokens["alice"]) as alice:
        with pytest.raises(pydantic.ValidationError, match="scope"):
            alice.add_procedure(title="T", when_to_use="w", body="b", scope="nobody")
        added = alice.add_procedure(
            title="Tally", when_to_use="receipts to total", scope="user", plan_template=TEMPLATE
        )
        assert (added.version, added.scope, added.user_id) == (1, "user", alice.me().user_id)
        assert added.id in [p.id for p in alice.procedures(scope="user")]
        edited = alice.edit_procedure(added.id, expected_version=1, body="Add them up.")
        assert (edited.version, edited.body) == (2, "Add them up.")
        with pytest.raises(ApiError) as stale:
            alice.edit_procedure(added.id, expected_version=1, title="Late")
        assert stale.value.status == 409
        cleared = alice.edit_procedure(added.id, plan_template=None)
        assert cleared.plan_template is None and cleared.version == 3
        shown = alice.procedure(added.id)
        assert [v.version for v in shown.versions] == [1, 2, 3]
        run_id = alice.submit("tally receipts", plan=TEMPLATE).run.id
        assert alice.wait(run_id, timeout_s=60).status == "succeeded"
        saved = alice.save_procedure(run_id, title="Tally again")
        assert saved.source_run_id == run_id and saved.title == "Tally again"
        for procedure_id in (added.id, saved.id):
            assert alice.delete_procedure(procedure_id).id == procedure_id
            with pytest.raises(ApiError) as gone:
                alice.procedure(procedure_id)
            assert gone.value.status == 404


def test_the_async_client_reads_memory_procedures_and_results(
    api_url: str, tokens: dict[str, str], make_token: MakeToken
) -> None:
    user = f"erin-{uuid.uuid4().hex[:8]}"
    store(user, "Erin's reports are in GBP", "currency")

    async def scenario() -> tuple[list[str], str, str, dict[str, int]]:
        async with AsyncClient(api_url, make_token("submitter", user=user)) as erin:
            facts = [f.text for f in await erin.facts()]
            found = (await erin.search_memory("GBP")).facts[0].fact.text
            added = await erin.add_procedure(
                title="Convert", when_to_use="GBP reports", scope="user", body="Use the rate."
            )
            listed = [p.id for p in await erin.procedures(user=user)]
            assert listed == [added.id]
            shown = await erin.procedure(added.id)
            edited = await erin.edit_procedure(added.id, title="Convert GBP")
            deleted = await erin.delete_procedure(added.id)
            assert shown.versions[0].title == "Convert" and edited.version == 2
            assert deleted.title == "Convert GBP"
            run_id = (await erin.submit("one", plan={"steps": [noop("a")]})).run.id
            done = await erin.wait(run_id, timeout_s=60)
            result = await erin.step_result(run_id, done.steps[0].id)
            saved = await erin.save_procedure(run_id)
            await erin.delete_procedure(saved.id)
            fact_id = (await erin.facts())[0].id
            assert (await erin.delete_fact(fact_id)).deleted["facts"] == 1
            with pytest.raises(ApiError):
                await erin.delete_episode(2_000_000_000)
            return facts, found, result.status, (await erin.forget(cancel_runs=True)).deleted

    facts, found, status, forgot = asyncio.run(scenario())
    assert facts == ["Erin's reports are in GBP"] and found == facts[0]
    assert status == "succeeded" and forgot["facts"] == 0
