"""`/api/v1/memory`: a user's facts (with their history), hybrid search, and forgetting a user.

A submitter token reads its own user's memory only (another user is a 403, whoever it is);
reviewer tokens have no access to memory; forgetting is for admins. The same model-layer
functions as `agentq memory ...`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from api.auth import Admin, Principal, Submitter
from api.responses import (
    EpisodeOut,
    FactOut,
    ForgetOut,
    ScoredEpisodeOut,
    ScoredFactOut,
    SearchOut,
)
from api.schemas import NO_NUL_PATTERN, Body, UserId
from models import memory
from models.db import session_scope
from models.facts import facts_of
from models.runs import USER_ID_MAX_CHARS

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


class Forget(Body):
    """Whose memory to delete."""

    user: UserId


def memory_user(user: str | None, principal: Principal) -> str:
    """The user whose memory is read: a submitter's own (403 for another), else `user` (400
    when left out)."""
    if principal.role == "submitter":
        if user is not None and user != principal.user_id:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN, "a submitter token reads only its own user's memory"
            )
        return principal.user_id or ""
    if user is None:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "user: required with an admin token")
    return user


@router.get("/facts", response_model=list[FactOut], summary="A user's facts")
def facts(
    principal: Submitter,
    user: UserQuery = None,
    history: Annotated[bool, Query(description="Include superseded and expired facts.")] = False,
) -> list[FactOut]:
    """The user's current facts, oldest first; with `history`, every version (closed ones have
    `valid_to` and, when replaced, `superseded_by`)."""
    user_id = memory_user(user, principal)
    with session_scope() as session:
        rows = facts_of(session, user_id=user_id, include_history=history)
        return [FactOut.model_validate(f) for f in rows]


@router.get("/search", response_model=SearchOut, summary="Search a user's memory")
def search(
    principal: Submitter,
    q: Annotated[str, Query(min_length=1, max_length=QUERY_MAX_CHARS, pattern=NO_NUL_PATTERN)],
    user: UserQuery = None,
) -> SearchOut:
    """Hybrid recall (pgvector cosine + full text, fused) over the user's facts and episodes,
    best first, as the planner recalls them."""
    user_id = memory_user(user, principal)
    with session_scope() as session:
        found = memory.recall_for(session, user_id=user_id, query=q)
        return SearchOut(
            facts=[
                ScoredFactOut(
                    fact=FactOut.model_validate(f.item), similarity=f.similarity,
                    text_match=f.text_match, score=f.score,
                )
                for f in found.facts
            ],
            episodes=[
                ScoredEpisodeOut(
                    episode=EpisodeOut.model_validate(e.item), similarity=e.similarity,
                    text_match=e.text_match, score=e.score,
                )
                for e in found.episodes
            ],
            embedding_model=memory.embedder().model,
        )  # fmt: skip


@router.post("/forget", response_model=ForgetOut, summary="Forget a user")
def forget(body: Forget, principal: Admin) -> ForgetOut:
    """Delete all of the user's memory: facts with their history, episodes, turns, summaries,
    and the events that quoted recalled facts. The runs stay. Admin only."""
    with session_scope() as session:
        counts = memory.forget_user(session, user_id=body.user)
    return ForgetOut(user_id=body.user, deleted=counts)
