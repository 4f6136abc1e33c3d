"""Structured logs (structlog) routed through the standard `logging` module.

`AGENTQ_LOG_FORMAT=console` (the default): Celery configures the root logger of each worker at
its `-l` level, so agentq's `event key=value` lines land in the same stream and format as
Celery's own. `AGENTQ_LOG_FORMAT=json`: every line of the process, agentq's and Celery's (or
uvicorn's) alike, is one JSON object (structlog's `JSONRenderer` behind a
`structlog.stdlib.ProcessorFormatter` on the handlers Celery sets up), with `event`, `level`,
`logger` and an ISO `timestamp`.

In both, a run task's lines carry `run_id`, `step_id` and `attempt` (structlog contextvars):
bound from the task's arguments when it starts (`task_bound`; None where the task does not name
one), rebound when the task claims a step or a phase (`bind_work`), unbound when it ends. A
periodic task binds nothing.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager as ContextManager
from typing import Any, Final

import structlog
from celery.signals import after_setup_logger, after_setup_task_logger
from structlog.typing import Processor

from models.settings import get_settings

CONSOLE_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"
# What a line of any origin gets before it is rendered as JSON.
_JSON_CHAIN: Final[list[Processor]] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def configure_logging(log_format: str | None = None) -> None:
    """Configure structlog for `log_format` (default `AGENTQ_LOG_FORMAT`: "console" or "json")
    and bind each Celery task's `run_id`, `step_id`, `attempt` on its lines."""
    json_lines = (log_format or get_settings().log_format) == "json"
    render: list[Processor] = [structlog.stdlib.ProcessorFormatter.wrap_for_formatter]
    if not json_lines:
        render = [structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True)]
    structlog.configure(
        processors=[*(_JSON_CHAIN if json_lines else [_JSON_CHAIN[0]]), *render],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    if json_lines:
        after_setup_logger.connect(_json_handlers, weak=False)
        after_setup_task_logger.connect(_json_handlers, weak=False)
        use_formatter(logging.getLogger(), formatter("json"))


def formatter(log_format: str) -> logging.Formatter:
    """The `logging` formatter of a handler for `log_format` ("console" or "json")."""
    if log_format != "json":
        return logging.Formatter(CONSOLE_FORMAT)
    return structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        foreign_pre_chain=_JSON_CHAIN,
    )


def use_formatter(logger: logging.Logger, chosen: logging.Formatter) -> None:
    """Give every handler of `logger` the formatter `chosen`."""
    for handler in logger.handlers:
        handler.setFormatter(chosen)


def _json_handlers(logger: logging.Logger | None = None, **_: Any) -> None:
    """Celery's `after_setup_logger` / `after_setup_task_logger`: its handlers write JSON."""
    if logger is not None:
        use_formatter(logger, formatter("json"))


def bind_work(**ids: int | None) -> None:
    """Bind what the task now holds on its following lines: a step's `run_id`, `step_id` and
    `attempt`, or a phase claim's `attempt`."""
    structlog.contextvars.bind_contextvars(**ids)


def task_bound(*, run_id: int | None = None, step_id: int | None = None) -> ContextManager[Any]:
    """Bind a task's `run_id` and `step_id` (and `attempt`, None until `bind_work` knows it) on
    every line logged inside the block, restored as they were after it. Each run task's body
    runs inside one: a receiver of Celery's `task_prerun`/`task_postrun` would do it for every
    task, but Celery then sends those signals for every task, which measured slower per step."""
    return structlog.contextvars.bound_contextvars(run_id=run_id, step_id=step_id, attempt=None)
