"""The worker's Celery app: `celery -A worker.app worker -Q steps,memory`.

Tasks are thin: each calls one function of `worker.phases.planner`, `worker.execution.steps` or
`worker.phases.synthesis`. A fresh `agentq.execute_step` message is a wake-up: it runs the fair-next
waiting item of any user (`worker.execution.wakeups`, `models.engine.fair_queue`), its own step only
when that is next. A step's task advances its own run (`worker.execution.steps.finish`) and may run
the next steps and the synthesis in-process; a plan or replan applies its run's next decision itself
(the coordinator's, by name, only if that fails).
`agentq.remember_run` runs on the `memory` queue (`models.engine.queue`): a worker started with
`-Q memory` alone writes memory only. A worker that consumes the `memory` queue remembers a run it
synthesized itself, right after, with no message, unless that needs a model call.
Each pool process loads the embedding model when it starts (`worker.memory.remembering.warm_up`,
logged as `worker.warm`), so no run waits for it. The main process starts and lists each MCP
server of `AGENTQ_MCP_SERVERS` once before the pool forks (one that cannot start is named in one
log line), then closes them; each pool process opens its own sessions when a step first calls a
server's tool, and closes them when it ends (`models.mcp.sessions`).

A task that finds the database unavailable sends itself again after a backoff
(`models.engine.queue.OUTAGE_RETRIES`) instead of being acknowledged as done; a step's task carries
the attempt it holds and its outcome, if it had one (`worker.execution.outages`). A plan, replan,
synthesis or memory task is run again whole: each claims its run's phase first
(`worker.execution.claims`) and does nothing if the run has moved on, so the rows are changed once.
Its earlier try's claim is no longer renewed once the outage ended that try
(`worker.execution.heartbeats`), so the retry claims the phase once that lease (`AGENTQ_LEASE_S`)
has run out, or, finding it still held, leaves it to the reconciler, which re-sends it then: the
phase goes on within about a lease and a reconcile interval of the database's return. A model call
answered before or during the outage is not made again: what keeps its answer waits for Postgres in
the task (`worker.model_calls.calls.waits_out_outages`). A bug in a plan, replan or synthesis
escalates its run (`internal_error`, `worker.execution.crashes`) rather than failing the task, which
the reconciler would re-send for ever.
"""

from __future__ import annotations

import os
from typing import Any, Final

import structlog
from celery import Task
from celery.signals import (
    celeryd_after_setup,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
)

from models.db import dispose_engines, session_scope
from models.engine import decisions, fair_queue, queue, stack_limits, tracing
from models.engine.queue import (
    OUTAGE_RETRIES,
    TASK_COORDINATE,
    TASK_EXECUTE_STEP,
    TASK_PLAN,
    TASK_RAW_NOOP,
    TASK_REMEMBER_RUN,
    TASK_REPLAN,
    TASK_SYNTHESIZE,
    make_celery,
)
from models.errors import AgentqError, DatabaseUnavailable, PhaseNotDue, RateLimited
from models.mcp import catalogue, sessions
from models.memory.tokens import check_tokenizer
from models.operations import metrics_export
from models.operations.logs import bind_work, configure_logging, task_bound
from models.orphans import die_with_parent
from models.plans.tools import load_tool_modules
from models.settings import get_settings
from worker.execution import chains, deferrals, messages, outages, recovery, steps, wakeups
from worker.execution.attempts import Claimed, Outcome
from worker.execution.crashes import escalated_on_crash
from worker.execution.heartbeats import StepHeld, heartbeat
from worker.memory import remembering
from worker.phases import planner, replan_checks, synthesis

MAIN_PID: Final = os.getpid()  # `celery worker` imports this module before it forks
_memory_here = False  # whether this worker consumes the `memory` queue (`_note_queues`)
configure_logging()
settings = get_settings()
load_tool_modules(settings.tool_modules)
check_tokenizer()  # token counting works offline, or the worker does not start
remembering.check_memory_model()
app = make_celery("agentq-worker", settings)
log = structlog.get_logger("agentq.worker")


@app.task(name=TASK_PLAN, **OUTAGE_RETRIES)  # type: ignore[untyped-decorator]
def plan(run_id: int) -> None:
    """Write the first plan of a run; rate-limited, the task is sent again later."""
    with task_bound(run_id=run_id):
        moved = False  # a crash escalated: nothing to tell the coordinator
        try:
            with tracing.span("agentq.plan", run_id=run_id), escalated_on_crash(run_id, "planning"):
                moved = planner.plan(run_id)
        except RateLimited as exc:
            _defer(exc, TASK_PLAN, "planning", run_id)
            return
        except PhaseNotDue as early:
            queue.send(TASK_PLAN, run_id, countdown=early.due_in_s)
            return
        if moved:
            _advance(run_id)


