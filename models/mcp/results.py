"""An MCP tool's answer (`CallToolResult`) as a step's result: JSON, small, and the same shape
for every server.

The shape (`result_dict`), documented in docs/how-to/mcp.md:

    {"content": [<block>, ...], "text": "<the text blocks, joined by newlines>",
     "structured": <the server's structuredContent>}    # "structured" only when sent

A block is one of
- `{"type": "text", "text": "..."}`;
- `{"type": "image" | "audio", "mime_type": "image/png", "bytes": 1234}`: the data itself is
  left out (a step's data is capped, `AGENTQ_STEP_DATA_MAX_BYTES`, and a base64 image is no use
  to a later step's arguments or to a model as text); `bytes` is its decoded size;
- `{"type": "resource", "uri", "mime_type", "text"}` for an embedded text resource, or
  `{"type": "resource", "uri", "mime_type", "bytes"}` for a binary one (its data left out);
- `{"type": "resource_link", "uri", "name", "mime_type", "description"}` (the last two when
  sent);
- `{"type": "<type>"}` for a block of a type this version does not know.

`${steps.NAME.text}` gives a later step the text, `${steps.NAME.structured}` the structured
content. The result's size is checked by `models.plans.tools.Tool.invoke` like any tool's.
"""

from __future__ import annotations

from typing import Any, Final

from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)

ERROR_MAX_CHARS: Final = 500  # of an isError answer's text kept in the step's error


def result_dict(result: CallToolResult) -> dict[str, Any]:
    """`result` as a step's result (the module docstring's shape)."""
    content = [block_dict(block) for block in result.content]
    found: dict[str, Any] = {"content": content, "text": _text(result)}
    if result.structured_content is not None:
        found["structured"] = result.structured_content
    return found


def block_dict(block: Any) -> dict[str, Any]:
    """One content block as the module docstring says."""
    if isinstance(block, TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageContent | AudioContent):
        return {"type": block.type, "mime_type": block.mime_type, "bytes": base64_size(block.data)}
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        found = {"type": "resource", "uri": str(resource.uri), "mime_type": resource.mime_type}
        if isinstance(resource, BlobResourceContents):
            return {**found, "bytes": base64_size(resource.blob)}
        return {**found, "text": resource.text}
    if isinstance(block, ResourceLink):
        link = {"type": "resource_link", "uri": str(block.uri), "name": block.name}
        more = {"mime_type": block.mime_type, "description": block.description}
        return {**link, **{key: value for key, value in more.items() if value is not None}}
    return {"type": str(getattr(block, "type", "unknown"))}


def error_text(result: CallToolResult) -> str:
    """What an `isError` answer says: its text blocks, on one line, at most `ERROR_MAX_CHARS`
    characters ("no detail" when it has none)."""
    text = " ".join(_text(result).split()) or "no detail"
    return text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 3] + "..."


def base64_size(data: str) -> int:
    """The decoded size, bytes, of base64 text `data` (padded or not), without decoding it."""
    digits = len("".join(data.split()).rstrip("="))
    return digits * 3 // 4


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))
