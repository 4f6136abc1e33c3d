"""The HTTP API reference page (`docs/reference/http-api.md`): every operation of the OpenAPI
spec the API serves (`api.app.create_api().openapi()`), with its parameters, request body,
responses and who may call it, and the fields of each request body's schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from api.app import create_api
from ops.docs.markdown import cell, code, prose, table

METHODS = ("get", "post", "put", "patch", "delete")


def spec() -> dict[str, Any]:
    """The OpenAPI document the API serves at `/openapi.json`."""
    return create_api().openapi()


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """`(method, path, operation)` of every operation, in the spec's order."""
    for path, item in document["paths"].items():
        for method in METHODS:
            if method in item:
                yield method.upper(), path, item[method]


def schema_name(schema: dict[str, Any]) -> str:
    """A schema as a short type: `RunSubmit`, `integer`, `string | null`, `array of StepOut`."""
    if "$ref" in schema:
        return str(schema["$ref"]).rpartition("/")[2]
    if "anyOf" in schema or "oneOf" in schema:
        return " | ".join(schema_name(s) for s in schema.get("anyOf", schema.get("oneOf", [])))
    if schema.get("type") == "array":
        return f"array of {schema_name(schema.get('items', {}))}"
    if "enum" in schema:
        return "one of " + ", ".join(str(v) for v in schema["enum"])
    return str(schema.get("type", "any"))


def _refs(schema: dict[str, Any]) -> list[str]:
    """The names of the component schemas `schema` is, or is one of (`anyOf`, `oneOf`)."""
    if "$ref" in schema:
        return [str(schema["$ref"]).rpartition("/")[2]]
    return [n for s in schema.get("anyOf", schema.get("oneOf", [])) for n in _refs(s)]


def _body(operation: dict[str, Any]) -> str | None:
    """The request body as Markdown: its schema, linked to its fields below, and media type."""
    content = operation.get("requestBody", {}).get("content", {})
    for media, entry in content.items():
        schema = entry.get("schema", {})
        text = cell(schema_name(schema))
        for name in _refs(schema):
            text = text.replace(name, f"[{name}](#schema-{name})", 1)
        required = "required" if operation["requestBody"].get("required") else "optional"
        return f"{text} ({media}, {required})"
    return None


def _operation(method: str, path: str, operation: dict[str, Any]) -> str:
    auth = "bearer token" if operation.get("security") else "none"
    parts = [
        f"### {method} {path} {{#{operation['operationId']}}}\n",
        f"**{operation.get('summary', '')}** (tag {code(', '.join(operation.get('tags', [])))}; "
        f"auth: {auth})\n",
        prose(operation.get("description", "")) + "\n",
    ]
    params = operation.get("parameters", [])
    if params:
        rows = [
            [
                code(p["name"]),
                p["in"],
                "yes" if p.get("required") else "no",
                cell(schema_name(p.get("schema", {}))),
                cell(p.get("description", "")),
            ]
            for p in params
        ]
        parts.append(table(["parameter", "in", "required", "type", "meaning"], rows))
    body = _body(operation)
    if body:
        parts.append(f"Request body: {body}.\n")
    responses = operation.get("responses", {})
    rows = [
        [code(status), cell(_response(r)), cell(r.get("description", ""))]
        for status, r in responses.items()
    ]
    parts.append(table(["status", "body", "when"], rows))
    return "\n".join(parts)


def _response(response: dict[str, Any]) -> str:
    for entry in response.get("content", {}).values():
        return schema_name(entry.get("schema", {}))
    return "-"


def _schema(name: str, schema: dict[str, Any]) -> str:
    required = set(schema.get("required", []))
    rows = [
        [
            code(field),
            cell(schema_name(s)),
            "yes" if field in required else "no",
            cell(s.get("description", "")),
        ]
        for field, s in schema.get("properties", {}).items()
    ]
    head = f"### {name} {{#schema-{name}}}\n\n{prose(schema.get('description', ''))}\n"
    return head + "\n" + table(["field", "type", "required", "meaning"], rows)


def _request_schemas(document: dict[str, Any]) -> list[str]:
    """The names of the schemas operations take as request bodies, sorted."""
    found = set()
    for _, _, operation in operations(document):
        for entry in operation.get("requestBody", {}).get("content", {}).values():
            found.update(_refs(entry.get("schema", {})))
    return sorted(found)


def render() -> str:
    """The whole page, Markdown."""
    document = spec()
    found = list(operations(document))
    index = [
        [f"[{m} {code(p)}](#{o['operationId']})", cell(o.get("summary", ""))] for m, p, o in found
    ]
    schemas = document.get("components", {}).get("schemas", {})
    parts = [
        "# HTTP API reference\n",
        "Generated from the API's OpenAPI spec (`api.app.create_api().openapi()`) by "
        "`python -m ops.docs.pages` (`ops/docs/api_reference.py`), with the default settings: a "
        "running server serves its own spec at `/openapi.json` (its budget ceilings and enabled "
        "tools are its settings'), and Swagger UI at `/docs` when `AGENTQ_API_DOCS` is set "
        "(for `agentq up`: <http://127.0.0.1:8765/docs>). Request bodies over 1 MiB are refused "
        f"with 413. {len(found)} operations.\n",
        prose(document["info"].get("description", "")) + "\n",
        table(["operation", "summary"], index),
        "## Operations\n",
        *(_operation(m, p, o) for m, p, o in found),
        "## Request bodies\n",
        *(_schema(name, schemas[name]) for name in _request_schemas(document)),
    ]
    return "\n".join(parts)
