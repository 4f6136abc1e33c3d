"""The embedded local stack, with real Postgres, Redis and child processes in a temporary dir.

The data dir is not under pytest's `tmp_path`: run as root, Postgres runs as the `pgserver` user,
which must traverse every parent of pgdata, and each new pytest session resets
/tmp/pytest-of-root to 0700, breaking the Postgres of any session still running.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import psutil
import pytest
import redis
import sqlalchemy as sa

from models.errors import StackError
from ops import postgres_tuning
from ops.embedded_redis import ALLOWED_SCRIPTS, PASSWORD_FILE_NAME
from ops.stack import LocalStack, default_data_dir
from ops.stack_file import read_stack_file

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SLEEPER = [sys.executable, "-c", "print('ready.', flush=True); import time; time.sleep(60)"]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="agentq-stack-test-"))
    yield root / "data"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def stack(data_dir: Path) -> Iterator[LocalStack]:
    local = LocalStack(data_dir)
    yield local
    local.stop()


def _query(database_url: str, sql: str) -> object:
    engine = sa.create_engine(database_url)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(sql))
            return result.scalar() if result.returns_rows else None
    finally:
        engine.dispose()


def _port_open(broker_url: str) -> bool:
    port = urlparse(broker_url).port
    assert port is not None
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_services_answer_and_stop_cleanly(stack: LocalStack) -> None:
    database_url, broker_url = stack.start_services()
    assert database_url.startswith("postgresql+psycopg://postgres@/postgres?host=/")
    _query(database_url, "CREATE EXTENSION IF NOT EXISTS vector")
    version = _query(database_url, "SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    assert str(version).startswith("0.8")
    assert redis.Redis.from_url(broker_url).ping() is True
    state = read_stack_file(stack.data_dir)
    assert state is not None
    assert (state["database_url"], state["broker_url"], state["pid"]) == (
        database_url,
        broker_url,
        os.getpid(),
    )

    child = stack.start_process("sleeper", SLEEPER, {"AGENTQ_PROBE": "1"})
    stack.wait_for_log("sleeper", "ready.", timeout_s=10)
    assert os.getpgid(child.pid) == child.pid  # its own process group
    stack.stop()

    assert child.poll() is not None
    assert not _port_open(broker_url)
    assert not (stack.data_dir / "stack.json").exists()
    assert read_stack_file(stack.data_dir) is None
    with pytest.raises(sa.exc.OperationalError):
        _query(database_url, "SELECT 1")
    stack.stop()  # idempotent


def test_data_survives_restart(data_dir: Path) -> None:
    with LocalStack(data_dir) as first:
        database_url, first_broker = first.start_services()
        _query(database_url, "CREATE TABLE kept AS SELECT 7 AS id")
    with LocalStack(data_dir) as second:
        database_url, second_broker = second.start_services()
        assert _query(database_url, "SELECT id FROM kept") == 7
        password = (data_dir / PASSWORD_FILE_NAME).read_text()
        assert urlparse(first_broker).password == urlparse(second_broker).password == password


def test_postgres_gets_a_quarter_of_ram_once_and_keeps_an_operators_edit(data_dir: Path) -> None:
    """shared_buffers is 25% of RAM from the first start (ops/postgres_tuning.py), and an edited
    value survives the next start: the block is written once."""
    wanted = postgres_tuning.shared_buffers_mb(postgres_tuning.physical_ram_bytes())
    with LocalStack(data_dir) as first:
        database_url, _ = first.start_services()
        setting = "SELECT setting::int * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'"
        assert _query(database_url, setting) == wanted
    conf = data_dir / "pgdata" / "postgresql.conf"
    conf.write_text(
        conf.read_text().replace(f"shared_buffers = {wanted}MB", "shared_buffers = 64MB")
    )
    with LocalStack(data_dir) as second:
        database_url, _ = second.start_services()
        assert _query(database_url, "SHOW shared_buffers") == "64MB"
    assert conf.read_text().count(postgres_tuning.MARKER) == 1


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_redis_wants_the_password_and_has_no_admin_commands(stack: LocalStack) -> None:
    _, broker_url = stack.start_services()
    port = urlparse(broker_url).port
    with socket.create_connection(("127.0.0.1", port or 0), timeout=5) as raw:
        raw.sendall(b"PING\r\n")
        assert raw.recv(100).startswith(b"-NOAUTH")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port or 0, password="wrong").ping()
    client = redis.Redis.from_url(broker_url)
    assert client.ping() is True
    for command in (
        ("CONFIG", "SET", "dir", "/tmp"),
        ("MODULE", "LIST"),
        ("SAVE",),
        ("ACL", "LIST"),
    ):
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.execute_command(*command)  # type: ignore[no-untyped-call]
    client.close()
    password = urlparse(broker_url).password
    redis_argv = psutil.Process(stack._children["redis"].popen.pid).cmdline()
    assert password and password not in " ".join(redis_argv)  # `ps` shows it to every user


def _holds_kombus_scripts(broker_url: str) -> bool:
    client = redis.Redis.from_url(broker_url)
    try:
        shas = [hashlib.sha1(script.encode()).hexdigest() for script in ALLOWED_SCRIPTS]
        return all(client.script_exists(*shas))
    finally:
        client.close()


def test_a_redis_started_again_holds_kombus_scripts_again(stack: LocalStack) -> None:
    """Clients may not load scripts (ops/embedded_redis.py), so every start of Redis loads
    kombu's: a worker could not bind its pidbox queue without them."""
    _, broker_url = stack.start_services()
    assert _holds_kombus_scripts(broker_url)
    stack.kill_redis()
    stack.start_redis()
    assert _holds_kombus_scripts(broker_url)
    stack._children["redis"].popen.kill()  # a crash, as `agentq up`'s supervisor sees it
    stack._children["redis"].popen.wait()
    assert stack.restart_dead() == ["redis"]
    assert _holds_kombus_scripts(broker_url)


