"""An MCP tool's answer as a step's result (`models.mcp.results`), and what the sessions make of
errors (`models.mcp.sessions.lost`, `describe`): pure functions, no server."""

from __future__ import annotations

import base64
import json

import anyio
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from models.mcp.results import ERROR_MAX_CHARS, base64_size, block_dict, error_text, result_dict
from models.mcp.sessions import describe, lost


def text(value: str) -> TextContent:
    return TextContent(type="text", text=value)


def test_text_and_structured_content() -> None:
    result = CallToolResult(content=[text("a"), text("b")], structuredContent={"total": 4.5})
    found = result_dict(result)
    assert found == {
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "text": "a\nb",
        "structured": {"total": 4.5},
    }
    assert json.loads(json.dumps(found, allow_nan=False)) == found


def test_no_structured_key_when_the_server_sent_none_and_empty_text_without_text_blocks() -> None:
    assert result_dict(CallToolResult(content=[])) == {"content": [], "text": ""}


def test_images_and_audio_keep_their_type_and_size_not_their_data() -> None:
    png = base64.b64encode(b"\x89PNG" + bytes(995)).decode()
    blocks = [
        ImageContent(type="image", data=png, mimeType="image/png"),
        AudioContent(type="audio", data=base64.b64encode(b"RIFF").decode(), mimeType="audio/wav"),
    ]
    assert [block_dict(b) for b in blocks] == [
        {"type": "image", "mime_type": "image/png", "bytes": 999},
        {"type": "audio", "mime_type": "audio/wav", "bytes": 4},
    ]


def test_embedded_resources_and_links() -> None:
    embedded = EmbeddedResource(
        type="resource",
        resource=TextResourceContents(
            uri="file:///notes.md", mimeType="text/markdown", text="# Hi"
        ),
    )
    blob = EmbeddedResource(
        type="resource",
        resource=BlobResourceContents(uri="file:///a.bin", blob=base64.b64encode(b"abc").decode()),
    )
    link = ResourceLink(type="resource_link", uri="file:///big.csv", name="big.csv")
    described = ResourceLink(
        type="resource_link",
        uri="https://x.example/r",
        name="r",
        mimeType="text/csv",
        description="rates",
    )
    assert [block_dict(b) for b in (embedded, blob, link, described)] == [
        {
            "type": "resource",
            "uri": "file:///notes.md",
            "mime_type": "text/markdown",
            "text": "# Hi",
        },
        {"type": "resource", "uri": "file:///a.bin", "mime_type": None, "bytes": 3},
        {"type": "resource_link", "uri": "file:///big.csv", "name": "big.csv"},
        {
            "type": "resource_link",
            "uri": "https://x.example/r",
            "name": "r",
            "mime_type": "text/csv",
            "description": "rates",
        },
    ]


def test_a_block_of_an_unknown_type_keeps_its_type_only() -> None:
    class Future:
        type = "hologram"

    assert block_dict(Future()) == {"type": "hologram"}


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 100, 1001])
def test_base64_size_is_the_decoded_size(size: int) -> None:
    data = base64.b64encode(bytes(size))
    assert base64_size(data.decode()) == size
    assert base64_size(data.decode().rstrip("=")) == size
    wrapped = "\n".join(data.decode()[i : i + 76] for i in range(0, len(data), 76))
    assert base64_size(wrapped) == size


def test_an_error_answer_is_its_text_on_one_line_shortened() -> None:
    assert (
        error_text(CallToolResult(content=[text("no such\nfile")], isError=True)) == "no such file"
    )
    assert error_text(CallToolResult(content=[], isError=True)) == "no detail"
    long = error_text(CallToolResult(content=[text("x" * 2000)], isError=True))
    assert len(long) == ERROR_MAX_CHARS and long.endswith("...")


def test_a_closed_connection_is_lost_a_refusal_is_not() -> None:
    assert lost(MCPError(CONNECTION_CLOSED, "Connection closed"))
    assert not lost(MCPError(INVALID_PARAMS, "bad params"))
    assert lost(ConnectionResetError())
    assert lost(anyio.ClosedResourceError())
    assert lost(ExceptionGroup("transport", [BrokenPipeError(), anyio.EndOfStream()]))
    assert not lost(ExceptionGroup("mixed", [BrokenPipeError(), ValueError()]))
    assert not lost(
        RuntimeError("Tool x has an output schema but did not return structured content")
    )


def test_describe_is_one_line_of_the_first_leaf() -> None:
    group = ExceptionGroup("unhandled errors", [FileNotFoundError(2, "No such file", "/srv/x")])
    assert describe(group) == "[Errno 2] No such file: '/srv/x' (FileNotFoundError)"
    assert describe(RuntimeError("a\n  b")) == "a b (RuntimeError)"
    assert describe(TimeoutError()) == "no detail (TimeoutError)"
    assert len(describe(RuntimeError("y" * 1000))) == 300
