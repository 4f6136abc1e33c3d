"""The embedded Postgres' memory setting, written into its `postgresql.conf` once.

initdb leaves `shared_buffers` at 128 MB. PostgreSQL's documentation (server configuration,
"Resource Consumption", shared_buffers): "If you have a dedicated database server with 1GB or
more of RAM, a reasonable starting value for shared_buffers is 25% of the memory in your
system", and more than 40% is unlikely to help. At 128 MB, memory recall over 1M facts (a 4 GB
table and a 1.9 GB HNSW index) reads most pages from the kernel's page cache rather than from
Postgres' own: at 100,000 facts, `facts.recall()` p50 fell from 22 to 14 ms with 4 GB
(`ops/bench/memory_scale.py`). Linux gives the shared memory pages as they are first touched, so
a large setting costs nothing until the data is there.

The block is appended once, after initdb and before the first start; an existing data dir
without it gets it at its next start. After that the file is the operator's: edit the line to
change it (it takes effect at the next `agentq up`).
"""

from __future__ import annotations

import os
from pathlib import Path

MARKER = "# agentq: ops/postgres_tuning.py"
RAM_SHARE = 0.25  # PostgreSQL docs, shared_buffers: 25% of the memory
MIN_MB, MAX_MB = 128, 8192  # initdb's default; a laptop-friendly ceiling


def shared_buffers_mb(ram_bytes: int) -> int:
    """A quarter of `ram_bytes` in MB, within 128..8,192."""
    return max(MIN_MB, min(MAX_MB, int(ram_bytes * RAM_SHARE) // 2**20))


def physical_ram_bytes() -> int:
    """This machine's physical memory (Unix `sysconf`)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def tune(pgdata: Path, ram_bytes: int | None = None) -> bool:
    """Append the block to `pgdata/postgresql.conf` unless it holds it already; whether it did.
    The file keeps its owner and mode (as root, Postgres runs as another user). Raises
    `OSError` if the file cannot be read or written."""
    conf = pgdata / "postgresql.conf"
    if MARKER in conf.read_text(encoding="utf-8"):
        return False
    mb = shared_buffers_mb(physical_ram_bytes() if ram_bytes is None else ram_bytes)
    with conf.open("a", encoding="utf-8") as out:
        out.write(f"\n{MARKER} (25% of RAM, at most {MAX_MB} MB)\nshared_buffers = {mb}MB\n")
    return True
