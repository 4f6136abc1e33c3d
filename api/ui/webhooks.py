"""The webhook delivery log: `/ui/webhooks`, for reviewers and admins (issue 15, part 4).

The subscriptions (`models.operations.webhooks.listed`, as `agentq webhook list` shows them: each
URL, its events and user, and its circuit breaker's state), then the newest deliveries of the outbox
(`models.operations.deliveries.recent`, the query behind `agentq webhook deliveries`), each with its
event, run, URL, status, attempts, the receiver's last HTTP status and the last error, and when the
next attempt is due (a delivery still `pending`); `?status=` shows one status only, an unknown
one is a 400 naming the known ones. Admins see the same as reviewers: URLs without userinfo or
query string (where receivers put passwords and tokens), no secret, no body (a body quotes a
run's goal), and of a receiver's answer only its status code (agentq never keeps its body).
"""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from api.ui.security import reviewer
from api.ui.templating import render
from models.db import session_scope
from models.operations import deliveries, webhooks
from models.operations.webhook_tables import DELIVERY_STATUSES
from models.settings import get_settings
from models.tables import utcnow

DELIVERIES_SHOWN: Final = 100
BAD_REQUEST: Final = 400
router = APIRouter()


@router.get("/webhooks", response_class=HTMLResponse)
def webhooks_page(request: Request, status: str | None = None) -> HTMLResponse:
    """The newest `DELIVERIES_SHOWN` webhook deliveries (in `status`, one of
    `DELIVERY_STATUSES`), newest first. Reviewers and admins; a submitter gets 403."""
    principal = reviewer(request)
    status = status or None  # `?status=` is no filter
    error = None
    if status is not None and status not in DELIVERY_STATUSES:
        error = f"status: {status!r} is not one of {', '.join(DELIVERY_STATUSES)}"
    with session_scope() as session:
        rows = [] if error else deliveries.recent(session, limit=DELIVERIES_SHOWN, status=status)
        subscriptions = webhooks.listed(session, settings=get_settings(), now=utcnow())
    return render(
        request,
        "webhooks.html",
        principal=principal,
        status_code=BAD_REQUEST if error else 200,
        title="Webhook deliveries",
        nav="webhooks",
        rows=rows,
        subscriptions=subscriptions,
        error=error,
        status_filter=status,
        statuses=DELIVERY_STATUSES,
    )
