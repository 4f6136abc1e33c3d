"""Spans as an OTLP/HTTP collector receives them: the protobuf `ExportTraceServiceRequest`
bodies a `tests.support.webhook_receiver.Receiver` kept, decoded with opentelemetry-proto."""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.webhook_receiver import Receiver


@dataclass(frozen=True)
class Span:
    """One exported span: ids in hex (parent "" for a root), name, service, attributes."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    service: str
    attributes: dict[str, object]


def _value(value: AnyValue) -> object:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def decode(body: bytes, encoding: str | None) -> list[Span]:
    """The spans of one request body (gzip-compressed when `encoding` says so)."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(gzip.decompress(body) if encoding == "gzip" else body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    Span(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        name=span.name,
                        service=str(resource.get("service.name")),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                    )
                )
    return spans


def received_spans(receiver: Receiver) -> list[Span]:
    """Every span `receiver` got so far."""
    return [
        span
        for request in list(receiver.requests)
        for span in decode(request.body, request.headers.get("content-encoding"))
    ]


def wait_for_spans(
    receiver: Receiver, done: Callable[[list[Span]], bool], timeout_s: float = 30
) -> list[Span]:
    """The spans received once `done(spans)` holds; AssertionError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not done(spans := received_spans(receiver)):
        names = sorted({span.name for span in spans})
        assert time.monotonic() < deadline, f"spans received so far: {names}"
        time.sleep(0.2)
    return spans
