"""Where a webhook may go (`models.operations.destinations`) and how the sender connects there
(`scheduler.webhooks.post`): non-public addresses refused unless the operator opts in, at
subscribe and at send; the name resolved once and the connection pinned to that address with
the name in the Host header; URLs shown without userinfo or query string. The sends go over a
real socket to `tests/support/webhook_receiver.py`; only the name lookup is stubbed (a DNS that
answers one address, then another)."""

from __future__ import annotations

import ipaddress
import re
import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from models.errors import InvalidInput
from models.front import commands
from models.operations import destinations
from models.operations.deliveries import Claimed
from models.settings import Settings, get_settings
from scheduler import webhooks as sender
from tests.support.webhook_receiver import Receiver

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SNAPSHOT = {
    "event": "run.finished",
    "occurred_at": NOW.isoformat(),
    "run": {"id": 7, "user_id": "ann", "status": "succeeded", "finished_at": None},
    "escalation": None,
}
REFUSED = {
    "127.0.0.1": "loopback",
    "10.1.2.3": "private (RFC 1918)",
    "172.20.0.1": "private (RFC 1918)",
    "192.168.1.1": "private (RFC 1918)",
    "100.64.0.7": "carrier-grade NAT (100.64.0.0/10, RFC 6598)",
    "0.0.0.0": "'this network' (0.0.0.0/8)",
    "169.254.169.254": "link-local (cloud metadata services live here)",
    "224.0.0.251": "multicast",
    "255.255.255.255": "reserved",
    "::1": "loopback",
    "fd00:ec2::254": "unique local (ULA, RFC 4193)",
    "fe80::1": "link-local",
    "ff02::1": "multicast",
    "::ffff:127.0.0.1": "loopback",  # IPv4-mapped
    "64:ff9b::a9fe:a9fe": "link-local (cloud metadata services live here)",  # NAT64
    "2002:0a00:0001::": "private (RFC 1918)",  # 6to4
    "192.0.2.1": "not public",  # documentation (TEST-NET-1)
}


def test_every_non_public_address_is_refused_and_named() -> None:
    for address, kind in REFUSED.items():
        assert destinations.refusal(ipaddress.ip_address(address)) == kind, address
    for public in ("93.184.215.14", "8.8.8.8", "2606:4700::1111"):
        assert destinations.refusal(ipaddress.ip_address(public)) is None, public


def test_a_url_is_shown_without_its_userinfo_or_query_string() -> None:
    shown = destinations.shown("https://bob:hunter2@hooks.example.com:8443/in?token=abc#x")
    assert shown == "https://***@hooks.example.com:8443/in?…"
    assert destinations.shown("http://127.0.0.1:9/hook") == "http://127.0.0.1:9/hook"


def answers(*addresses: str) -> Any:
    """A stub of `socket.getaddrinfo` whose name answers each of `addresses` in turn (the last
    for ever after), as a rebinding DNS does; IP literals resolve as they are."""
    answered = iter(addresses)
    real = socket.getaddrinfo
    calls: list[str] = []

    def lookup(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            calls.append(host)
            address = next(answered, addresses[-1])
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]
        return real(host, port, *args, **kwargs)

    lookup.calls = calls  # type: ignore[attr-defined]
    return lookup


def test_the_host_is_resolved_once_and_refused_when_any_address_is_not_public() -> None:
    url = "https://hooks.example.com/in"
    found = destinations.resolve(url, allow_private=False, lookup=answers("93.184.215.14"))
    assert (found.address, found.host_header, found.server_name) == (
        "93.184.215.14",
        "hooks.example.com",
        "hooks.example.com",
    )
    assert found.pinned_url == "https://93.184.215.14/in"
    v6 = destinations.resolve("http://u:p@h.example:81/", allow_private=True, lookup=answers("::1"))
    assert v6.pinned_url == "http://u:p@[::1]:81/" and v6.host_header == "h.example:81"
    with pytest.raises(
        InvalidInput, match=re.escape("resolves to 10.0.0.5, a private (RFC 1918) address")
    ):
        destinations.resolve(url, allow_private=False, lookup=answers("10.0.0.5"))


def claimed(url: str) -> Claimed:
    give_up = NOW + timedelta(days=1)
    return Claimed(1, uuid.uuid4(), "run.finished", SNAPSHOT, 1, give_up, 1, url, "whsec_x")


@pytest.fixture
def no_opt_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AGENTQ_WEBHOOK_ALLOW_PRIVATE_NETWORKS", "false")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.mark.usefixtures("no_opt_in")
def test_without_the_opt_in_a_private_receiver_is_refused_at_subscribe_and_at_send() -> None:
    with Receiver() as receiver:
        with pytest.raises(
            InvalidInput, match=re.escape("url: the host '127.0.0.1' resolves to 127.0.0.1")
        ):
            commands.add_webhook(url=receiver.url, events=["run.finished"])
        settings = get_settings()
        with sender.client(settings) as http:
            response = sender.post(http, claimed(receiver.url), settings)
        allowed = Settings(webhook_allow_private_networks=True)
        with sender.client(allowed) as http:
            reached = sender.post(http, claimed(receiver.url), allowed)
    assert response.status_code is None and not response.contacted
    assert response.error is not None and "a loopback address" in response.error
    assert reached.status_code == 200 and len(receiver.requests) == 1  # the refused one: none


def test_a_send_connects_to_the_address_resolved_once_with_the_name_as_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The name answers 127.0.0.1, then (rebinding) an address nothing listens on: the attempt
    reaches the receiver on the first, asking for the name."""
    lookup = answers("127.0.0.1", "10.255.255.1")
    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    settings = Settings(webhook_allow_private_networks=True, webhook_timeout_s=5)
    with Receiver() as receiver:
        url = f"http://hooks.rebind.test:{receiver.port}/hook?token=t"
        with sender.client(settings) as http:
            response = sender.post(http, claimed(url), settings)
    assert response.status_code == 200, response.error
    assert lookup.calls == ["hooks.rebind.test"]
    (request,) = receiver.requests
    assert request.headers["host"] == f"hooks.rebind.test:{receiver.port}"


def test_of_a_receivers_answer_only_its_status_is_kept() -> None:
    settings = Settings(webhook_allow_private_networks=True)
    with Receiver([503]) as receiver, sender.client(settings) as http:
        response = sender.post(http, claimed(receiver.url), settings)
    assert (response.status_code, response.error) == (503, "HTTP 503")  # its body said "no"