@app.task(name=TASK_REPLAN, **OUTAGE_RETRIES)  # type: ignore[untyped-decorator]
def replan(run_id: int, step_id: int) -> None:
    """Splice new steps in after a failed step; rate-limited, the task is sent again later."""
    with task_bound(run_id=run_id, step_id=step_id):
        moved = False  # a crash escalated: nothing to tell the coordinator
        try:
            with (
                tracing.span("agentq.replan", run_id=run_id, step_id=step_id),
                escalated_on_crash(run_id, "replanning"),
            ):
                moved = planner.replan(run_id, step_id)
        except RateLimited as exc:
            _defer(exc, TASK_REPLAN, "replanning", run_id, step_id)
            return
        except PhaseNotDue as early:
            queue.send(TASK_REPLAN, run_id, step_id, countdown=early.due_in_s)
            return
        if moved:
            _advance(run_id)


def _advance(run_id: int) -> None:
    """Apply the next decision of run `run_id`, whose plan or replan this task just wrote, here
    (`models.engine.decisions.advance`, as the coordinator would), so its steps enter the fair queue
    with no hop through the coordinator's queue (a worker free meanwhile would take another
    user's step first); any error, and the coordinator is asked instead."""
    try:
        with session_scope() as session:
            advanced = decisions.advance(session, run_id, cap=settings.user_max_running_steps)
    except AgentqError as exc:
        log.warning("advance.handed_over", run_id=run_id, error=str(exc))
        queue.try_send(TASK_COORDINATE, run_id)
        return
    for task, args in advanced[1].sends if advanced is not None else []:
        queue.try_send(task, *args)


def _defer(exc: RateLimited, task: str, phase: str, run_id: int, *args: int) -> None:
    """Send `task` again after the server's `retry-after`, or not at all (see `defer_phase`)."""
    if deferrals.defer_phase(run_id, phase=phase, exc=exc):
        queue.send(task, run_id, *args, countdown=exc.retry_after_s)


@app.task(name=TASK_EXECUTE_STEP, bind=True, **OUTAGE_RETRIES)  # type: ignore[untyped-decorator]
def execute_step(
    task: Task, step_id: int, held: dict[str, Any] | None = None, after_lost: bool = False
) -> None:
    """Claim and run one step, record it and advance its run (`worker.execution.steps.finish`); then
    run the next step this process claimed, or the run's synthesis, within the chain's bounds.

    `held` is what this task carries when it sent itself again because the database was away
    (`worker.execution.outages`): the attempt it holds, whose outcome is recorded instead of a
    claim. `after_lost`: sent for when the lease of a lost worker's attempt ends
    (`worker.execution.recovery`), the step is taken back first."""
    with task_bound(step_id=step_id):
        _execute_step(task, step_id, held, after_lost)


def _execute_step(task: Task, step_id: int, held: dict[str, Any] | None, after_lost: bool) -> None:
    """`execute_step`'s work, inside its bound log context."""
    if after_lost and not recovery.take_back(step_id):
        return
    redelivered = bool((task.request.delivery_info or {}).get("redelivered"))
    claimed, outcome = _start(step_id, held, wake=not (after_lost or redelivered))
    if claimed is None and held is None and redelivered:
        recovery.check_later(step_id)  # its worker was lost mid-step: back when its lease ends
        claimed, phase = messages.claim_woken(step_id, heirs_only=True)  # handed over
        if phase is not None:
            _run_phase(phase)
    chain = chains.Chain.from_settings(settings)
    while claimed is not None:
        step = claimed.step
        bind_work(run_id=step.run_id, step_id=step.id, attempt=step.attempt)
        try:
            with tracing.span(
                "agentq.step", run_id=step.run_id, step_id=step.id, attempt=step.attempt
            ):
                outcome = outcome or _perform(claimed)
                done = steps.finish(claimed, outcome, may_chain=chain.may_continue())
        except DatabaseUnavailable as exc:
            countdown = queue.outage_countdown_s(
                task.request.retries, holds_outcome=outcome is not None
            )
            carried = {"held": outages.carry(claimed, outcome, exc)}
            log.warning(
                "execute_step.database_unavailable",
                step_id=claimed.step.id,
                attempt=claimed.step.attempt,
                outcome=carried["held"]["outcome"]["kind"],
                retry_in_s=countdown,
            )
            raise task.retry(
                exc=exc, args=[claimed.step.id], kwargs=carried, countdown=countdown
            ) from exc
        outcome = None
        chain.done += 1
        for send, args in done.sends:  # a broker that is down: the reconciler re-sends
            queue.try_send(send, *args)
        if done.again_in_s is not None:
            queue.send(TASK_EXECUTE_STEP, claimed.step.id, countdown=done.again_in_s)
        if done.synthesize:
            _synthesize_after_step(claimed.step.run_id)
        if done.phase is not None:  # taken in fair order: another run's plan, replan or synthesis
            _run_phase(done.phase)
        claimed = done.next


