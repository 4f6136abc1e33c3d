"""The embedded Postgres's start: a lost `useradd` race is tried again, nothing else is."""

from __future__ import annotations

import subprocess

from ops.embedded_postgres import _lost_useradd_race


def test_only_useradd_refusing_an_existing_user_is_a_lost_race() -> None:
    useradd = ["useradd", "-s", "/bin/bash", "pgserver"]
    assert _lost_useradd_race(subprocess.CalledProcessError(9, useradd))
    assert not _lost_useradd_race(subprocess.CalledProcessError(1, useradd))  # cannot lock
    assert not _lost_useradd_race(subprocess.CalledProcessError(9, ["initdb", "-D", "x"]))
    assert not _lost_useradd_race(OSError("no space left on device"))
