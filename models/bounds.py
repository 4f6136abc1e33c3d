"""Bounds on what the command line and the API accept, importable without the database layer.

`agentq --help` builds every option from these, so this module imports nothing but the standard
library (issue 15, part 10: the help took 2.7-15 s while it imported SQLAlchemy and Celery).
"""

from __future__ import annotations

from typing import Final

PG_INT_MAX: Final = 2**31 - 1  # ids, counts and budgets are Postgres `integer` columns
REPLAN_CHECKS: Final = ("off", "model")  # AGENTQ_REPLAN_CHECK, and a run's `replan_check`
# A submit's Idempotency-Key (`models.engine.idempotency`), at most this long (Stripe's length);
# its pattern is `models.patterns.IDEMPOTENCY_KEY_PATTERN`.
IDEMPOTENCY_KEY_MAX_CHARS: Final = 255
