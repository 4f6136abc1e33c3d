"""Long-term memory in the engine: remember a run once it has ended, and warm the embedder up.

Remembering writes one episode per run (goal, plan, what failed and what fixed it, outcome,
answer: `worker.memory.run_memory`), the reviewers' answers their reviewers asked to remember
(source `reviewer:<name>`), and the facts a model extracts from the run (source `run:<id>`,
`worker.memory.extraction`), reconciled by `models.memory.facts.remember` (add, duplicate, or
supersede). It runs off the run's hot path: a run is `succeeded` (or `failed`, `cancelled`) first,
then the `agentq.remember_run` task on the `memory` queue writes its memory (issue 10), so a memory
write never delays a run's end and a deployment may give it workers of its own. A worker that
consumes the `memory` queue writes the memory of a run it synthesized itself, right after its end
is committed, with no message, unless that needs a model call (`model_calls`; issue 29). A run
whose user was forgotten after it was created remembers nothing (`models.memory.erasures`).
Memory never decides a run's outcome: a failure to remember is recorded as an event and the run
stays as it ended.

The fact extraction is a paid phase: the task claims it (`models.engine.phases`, the run's status
being its end) before the model call and writes only while it holds it, so a message delivered twice
asks the model once. Embeddings are batched: a task that starts `MEMORY_BATCH_AFTER_S` or more after
its run ended (memory is behind) remembers its own run and up to `MEMORY_BATCH_MAX_RUNS` - 1 other
ended runs of the same user that wait for memory and need no model call
(`models.engine.ended_runs.BATCHABLE`), with one `embed` call for all their texts, in one read and
one write transaction. Each of those runs still has its own message; the episode is written once per
run (`models.memory.episodes.remember_episodes`), so the second task to write a run writes nothing,
and a task that finds its run already remembered does nothing.

Then each run whose episode the task wrote has its procedures judged and may teach one
(`worker.memory.procedure_learning`), once per run."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Sequence
from datetime import timedelta
from typing import Any, Final

import structlog
from pydantic import ValidationError
from sqlmodel import Session

from models.db import session_scope
from models.engine import ended_runs, events, phases
from models.engine.ended_runs import EndedRun
from models.errors import AgentqError, DatabaseUnavailable, NotFound
from models.memory import embedders
from models.memory.episodes import NewEpisode, remember_episodes
from models.memory.facts import remember
from models.memory.memory_admin import embedder
from models.memory.reembedding import check_embedding_model
from models.memory.time_expressions import annotate
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import utcnow
from worker.execution.claims import claim_phase, renewed
from worker.memory import extraction, procedure_learning
from worker.memory.run_memory import RunMemory, run_memory
from worker.model_calls import calls
from worker.model_calls.prompts import FactSpec

log = structlog.get_logger("agentq.worker")
FACT_OUTCOMES = ("added", "duplicate", "superseded", "dropped")
MEMORY_BATCH_MAX_RUNS: Final = 16  # runs one memory task remembers at most, with one embed call
# A task that starts this long after its run ended batches: memory is behind, so runs that ended
# since are waiting too. One that starts sooner remembers its run alone, and searches for none.
MEMORY_BATCH_AFTER_S: Final = 1.0
# Only runs created this recently are batched: it bounds the read's scan of the user's runs
# (`ix_runs_user_created`); an older run is remembered by its own message.
MEMORY_BATCH_WINDOW_S: Final = 3600.0


def remember_ended_run(run_id: int, *, model_calls: bool = True) -> bool:
    """Write the memory of run `run_id`, which has ended (`agentq.remember_run`, on the `memory`
    queue; or the worker that synthesized it, with `model_calls` False), and of the runs batched
    with it; a run in any other state is left alone. Returns True, or False, having done
    nothing, when the run needs a model call (its fact extraction) and `model_calls` is False.

    In order: read the runs (one transaction, `models.engine.ended_runs.read`); ask the model for
    the run's facts unless `extraction.skip_reason` says there is nothing to learn; embed every
    episode's summary, the answers and the facts in one `embed` call; write the episodes, each
    with its `memory.remembered` event, then the run's answers and facts (one transaction): no
    model or embedding call inside a transaction (DESIGN.md, invariant 11). The event's detail:
    `outcome`, `answers`, counts by fact outcome (`added`, `duplicate`, `superseded`,
    `dropped`), `withheld_failures`, and `extraction`: `asked`, or `skipped` with the reason in
    `extraction_skipped`; a run batched with another's has `batched_with`, that run's id.

    Failures are recorded as `memory.failed` (`{"error"}`) on the run, never raised; a failed
    extraction, or a fact that cannot be written, still writes the episode and the answers (an
    answer that cannot be written, the episode and the facts). A run whose user was forgotten
    after it was created records `memory.dropped` instead and calls no model; a run whose memory
    task has already ended (a message delivered twice, or the run was batched with another's) is
    left alone. Raises `NotFound` when the run does not exist, and `DatabaseUnavailable`, which
    is no failure of the memory: the task waits out the outage and writes it all then.
    """
    runs = _read(run_id)
    if not runs:
        return True
    try:
        own, *others = (run_memory(run) for run in runs)
        holder = None
        if own.skipped is None and not model_calls:
            return False
        if own.skipped is None:  # a paid phase: the extraction's model call, once (issue 11)
            holder = claim_phase(run_id, tuple(RUN_TERMINAL))
            if holder is None:
                return True
        written = _remember(own, [other for other in others if not other.writes_facts], holder)
    except DatabaseUnavailable:  # not the memory's failure: the task waits out the outage
        raise
    except (AgentqError, ValidationError, ValueError) as exc:
        with session_scope() as session:
            _record_failure(session, run_id, str(exc))
        return True
    for remembered in sorted(written):  # each run once: the task that wrote its episode
        try:
            procedure_learning.learn_from(remembered)
        except DatabaseUnavailable:  # the task waits out the outage
            raise
        except (AgentqError, ValueError) as exc:  # an embedder's failure: the memory stands
            procedure_learning.not_learned(remembered, str(exc))
    return True


def _read(run_id: int) -> list[EndedRun]:
    """The run and the runs batched with it; empty when the run is to be left alone."""
    now = utcnow()
    with session_scope() as session:
        runs = ended_runs.read(
            session,
            run_id,
            more=MEMORY_BATCH_MAX_RUNS - 1,
            since=now - timedelta(seconds=MEMORY_BATCH_WINDOW_S),
            ended_before=now - timedelta(seconds=MEMORY_BATCH_AFTER_S),
        )
        if not runs:
            raise NotFound(f"run {run_id} does not exist")
        run = runs[0]
        if run.outcome not in RUN_TERMINAL:
            log.info("memory.skipped", run_id=run_id, reason=f"run is {run.outcome}")
            return []
        if run.memory_ended:
            log.info("memory.skipped", run_id=run_id, reason="already remembered")
            return []
        if run.erased_at is not None:  # its memory would be dropped write by write: ask nothing
            point = run.erased_at.isoformat()
            events.record_event(session, run_id, "memory.dropped", what="run", erased_at=point)
            return []
    return runs


def _record_failure(session: Session, run_id: int, error: str) -> None:
    log.warning("memory.failed", run_id=run_id, error=error)
    events.record_event(session, run_id, "memory.failed", error=error[:500])


def _remember(
    own: RunMemory, others: list[RunMemory], holder: phases.Claimed | None
) -> Collection[int]:
    """Extract (unless skipped), embed once, write, and record how it went; the ids of the runs
    whose episode this wrote. Raises what embedding and writing raise (the caller records it).
    With `holder`, the phase claim of the extraction, renewed while the model and the embedder
    are called: nothing is written if another attempt took the phase over since."""
    with renewed(holder):
        facts, error = _extract(own)
        model = embedder()
        texts = [own.summary, *(a.text for a in own.answers), *(f.text for f in facts)]
        vectors = model.embed([*texts, *(other.summary for other in others)])  # one call for all
    episodes = [_episode(own, vectors[0], with_event=not own.writes_facts)]
    episodes += [
        _episode(other, vector, batched_with=own.run.id)
        for other, vector in zip(others, vectors[len(texts) :], strict=True)
    ]
    written = _write(own, episodes, holder, facts, vectors[1 : len(texts)], model.model, error)
    if len(episodes) > 1:
        log.info("memory.batched", run_id=own.run.id, written=sorted(written))
    return written


@calls.waits_out_outages  # paid for (the extraction, the embeddings): kept across an outage
def _write(
    own: RunMemory,
    episodes: list[NewEpisode],
    holder: phases.Claimed | None,
    facts: list[FactSpec],
    vectors: list[list[float]],
    embedding_model: str,
    error: str | None,
) -> Collection[int]:
    """Unless another attempt took the extraction over since `holder` claimed it, write the
    episodes and then the run's facts, in one transaction; the ids of the runs whose episode
    this wrote."""
    with session_scope() as session:
        if holder is not None and not phases.end(
            session, own.run.id, holder.attempt, statuses=tuple(RUN_TERMINAL)
        ):
            log.info("memory.skipped", run_id=own.run.id, reason="the phase was taken over")
            return ()
        written = remember_episodes(
            session, user_id=own.run.user_id, episodes=episodes, embedding_model=embedding_model
        )
        if own.run.id not in written:
            log.info("memory.skipped", run_id=own.run.id, reason="already remembered")
        elif own.writes_facts:
            _write_facts(session, own, facts, vectors, embedding_model, error)
    return written


def _extract(found: RunMemory) -> tuple[list[FactSpec], str | None]:
    """The run's extracted facts (none when skipped), each with its relative time expressions
    resolved against the day the run was submitted ("due next Friday (19 May 2023)",
    `models.memory.time_expressions`), and why extraction failed (None if not): the episode and the
    answers are written all the same."""
    if found.skipped is not None:
        return [], None
    run = found.run
    try:
        extracted = extraction.extract_facts(run.id, run.goal, found.failures, found.stated)
        said_on = run.created_at.date()
        return [f.model_copy(update={"text": annotate(f.text, said_on)}) for f in extracted], None
    except DatabaseUnavailable:
        raise
    except (AgentqError, ValueError) as exc:
        return [], f"fact extraction: {exc}"


def _episode(
    found: RunMemory, vector: list[float], *, with_event: bool = True, batched_with: int = 0
) -> NewEpisode:
    """The run's episode, with its `memory.remembered` event unless `with_event` is False (its
    facts are written after the episode, and their outcomes counted in the event)."""
    run = found.run
    detail = _counts(found) | ({"batched_with": batched_with} if batched_with else {})
    return NewEpisode(
        run_id=run.id,
        goal=run.goal,
        plan=found.plan,
        failures=found.failures,
        outcome=run.outcome,
        final_answer=run.final_answer,
        summary=found.summary,
        embedding=vector,
        event_kind="memory.remembered" if with_event else None,
        event_detail=detail if with_event else None,
    )


def _counts(found: RunMemory, outcomes: Sequence[str] = ()) -> dict[str, Any]:
    """The detail of the run's `memory.remembered` event, with its facts' `outcomes`."""
    counts: dict[str, Any] = {"outcome": found.run.outcome, "answers": len(found.answers)}
    counts |= dict.fromkeys(FACT_OUTCOMES, 0)
    for outcome in outcomes:
        counts[outcome] += 1
    counts["withheld_failures"] = found.withheld
    if found.skipped is None:
        return counts | {"extraction": "asked"}
    return counts | {"extraction": "skipped", "extraction_skipped": found.skipped}


def _write_facts(
    session: Session,
    found: RunMemory,
    facts: list[FactSpec],
    vectors: Sequence[list[float]],
    embedding_model: str,
    error: str | None,
) -> None:
    """Write the run's answers, then its facts (embedded in `vectors`, in that order), after its
    episode, each kind in a savepoint: one that cannot be written (`ValueError`) leaves the
    episode and the other kind written. Then the run's event: `memory.failed` when a write or
    the extraction failed (`error`), else `memory.remembered` with their outcomes."""
    answer_vectors, fact_vectors = vectors[: len(found.answers)], vectors[len(found.answers) :]
    writes: list[Callable[[], list[str]]] = [
        lambda: _remember_answers(session, found, answer_vectors, embedding_model),
        lambda: _remember_facts(session, found, facts, fact_vectors, embedding_model),
    ]
    errors = [] if error is None else [error]
    outcomes: list[str] = []
    for write in writes:
        try:
            with session.begin_nested():
                outcomes += write()
        except ValueError as exc:
            errors.append(str(exc))
    if errors:
        _record_failure(session, found.run.id, "; ".join(errors))
    else:
        counts = _counts(found, outcomes)
        events.record_event(session, found.run.id, "memory.remembered", **counts)


def _remember_answers(
    session: Session, found: RunMemory, vectors: Sequence[list[float]], embedding_model: str
) -> list[str]:
    """Write the remembered answers (embedded in `vectors`) as facts of the run's user; each
    one's outcome."""
    return [
        remember(
            session,
            user_id=found.run.user_id,
            subject=answer.subject,
            attribute=answer.attribute,
            category="knowledge",
            text=answer.text,
            embedding=vector,
            embedding_model=embedding_model,
            source_run_id=found.run.id,
            source=answer.source,
        ).outcome
        for answer, vector in zip(found.answers, vectors, strict=True)
    ]