def test_the_data_dir_is_private(stack: LocalStack) -> None:
    stack.start_services()
    data = stack.data_dir
    postgres = psutil.Process(int((data / "pgdata/postmaster.pid").read_text().split()[0]))
    if os.geteuid() == 0:  # Postgres runs as `pgserver` with our group: it may only traverse
        assert (_mode(data), data.stat().st_gid) == (0o710, postgres.gids().effective)
    else:
        assert _mode(data) == 0o700
    assert _mode(data / "logs") == _mode(data / "redis") == 0o700
    private = ["stack.json", "stack.lock", PASSWORD_FILE_NAME, "redis/redis.conf", "logs/redis.log"]
    assert {name: _mode(data / name) for name in private} == dict.fromkeys(private, 0o600)


def test_an_older_wide_data_dir_is_narrowed_at_start(data_dir: Path) -> None:
    (data_dir / "logs").mkdir(parents=True)
    for path in (data_dir, data_dir / "logs"):
        path.chmod(0o755)
    for name in ("logs/worker.log", "celerybeat-schedule", "stack.lock"):
        (data_dir / name).write_text("")
        (data_dir / name).chmod(0o644)
    with LocalStack(data_dir) as local:
        local.start_services()
        assert _mode(data_dir) & 0o077 in (0, 0o010)  # 0700, or 0710 as root (see above)
        assert _mode(data_dir / "logs") == 0o700
        for name in ("logs/worker.log", "celerybeat-schedule", "stack.lock"):
            assert _mode(data_dir / name) == 0o600, name


def test_children_create_private_files(stack: LocalStack, data_dir: Path) -> None:
    made = data_dir.parent / "made-by-child"
    code = f"open({str(made)!r}, 'w').close(); print('ready.', flush=True)"
    stack.start_process("maker", [sys.executable, "-c", code], {})
    stack.wait_for_log("maker", "ready.", timeout_s=10)
    assert _mode(made) == 0o600  # umask 077, though this process's umask is wider
    assert _mode(stack.log_path("maker")) == 0o600


