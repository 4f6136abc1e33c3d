"""Issue 9, a user test of `agentq up` on a shared machine: two local attacks, both closed.

Before: `agentq up` started its children with `python -m celery ...` and `python -m uvicorn ...`,
and `-m` (and Celery's `-A`, and uvicorn's `--app-dir`) put the directory `agentq up` was
started from first on `sys.path`: a `worker/__init__.py` there ran in the worker and API
processes. And a data directory owned by another user was accepted (its mode narrowed, its owner
kept), so that user could swap `stack.json` (every CLI command then used their database URL) or
`redis/redis.conf`. Now the children start in the data directory with `python -P`, a data
directory (or anything in it, or a parent others may write) that another user owns is refused,
and the CLI refuses a `stack.json` it did not write itself.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import engine_dir
from tests.support.console import AGENTQ, UP_TIMEOUT_S, Console, _env, wait_for_status

pytestmark = pytest.mark.security

# Named like agentq's packages and the modules the children are started with (`-m celery`).
SHADOWS = (
    *("worker/__init__.py", "api/__init__.py", "scheduler/__init__.py", "models/__init__.py"),
    *("celery.py", "uvicorn.py", "kombu.py"),
)
REFUSAL_TIMEOUT_S = 60  # a refusal comes before anything starts; a stack that starts runs on


@pytest.fixture
def home() -> Iterator[Path]:
    yield from engine_dir()


def _stranger() -> pwd.struct_passwd:
    """The user another user's files belong to in these tests."""
    return pwd.getpwnam("nobody")


def _owned_by_stranger(path: Path) -> str:
    """Give `path` to another user (`nobody`); returns the name agentq must name. Only root may
    give a file away: unprivileged, the test is skipped (CI runs as root; the rule itself is
    checked without root by tests/unit/test_data_dir.py's `..._seen_by_another_uid`)."""
    if os.geteuid() != 0:
        pytest.skip("handing a file to another user needs root")
    stranger = _stranger()
    os.chown(path, stranger.pw_uid, stranger.pw_gid)
    return stranger.pw_name


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # as Ctrl-C stops it
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- 1: `agentq up` runs nothing from the directory it is started in --------------------------


def _plant(directory: Path, marker: Path) -> None:
    """Modules named like agentq's packages and its children's `-m` modules, each of which
    appends its name to `marker` when imported."""
    for name in SHADOWS:
        module = directory / name
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n")


def _wait_until_up(log: Path, proc: subprocess.Popen[bytes], marker: Path) -> str:
    deadline = time.monotonic() + UP_TIMEOUT_S
    while "agentq is up" not in (text := log.read_text(errors="replace")):
        assert not marker.exists(), f"imported from the start dir: {marker.read_text()}\n{text}"
        assert proc.poll() is None and time.monotonic() < deadline, f"not up:\n{text}"
        time.sleep(0.2)
    return text


def test_up_imports_nothing_from_the_directory_it_is_started_in(home: Path, tmp_path: Path) -> None:
    start_dir, marker = tmp_path / "checkout", tmp_path / "PWNED"
    _plant(start_dir, marker)
    env, log = _env(home), home / "up.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [AGENTQ, "up"], env=env, cwd=start_dir, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        _wait_until_up(log, proc, marker)
        plan = start_dir / "plan.json"
        plan.write_text(json.dumps({"steps": [{"name": "a", "kind": "tool", "tool": "noop"}]}))
        submitted = subprocess.run(
            [AGENTQ, "run", "submit", "from a checkout", "--user", "cwd", "--plan", str(plan)],
            env=env,
            cwd=start_dir,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        stack = json.loads((home / "stack.json").read_text())
        console = Console(home, "", stack["database_url"], env)
        run_id = int(submitted.stdout.split("run ")[1].split()[0])
        assert wait_for_status(console, run_id, ("succeeded",)).status == "succeeded"
    finally:
        _stop(proc)
    assert not marker.exists(), f"imported from the start dir: {marker.read_text()}"


# -- 2: a data directory another user owns is refused -----------------------------------------


def _refused_up(home: Path) -> subprocess.CompletedProcess[str]:
    """`agentq up` on `home`, expected to refuse at once; a stack that starts is stopped."""
    with subprocess.Popen(
        [AGENTQ, "up"],
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=REFUSAL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
            pytest.fail(f"agentq up accepted {home} and ran:\n{out}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def test_up_refuses_a_data_dir_another_user_owns(home: Path) -> None:
    """The user test: `nobody` makes a world-writable dir, root runs agentq up on it."""
    shared = home / "aqhome"
    shared.mkdir()
    shared.chmod(0o777)
    owner = _owned_by_stranger(shared)
    done = _refused_up(shared)
    assert done.returncode == 2, done.stdout
    text = " ".join(done.stdout.split())  # rich wraps long lines
    assert "AGENTQ_HOME" in text and f"owned by {owner}" in text, text
    assert list(shared.iterdir()) == []  # nothing written into it
    assert (shared.stat().st_uid, shared.stat().st_mode & 0o777) == (_stranger().pw_uid, 0o777)


@pytest.mark.parametrize("planted", ["redis", "stack.json", "logs"])
def test_up_refuses_what_another_user_put_in_its_data_dir(home: Path, planted: str) -> None:
    """`redis/` (where redis.conf is written, then read by Redis), `stack.json`, `logs/`."""
    path = home / planted
    if planted == "stack.json":
        path.write_text("{}")
    else:
        path.mkdir()
    owner = _owned_by_stranger(path)
    done = _refused_up(home)
    assert done.returncode == 2, done.stdout
    text = " ".join(done.stdout.split())
    assert "AGENTQ_HOME" in text and planted in text and f"owned by {owner}" in text, text
    assert not (home / "pgdata").exists()  # refused before anything started


def test_up_refuses_a_data_dir_in_a_parent_others_may_write(home: Path) -> None:
    """Without the sticky bit, any user may rename the data dir away and put theirs there."""
    parent = home / "open"
    parent.mkdir()
    parent.chmod(0o777)
    done = _refused_up(parent / "aqhome")
    assert done.returncode == 2, done.stdout
    text = " ".join(done.stdout.split())
    assert "AGENTQ_HOME" in text and "writable by others" in text, text
    assert list(parent.iterdir()) == []


# -- 3: the CLI trusts only a stack.json its own user wrote -----------------------------------


@pytest.mark.parametrize("how", ["owned by nobody", "mode 0666", "mode 0620"])
def test_cli_refuses_a_stack_json_others_could_have_written(
    console: Console, home: Path, how: str
) -> None:
    """A planted stack.json naming a live stack (the attacker's: here the `console` fixture's)
    would have pointed every agentq command at the attacker's database and broker."""
    planted = home / "stack.json"
    shutil.copyfile(console.home / "stack.json", planted)
    if how == "owned by nobody":
        planted.chmod(0o600)
        _owned_by_stranger(planted)
    else:
        planted.chmod(int(how.removeprefix("mode "), 8))
    done = subprocess.run(
        [AGENTQ, "run", "list"],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    text = " ".join(done.stderr.split())
    assert done.returncode == 2, f"agentq run list used the planted stack.json:\n{done.stdout}"
    assert str(planted) in text and "stack.json" in text, text
    reason = "owned by nobody" if how == "owned by nobody" else "writable by"
    assert reason in text, text
