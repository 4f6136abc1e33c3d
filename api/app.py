"""The FastAPI application: the routers under `/api/v1`, health, the OpenAPI spec, the web UI.

Run it with `uvicorn api.app:create_app --factory` (what `agentq up` does, on
`AGENTQ_API_HOST`:`AGENTQ_API_PORT`). It reaches Postgres and the broker with the same settings
as every agentq process (`DATABASE_URL`, `BROKER_URL`).
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import APIRouter, Depends, FastAPI

from api import (
    access_log,
    headers,
    health,
    limits,
    memory,
    metrics,
    procedures,
    reviews,
    run_forks,
    runs,
    schedules,
    streams,
)
from api.auth import AnyPrincipal
from api.errors import REFUSALS, document_validation_errors, install_error_handlers
from api.openapi import state_rules
from api.responses import ErrorOut, PrincipalOut
from models.db import session_scope
from models.engine import stack_limits, tracing
from models.errors import AgentqError
from models.plans.tools import catalog
from models.settings import BUDGET_CEILINGS, Settings, get_settings

API_PREFIX = "/api/v1"
DESCRIPTION = """\
The HTTP API of agentq, a durable plan engine for AI agents.

Every `/api/v1` request needs `Authorization: Bearer <token>` (create one with
`agentq token create --name NAME --role submitter|reviewer|admin [--user USER]`). Submitters
submit, read and cancel their own user's runs and read that user's memory; reviewers read every
run and work the review queue; admins do everything. Refusals are JSON:
`{"detail": "what was wrong and what is allowed", "error": "Kind"}`; a 422 (a body or parameter
of the wrong shape) has FastAPI's list of field errors as its `detail`. Request bodies over
1 MiB are refused with 413.
"""

me_router = APIRouter(tags=["auth"])
log = structlog.get_logger("agentq.api")


class AgentqAPI(FastAPI):
    """FastAPI whose spec documents agentq's 422 body (`api.errors.document_validation_errors`)
    and states every rule the server enforces on a request (`api.openapi.state_rules`)."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            spec = document_validation_errors(super().openapi())
            settings = _stack_settings()
            ceilings = {name: getattr(settings, most) for name, _, most in BUDGET_CEILINGS}
            self.openapi_schema = state_rules(spec, catalog(), ceilings)
        return self.openapi_schema


def _stack_settings() -> Settings:
    """The settings with the stack's limits (`models.engine.stack_limits`): the ceilings the spec
    states are those every submit enforces. With no database to read (a spec built offline),
    this process's own, logged."""
    try:
        with session_scope() as session:
            return stack_limits.effective(session, get_settings())
    except AgentqError as exc:
        log.warning("openapi.own_limits", error=str(exc))
        return get_settings()


@me_router.get("/me", response_model=PrincipalOut, summary="Who this token acts as")
def me(principal: AnyPrincipal) -> PrincipalOut:
    """The token's id, name, role and (for a submitter) user."""
    return PrincipalOut(
        token_id=principal.token_id,
        name=principal.name,
        role=principal.role,
        user_id=principal.user_id,
    )


def create_app() -> FastAPI:
    """The API app: `/api/v1/{runs,reviews,memory,procedures,schedules,me}`, `/healthz`,
    `/readyz`, `/metrics`, `/openapi.json`,
    `/docs` (only with `AGENTQ_API_DOCS`), and the web UI (`api.ui.install`, at `/ui`)."""
    from api.ui import install

    access_log.configure()
    tracing.setup(get_settings(), service="api")
    app = create_api()
    install(app)
    tracing.instrument_app(app)  # a server span per request, when AGENTQ_OTLP_ENDPOINT is set
    return app


def create_api() -> FastAPI:
    """`create_app` without the web UI (which adds nothing to the OpenAPI spec): the JSON API,
    health and the spec alone, with the security headers (`api.headers`).

    Swagger UI at `/docs` is off unless `AGENTQ_API_DOCS` is set: FastAPI's page loads it from a
    CDN (blank offline, and with no Subresource Integrity check; issue 9). Serving its files
    from a wheel (`swagger-ui-bundle`, `fastapi-offline`) would add a dependency and an inline
    script to allow for one page a deployment rarely needs; `/openapi.json` is always served,
    for any OpenAPI viewer."""
    app = AgentqAPI(
        title="agentq",
        version="1",
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url="/docs" if get_settings().api_docs else None,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
    )
    install_error_handlers(app)
    refusals = {code: {"model": ErrorOut, "description": text} for code, text in REFUSALS.items()}
    routers = (
        runs.router,
        run_forks.router,
        reviews.router,
        streams.router,
        memory.router,
        procedures.router,
        schedules.router,  # goals on a schedule (issue 32, item 2)
    )
    for router in (*routers, me_router):
        app.include_router(
            router,
            prefix=API_PREFIX,
            responses=refusals,  # type: ignore[arg-type]
            dependencies=[Depends(limits.query_as_declared)],
        )
    app.include_router(health.router)
    app.include_router(metrics.router)
    limits.install(app)
    access_log.install(app)  # it logs the body limit's refusals too
    headers.install(app)  # the outermost: every answer gets them, refusals included
    return app