def test_second_stack_on_same_dir_is_refused(stack: LocalStack, data_dir: Path) -> None:
    stack.start_services()
    with pytest.raises(StackError, match=rf"already running on .* \(pid {os.getpid()}\)"):
        LocalStack(data_dir).start_services()
    assert read_stack_file(stack.data_dir) is not None  # the refused start removed nothing


def test_stale_stack_file_is_ignored(data_dir: Path) -> None:
    data = data_dir
    data.mkdir()
    dead = psutil.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = {"database_url": "x", "broker_url": "y", "pid": dead.pid, "started_at": "2020-01-01"}
    (data / "stack.json").write_text(json.dumps(stale))
    assert read_stack_file(data) is None
    with LocalStack(data) as local:
        local.start_services()
        assert read_stack_file(data) is not None


CRASHING_UP = """
import sys, time
from pathlib import Path
from ops.stack import LocalStack
stack = LocalStack(Path(sys.argv[1]))
stack.start_services()
child = stack.start_process("sleeper", sys.argv[2:], {})
stack.wait_for_log("sleeper", "ready.", timeout_s=10)
print(child.pid, stack._children["redis"].popen.pid, flush=True)
time.sleep(60)
"""


def test_a_crashed_stack_leaves_no_ghosts_and_its_postgres_is_adopted(data_dir: Path) -> None:
    data = data_dir
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", CRASHING_UP, str(data), *SLEEPER]
    with psutil.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) as up:
        assert up.stdout is not None
        pids = [psutil.Process(int(pid)) for pid in up.stdout.readline().split()]
        orphan_postgres = psutil.Process(
            int((data / "pgdata/postmaster.pid").read_text().split()[0])
        )
        up.kill()
    _gone, alive = psutil.wait_procs(pids, timeout=10)
    assert alive == []  # the sleeper and Redis got SIGTERM when their parent died
    assert read_stack_file(data) is None
    with LocalStack(data) as again:
        assert _query(again.start_services()[0], "SELECT pg_backend_pid()") is not None
        assert orphan_postgres.is_running()  # adopted, not replaced
    orphan_postgres.wait(timeout=10)  # and stopped with the new stack


def test_wait_for_log_reports_an_exited_process(stack: LocalStack) -> None:
    argv = [sys.executable, "-c", "print('boom', flush=True); raise SystemExit(3)"]
    stack.start_process("crasher", argv, {})
    with pytest.raises(StackError, match=r"(?s)exited with code 3.*boom"):
        stack.wait_for_log("crasher", "ready.", timeout_s=10)


def test_wait_for_log_ignores_earlier_runs(stack: LocalStack) -> None:
    stack.log_path("quiet").parent.mkdir(parents=True)
    stack.log_path("quiet").write_text("ready.\n")  # left by a previous run
    stack.start_process("quiet", [sys.executable, "-c", "import time; time.sleep(60)"], {})
    with pytest.raises(StackError, match=r"did not log 'ready\.' within 0\.5 s"):
        stack.wait_for_log("quiet", "ready.", timeout_s=0.5)


def test_stop_kills_a_child_that_ignores_sigterm(stack: LocalStack) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready.', flush=True); time.sleep(60)"
    )
    child = stack.start_process("stubborn", [sys.executable, "-c", code], {})
    stack.wait_for_log("stubborn", "ready.", timeout_s=10)
    started = time.monotonic()
    stack.stop(grace_s=0.5)
    assert child.returncode == -9
    assert time.monotonic() - started < 10


