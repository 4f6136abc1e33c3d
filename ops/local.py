"""The whole engine on this machine: the embedded services, migrations, worker, scheduler and
webhook sender.

Used by `agentq up`, `agentq demo`, the integration tests and the benchmark, so all of them run
the same processes a deployment runs: `celery -A worker.app worker -Q steps,memory`,
`celery -A scheduler.app worker -Q coordinator -B` and `celery -A scheduler.sender worker -Q
webhooks`. They run in the data dir, never the caller's
directory (ops/stack.py says why), so what `Settings` reads from the caller's `.env` is passed to
them in their environment. The engine counts as started once every pool process of the worker
has loaded its embedding model (`worker.warm`), so no run waits for that.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from dotenv import dotenv_values
from pydantic.fields import FieldInfo

from models.db import session_scope
from models.engine import stack_limits
from models.engine.queue import CELERY_BROKER_VARIABLES
from models.memory.embedding_choice import LOCAL_MODEL, provider_in_use
from models.memory.memory_admin import embedder
from models.memory.reembedding import check_embedding_model
from models.migrate import upgrade
from models.settings import Settings, get_settings, setting_name
from models.settings_variables import field_variables
from ops.deployment import (
    SCHEDULE_FILE_NAME,
    api_argv,
    scheduler_argv,
    sender_argv,
    worker_argv,
)
from ops.listen import Listen
from ops.preflight import check_port_free
from ops.stack import UVICORN_READY, LocalStack

CELERY_READY_TIMEOUT_S = 90.0
# How long the worker's pool processes may take to load the embedding model, together.
WORKER_WARM_TIMEOUT_S = 180.0
WORKER_WARM = "event='worker.warm'"  # what each pool process logs once its embedder is loaded
WORKER_WARM_JSON = '"event": "worker.warm"'  # the same, with AGENTQ_LOG_FORMAT=json
API_READY_TIMEOUT_S = 60.0


def engine_env(
    database_url: str, broker_url: str, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of a child process that connects to this stack: this process's, over
    the settings of the `.env` here (`dotenv_settings`: the child runs in the data dir), with
    AGENTQ_HOME absolute, the stack's URLs, then `extra`. Celery's own broker and backend
    variables (`models.engine.queue.CELERY_BROKER_VARIABLES`: `BROKER_URL`, `CELERY_BROKER_URL`,
    ...) are set empty, which Celery and its command line take as unset: a child uses the stack's
    broker alone, as this process does (issue 11: the workers had joined another)."""
    return {
        **dotenv_settings(os.environ),
        **os.environ,
        **dict.fromkeys(CELERY_BROKER_VARIABLES, ""),
        "AGENTQ_HOME": str(get_settings().home.expanduser().resolve()),
        "AGENTQ_DATABASE_URL": database_url,
        "AGENTQ_BROKER_URL": broker_url,
        **(extra or {}),
    }


def ignored_broker_variables(environ: Mapping[str, str]) -> list[str]:
    """Which of `models.engine.queue.CELERY_BROKER_VARIABLES` `environ` sets: `agentq up` uses its
    own Redis in every process all the same, and says so."""
    return [name for name in CELERY_BROKER_VARIABLES if environ.get(name)]


def dotenv_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """`{variable: value}` of each setting that the `.env` of the current directory gives and
    `environ` does not (under none of its names: `AGENTQ_<NAME>` or its aliases such as
    `DATABASE_URL`), as `Settings` would read them here: the environment wins over `.env`.
    For a child process started elsewhere, which would not find that file."""
    env_file = Settings.model_config.get("env_file")
    if not isinstance(env_file, str | Path) or not Path(env_file).is_file():
        return {}
    found = {k.upper(): v for k, v in dotenv_values(env_file).items() if v is not None}
    present = {name.upper() for name in environ}
    settings: dict[str, str] = {}
    for field, info in Settings.model_fields.items():
        names = _variable_names(field, info)
        if present.isdisjoint(names):
            settings.update((name, found[name]) for name in names if name in found)
    return settings


def _variable_names(field: str, info: FieldInfo) -> set[str]:
    """The environment variables a `Settings` field is read from, upper case."""
    return {name.upper() for name in field_variables(field, info)}


