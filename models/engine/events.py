"""A run's timeline: one row per transition and decision, appended by the statement that writes it.

`record_event` inserts at once (named SQL on the session's connection, `models.sql`), not at the
session's next flush: every transition records one, and the ORM's unit of work cost as much as
the transition itself (issue 10).
"""

from __future__ import annotations

import json
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.tables import utcnow

# insert_event: one timeline entry; :detail is JSON text.
INSERT_EVENT: Final = """
INSERT INTO run_events (run_id, step_id, at, kind, detail)
VALUES (:run_id, :step_id, :at, :kind, CAST(:detail AS jsonb))"""


def record_event(
    session: Session, run_id: int, kind: str, *, step_id: int | None = None, **detail: Any
) -> None:
    """Append one entry to the run's timeline, now, in the caller's transaction; `detail` must
    be JSON-serializable (`TypeError` otherwise)."""
    params = {"run_id": run_id, "step_id": step_id, "at": utcnow(), "kind": kind}
    sql.execute(session, INSERT_EVENT, {**params, "detail": json.dumps(detail)})