def _remember_facts(
    session: Session,
    found: RunMemory,
    facts: list[FactSpec],
    vectors: Sequence[list[float]],
    embedding_model: str,
) -> list[str]:
    """Write the extracted facts (embedded in `vectors`), source `run:<id>`, with their
    category's time to live; each one's outcome."""
    ttl_s = get_settings().fact_ttl_s
    return [
        remember(
            session,
            user_id=found.run.user_id,
            subject=fact.subject,
            attribute=fact.attribute,
            category=fact.category,
            text=fact.text,
            embedding=vector,
            embedding_model=embedding_model,
            source_run_id=found.run.id,
            ttl_s=ttl_s.get(fact.category),
        ).outcome
        for fact, vector in zip(facts, vectors, strict=True)
    ]


def check_memory_model() -> None:
    """At start-up: refuse an embedding model or dimension other than the stored rows' (see
    `models.memory.reembedding.check_embedding_model`), and make sure its indexes exist."""
    with session_scope() as session:
        check_embedding_model(session, embedder())


def preload() -> None:
    """In a worker's main process, before its pool forks: import the configured embedder's
    libraries (`models.memory.embedders.preload`), so each pool process's `warm_up` only reads
    the weights. A failure is logged (`worker.preload`) and left to `warm_up`, which names it
    again in each pool process."""
    model = embedder()
    try:
        if embedders.preload(model):
            log.info("worker.preloaded", embedder=model.model)
    except Exception as exc:  # the pool must start even when the extra is missing
        log.warning("worker.preload", embedder=model.model, error=f"{type(exc).__name__}: {exc}")


