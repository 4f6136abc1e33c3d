"""The Python client covers the whole JSON API: `agentq.routes.OPERATIONS` names a method of
`Client` and `AsyncClient` for every operation of the served spec under `/api/v1`, and names no
operation the spec does not have. What is not the client's: health (`/healthz`, `/readyz`, for
probes), `/metrics` (Prometheus), the spec and docs pages, and the web console (`/ui`, HTML
forms); those are outside `/api/v1`, and the test checks they are all that is."""

from __future__ import annotations

import inspect
from typing import Any, Final

import pytest

from agentq.client import AsyncClient, Client
from agentq.routes import API_PREFIX, OPERATIONS
from api.app import create_app

NOT_THE_CLIENTS: Final = frozenset({"/healthz", "/readyz"})  # in the spec, outside /api/v1


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return create_app().openapi()


def served(spec: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path.removeprefix(API_PREFIX))
        for path, operations in spec["paths"].items()
        if path.startswith(API_PREFIX + "/")
        for method in operations
    }


def test_every_operation_of_the_api_has_a_client_method_and_no_other(
    spec: dict[str, Any],
) -> None:
    assert served(spec) - OPERATIONS.keys() == set(), "operations the client cannot send"
    assert OPERATIONS.keys() - served(spec) == set(), "client routes the API does not have"


def test_the_spec_has_nothing_else_but_health(spec: dict[str, Any]) -> None:
    paths = set(spec["paths"])
    assert {p for p in paths if not p.startswith(API_PREFIX + "/")} == NOT_THE_CLIENTS


@pytest.mark.parametrize("name", sorted(set(OPERATIONS.values())))
def test_both_clients_have_the_method(name: str) -> None:
    assert callable(getattr(Client, name, None)), name
    method = getattr(AsyncClient, name, None)
    assert (
        inspect.iscoroutinefunction(method)
        or inspect.isasyncgenfunction(method)
        or (
            name == "events"  # returns the async iterator of `_stream`
        )
    ), name