def _perform(claimed: Claimed) -> Outcome:
    """Run the claimed step, then the should-replan check of its run
    (`worker.phases.replan_checks`), with its lease renewed every heartbeat
    (`worker.execution.heartbeats`)."""
    with heartbeat.renewing(StepHeld(claimed.step.id or 0, claimed.step.attempt)):
        return replan_checks.with_check(claimed, steps.perform(claimed))


def _start(
    step_id: int, held: dict[str, Any] | None, *, wake: bool
) -> tuple[Claimed | None, Outcome | None]:
    """The claimed step and, for a retry that holds its attempt, the outcome it carries. A
    fresh message (`wake`) takes the fair-next item instead (`worker.execution.wakeups`): a step, or
    a run's phase, run here before the task ends."""
    if held is not None:
        return outages.resume(step_id, held) or (None, None)
    if not wake:
        return messages.claim(step_id), None
    for _ in range(wakeups.PHASES_PER_WAKEUP):
        claimed, phase = messages.claim_woken(step_id)
        if phase is None:
            return claimed, None
        _run_phase(phase)  # then pick again: the phase may have released the next item
    return messages.claim_woken(step_id, fair=False)[0], None


def _run_phase(item: fair_queue.Item) -> None:
    """Run the plan, replan or synthesis of `item` in this task, as its own task would (its
    claim takes the phase, or finds another worker holds it and does nothing)."""
    if item.status == "planning":
        plan(item.run_id)
    elif item.status == "replanning" and item.failed_step_id is not None:
        replan(item.run_id, item.failed_step_id)
    elif item.status == "synthesizing":
        synthesize_run(item.run_id)


def _synthesize_after_step(run_id: int) -> None:
    """`synthesize_run` in the task of the run's last step; if the database goes away meanwhile,
    the synthesis is sent as a task of its own, which waits out the outage (the step's outcome
    is committed: its own task must not run again)."""
    try:
        with task_bound(run_id=run_id):  # the synthesis's lines are not the step's
            synthesize_run(run_id)
    except DatabaseUnavailable:
        log.warning("synthesize.database_unavailable", run_id=run_id)
        queue.send(TASK_SYNTHESIZE, run_id, countdown=queue.outage_countdown_s(0))


@app.task(name=TASK_SYNTHESIZE, **OUTAGE_RETRIES)  # type: ignore[untyped-decorator]
def synthesize(run_id: int) -> None:
    """Write the final answer of a run (`synthesize_run`)."""
    with task_bound(run_id=run_id):
        synthesize_run(run_id)


def synthesize_run(run_id: int) -> None:
    """Write the final answer of a run, then send its memory task and what the dispatch of its
    user released (`worker.phases.synthesis.synthesize`); rate-limited, the task is sent again
    later."""
    sends: list[tuple[str, tuple[int, ...]]] = []  # a crash escalated: nothing to send
    try:
        with (
            tracing.span("agentq.synthesize", run_id=run_id),
            escalated_on_crash(run_id, "synthesizing"),
        ):
            sends = synthesis.synthesize(run_id)
    except RateLimited as exc:
        _defer(exc, TASK_SYNTHESIZE, "synthesizing", run_id)
        return
    except PhaseNotDue as early:
        queue.send(TASK_SYNTHESIZE, run_id, countdown=early.due_in_s)
        return
    for task, args in sends:
        if task == TASK_REMEMBER_RUN and _memory_here and _remembered_here(run_id):
            continue
        if not queue.try_send(task, *args):
            log.warning("synthesize.unsent", run_id=run_id, task=task)


