"""Settings of the programs that act through agentq's HTTP API rather than on its database:
`agentq mcp` (`ops.mcp_server`), which serves agentq to an MCP client with an API token.

`models.settings.Settings` inherits these fields, so they are read like every other setting
(`AGENTQ_<NAME>`, `.env`) and reached as `settings.<name>`.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings

from models.settings_connections import blank_is_unset, check_http_url


class ClientSettings(BaseSettings):
    """Fields of `Settings` for a client of the HTTP API."""

    api_url: str | None = Field(
        default=None,
        description="The HTTP API `agentq mcp` acts through (its base URL, a trailing /api/v1 "
        "allowed); unset: the `agentq up` running on AGENTQ_HOME, else "
        "http://AGENTQ_API_HOST:AGENTQ_API_PORT.",
    )
    api_token: SecretStr | None = Field(
        default=None,
        description="The API token `agentq mcp` acts with (`agentq token create`): its role "
        "decides what the MCP client may do.",
    )

    # Named apart: a validator method of the same name in another base of `Settings` replaces it.
    @field_validator("api_url", "api_token", mode="before")
    @classmethod
    def _blank_client_value_is_unset(cls, value: object) -> object:
        return blank_is_unset(value)

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, url: str | None) -> str | None:
        return None if url is None else check_http_url(url, example="http://127.0.0.1:8765")
