"""Webhook destinations: which addresses a webhook may reach, the receiver's name resolved once
and the connection pinned to that address, and a URL as people are shown it.

A sender that connects wherever a subscribed name points when it sends can be steered into the
deployment's own network (server-side request forgery): the receiver's owner, or whoever
controls its DNS, points the name at 127.0.0.1, at 10.0.0.5, or at the cloud's metadata
service on 169.254.169.254, and agentq posts there from inside (OWASP, "Server-Side Request
Forgery Prevention Cheat Sheet"). So a URL's host is resolved once per attempt (`resolve`);
every address it resolves to must be public (`refusal`: not in `REFUSED_NETWORKS`, and global
as IANA's special-purpose registries say, Python's `ipaddress.is_global`); and the attempt
connects to the first of them (`Destination.pinned_url`), sending the original name in the
Host header and as the TLS server name (SNI, and the name the certificate must match). No
second lookup is made, so a name that answers differently a moment later (DNS rebinding)
cannot move the connection. The check runs at subscribe too, so a mistake is refused at once.
`AGENTQ_WEBHOOK_ALLOW_PRIVATE_NETWORKS` lets an operator opt out (a receiver on their own
network; the test suite's on 127.0.0.1). A name lookup is a network call: never inside a
transaction (DESIGN.md, invariant 11).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import SplitResult, urlsplit, urlunsplit

from models.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Lookup = Callable[..., Sequence[tuple[Any, ...]]]  # socket.getaddrinfo's shape

# Refused unless the operator opts in, each with what it is; anything else not global is
# refused too ("not public"). Sources: RFC 6890 and IANA's special-purpose address registries.
REFUSED_NETWORKS: Final = tuple(
    (ipaddress.ip_network(network), kind)
    for network, kind in (
        ("0.0.0.0/8", "'this network' (0.0.0.0/8)"),
        ("10.0.0.0/8", "private (RFC 1918)"),
        ("100.64.0.0/10", "carrier-grade NAT (100.64.0.0/10, RFC 6598)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local (cloud metadata services live here)"),
        ("172.16.0.0/12", "private (RFC 1918)"),
        ("192.168.0.0/16", "private (RFC 1918)"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fc00::/7", "unique local (ULA, RFC 4193)"),
        ("fe80::/10", "link-local"),
        ("ff00::/8", "multicast"),
    )
)
# IPv6 forms that carry an IPv4 address a connection ends up at: IPv4-mapped (::ffff:0:0/96),
# NAT64's well-known prefix (64:ff9b::/96, RFC 6052) and 6to4 (2002::/16, RFC 3056).
NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
DEFAULT_PORTS: Final = {"http": 80, "https": 443}
REDACTED_USERINFO: Final = "***@"
REDACTED_QUERY: Final = "?…"


@dataclass(frozen=True)
class Destination:
    """Where one attempt connects: `address` (an IP, the first the name resolved to), with
    `host_header` (the URL's host and port as written) and `server_name` (the name TLS checks)."""

    url: str
    address: str
    host_header: str
    server_name: str

    @property
    def tls(self) -> bool:
        """Whether the URL is https (so `server_name` goes in the TLS handshake)."""
        return urlsplit(self.url).scheme == "https"

    @property
    def pinned_url(self) -> str:
        """`url` with its host replaced by `address` (bracketed when IPv6), the rest unchanged."""
        parts = urlsplit(self.url)
        userinfo = parts.netloc.rpartition("@")[0]
        host = f"[{self.address}]" if ":" in self.address else self.address
        netloc = f"{userinfo}@{host}" if userinfo else host
        if parts.port is not None:
            netloc += f":{parts.port}"
        return urlunsplit(parts._replace(netloc=netloc))


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 `address` carries (IPv4-mapped, NAT64, 6to4), else None."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def refusal(address: IPAddress) -> str | None:
    """Why a webhook may not connect to `address` ("loopback", "private (RFC 1918)", ...), or
    None for a public address. An IPv6 address carrying an IPv4 one is judged by both."""
    inner = embedded_ipv4(address)
    if inner is not None and (why := refusal(inner)) is not None:
        return why
    for network, kind in REFUSED_NETWORKS:
        if address.version == network.version and address in network:
            return kind
    return None if address.is_global else "not public"


def host_of(url: str) -> str:
    """The host `url` names (lower case); raises `InvalidInput` for one with none."""
    host = urlsplit(url).hostname
    if not host:
        raise InvalidInput(f"url: {shown(url)!r} names no host")
    return host


def resolve(url: str, *, allow_private: bool, lookup: Lookup | None = None) -> Destination:
    """Resolve `url`'s host once and return where to connect: the first address, when every
    address it resolves to is public (or `allow_private`); `lookup` is `socket.getaddrinfo`
    unless given. Raises `InvalidInput` naming the host: it does not resolve, or one of its
    addresses is refused (`refusal`), and why."""
    parts = urlsplit(url)
    host = host_of(url)
    port = parts.port or DEFAULT_PORTS.get(parts.scheme, 80)
    try:
        found = (lookup or socket.getaddrinfo)(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise InvalidInput(f"url: the host {host!r} does not resolve ({exc})") from exc
    addresses = list(dict.fromkeys(_address(info) for info in found))
    if not addresses:
        raise InvalidInput(f"url: the host {host!r} resolves to no address")
    if not allow_private:
        _check_public(host, addresses)
    return Destination(url, str(addresses[0]), _host_header(parts), _ascii(host))


def _address(info: tuple[Any, ...]) -> IPAddress:
    # getaddrinfo's sockaddr: (address, port) or (address, port, flow, scope); a scoped IPv6
    # address comes as "fe80::1%eth0"
    return ipaddress.ip_address(str(info[4][0]).partition("%")[0])


def _check_public(host: str, addresses: list[IPAddress]) -> None:
    for address in addresses:
        why = refusal(address)
        if why is not None:
            raise InvalidInput(
                f"url: the host {host!r} resolves to {address}, a {why} address; webhooks "
                "go to public addresses only, unless AGENTQ_WEBHOOK_ALLOW_PRIVATE_NETWORKS=true"
            )


def _host_header(parts: SplitResult) -> str:
    """The URL's host and port as written, without userinfo (IDNA-encoded: a header is ASCII)."""
    host = _ascii(parts.hostname or "")
    host = f"[{host}]" if ":" in host else host
    return host if parts.port is None else f"{host}:{parts.port}"


def _ascii(host: str) -> str:
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def shown(url: str) -> str:
    """`url` as agentq shows it anywhere (CLI, console, errors): without its userinfo (a
    password: `https://***@host/path`) and query string (often a token: `...?…`), nor its
    fragment. Whoever runs the stack reads the row itself."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED_USERINFO + netloc.rpartition("@")[2]
    query = REDACTED_QUERY if parts.query else ""
    return urlunsplit(parts._replace(netloc=netloc, query="", fragment="")) + query