def _remembered_here(run_id: int) -> bool:
    """Write the memory of the run this process just synthesized, here, with no message (issue
    29: a message cost its run about 3 ms of CPU in the broker, the main process and the pool),
    unless it needs a model call (the fact extraction, which goes to the `memory` queue as
    before), the database went away, or it failed (logged): its memory task then does it, or
    records why not; whether it was written here. The run's end is committed
    already, and an ended run whose memory never ended is asked for again by the reconciler
    (`scheduler.tasks.reconcile`), so nothing is lost if this process dies meanwhile."""
    try:
        with task_bound(run_id=run_id), tracing.span("agentq.remember", run_id=run_id):
            return remembering.remember_ended_run(run_id, model_calls=False)
    except DatabaseUnavailable:  # its task waits out the outage
        log.warning("remember.database_unavailable", run_id=run_id)
    except Exception as exc:  # never the step chain's failure: the memory task tries it again
        log.warning("remember.not_here", run_id=run_id, error=str(exc)[:200])
    return False


@app.task(name=TASK_REMEMBER_RUN, **OUTAGE_RETRIES)  # type: ignore[untyped-decorator]
def remember_run(run_id: int) -> None:
    """Write the episode and facts of a run that has ended (succeeded, failed, cancelled)."""
    with task_bound(run_id=run_id), tracing.span("agentq.remember", run_id=run_id):
        remembering.remember_ended_run(run_id)


@app.task(name=TASK_RAW_NOOP)  # type: ignore[untyped-decorator]
def raw_noop(_previous: object = None) -> None:
    """A bare Celery task with no agentq bookkeeping: the benchmark's baseline."""


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _fresh_engine(**_: Any) -> None:
    die_with_parent(MAIN_PID)  # no pool process outlives a killed worker
    dispose_engines()
    # After the fork (the SDK's export thread), before any engine (SQLAlchemy's spans).
    tracing.setup(settings, service="worker")
    # Loaded here, after the fork, not in the parent: torch's OpenMP pool does not survive a fork
    # (pytorch/pytorch#41197, #17199); the parent only imported torch (`_preload_embedder`).
    # Celery's worker_proc_alive_timeout allows for a load that has to import it after all
    # (models.engine.queue.WORKER_PROC_ALIVE_TIMEOUT_S).
    remembering.warm_up()


@task_prerun.connect  # type: ignore[untyped-decorator]
def _stack_limits(**_: Any) -> None:
    stack_limits.refresh()  # the dispatch cap is the stack's, whatever this machine's env says


@celeryd_after_setup.connect  # type: ignore[untyped-decorator]
def _note_queues(instance: Any, **_: Any) -> None:
    """In the main process, before the pool forks: whether this worker consumes the `memory`
    queue (`-Q`), which lets it remember the runs it synthesizes itself (`_remembered_here`)."""
    global _memory_here
    _memory_here = queue.QUEUE_MEMORY in (instance.app.amqp.queues.consume_from or {})


@celeryd_after_setup.connect  # type: ignore[untyped-decorator]
def _preload_embedder(**_: Any) -> None:
    """In the main process, once its logging is set up and before the pool forks: import the
    local embedder's libraries (onnxruntime once the machine has the model's export, else torch
    and transformers too), with one OpenMP thread per process, so a
    pool process, the first ones and every replacement, warms up in about 0.2 s instead of 5."""
    remembering.preload()


@worker_init.connect  # type: ignore[untyped-decorator]
def _check_mcp_servers(**_: Any) -> None:
    """In the main process, before the pool forks: start and list every MCP server once, so
    one that cannot start is named in this log now (one line each, `models.mcp.catalogue`),
    then close them all: each pool process opens its own sessions when first needed
    (`models.mcp.sessions`); the listings are inherited."""
    if settings.mcp_servers:
        catalogue.check_servers()
        sessions.shutdown()


@worker_init.connect  # type: ignore[untyped-decorator]
def _metrics(**_: Any) -> None:
    """In the main process, before the pool forks: every process writes its metrics under
    `AGENTQ_METRICS_DIR`, served on `AGENTQ_METRICS_PORT` if set
    (`models.operations.metrics_export`)."""
    metrics_export.record_in(metrics_export.metrics_dir(settings))
    metrics_export.serve(settings, database=False)


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _forget_metrics(pid: int | None = None, **_: Any) -> None:
    metrics_export.forget_process(pid or os.getpid(), metrics_export.metrics_dir(settings))


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _close_mcp_sessions(**_: Any) -> None:
    """A pool process ends by `os._exit` (no atexit): its MCP sessions are closed here, so its
    stdio servers exit with it (`models.mcp.sessions.close_all`)."""
    sessions.close_all()
