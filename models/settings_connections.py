"""Settings for what every process connects to: the database's and the broker's URLs, and the
check of the other URL settings (`check_http_url`: `AGENTQ_OTLP_ENDPOINT`).

`models.settings.Settings` inherits these fields, so they are read like every other setting
(`AGENTQ_<NAME>`, `.env`, and the conventional `DATABASE_URL` and `BROKER_URL`) and reached as
`settings.<name>`. A URL is checked when the settings are read, by the parser that will use it
(SQLAlchemy's for the database, kombu's for the broker), so a scheme agentq does not run on, a
port that is not a number from 1 to 65535, or a URL that cannot be parsed is one line naming the
variable before anything is written, not a traceback after. The error never shows the URL: it may
hold a password.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings

# SQLAlchemy with psycopg 3 (`models.db.normalize_url` gives the plain schemes that driver).
DATABASE_SCHEMES: Final = ("postgresql", "postgres", "postgresql+psycopg")
# kombu's Redis and RabbitMQ transports (`models.engine.queue.transport_options`).
BROKER_SCHEMES: Final = ("redis", "rediss", "amqp", "amqps", "pyamqp")
PORT_MAX: Final = 65_535
DATABASE_SHAPE: Final = "postgresql://user:password@host:5432/dbname"
BROKER_SHAPE: Final = "redis://:password@host:6379/0"


def url_error(problem: str) -> PydanticCustomError:
    """A refusal of a URL whose message is `problem` alone (no pydantic prefix, no value)."""
    return PydanticCustomError("url", problem)


def _schemes(allowed: tuple[str, ...]) -> str:
    """`a://, b:// or c://`."""
    *others, last = (f"{scheme}://" for scheme in allowed)
    return f"{', '.join(others)} or {last}"


def _unparsed(shape: str) -> PydanticCustomError:
    return url_error(
        f"cannot be parsed as a URL like {shape}: a port must be a number from 1 to {PORT_MAX}, "
        "and special characters in a password (/ ? # @ : [ ]) percent-encoded"
    )


def _check_port(port: int | None) -> None:
    if port is not None and not 1 <= port <= PORT_MAX:
        raise url_error(f"the port must be a number from 1 to {PORT_MAX}")


def blank_is_unset(value: object) -> object:
    """A setting's raw value with a blank string (empty, or spaces only) read as unset (None): an
    `X=` line in a compose file or `.env` means "not set" to the people who write it."""
    return None if isinstance(value, str) and not value.strip() else value


def check_database_url(url: str) -> str:
    """`url` if SQLAlchemy parses it into a Postgres URL of `DATABASE_SCHEMES` with a port from
    1 to 65535 (or none); else raises `PydanticCustomError` saying what is wrong, not the URL."""
    from sqlalchemy.engine import make_url  # SQLAlchemy: only when a URL is set
    from sqlalchemy.exc import ArgumentError

    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in DATABASE_SCHEMES:
        raise url_error(f"must start with {_schemes(DATABASE_SCHEMES)} ({DATABASE_SHAPE})")
    try:
        port = make_url(url).port
    except (ArgumentError, ValueError):  # ValueError: a port that is no number
        raise _unparsed(DATABASE_SHAPE) from None
    _check_port(port)
    return url


def check_broker_url(url: str) -> str:
    """`url` if kombu parses it into a broker URL of `BROKER_SCHEMES` with a port from 1 to
    65535 (or none); else raises `PydanticCustomError` saying what is wrong, not the URL."""
    from kombu.utils.url import parse_url  # kombu: only when a URL is set

    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in BROKER_SCHEMES:
        raise url_error(f"must start with {_schemes(BROKER_SCHEMES)} ({BROKER_SHAPE})")
    try:
        port = parse_url(url)["port"]
    except ValueError:  # a port that is no number or out of range, an unclosed [
        raise _unparsed(BROKER_SHAPE) from None
    _check_port(port)
    return url


def check_http_url(url: str, example: str = "http://collector:4318") -> str:
    """`url` if it is an http:// or https:// URL that names a host, with a port from 1 to 65535
    (or none); else raises `PydanticCustomError` saying what is wrong (with `example`), not the
    URL."""
    shape = f"an http:// or https:// URL with a host, such as {example}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is no number or out of range, an unclosed [
        raise url_error(f"must be {shape} (a port from 1 to {PORT_MAX})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise url_error(f"must be {shape}")
    _check_port(port)
    return url


class ConnectionSettings(BaseSettings):
    """Fields of `Settings` for the database and the broker."""

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("AGENTQ_DATABASE_URL", "DATABASE_URL"),
        description="SQLAlchemy URL of Postgres with pgvector (postgresql://, postgres:// or "
        "postgresql+psycopg://); unset: the embedded server.",
    )
    broker_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("AGENTQ_BROKER_URL", "BROKER_URL"),
        description="Celery broker URL (redis://, rediss://, amqp://, amqps:// or pyamqp://); "
        "unset: the embedded Redis.",
    )

    @field_validator("database_url", "broker_url", mode="before")
    @classmethod
    def _blank_url_is_unset(cls, value: object) -> object:
        return blank_is_unset(value)

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, url: str | None) -> str | None:
        return None if url is None else check_database_url(url)

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, url: str | None) -> str | None:
        return None if url is None else check_broker_url(url)