def start_engine(
    data_dir: Path,
    *,
    worker_concurrency: int = 2,
    coordinators: int = 1,
    extra_env: dict[str, str] | None = None,
    loglevel: str = "INFO",
    say: Callable[[str], object] | None = None,
    prepare: Callable[[], object] = lambda: None,
    broker_url: str | None = None,
    listen: Listen | None = None,
    owner: str = "agentq up",
) -> LocalStack:
    """Start Postgres, Redis, run migrations, write the stack's limits (`owner_settings`, set
    by `owner`: `models.engine.stack_limits`), then the worker (on `steps` and `memory`), the
    scheduler (with beat), `coordinators - 1` more coordinator processes (`coordinator-2`,
    ... without beat: one beat per deployment) on the same queue, and the webhook sender
    (`sender`, on `webhooks`); return once all consume and
    each of the worker's `worker_concurrency` pool processes has loaded its embedding model
    (`worker.warm` in its log; not waited for with a `loglevel` above INFO, which hides that
    line). With `broker_url` (a Redis or RabbitMQ elsewhere) that broker is used and no Redis
    is started; with `listen` the services accept TCP from other machines (ops/listen.py), and
    role `agentq` gets its grants once the migrations ran.

    Returns the running `LocalStack` (stop it with `stop()`); this process's environment gets
    `AGENTQ_DATABASE_URL` and `AGENTQ_BROKER_URL` so its own calls reach the same stack, and
    `AGENTQ_METRICS_DIR` (`fresh_metrics_dir`) so its API serves the processes' metrics. When
    the workers load a model in-process (the `local` embedder of this process's settings: 5-45 s,
    torch's import mostly), `say` gets a line as they start and one with the seconds once all
    have it. `prepare` runs after the migrations, before the workers start (`agentq up` and
    `agentq demo` run `check_memory_model` there). Raises
    `StackError` when anything fails to start, after stopping what did start.
    """
    stack = LocalStack(data_dir)
    try:
        database_url, broker_url = stack.start_services(broker_url=broker_url, listen=listen)
        os.environ["AGENTQ_DATABASE_URL"] = database_url
        os.environ["AGENTQ_BROKER_URL"] = broker_url
        os.environ["AGENTQ_METRICS_DIR"] = str(fresh_metrics_dir(data_dir))
        get_settings.cache_clear()  # read again: this process's settings have the stack's URLs
        upgrade(database_url)
        with session_scope() as session:
            by = f"{owner} (pid {os.getpid()})"
            stack_limits.publish(session, owner_settings(extra_env), by=by)
        if listen is not None:
            stack.open_to_other_machines()  # grants per table: after the migrations
        prepare()
        env = engine_env(database_url, broker_url, extra_env)
        loading = _loading_line(worker_concurrency) if say is not None else None
        started = time.monotonic()
        if say is not None and loading:
            say(loading)
        worker = worker_argv(concurrency=worker_concurrency, loglevel=loglevel)
        stack.start_process("worker", worker, env)
        schedule = stack.data_dir / SCHEDULE_FILE_NAME
        stack.start_process("scheduler", scheduler_argv(schedule=schedule, loglevel=loglevel), env)
        extra = [f"coordinator-{n}" for n in range(2, coordinators + 1)]
        for name in extra:
            argv = scheduler_argv(schedule=None, hostname=f"{name}@%h", loglevel=loglevel)
            stack.start_process(name, argv, env)
        stack.start_process("sender", sender_argv(loglevel=loglevel), env)
        for name in ("worker", "scheduler", *extra, "sender"):
            stack.wait_for_log(name, "ready.", CELERY_READY_TIMEOUT_S)
        if logging.getLevelNamesMapping().get(loglevel.upper(), logging.INFO) <= logging.INFO:
            warm = WORKER_WARM_JSON if env.get("AGENTQ_LOG_FORMAT") == "json" else WORKER_WARM
            stack.wait_for_log("worker", warm, WORKER_WARM_TIMEOUT_S, count=worker_concurrency)
            if say is not None and loading:
                say(f"embedding model loaded in {time.monotonic() - started:.1f} s")
    except BaseException:
        stack.stop()
        raise
    return stack


def owner_settings(extra_env: Mapping[str, str] | None) -> Settings:
    """What the stack's processes are told of its limits (`models.engine.stack_limits.LIMITS`): this
    process's settings, with the limits `extra_env` (their environment's additions) sets over
    them. Raises `ConfigurationError` naming the setting for a value it cannot take."""
    extra = extra_env or {}
    given = {
        name: stack_limits.parsed(name, extra[setting_name(name)])
        for name in stack_limits.LIMITS
        if setting_name(name) in extra
    }
    return get_settings().model_copy(update=given)


def fresh_metrics_dir(data_dir: Path) -> Path:
    """`<data_dir>/metrics`, the metrics directory of the stack's processes (whatever
    `AGENTQ_METRICS_DIR` says: the stack owns its data dir, and two stacks never share one),
    emptied of an earlier run's files as prometheus-client's multiprocess mode requires."""
    directory = (data_dir / "metrics").expanduser().resolve()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink(missing_ok=True)
    return directory


def start_api(
    stack: LocalStack, *, host: str, port: int, extra_env: dict[str, str] | None = None
) -> str:
    """Start the HTTP API and web UI (uvicorn, process `api`, restarted by `agentq up` like the
    Celery processes) on `host`:`port` against the running stack; returns its base URL once it
    listens. Raises `StackError` with the end of its log if it does not start (a port in use)."""
    check_port_free(host, port)
    settings = get_settings()
    env = engine_env(settings.database_url or "", settings.broker_url or "", extra_env)
    stack.start_process("api", api_argv(host=host, port=port), env)
    stack.wait_for_log("api", UVICORN_READY, API_READY_TIMEOUT_S)
    return f"http://{host}:{port}"


def _loading_line(worker_concurrency: int) -> str | None:
    """What `start_engine` says while the worker's pool processes load the `local` embedding
    model (`worker.memory.remembering.warm_up`); None for a provider with nothing to load."""
    if provider_in_use(get_settings()) != "local":
        return None
    processes = "process" if worker_concurrency == 1 else f"{worker_concurrency} processes"
    return f"loading the embedding model {LOCAL_MODEL} in the worker's {processes} …"


def check_memory_model() -> None:
    """`models.memory.reembedding.check_embedding_model` with this process's embedder: the check
    each worker makes at start, made before they start, where its `ConfigurationError` is one line
    rather than a worker's traceback in its log. For a stack whose workers have this process's
    settings (no embedding setting in `extra_env`)."""
    with session_scope() as session:
        check_embedding_model(session, embedder())
