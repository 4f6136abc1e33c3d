"""What of the user's memory a model call may hold, once a reviewer's words are in its context.

A reviewer reads every run but none of a user's memory (issue 9), so a call whose context holds
a reviewer's words (an edit, an answer, a step a reviewer authored however it reached the plan,
a reviewer's procedure recalled into it: `models.review.authorship`,
`worker.phases.procedure_context`) acts with the reviewer's rights: it recalls none of the user's
memory (`recall_or_withhold`), and a fact extraction, whose answer becomes the user's memory, reads
only the user's own words (`own_words_only`), so nothing a reviewer's step produced becomes the
user's memory (issue 27).
"""

from __future__ import annotations

from typing import Any, Final

from sqlmodel import Session

from models.engine import events
from models.memory.memory_admin import Recalled, recall_for
from models.review.authorship import reviewer_in_run
from models.tables import Run
from worker.model_calls.prompts import Prompt

EXTRACTION: Final = "extract_facts"  # the purpose of the call whose answer becomes memory


def without_pinned(recalled: Recalled, pinned: dict[str, str]) -> Recalled:
    """`recalled` less the user's facts about what this run pins: the pinned value is the user's
    word for this run, and an older remembered value must not sit beside it in the prompt."""
    facts = [
        f for f in recalled.facts if not (f.item.subject == "user" and f.item.attribute in pinned)
    ]
    return Recalled(facts=facts, episodes=recalled.episodes)


def recall_or_withhold(
    session: Session,
    run: Run,
    prompt: Prompt,
    pinned: dict[str, str],
    *,
    words: dict[str, Any] | None = None,
) -> Recalled:
    """What the user's memory offers this call: nothing for a call that asks for nothing
    (`prompt.query` None); nothing, recorded as a `memory.withheld` event (its detail:
    `purpose`, `reason`, and `models.review.authorship.reviewer_in_run`'s keys), once a reviewer's
    words are in the run (a reviewer's decision with words, or a step a reviewer authored, such
    as one adopted from a reviewer's procedure), or when `words` says why (a reviewer's
    procedure recalled into this call, `worker.phases.procedure_context.reviewers_procedure`): they
    are in this call's context, and a call holding them beside the user's memory acts with the
    reviewer's rights, who may not read it; else the recalled facts and episodes, less those
    about what the run pins (`pinned`, key -> value)."""
    if not prompt.query:
        return Recalled()
    words = reviewer_in_run(session, run.id or 0) or words
    if words is not None:
        events.record_event(
            session,
            run.id or 0,
            "memory.withheld",
            purpose=prompt.purpose,
            **words,
            reason="a reviewer's words are in this call's context; the user's memory is not "
            "recalled beside them",
        )
        return Recalled()
    vector = list(prompt.query_vector) if prompt.query_vector is not None else None
    recalled = recall_for(session, user_id=run.user_id, query=prompt.query, vector=vector)
    return without_pinned(recalled, pinned)


def own_words_only(session: Session, run: Run, prompt: Prompt) -> bool:
    """Whether `prompt`'s context is to hold only the user's own words: a fact extraction of a
    run a reviewer's words are in (`models.review.authorship.reviewer_in_run`). Its context then
    holds no turns, no summary, no step of the plan and no fact a reviewer pinned: the goal, the
    user's pinned facts and the user's own failures (its task) are what it learns from."""
    return prompt.purpose == EXTRACTION and reviewer_in_run(session, run.id or 0) is not None
