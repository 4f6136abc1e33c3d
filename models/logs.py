"""Structured logs (structlog) routed through the standard `logging` module.

Celery configures the root logger of each worker at its `-l` level, so agentq's key=value events
land in the same stream and format as Celery's own lines.
"""

from __future__ import annotations

import structlog


def configure_logging() -> None:
    """Send structlog events to stdlib logging as `event key=value ...` lines."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=True),
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
