"""The embedded Postgres' shared_buffers: a quarter of RAM within bounds, written once."""

from __future__ import annotations

from pathlib import Path

from ops import postgres_tuning

GIB = 2**30


def test_a_quarter_of_ram_within_bounds() -> None:
    assert postgres_tuning.shared_buffers_mb(24 * GIB) == 6144
    assert postgres_tuning.shared_buffers_mb(256 * 2**20) == 128  # initdb's default as a floor
    assert postgres_tuning.shared_buffers_mb(256 * GIB) == 8192


def test_the_block_is_appended_once(tmp_path: Path) -> None:
    conf = tmp_path / "postgresql.conf"
    conf.write_text("max_connections = 100\n")
    assert postgres_tuning.tune(tmp_path, ram_bytes=8 * GIB)
    assert not postgres_tuning.tune(tmp_path, ram_bytes=16 * GIB)
    text = conf.read_text()
    assert text.startswith("max_connections = 100\n")
    assert text.count("shared_buffers") == 1 and "shared_buffers = 2048MB" in text
