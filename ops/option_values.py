"""Typer callbacks that check one option's value, importable without the database layer (the
`agentq` command tree, and so `agentq --help`, is built from them: issue 15, part 10)."""

from __future__ import annotations

from urllib.parse import urlsplit

import typer

from models.bounds import REPLAN_CHECKS
from models.states import RUN_STATUSES


def not_blank(value: str | None) -> str | None:
    """Typer callback: refuse an empty or all-blank value (None, not given, passes)."""
    if value is not None and not value.strip():
        raise typer.BadParameter("must not be empty")
    return value


def run_status(value: str | None) -> str | None:
    """Typer callback: refuse anything but a run status, naming the allowed ones."""
    if value is not None and value not in RUN_STATUSES:
        raise typer.BadParameter(
            f"{value!r} is not a run status; use one of {', '.join(RUN_STATUSES)}"
        )
    return value


def replan_check_value(value: str | None) -> str | None:
    """Typer callback: refuse anything but a `replan_check` (`models.plans.plan_checks`)."""
    if value is not None and value not in REPLAN_CHECKS:
        raise typer.BadParameter(f"{value!r}: use one of {', '.join(REPLAN_CHECKS)}")
    return value


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")  # the MCP SDK guards these from DNS rebinding


def http_url(value: str | None) -> str | None:
    """Typer callback: refuse anything but an http:// or https:// URL with a host."""
    if value is not None:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise typer.BadParameter(
                f"{value!r} is not an http:// or https:// URL, such as http://127.0.0.1:8765"
            )
    return value


def loopback_address(value: str | None) -> str | None:
    """Typer callback: refuse anything but `HOST:PORT` with a loopback HOST (`LOOPBACK_HOSTS`;
    `[::1]:PORT` for IPv6) and a port from 1 to 65535."""
    if value is not None:
        host_port(value)
    return value


def host_port(value: str) -> tuple[str, int]:
    """`HOST:PORT` as (host, port), checked as `loopback_address` says; raises
    `typer.BadParameter` naming what is wrong."""
    host, sep, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise typer.BadParameter(f"{value!r}: expected HOST:PORT with a port from 1 to 65535")
    if host not in LOOPBACK_HOSTS:
        raise typer.BadParameter(
            f"{host!r}: whoever connects acts with the server's token, so only a loopback "
            f"address is allowed ({', '.join(LOOPBACK_HOSTS)})"
        )
    return host, int(port)