# Like a Celery worker's main process: on SIGTERM it finishes its work (1 s) and exits 0, and it
# has a child of its own (a pool process) that must not be signalled before that.
WARM_MAIN = """
import signal, subprocess, sys, time
from pathlib import Path
marks = Path(sys.argv[1])
def warm_shutdown(signum, frame):
    with marks.open("a") as f:
        f.write("main got SIGTERM\\n")
    time.sleep(1)
    with marks.open("a") as f:
        f.write("main exits\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, warm_shutdown)
pool = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[1]])
print(pool.pid, "ready.", flush=True)
while True:
    time.sleep(60)
"""
POOL_PROCESS = """
import signal, sys, time
from pathlib import Path
def hit(signum, frame):
    with Path(sys.argv[1]).open("a") as f:
        f.write(f"pool got signal {signum}\\n")
    sys.exit(1)
signal.signal(signal.SIGTERM, hit)
signal.signal(signal.SIGINT, hit)
time.sleep(60)
"""


def test_stop_signals_only_the_main_process_and_waits_for_it(
    stack: LocalStack, data_dir: Path
) -> None:
    marks = data_dir.parent / "marks.txt"
    argv = [sys.executable, "-c", WARM_MAIN, str(marks), POOL_PROCESS]
    main = stack.start_process("warm", argv, {})
    stack.wait_for_log("warm", "ready.", timeout_s=10)
    pool = psutil.Process(int(stack.log_path("warm").read_text().split()[0]))
    assert os.getpgid(pool.pid) == main.pid  # in the main process's group, like a pool process

    stack.stop(grace_s=10)

    assert main.returncode == 0
    assert marks.read_text().splitlines() == ["main got SIGTERM", "main exits"]
    assert _dies(pool)  # SIGKILLed with the group once the main process had left


def _dies(proc: psutil.Process, timeout_s: float = 5) -> bool:
    """Whether `proc` is gone, or a zombie (its new parent may never reap it), within timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_restart_dead_starts_exited_children_again(stack: LocalStack) -> None:
    code = (
        "import os, time; print('ready.', os.environ['AGENTQ_PROBE'], flush=True); time.sleep(60)"
    )
    first = stack.start_process("worker", [sys.executable, "-c", code], {"AGENTQ_PROBE": "p1"})
    stack.wait_for_log("worker", "ready.", timeout_s=10)
    assert stack.restart_dead() == []
    assert stack.last_exit_code("worker") is None

    first.kill()
    deadline = time.monotonic() + 10
    while not (restarted := stack.restart_dead()):
        assert time.monotonic() < deadline, "the killed child was not restarted"
        time.sleep(0.05)

    assert restarted == ["worker"]
    assert stack.last_exit_code("worker") == -9
    stack.wait_for_log("worker", "ready. p1", timeout_s=10)  # same argv and env, new log part
    second = stack._children["worker"].popen
    assert second.pid != first.pid and second.poll() is None
    assert stack.restart_dead() == []


def test_celery_argv(stack: LocalStack) -> None:
    argv = stack.celery_argv("worker.app", "steps", concurrency=2, hostname="w1@%h", beat=True)
    assert argv[:4] == [sys.executable, "-P", "-m", "celery"]  # -P: no current dir on sys.path
    assert argv[-3:] == ["-B", "-s", str(stack.data_dir / "celerybeat-schedule")]
    assert "-B" not in stack.celery_argv("a", "q", concurrency=1, hostname="h")


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTQ_HOME", str(tmp_path))
    assert default_data_dir() == tmp_path
    monkeypatch.delenv("AGENTQ_HOME")
    assert default_data_dir() == Path.home() / ".agentq"


def test_wait_for_log_counts_lines(stack: LocalStack) -> None:
    code = "print('warm 1\\nwarm 2', flush=True); import time; time.sleep(60)"
    argv = [sys.executable, "-c", code]
    stack.start_process("pool", argv, {})
    stack.wait_for_log("pool", "warm", timeout_s=10, count=2)
    with pytest.raises(StackError, match=r"did not log 'warm' 3 times within 0\.5 s"):
        stack.wait_for_log("pool", "warm", timeout_s=0.5, count=3)
