"""`/api/v1/memory`: a user's facts (with their history), hybrid search, deleting one fact or
episode, and forgetting a user.

Users own their memory (issue 9): an admin token reads and deletes anyone's; a submitter token
its own user's only (another user is a 403 for a read or a forget, and a 404 for one fact or
episode, as if it did not exist); reviewer tokens none (`Principal.can_read_memory`, the rule
the run detail follows too). The same model-layer functions as `agentq memory ...`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status

from api.auth import Principal, Submitter
from api.responses import (
    DeletedOut,
    EpisodeOut,
    ErrorOut,
    FactOut,
    ForgetOut,
    RunDetail,
    ScoredEpisodeOut,
    ScoredFactOut,
    SearchOut,
)
from api.schemas import PG_INT_MAX, Forget
from api.token_limits import LIMITED, charge_costly_read
from models.db import session_scope
from models.engine.runs import USER_ID_MAX_CHARS
from models.front import commands, forgetting
from models.memory import memory_admin
from models.memory.facts import facts_of
from models.patterns import NO_NUL_PATTERN

router = APIRouter(prefix="/memory", tags=["memory"])
QUERY_MAX_CHARS = 2_000  # a search is a question, not a document
UserQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=USER_ID_MAX_CHARS,
        pattern=NO_NUL_PATTERN,
        description="Whose memory; a submitter token's own user when left out.",
    ),
]


RowId = Annotated[int, Path(ge=1, le=PG_INT_MAX)]
STALE_MEMORY = (
    "the user's memory was embedded by another embedding model or dimension than the server's "
    "(`ConfigurationError`, naming AGENTQ_EMBEDDING_MODEL / AGENTQ_EMBEDDING_DIM): an operator "
    "runs `agentq memory reembed`, or sets them back"
)


def without_memory(detail: RunDetail, principal: Principal) -> RunDetail:
    """The run detail as `principal` may see it: whole when it may read the run's user's memory
    (`Principal.can_read_memory`), else with the events that quote recalled memory
    (`models.memory.memory_admin.MEMORY_EVENT_KINDS`) reduced to
    `models.memory.memory_admin.hidden_detail`."""
    if not principal.can_read_memory(detail.user_id):
        for event in detail.events:
            if event.kind in memory_admin.MEMORY_EVENT_KINDS:
                event.detail = memory_admin.hidden_detail(event.detail)
    return detail


def memory_user(user: str | None, principal: Principal) -> str:
    """The user whose memory is read or forgotten: `user`, else a submitter token's own
    (`Principal.acting_for`: 403 for an admin without `user`); 403 for a user whose memory the
    principal may not read."""
    user = principal.acting_for(user)
    if not principal.can_read_memory(user):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "a submitter token reads and forgets only its own user's memory",
        )
    return user


def own_user(principal: Principal) -> str | None:
    """Whose rows a principal may delete one by one: a submitter's own user; None (anyone's)
    for an admin."""
    return principal.user_id or "" if principal.role == "submitter" else None


@router.get("/facts", response_model=list[FactOut], summary="A user's facts", responses=LIMITED)
def facts(
    principal: Submitter,
    user: UserQuery = None,
    history: Annotated[bool, Query(description="Include superseded and expired facts.")] = False,
) -> list[FactOut]:
    """The user's current facts, oldest first; with `history`, every version (closed ones have
    `valid_to` and, when replaced, `superseded_by`). A costly read (429 beyond the token's
    `AGENTQ_COSTLY_READS_PER_MINUTE`): it is not paged."""
    user_id = memory_user(user, principal)
    charge_costly_read(principal)
    with session_scope() as session:
        rows = facts_of(session, user_id=user_id, include_history=history)
        return [FactOut.model_validate(f) for f in rows]


@router.get(
    "/search",
    response_model=SearchOut,
    summary="Search a user's memory",
    responses={503: {"model": ErrorOut, "description": STALE_MEMORY}, **LIMITED},
)
def search(
    principal: Submitter,
    q: Annotated[str, Query(min_length=1, max_length=QUERY_MAX_CHARS, pattern=NO_NUL_PATTERN)],
    user: UserQuery = None,
) -> SearchOut:
    """Hybrid recall (pgvector cosine + full text, fused) over the user's facts and episodes,
    best first, as the planner recalls them. 503 (`ConfigurationError`, naming the settings)
    when the user's memory was embedded by another embedding model or dimension than the
    server's, until `agentq memory reembed` has rewritten it. A costly read: 429 beyond the
    token's `AGENTQ_COSTLY_READS_PER_MINUTE`."""
    user_id = memory_user(user, principal)
    charge_costly_read(principal)
    found = memory_admin.search(user_id=user_id, query=q)
    return SearchOut(
        facts=[
            ScoredFactOut(
                fact=FactOut.model_validate(f.item),
                similarity=f.similarity,
                text_match=f.text_match,
                score=f.score,
            )
            for f in found.facts
        ],
        episodes=[
            ScoredEpisodeOut(
                episode=EpisodeOut.model_validate(e.item),
                similarity=e.similarity,
                text_match=e.text_match,
                score=e.score,
            )
            for e in found.episodes
        ],
        embedding_model=memory_admin.embedder().model,
    )


@router.post("/forget", response_model=ForgetOut, summary="Forget a user")
def forget(principal: Submitter, body: Forget | None = None) -> ForgetOut:
    """Delete all of the user's memory: facts with their history, episodes, turns, summaries,
    and the events that quoted recalled facts. It is final: memory writes of the user's runs
    created before it are dropped. With `cancel_runs`, the user's active runs are cancelled;
    with `runs`, their runs' content is erased and their schedules deleted too. Admin for any
    user; a submitter token for its own user only (403 for another). Every field is optional,
    the body too: a submitter forgets its own memory with an empty POST."""
    body = body or Forget()
    user_id = memory_user(body.user, principal)
    done = forgetting.forget(user_id, cancel_runs=body.cancel_runs, runs=body.runs)
    return ForgetOut(
        user_id=user_id,
        deleted=done.deleted,
        erased_at=done.erased_at,
        cancelled_runs=list(done.cancelled_runs),
        erased_runs=done.erased_runs,
    )


@router.delete("/facts/{fact_id}", response_model=DeletedOut, summary="Delete one fact")
def delete_fact(fact_id: RowId, principal: Submitter) -> DeletedOut:
    """Delete the fact with its history (the older versions it superseded) and take it out of
    the events that quoted it. Admin for any user's; a submitter token for its own user's only
    (404 for another's, as for one that does not exist)."""
    done = commands.forget_fact(fact_id, user_id=own_user(principal))
    return DeletedOut(user_id=done.user_id, deleted=done.counts)


@router.delete("/episodes/{episode_id}", response_model=DeletedOut, summary="Delete one episode")
def delete_episode(episode_id: RowId, principal: Submitter) -> DeletedOut:
    """Delete the episode (embedding included) and take it out of the events that quoted it.
    Admin for any user's; a submitter token for its own user's only (404 otherwise)."""
    done = commands.forget_episode(episode_id, user_id=own_user(principal))
    return DeletedOut(user_id=done.user_id, deleted=done.counts)
