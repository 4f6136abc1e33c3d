"""The operator's approval policy for tool calls (`AGENTQ_TOOL_APPROVALS`, issue 30, item 1).

`models.settings.Settings` inherits the field. Its form and rule are `models.approval_policy`'s;
a value that does not parse is refused at start, naming `AGENTQ_TOOL_APPROVALS.<tool>`.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Final

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings

from models.approval_policy import Policy, parse
from models.errors import InvalidInput


class ApprovalSettings(BaseSettings):
    """Fields of `Settings` for approvals before effects."""

    tool_approvals: dict[str, Any] = Field(
        default_factory=dict,
        description="Which tool calls need a person's approval before they run (JSON object: "
        'tool name or pattern -> "always", "never" or {"when": [{"arg", <comparison>}]}); '
        "unnamed MCP tools need it unless marked readOnlyHint: true.",
    )

    @field_validator("tool_approvals", mode="after")
    @classmethod
    def _policy(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            parse(value, field="AGENTQ_TOOL_APPROVALS")
        except InvalidInput as exc:
            message = str(exc).removeprefix("AGENTQ_TOOL_APPROVALS.")
            raise PydanticCustomError(
                "approval_policy", "{message}", {"message": message}
            ) from None
        return value

    @property
    def approval_policy(self) -> Policy:
        """`tool_approvals`, parsed (`models.approval_policy.parse`) once per value: every tool
        call reads it."""
        if not self.tool_approvals:
            return NO_RULES
        return _parsed(json.dumps(self.tool_approvals, sort_keys=True))


NO_RULES: Final = Policy()  # the default: no tool named (MCP tools still judged by their hints)


@functools.cache
def _parsed(text: str) -> Policy:
    return parse(text, field="AGENTQ_TOOL_APPROVALS")
