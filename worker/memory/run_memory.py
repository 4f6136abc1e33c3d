"""What a run's memory is made of, from the run as its memory task read it
(`models.engine.ended_runs`).

Pure functions, no database: the episode (the last plan, the failures the user's memory may keep
and what fixed them, the summary that is embedded), the facts the reviewers' remembered answers
become, and whether facts are extracted (`worker.memory.extraction.skip_reason`). Steps that act for
a reviewer (`models.review.authorship.reviewers_steps`: a reviewer wrote them, or they were built
from what a reviewer wrote) act with the reviewer's rights: their failures are left out of the
episode and of extraction, and a fix they made counts as `reviewer`, so nothing they produce
becomes the user's memory (issue 9).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from models.engine.ended_runs import EndedRun
from models.memory.episodes import PlanItem
from models.review.authorship import StepFields, reviewers_steps
from models.tables import Escalation
from worker.memory import extraction

ANSWER_FACT_MAX_CHARS = 1_000  # a remembered answer is a sentence of memory, not a document


@dataclass(frozen=True)
class AnswerFact:
    """The fact a remembered reviewer answer becomes."""

    subject: str
    attribute: str
    text: str
    source: str


@dataclass(frozen=True)
class RunMemory:
    """What a run's memory is written from: the episode's `plan` and `summary` (the text
    embedded), the failures the user's memory may keep and how many were `withheld`, the facts
    the user pinned (`stated`), the remembered reviewer `answers`, and `skipped`: why no facts are
    extracted (`extraction.skip_reason`), None to extract them."""

    run: EndedRun
    plan: list[PlanItem]
    summary: str
    failures: list[dict[str, Any]]  # `models.memory.episodes.Failure`s
    withheld: int
    stated: dict[str, str]
    answers: list[AnswerFact]
    skipped: str | None

    @property
    def writes_facts(self) -> bool:
        """Whether remembering the run may write facts (answers to remember, or an extraction),
        beyond its episode."""
        return bool(self.answers) or self.skipped is None


def run_memory(run: EndedRun) -> RunMemory:
    """The memory of `run`: its episode's content, its answers' facts, whether to extract."""
    theirs = reviewers_steps(run.steps, reviewer_facts=run.reviewer_facts)
    steps = [step for step, _ in run.steps]
    failures = remembered_failures(steps, theirs)
    lines = [f"Goal: {run.goal}", f"Outcome: {run.outcome}"]
    lines += [f"{f['tool']} failed ({f['error']}); fixed by {f['fixed_by']}" for f in failures]
    skipped = extraction.skip_reason(
        model_steps=extraction.model_steps(steps),
        failures=len(failures),
        stated_facts=len(run.user_facts),
    )
    return RunMemory(
        run=run,
        plan=[{"name": s.name, "tool": s.tool, "status": s.status} for s in run.current],
        summary="\n".join(lines),
        failures=failures,
        withheld=sum(1 for s in steps if s.status == "failed" and s.id in theirs),
        stated=run.user_facts,
        answers=[answer_fact(esc) for esc in run.answers],
        skipped=skipped,
    )


def remembered_failures(
    steps: Sequence[StepFields], reviewers: Collection[int]
) -> list[dict[str, Any]]:
    """Each failed step of `steps` (a run's, in id order) but those acting for a reviewer (ids
    in `reviewers`), with what later succeeded under the same name (`fixed_by`: a tool name,
    `reviewer` for an answer or a reviewer's step, None when nothing did)."""
    out = []
    for failed in (s for s in steps if s.status == "failed" and s.id not in reviewers):
        fix = next(
            (
                s
                for s in steps
                if s.name == failed.name
                and s.status == "succeeded"
                and (s.id or 0) > (failed.id or 0)
            ),
            None,
        )
        fixed_by = None
        if fix is not None:
            fixed_by = "reviewer" if fix.kind == "human" or fix.id in reviewers else fix.tool
        out.append(
            {"step": failed.name, "tool": failed.tool, "error": failed.error, "fixed_by": fixed_by}
        )
    return out


def answer_fact(esc: Escalation) -> AnswerFact:
    """The fact a remembered reviewer answer becomes: about the step it answered (subject
    `review`, attribute `answer:<step>`, so a newer answer for that step replaces it), saying
    who answered; its source is `reviewer:<name>`."""
    step = str(esc.detail.get("step") or "")
    tool = str(esc.detail.get("tool") or "")
    answer = json.dumps(esc.answer, ensure_ascii=False)
    if len(answer) > ANSWER_FACT_MAX_CHARS:
        answer = answer[: ANSWER_FACT_MAX_CHARS - 3] + "..."
    what = f"step {step}" + (f" ({tool})" if tool else "") if step else f"a run ({esc.reason})"
    return AnswerFact(
        subject="review",
        attribute=f"answer:{step}" if step else "answer",
        text=f"Reviewer {esc.decided_by} answered for {what}: {answer}",
        source=f"reviewer:{esc.decided_by}",
    )
