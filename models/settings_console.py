"""Settings for the review console's sessions and the API's own pages (`api.ui`, `api.app`).

`models.settings.Settings` inherits these fields, so they are read like every other setting
(`AGENTQ_<NAME>`, `.env`) and reached as `settings.<name>`. They live here only to keep
`models/settings.py` under 400 lines.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field, SecretStr, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings

from models.settings_connections import blank_is_unset

# An HMAC key shorter than the hash's output "is strongly discouraged" (RFC 2104, section 3); the
# console's is HMAC-SHA256's, 32 bytes. The secret agentq generates when none is set is
# `secrets.token_urlsafe(32)`, 43 characters (`models.private_files.read_or_create_secret`).
UI_SESSION_SECRET_MIN_CHARS: Final = 32
UI_SESSION_SECRET_RULE: Final = (
    f"must be at least {UI_SESSION_SECRET_MIN_CHARS} characters, a long random value (such as "
    "the output of `openssl rand -base64 32`); unset, one is generated into AGENTQ_HOME"
)


class ConsoleSettings(BaseSettings):
    """Fields of `Settings` for the review console and the API's Swagger UI."""

    ui_session_secret: SecretStr | None = Field(
        default=None,
        description="Signs the review console's session cookies, at least "
        f"{UI_SESSION_SECRET_MIN_CHARS} characters; unset: generated once into AGENTQ_HOME.",
    )
    ui_session_max_age_s: int = Field(
        default=12 * 3600, ge=60, description="Review console session lifetime, s."
    )
    ui_cookie_secure: bool = Field(
        default=False, description="Send the review console's cookie over HTTPS only."
    )
    # Console sessions and docs (issue 9: console hardening). 30 minutes: the upper end of the
    # idle timeouts the OWASP Session Management Cheat Sheet gives for low-risk applications
    # (15-30 min); a page's live refresh does not count as activity.
    ui_session_idle_s: int = Field(
        default=1800,
        ge=60,
        le=7 * 86_400,
        description="A console session with no request for this long is signed out, s.",
    )
    api_docs: bool = Field(
        default=False,
        description="Serve Swagger UI at /docs (it loads its script and CSS from a CDN).",
    )

    @field_validator("ui_session_secret", mode="before")
    @classmethod
    def _session_secret(cls, value: object) -> object:
        """Blank is unset; a shorter secret than `UI_SESSION_SECRET_MIN_CHARS` is refused
        (saying how long, never the secret)."""
        value = blank_is_unset(value)
        if isinstance(value, str) and len(value) < UI_SESSION_SECRET_MIN_CHARS:
            raise PydanticCustomError("too_short", UI_SESSION_SECRET_RULE)
        return value