def warm_up() -> float:
    """Load the configured embedder in this process (`models.memory.embedders.warm_up`), so no run
    waits for it; logs `worker.warming` (with `embedder`, the model) first, then `worker.warm`
    with `seconds`, `embedder`, `warmed` (False for an API embedder, or when loading failed:
    then `error`, and the first real embedding will fail and be recorded as `memory.failed`) and
    `preloaded` (whether the main process had imported the model's libraries: `preload`).
    Returns the seconds it took."""
    start = time.monotonic()
    model = embedder()
    preloaded = embedders.preloaded(model)
    # Said before the load too: without a preload, a pool process is silent for 5-30 s.
    log.info("worker.warming", embedder=model.model, pid=os.getpid(), preloaded=preloaded)
    try:
        warmed, error = embedders.warm_up(model), None
    except Exception as exc:  # a failed warm-up must not stop the pool process from starting
        warmed, error = False, f"{type(exc).__name__}: {exc}"
    seconds = round(time.monotonic() - start, 3)
    fields = {
        "seconds": seconds,
        "embedder": model.model,
        "warmed": warmed,
        "preloaded": preloaded,
        "pid": os.getpid(),
    }
    if error is None:
        log.info("worker.warm", **fields)
    else:
        log.warning("worker.warm", error=error[:500], **fields)
    return seconds
