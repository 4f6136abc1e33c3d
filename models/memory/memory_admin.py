"""Memory administration: the embedder in use, searching, forgetting, who reads it.

Rows of two embedding models, or of one model at two dimensions, are never compared (DESIGN.md,
invariant 7): `search` refuses a user's memory embedded otherwise than configured, as a worker's
start-up does any memory (`models.memory.reembedding`), until `agentq memory reembed` has rewritten
it. Forgetting a user (`forget`) deletes every fact (history included), episode, turn, summary and
user-scoped procedure of that user, embeddings with them, and is final: it records an erasure
point that drops the memory writes of the user's runs created before it (`models.memory.erasures`);
it can cancel the user's active runs and erase their runs' content too. `delete_fact` and
`delete_episode` delete one item, history included. Run events that quote recalled memory are
left out for readers who may not read the user's memory (`shown_events`). The CLI, the API and
the console call these functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Final

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.db import session_scope
from models.engine import erased_runs, queue, transitions
from models.engine.runs import check_user_id
from models.errors import Conflict, IllegalTransition, NotFound
from models.memory import erasures
from models.memory.embedders import LocalEmbedder, make_embedder
from models.memory.embedding_choice import provider_in_use
from models.memory.embeddings import Embedder, HashEmbedder
from models.memory.episodes import (
    Episode,
    ScoredEpisode,
    delete_episode,
    forget_episodes,
    recall_episodes,
)
from models.memory.facts import (
    Fact,
    ScoredFact,
    delete_fact,
    forget_facts,
    recall,
)
from models.memory.messages import forget_messages
from models.memory.procedure_recall import RECALLED as PROCEDURES_RECALLED
from models.memory.procedure_recall import hidden_detail as hidden_procedures
from models.memory.procedures import forget_procedures
from models.memory.reembedding import check_user_memory
from models.settings import get_settings
from models.states import RUN_ACTIVE
from models.tables import Run, RunEvent

HASH_MIN_SIMILARITY = 0.0  # hashed words: low cosines are normal, rely on the fused rank
MODEL_MIN_SIMILARITY = 0.2  # all-MiniLM-L6-v2 on LoCoMo dev: keeps 96% of evidence pairs


@lru_cache(maxsize=1)
def embedder() -> Embedder:
    """The configured embedder (`AGENTQ_EMBEDDING_PROVIDER`, or the model-free fallback of
    `models.memory.embedding_choice.provider_in_use`), built once per process."""
    s = get_settings()
    return make_embedder(
        provider_in_use(s),
        model=s.embedding_model,
        dim=s.embedding_dim,
        base_url=s.openai_base_url,
        api_key=s.openai_api_key,
        request_timeout_s=s.model_request_timeout_s,
        max_retries=s.model_max_attempts - 1,
    )


def min_similarity() -> float:
    """The recall threshold: `AGENTQ_RECALL_MIN_SIMILARITY`, else the default of the embedder
    this process runs (`embedder`: the configured provider or the hash fallback, decided once,
    so a recall does not look up installed packages again)."""
    s = get_settings()
    if s.recall_min_similarity is not None:
        return s.recall_min_similarity
    return HASH_MIN_SIMILARITY if isinstance(embedder(), HashEmbedder) else MODEL_MIN_SIMILARITY


@dataclass(frozen=True)
class Recalled:
    """What memory offers one call, most relevant first."""

    facts: list[ScoredFact] = field(default_factory=list)
    episodes: list[ScoredEpisode] = field(default_factory=list)


def search(*, user_id: str, query: str) -> Recalled:
    """What `agentq memory search` and `GET /api/v1/memory/search` answer: `recall_for`, after
    refusing (`ConfigurationError`, naming the settings and `agentq memory reembed`) a user
    whose stored rows another embedding model or dimension made: their vectors are never
    compared, so the search would silently find nothing (`models.memory.reembedding`). Each list
    is highest score first (`by_score`). Commits: the
    check is one transaction, the recall another, and the query is embedded between them."""
    with session_scope() as session:
        check_user_memory(session, embedder(), user_id=user_id)
    with session_scope() as session:  # recall_for embeds before its first statement
        return by_score(recall_for(session, user_id=user_id, query=query))


def by_score(found: Recalled) -> Recalled:
    """`found` with each list ordered by `score`, highest first (ties keep recall's order): what
    a person reads. A model call's recall keeps a turn's facts beside the turn instead
    (`models.memory.rerank.group_turns`), which breaks that order."""
    return Recalled(
        facts=sorted(found.facts, key=lambda f: -f.score),
        episodes=sorted(found.episodes, key=lambda e: -e.score),
    )


def recalls() -> bool:
    """Whether model calls recall memory at all (`AGENTQ_RECALL_FACTS_K`, `..._EPISODES_K`)."""
    s = get_settings()
    return bool(s.recall_facts_k or s.recall_episodes_k)


def embeds_remotely() -> bool:
    """Whether the configured embedder calls a server (anything but the in-process `hash` and
    `local` ones): its calls must then be made outside any transaction (DESIGN.md, invariant 11),
    so a recall query is embedded first (`query_vector`) and passed to `recall_for`."""
    return not isinstance(embedder(), HashEmbedder | LocalEmbedder)


def query_vector(query: str) -> list[float]:
    """`query` embedded by the configured embedder, for `recall_for`; raises what it raises."""
    return embedder().embed([query])[0]


def recall_for(
    session: Session, *, user_id: str, query: str, vector: list[float] | None = None
) -> Recalled:
    """The user's facts and past episodes relevant to `query` (hybrid search, one embedding:
    `vector`, computed before the transaction, or else here, which only an in-process embedder
    may do: `embeds_remotely`)."""
    s, model = get_settings(), embedder()
    if not recalls():
        return Recalled()
    vector = vector if vector is not None else model.embed([query])[0]
    common: dict[str, Any] = {
        "user_id": user_id,
        "query_text": query,
        "query_embedding": vector,
        "embedding_model": model.model,
        "min_similarity": min_similarity(),
    }
    return Recalled(
        facts=recall(session, k=s.recall_facts_k, **common) if s.recall_facts_k else [],
        episodes=recall_episodes(session, k=s.recall_episodes_k, **common)
        if s.recall_episodes_k
        else [],
    )


# The events that end a run's memory task: its episode and facts were written, or the writing
# failed, or the run's user was forgotten (a `memory.dropped` of `what` "run"; the other
# `memory.dropped` events are single writes refused: `models.memory.erasures`).
MEMORY_ENDED: Final = ("memory.remembered", "memory.failed")
MEMORY_DROPPED_RUN: Final = sa.and_(
    col(RunEvent.kind) == "memory.dropped", col(RunEvent.detail)["what"].astext == "run"
)


def memory_ended(session: Session, run_id: int) -> RunEvent | None:
    """The event that ended the run's memory task (`worker.memory.remembering.remember_ended_run`):
    its first `memory.remembered`, `memory.failed`, or `memory.dropped` of the whole run; None while
    the task has not ended (it runs on the `memory` queue after the run ends, so a `succeeded` run
    may have none yet)."""
    ended = sa.or_(col(RunEvent.kind).in_(MEMORY_ENDED), MEMORY_DROPPED_RUN)
    stmt = select(RunEvent).where(RunEvent.run_id == run_id, ended)
    return session.exec(stmt.order_by(col(RunEvent.id))).first()


RECALLED: Final = "memory.recalled"  # quotes recalled facts (their text) and episodes (run ids)
# events whose detail quotes a user's memory (procedures.recalled: the titles of their own)
MEMORY_EVENT_KINDS: Final = frozenset({RECALLED, PROCEDURES_RECALLED})
HIDDEN_MEMORY: Final = (
    "recalled memory of the run's user: shown to that user's submitter tokens and admins only"
)
# unquote_facts: take the texts :texts out of the user's memory.recalled events.
UNQUOTE_FACTS: Final = (
    "UPDATE run_events SET detail = jsonb_set(detail, '{facts}', coalesce(("
    "SELECT jsonb_agg(f) FROM jsonb_array_elements(detail -> 'facts') AS f "
    "WHERE NOT (f #>> '{}') = ANY(:texts)), '[]'::jsonb)) "
    "WHERE kind = 'memory.recalled' AND detail -> 'facts' ?| :texts "
    "AND run_id IN (SELECT id FROM runs WHERE user_id = :user_id)"
)
# unquote_episode: take the episode of run :episode_run out of the user's memory.recalled events.
UNQUOTE_EPISODE: Final = (
    "UPDATE run_events SET detail = jsonb_set(detail, '{episodes}', coalesce(("
    "SELECT jsonb_agg(e) FROM jsonb_array_elements(detail -> 'episodes') AS e "
    "WHERE e <> to_jsonb(CAST(:episode_run AS integer))), '[]'::jsonb)) "
    "WHERE kind = 'memory.recalled' "
    "AND detail -> 'episodes' @> jsonb_build_array(CAST(:episode_run AS integer)) "
    "AND run_id IN (SELECT id FROM runs WHERE user_id = :user_id)"
)


# untitle_procedures: drop the titles of user-scoped procedures from the user's runs' events.
UNTITLE_PROCEDURES: Final = (
    "UPDATE run_events SET detail = jsonb_set(detail, '{procedures}', coalesce(("
    "SELECT jsonb_agg(CASE WHEN p ->> 'scope' = 'user' THEN p - 'title' ELSE p END) "
    "FROM jsonb_array_elements(detail -> 'procedures') AS p), '[]'::jsonb)) "
    "WHERE kind = 'procedures.recalled' "
    "AND run_id IN (SELECT id FROM runs WHERE user_id = :user_id)"
)


@dataclass(frozen=True)
class Forgotten:
    """What `forget` did: the user's new erasure point, the rows deleted per kind, the runs it
    cancelled, and (with `runs`) the rows whose content it erased per table."""

    user_id: str
    erased_at: datetime
    deleted: dict[str, int]
    cancelled_runs: tuple[int, ...] = ()
    erased_runs: dict[str, int] = field(default_factory=dict)


def forget(user_id: str, *, cancel_runs: bool = False, runs: bool = False) -> Forgotten:
    """Forget `user_id` for good: delete their memory and record an erasure point (the memory
    writes of their runs created before it are dropped); with `cancel_runs`, cancel each of
    their active runs as `agentq run cancel` does (a waiting escalation is withdrawn); with
    `runs`, erase the content of their ended runs as well (`models.engine.erased_runs.erase_runs`).

    Commits, one transaction per part (memory; each cancel; the runs' content): a forget holds
    the user's erasure lock, which a decision waits for while it holds its run's lock, so the
    forget never waits for a run's lock itself. Raises `Conflict` (changing nothing) for
    `runs` while the user has active runs and `cancel_runs` is not given, and `InvalidInput`
    for a `user_id` no user can have (`models.engine.runs.check_user_id`).
    """
    check_user_id(user_id)  # before the erasure point's row is written
    with session_scope() as session:
        active = active_runs(session, user_id=user_id)
        if runs and active and not cancel_runs:
            listed = ", ".join(str(i) for i in active)
            raise Conflict(
                f"runs: {user_id!r} has active runs (ids {listed}) whose content would be written "
                "again; cancel them too (--cancel-runs, cancel_runs) or wait until they end"
            )
        erased_at, deleted = _forget_memory(session, user_id=user_id)
    cancelled = tuple(run_id for run_id in active if cancel_runs and _cancel(run_id))
    erased: dict[str, int] = {}
    if runs:
        with session_scope() as session:
            erased = erased_runs.erase_runs(session, user_id=user_id)
    return Forgotten(user_id, erased_at, deleted, cancelled, erased)


def active_runs(session: Session, *, user_id: str) -> list[int]:
    """The ids of `user_id`'s runs that have not ended, oldest first."""
    stmt = select(Run.id).where(Run.user_id == user_id, col(Run.status).in_(RUN_ACTIVE))
    return [int(i or 0) for i in session.exec(stmt.order_by(col(Run.id)))]


def _cancel(run_id: int) -> bool:
    """Cancel one run in its own transaction and send what follows a cancel; False when it
    ended meanwhile."""
    with session_scope() as session:
        transitions.lock_run(session, run_id)
        try:
            status = transitions.cancel_run(session, run_id).status
        except IllegalTransition:
            return False
    queue.follow_up(run_id, status)  # its remember task records the dropped memory
    return True


def forget_user(session: Session, *, user_id: str) -> dict[str, int]:
    """Delete all of `user_id`'s memory after moving their erasure point to now (see
    `forget`, which commits); returns the rows deleted per kind.

    Also deleted: the `memory.recalled` events of the user's runs, which quote recalled facts.
    The runs themselves (goals, pinned facts, steps) stay: they are the record of work done.
    """
    return _forget_memory(session, user_id=user_id)[1]


def _forget_memory(session: Session, *, user_id: str) -> tuple[datetime, dict[str, int]]:
    erased_at = erasures.erase(session, user_id=user_id)  # first: the lock, then the deletes
    counts = {
        "facts": forget_facts(session, user_id=user_id),
        "episodes": forget_episodes(session, user_id=user_id),
        **forget_messages(session, user_id=user_id),
        "procedures": forget_procedures(session, user_id=user_id),
    }
    recalled = session.execute(
        sa.delete(RunEvent).where(
            col(RunEvent.kind) == RECALLED,
            col(RunEvent.run_id).in_(sa.select(col(Run.id)).where(col(Run.user_id) == user_id)),
        )
    )
    counts["recall events"] = int(getattr(recalled, "rowcount", 0))
    session.execute(sa.text(UNTITLE_PROCEDURES), {"user_id": user_id})
    return erased_at, counts


@dataclass(frozen=True)
class Deleted:
    """Whose item was deleted, and the rows changed per kind (the fact's versions or the
    episode, and the `memory.recalled` events that quoted them)."""

    user_id: str
    counts: dict[str, int]


def forget_fact(session: Session, *, fact_id: int, user_id: str | None = None) -> Deleted:
    """Delete fact `fact_id` with its history (`models.memory.facts.delete_fact`), and take its
    texts out of the `memory.recalled` events of its user's runs. With `user_id`, only that user's
    fact. Raises `NotFound` for a fact that does not exist or (with `user_id`) is another
    user's, alike."""
    owner = user_id if user_id is not None else _owner(session, Fact, fact_id)
    deleted = delete_fact(session, fact_id=fact_id, user_id=owner or "")
    if not deleted or owner is None:
        raise NotFound(f"fact {fact_id} does not exist")
    texts = sorted(set(deleted.values()))
    unquoted = session.execute(sa.text(UNQUOTE_FACTS), {"texts": texts, "user_id": owner})
    counts = {"facts": len(deleted), "recall events": int(getattr(unquoted, "rowcount", 0))}
    return Deleted(owner, counts)


def forget_episode(session: Session, *, episode_id: int, user_id: str | None = None) -> Deleted:
    """Delete episode `episode_id` (embedding included) and take it out of the
    `memory.recalled` events of its user's runs; as `forget_fact` otherwise."""
    owner = user_id if user_id is not None else _owner(session, Episode, episode_id)
    run_id = delete_episode(session, episode_id=episode_id, user_id=owner or "")
    if run_id is None or owner is None:
        raise NotFound(f"episode {episode_id} does not exist")
    params = {"episode_run": run_id, "user_id": owner}
    unquoted = session.execute(sa.text(UNQUOTE_EPISODE), params)
    return Deleted(owner, {"episodes": 1, "recall events": int(getattr(unquoted, "rowcount", 0))})


def _owner(session: Session, table: Any, row_id: int) -> str | None:
    owner: str | None = session.scalar(sa.select(table.user_id).where(table.id == row_id))
    return owner


def shown_events(events: Iterable[RunEvent], *, memory_readable: bool) -> list[RunEvent]:
    """The run's events as a reader sees them: whole when the reader may read the run's user's
    memory; otherwise each event that quotes it (`MEMORY_EVENT_KINDS`) is replaced by a copy
    that keeps its purpose and counts and says why the rest is hidden. The rows are never
    changed. One rule for the API's run detail and the console's timeline (issue 9)."""
    return [
        e if memory_readable or e.kind not in MEMORY_EVENT_KINDS else _hidden(e) for e in events
    ]


def hidden_detail(detail: Any) -> dict[str, Any]:
    """What a reader who may not read the run's user's memory sees of a memory event's detail
    (`MEMORY_EVENT_KINDS`): the call's purpose, how many facts and episodes were recalled, and
    why the rest is hidden."""
    found = detail if isinstance(detail, dict) else {}
    if "procedures" in found:  # procedures.recalled: only the user's own titles are hidden
        return hidden_procedures(found)
    facts, episodes = found.get("facts"), found.get("episodes")
    return {
        "purpose": found.get("purpose"),
        "recalled_facts": len(facts) if isinstance(facts, list) else None,
        "recalled_episodes": len(episodes) if isinstance(episodes, list) else None,
        "hidden": HIDDEN_MEMORY,
    }


def _hidden(event: RunEvent) -> RunEvent:
    return RunEvent(
        id=event.id,
        run_id=event.run_id,
        step_id=event.step_id,
        at=event.at,
        kind=event.kind,
        detail=hidden_detail(event.detail),
    )
