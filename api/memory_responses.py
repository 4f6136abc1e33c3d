"""The API's answers about memory (`/api/v1/memory`, `api.memory`): facts, episodes, recall and
deletions; `agentq memory ... --json` prints the same shapes. `api.responses` re-exports them,
the one module of answers the client (`agentq`) imports."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class FactOut(BaseModel):
    """One version of a fact; current while `valid_to` is null (and `expires_at` not past)."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    user_id: str
    subject: str
    attribute: str | None
    category: str
    text: str
    valid_from: datetime
    valid_to: datetime | None
    superseded_by: int | None
    source_run_id: int | None
    source: str = Field(
        description="Where it came from: `run:<id>` (extracted from the user's run), "
        "`reviewer:<name>` (a reviewer's answer, remembered at the reviewer's request), or "
        "`unknown` (stored before sources were recorded)."
    )
    expires_at: datetime | None
    embedding_model: str


class EpisodeOut(BaseModel):
    """One finished run as remembered."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    user_id: str
    run_id: int
    goal: str
    outcome: str
    final_answer: str
    summary: str
    created_at: datetime


class Score(BaseModel):
    """How a recalled item ranked: cosine `similarity`, whether the text matched, `score`."""

    similarity: float
    text_match: bool
    score: float


class ScoredFactOut(Score):
    fact: FactOut


class ScoredEpisodeOut(Score):
    episode: EpisodeOut


class SearchOut(BaseModel):
    """Hybrid recall over a user's facts and episodes, best first."""

    facts: list[ScoredFactOut]
    episodes: list[ScoredEpisodeOut]
    embedding_model: str


class ForgetOut(BaseModel):
    """Rows deleted per kind (facts, episodes, turns, summaries, recall events); the user's new
    erasure point (memory writes of runs created before it are dropped); the runs cancelled;
    with `runs`, the rows whose content was erased per table."""

    user_id: str
    deleted: dict[str, int]
    erased_at: datetime
    cancelled_runs: list[int] = []
    erased_runs: dict[str, int] = {}


class DeletedOut(BaseModel):
    """One fact (with the versions it superseded) or episode deleted: rows changed per kind
    (the facts or episode, and the `memory.recalled` events that quoted them)."""

    user_id: str
    deleted: dict[str, int]
