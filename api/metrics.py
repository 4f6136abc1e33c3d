"""`/metrics`: Prometheus' text exposition of agentq's metrics (`models.operations.metrics_export`).

It takes a reviewer or admin token (`Authorization: Bearer`, which Prometheus sends from its
scrape config's `authorization`): the metrics hold no run's content, but they count every
user's runs, steps and spend, which a submitter, who sees only its own user's runs, may not
read. It is left out of the OpenAPI spec: it answers text, not the JSON API.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from api.auth import Reviewer
from models.operations.metrics_export import exposition
from models.settings import get_settings

router = APIRouter(tags=["metrics"])


@router.get("/metrics", include_in_schema=False)
def metrics(_principal: Reviewer) -> Response:
    """Every metric of the processes sharing `AGENTQ_METRICS_DIR` with this one, and the gauges
    read from the database and the broker at this scrape."""
    body, content_type = exposition(get_settings())
    return Response(content=body, media_type=content_type)
