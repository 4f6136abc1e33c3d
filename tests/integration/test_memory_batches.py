"""The memory task's lean path (issue 10) on the real embedded Postgres: an episode and its
`memory.remembered` event in one commit, several ended runs of one user remembered by one task
with one embedding call, a run batched by another task's message left alone when its own message
comes, and two writers of overlapping batches writing each run once.

The runs here end through the transitions, with no `agentq.remember_run` sent, so only this
process remembers them (`worker.memory.remembering.remember_ended_run`, called in-process)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import col, select

from models.db import session_scope
from models.engine import ended_runs, run_transitions
from models.memory import memory_admin
from models.memory.episodes import NewEpisode, episodes_of, remember_episodes
from models.memory.facts import facts_of
from models.tables import Run, RunEvent, utcnow
from worker.memory import extraction
from worker.memory import remembering as worker_memory
from worker.model_calls.prompts import FactSpec
from worker.model_calls.structured import InvalidOutput

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
NOOP = [{"name": "a", "kind": "tool", "tool": "noop"}]
LOCK_WAIT_S = 1.5  # long enough for a blocked statement to show it is blocked
# xmin_of: the transaction that wrote the run's episode, and each that wrote its memory events.
XMIN_OF = """
SELECT (SELECT xmin::text FROM episodes WHERE run_id = :run_id) AS episode,
    (SELECT array_agg(xmin::text) FROM run_events
     WHERE run_id = :run_id AND kind = 'memory.remembered') AS events"""


# backdate: the run ended :s seconds earlier than it did.
BACKDATE = "UPDATE runs SET finished_at = finished_at - make_interval(secs => :s) WHERE id = :id"
WAITED_S = 5.0  # how long the runs of a batch have waited for memory: over MEMORY_BATCH_AFTER_S


def _user(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _ended_run(make_run: MakeRun, user: str, *, ended_s_ago: float = 0, **overrides: Any) -> int:
    """A run of `user` that succeeded `ended_s_ago` seconds ago and whose memory task was never
    sent (as if its message were still waiting in the queue)."""
    run_id = make_run(NOOP, user=user, start=False, **overrides)
    with session_scope() as session:
        run_transitions.start_synthesis(session, run_id)
        run_transitions.succeed_run(session, run_id, final_result={"answer": f"done {run_id}"})
    with session_scope() as session:
        session.execute(sa.text(BACKDATE), {"id": run_id, "s": ended_s_ago})
    return run_id


def _events(run_id: int, kind: str) -> list[RunEvent]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == kind)
        return list(session.exec(stmt.order_by(col(RunEvent.id))))


def _counting_embeds(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record every `embed` call of this process's embedder (the texts of each)."""
    model = memory_admin.embedder()
    calls: list[list[str]] = []
    embed = model.embed

    def counted(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return embed(texts)

    monkeypatch.setattr(model, "embed", counted)
    return calls


def test_the_episode_and_its_event_are_one_commit(make_run: MakeRun) -> None:
    run_id = _ended_run(make_run, _user("one-commit"))
    worker_memory.remember_ended_run(run_id)
    with session_scope() as session:
        written = session.execute(sa.text(XMIN_OF), {"run_id": run_id}).one()
    assert written.episode is not None and written.events == [written.episode]


def test_one_task_remembers_the_users_waiting_runs_with_one_embed_call(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _user("batch")
    first, second, third = (_ended_run(make_run, user, ended_s_ago=WAITED_S) for _ in range(3))
    pinned = _ended_run(make_run, user, facts={"currency": "EUR"})  # needs a model call
    calls = _counting_embeds(monkeypatch)
    worker_memory.remember_ended_run(second)
    assert len(calls) == 1 and len(calls[0]) == 3  # the three summaries
    with session_scope() as session:
        episodes = {e.run_id: e for e in episodes_of(session, user_id=user)}
    assert set(episodes) == {first, second, third}  # not the run that extracts facts
    assert episodes[third].final_answer == f"done {third}"
    commits = set()
    for run_id in (first, second, third):
        (remembered,) = _events(run_id, "memory.remembered")
        assert remembered.detail["extraction"] == "skipped" and remembered.detail["added"] == 0
        batched = remembered.detail.get("batched_with")
        assert batched == (None if run_id == second else second)
        with session_scope() as session:
            written = session.execute(sa.text(XMIN_OF), {"run_id": run_id}).one()
        assert written.events == [written.episode]
        commits.add(written.episode)
    assert len(commits) == 1  # the three episodes and their events: one write transaction
    assert _events(pinned, "memory.remembered") == []


def test_a_run_remembered_in_another_tasks_batch_is_left_alone_by_its_own(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _user("dup")
    first, second = (_ended_run(make_run, user, ended_s_ago=WAITED_S) for _ in range(2))
    worker_memory.remember_ended_run(first)
    (remembered,) = _events(second, "memory.remembered")
    assert remembered.detail["batched_with"] == first
    calls = _counting_embeds(monkeypatch)
    worker_memory.remember_ended_run(second)  # its own message, delivered after the batch
    worker_memory.remember_ended_run(first)  # and a duplicate of the first's
    assert calls == []
    assert [e.id for e in _events(second, "memory.remembered")] == [remembered.id]
    assert len(_events(first, "memory.remembered")) == 1
    with session_scope() as session:
        assert sorted(e.run_id for e in episodes_of(session, user_id=user)) == [first, second]


def test_a_task_that_starts_soon_after_its_run_ended_remembers_it_alone(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _user("prompt")
    waiting, own = _ended_run(make_run, user, ended_s_ago=WAITED_S), _ended_run(make_run, user)
    calls = _counting_embeds(monkeypatch)
    worker_memory.remember_ended_run(own)  # memory keeps up: no search for other runs
    assert len(calls) == 1 and len(calls[0]) == 1
    assert _events(waiting, "memory.remembered") == []
    (remembered,) = _events(own, "memory.remembered")
    assert "batched_with" not in remembered.detail


def test_only_waiting_runs_of_the_same_user_created_recently_are_batched(
    make_run: MakeRun,
) -> None:
    user = _user("scope")
    older, own = (_ended_run(make_run, user, ended_s_ago=WAITED_S) for _ in range(2))
    other_users = _ended_run(make_run, _user("other"), ended_s_ago=WAITED_S)
    now = utcnow()
    long_ago, later, behind = now - timedelta(hours=1), now + timedelta(hours=1), now

    def read(run_id: int, **overrides: Any) -> list[int]:
        args = {"more": 5, "since": long_ago, "ended_before": behind, **overrides}
        with session_scope() as session:
            return [r.id for r in ended_runs.read(session, run_id, **args)]

    assert read(own) == [own, older]
    assert read(own, more=0) == read(own, since=later) == [own]
    assert read(own, ended_before=now - timedelta(seconds=2 * WAITED_S)) == [own]  # not behind
    assert read(other_users) == [other_users]
    worker_memory.remember_ended_run(older)  # remembers `own` too
    assert read(own) == [own]  # its memory ended: it searches for no other run
    with session_scope() as session:
        (found,) = ended_runs.read(session, own, more=5, since=long_ago, ended_before=behind)
    assert found.memory_ended and found.outcome == "succeeded"


def test_a_forgotten_users_run_records_its_drop_once(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _user("gone")
    run_id = _ended_run(make_run, user, ended_s_ago=WAITED_S)
    memory_admin.forget(user)
    calls = _counting_embeds(monkeypatch)
    worker_memory.remember_ended_run(run_id)
    worker_memory.remember_ended_run(run_id)  # delivered twice
    (dropped,) = _events(run_id, "memory.dropped")
    assert dropped.detail["what"] == "run" and calls == []  # nothing embedded for it
    with session_scope() as session:
        assert memory_admin.memory_ended(session, run_id) == dropped
        assert episodes_of(session, user_id=user) == []


def _extracting(monkeypatch: pytest.MonkeyPatch, *facts: FactSpec) -> None:
    """The model "extracts" `facts`, or fails to when there are none."""

    def extract(*_: Any) -> list[FactSpec]:
        if not facts:
            raise InvalidOutput("no valid facts after re-asking: not JSON")
        return list(facts)

    monkeypatch.setattr(extraction, "extract_facts", extract)


def test_a_fact_that_cannot_be_written_leaves_the_episode_and_records_the_failure(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _user("bad-fact")
    run_id = _ended_run(make_run, user, facts={"currency": "EUR"})  # so facts are extracted
    good = FactSpec(subject="user", attribute="currency", category="preference", text="EUR")
    blank = FactSpec(subject="  ", category="preference", text="nothing about anyone")
    _extracting(monkeypatch, good, blank)
    worker_memory.remember_ended_run(run_id)
    (failed,) = _events(run_id, "memory.failed")
    assert "subject and text: must not be empty" in failed.detail["error"]
    assert _events(run_id, "memory.remembered") == []
    with session_scope() as session:
        assert [e.run_id for e in episodes_of(session, user_id=user)] == [run_id]
        assert facts_of(session, user_id=user) == []  # the facts are written all or none


def test_a_failed_extraction_still_writes_the_episode_in_the_same_commit(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _user("no-facts")
    run_id = _ended_run(make_run, user, facts={"currency": "EUR"})
    _extracting(monkeypatch)
    worker_memory.remember_ended_run(run_id)
    (failed,) = _events(run_id, "memory.failed")
    assert failed.detail["error"].startswith("fact extraction: no valid facts")
    with session_scope() as session:
        written = session.execute(sa.text(XMIN_OF), {"run_id": run_id}).one()
        (xmin,) = session.execute(
            sa.text("SELECT xmin::text FROM run_events WHERE id = :id"), {"id": failed.id}
        ).one()
    assert written.episode is not None and xmin == written.episode


def _episode(run_id: int, text: str) -> NewEpisode:
    return NewEpisode(
        run_id=run_id,
        goal="g",
        plan=[],
        failures=[],
        outcome="succeeded",
        final_answer="",
        summary=text,
        embedding=memory_admin.embedder().embed([text])[0],
        event_kind="memory.remembered",
        event_detail={"by": text},
    )


def test_two_writers_of_overlapping_batches_write_each_run_once(make_run: MakeRun) -> None:
    user = _user("overlap")
    a, b, c = (_ended_run(make_run, user) for _ in range(3))
    model = memory_admin.embedder().model
    first = [_episode(a, "first"), _episode(b, "first")]
    second = [_episode(c, "second"), _episode(b, "second")]  # out of order on purpose

    def write_second() -> dict[int, Any]:
        with session_scope() as session:
            return remember_episodes(session, user_id=user, episodes=second, embedding_model=model)

    with session_scope() as session:
        assert remember_episodes(session, user_id=user, episodes=first, embedding_model=model) == {
            a: None,
            b: None,
        }
        done, out = threading.Event(), {}
        thread = threading.Thread(target=lambda: (out.update(v=write_second()), done.set()))
        thread.start()
        assert not done.wait(LOCK_WAIT_S), "the second writer did not wait for the first's row"
    thread.join(30)
    assert done.is_set() and out["v"] == {c: None}  # b was the first's
    for run_id, by in ((a, "first"), (b, "first"), (c, "second")):
        assert [e.detail["by"] for e in _events(run_id, "memory.remembered")] == [by]
    with session_scope() as session:
        summaries = {e.run_id: e.summary for e in episodes_of(session, user_id=user)}
    assert summaries == {a: "first", b: "first", c: "second"}


def test_a_batch_write_after_a_forget_drops_the_episodes_and_records_it(
    make_run: MakeRun,
) -> None:
    user = _user("forgot")
    run_id = _ended_run(make_run, user)
    model = memory_admin.embedder().model
    point = memory_admin.forget(user).erased_at
    with session_scope() as session:
        written = remember_episodes(
            session, user_id=user, episodes=[_episode(run_id, "late")], embedding_model=model
        )
    assert written == {run_id: point}
    (dropped,) = _events(run_id, "memory.dropped")
    # the same instant; Postgres' JSON drops a fraction's trailing zeros (.31378, not .313780)
    assert dropped.detail.keys() == {"what", "erased_at"} and dropped.detail["what"] == "episode"
    assert datetime.fromisoformat(dropped.detail["erased_at"]) == point
    assert [e.detail["by"] for e in _events(run_id, "memory.remembered")] == ["late"]
    with session_scope() as session:
        assert episodes_of(session, user_id=user) == []


def test_a_batch_write_waits_for_a_forget_holding_the_lock_then_is_dropped(
    make_run: MakeRun,
) -> None:
    user = _user("race-b")
    run_id = _ended_run(make_run, user)
    model = memory_admin.embedder().model
    episode = _episode(run_id, "racing")

    def write() -> dict[int, Any]:
        with session_scope() as session:
            return remember_episodes(
                session, user_id=user, episodes=[episode], embedding_model=model
            )

    with session_scope() as forgetting:
        memory_admin.forget_user(forgetting, user_id=user)
        done, out = threading.Event(), {}
        thread = threading.Thread(target=lambda: (out.update(v=write()), done.set()))
        thread.start()
        assert not done.wait(LOCK_WAIT_S), "the write did not wait for the forget's lock"
    thread.join(30)
    assert done.is_set() and list(out["v"]) == [run_id] and out["v"][run_id] is not None
    with session_scope() as session:
        assert episodes_of(session, user_id=user) == []


def test_an_extracted_fact_keeps_the_date_its_relative_time_names(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = _user("dated-fact")
    run_id = _ended_run(make_run, user, facts={"currency": "EUR"})
    said = FactSpec(subject="user", category="event", text="Paid the invoice yesterday")
    _extracting(monkeypatch, said)
    worker_memory.remember_ended_run(run_id)
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        day = run.created_at.date() - timedelta(days=1)
        (fact,) = facts_of(session, user_id=user)
    assert fact.text == f"Paid the invoice yesterday ({day.day} {day:%B} {day.year})"
