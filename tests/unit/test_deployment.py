"""`agentq worker|scheduler|api` (ops/deployment_commands.py), the command lines they share with
`agentq up` (ops/deployment.py), `--listen`'s URLs and pg_hba.conf (ops/listen.py), and the
broker's per-transport options (models/engine/queue.py). No services: `os.execve` is caught."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from typer.testing import CliRunner

from models.db import check_reachable
from models.engine.queue import celery_config, transport_options
from models.errors import ConfigurationError, DatabaseUnavailable
from models.settings import Settings, get_settings
from ops import cli
from ops.listen import Listen, env_text, hba_text, other_machines_text, remote_urls
from tests.support.net import free_port

URLS = {
    "AGENTQ_DATABASE_URL": "postgresql://agentq:pw@db.internal:5432/agentq",
    "AGENTQ_BROKER_URL": "amqp://agentq:pw@mq.internal:5672/agentq",
}


def run_cli(
    args: list[str], env: dict[str, str], *, reachable: bool = True
) -> tuple[Any, mock.MagicMock]:
    """The CLI with `env` alone, as a new process would read it (no settings cached by an earlier
    test), `os.execve` and `os.chdir` caught; the database check (`models.db.check_reachable`)
    passes unless not `reachable`, when it connects for real."""
    get_settings.cache_clear()
    with (
        mock.patch.dict(os.environ, {"PATH": os.environ.get("PATH", ""), **env}, clear=True),
        mock.patch("ops.deployment_commands.os.execve") as execve,
        mock.patch("ops.deployment_commands.os.chdir") as chdir,
        mock.patch("models.db.check_reachable") if reachable else contextlib.nullcontext(),
    ):
        result = CliRunner().invoke(cli.app, args)
    get_settings.cache_clear()  # what the CLI read from `env` is not the next test's
    if execve.called:
        chdir.assert_called_once_with("/")
    return result, execve


@pytest.mark.parametrize("command", ["worker", "scheduler", "sender", "api"])
@pytest.mark.parametrize("missing", ["AGENTQ_DATABASE_URL", "AGENTQ_BROKER_URL"])
def test_refuses_without_a_url_and_names_it(command: str, missing: str, tmp_path: Path) -> None:
    env = {k: v for k, v in URLS.items() if k != missing} | {"AGENTQ_HOME": str(tmp_path)}
    result, execve = run_cli([command], env)
    assert not execve.called
    assert isinstance(result.exception, Exception) and missing in str(result.exception)
    assert "embedded" in str(result.exception)


def test_refuses_another_scheme_and_names_the_allowed(tmp_path: Path) -> None:
    env = {**URLS, "AGENTQ_BROKER_URL": "sqs://x", "AGENTQ_HOME": str(tmp_path)}
    result, execve = run_cli(["worker"], env)
    assert not execve.called
    said = str(result.exception)
    assert isinstance(result.exception, ConfigurationError), result.exception
    assert "AGENTQ_BROKER_URL or BROKER_URL: must start with redis://, rediss://, amqp://" in said
    assert "sqs" not in said  # the URL is never shown: it may hold a password


@pytest.mark.parametrize("command", ["worker", "scheduler", "sender", "api"])
@pytest.mark.parametrize(
    ("variable", "value"), [("AGENTQ_DATABASE_POOLER", "yes"), ("AGENTQ_FAIR_SLICE_S", "-1")]
)
def test_an_invalid_setting_is_one_line_naming_the_variable(
    command: str, variable: str, value: str, tmp_path: Path
) -> None:
    """The deployment commands read settings as every other command does: a bad value is a
    `ConfigurationError` naming the variable (one red line, exit 2 in `cli.main`), no traceback."""
    env = {**URLS, "AGENTQ_HOME": str(tmp_path), variable: value}
    result, execve = run_cli([command], env)
    assert not execve.called
    assert isinstance(result.exception, ConfigurationError), result.exception
    assert str(result.exception).startswith(f"invalid settings: {variable}: ")


@pytest.mark.parametrize("command", ["worker", "scheduler", "sender", "api"])
def test_an_unreachable_database_is_one_line_naming_the_variable(
    command: str, tmp_path: Path
) -> None:
    """Before Celery or uvicorn runs: the worker's import of a database it could not reach was
    Celery's 180-line "Unable to load celery application" with the driver's tracebacks."""
    database = f"postgresql://agentq:s3cret-pw@127.0.0.1:{free_port()}/agentq"  # nothing there
    env = {**URLS, "AGENTQ_DATABASE_URL": database, "AGENTQ_HOME": str(tmp_path)}
    result, execve = run_cli([command], env, reachable=False)
    assert not execve.called
    assert isinstance(result.exception, DatabaseUnavailable), result.exception
    said = str(result.exception)
    assert said == "cannot reach the database at AGENTQ_DATABASE_URL (connection refused)", said


def test_migrate_on_an_unreachable_database_is_one_line_and_migrates_nothing(
    tmp_path: Path,
) -> None:
    database = f"postgresql://agentq:s3cret-pw@127.0.0.1:{free_port()}/agentq"  # nothing there
    env = {**URLS, "AGENTQ_DATABASE_URL": database, "AGENTQ_HOME": str(tmp_path)}
    with mock.patch("models.migrate.upgrade") as upgrade:
        result, _ = run_cli(["migrate"], env, reachable=False)
    assert not upgrade.called
    assert isinstance(result.exception, DatabaseUnavailable), result.exception
    assert str(result.exception) == (
        "cannot reach the database at AGENTQ_DATABASE_URL (connection refused)"
    )


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("postgresql://u:pw@127.0.0.1:port/x", "Port could not be cast to integer value as 'port'"),
        ("postgresql://u:p w@127.0.0.1/x", 'unexpected spaces found in "***"'),
        ("postgresql://u:pw%40x@127.0.0.1/x?nope=1", 'invalid URI query parameter: "nope"'),
    ],
)
def test_an_unreadable_database_url_is_named_and_its_password_masked(url: str, said: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        check_reachable(url, named="AGENTQ_DATABASE_URL")
    message = str(refused.value)
    assert message.startswith("AGENTQ_DATABASE_URL: not a URL the driver can read (")
    assert said in message and "p w" not in message and "pw" not in message, message


def test_worker_execs_the_celery_worker_with_the_urls(tmp_path: Path) -> None:
    env = {**URLS, "AGENTQ_HOME": str(tmp_path), "BROKER_URL": "redis://elsewhere"}
    result, execve = run_cli(["worker", "--concurrency", "3", "--name", "w2@%h"], env)
    assert result.exit_code == 0, result.output
    path, argv, child_env = execve.call_args.args
    assert path == sys.executable == argv[0]
    assert argv[1:] == [
        *("-P", "-m", "celery", "-A", "worker.app", "worker", "-Q", "steps,memory"),
        *("-c", "3", "-n", "w2@%h", "--pool", "prefork", "-l", "INFO"),
    ]
    assert child_env["AGENTQ_DATABASE_URL"] == URLS["AGENTQ_DATABASE_URL"]
    assert child_env["AGENTQ_BROKER_URL"] == URLS["AGENTQ_BROKER_URL"]
    assert child_env["BROKER_URL"] == ""  # Celery's own variable cannot move the broker


def test_scheduler_runs_beat_with_its_state_in_home(tmp_path: Path) -> None:
    result, execve = run_cli(["scheduler"], {**URLS, "AGENTQ_HOME": str(tmp_path / "h")})
    assert result.exit_code == 0, result.output
    argv = execve.call_args.args[1]
    assert argv[argv.index("-Q") + 1] == "coordinator" and argv[argv.index("-c") + 1] == "1"
    assert argv[-3:] == ["-B", "-s", str(tmp_path / "h" / "celerybeat-schedule")]
    assert (tmp_path / "h").is_dir()
    result, execve = run_cli(["scheduler", "--no-beat"], {**URLS, "AGENTQ_HOME": str(tmp_path)})
    assert "-B" not in execve.call_args.args[1]


def test_sender_consumes_the_webhooks_queue_alone(tmp_path: Path) -> None:
    result, execve = run_cli(["sender"], {**URLS, "AGENTQ_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    argv = execve.call_args.args[1]
    assert argv[3:8] == ["celery", "-A", "scheduler.sender", "worker", "-Q"]
    assert argv[argv.index("-Q") + 1] == "webhooks" and "-B" not in argv
    assert argv[argv.index("-n") + 1] == "webhooks@%h"


def test_api_execs_uvicorn_on_the_given_address(tmp_path: Path) -> None:
    env = {**URLS, "AGENTQ_HOME": str(tmp_path), "AGENTQ_API_PORT": "9000"}
    result, execve = run_cli(["api", "--host", "0.0.0.0"], env)
    assert result.exit_code == 0, result.output
    argv = execve.call_args.args[1]
    assert argv[3:6] == ["uvicorn", "api.app:create_app", "--factory"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0" and argv[argv.index("--port") + 1] == "9000"


def test_remote_urls_quote_the_passwords_and_name_the_host() -> None:
    urls = remote_urls(Listen("10.0.0.5", 15432, 16379), "p/w+", "r@s")
    assert urls == {
        "AGENTQ_DATABASE_URL": "postgresql://agentq:p%2Fw%2B@10.0.0.5:15432/postgres",
        "AGENTQ_BROKER_URL": "redis://:r%40s@10.0.0.5:16379/0",
    }
    assert "[fd00::5]:5432" in remote_urls(Listen("fd00::5"), "a", "b")["AGENTQ_DATABASE_URL"]
    with mock.patch("ops.listen.socket.getfqdn", return_value="box.lan"):
        assert "@box.lan:6379" in remote_urls(Listen("0.0.0.0"), "a", "b")["AGENTQ_BROKER_URL"]


def test_up_prints_the_urls_masked_and_names_the_files(tmp_path: Path) -> None:
    listen = Listen("10.0.0.5", 15432, 16379)
    text = other_machines_text(listen, tmp_path)
    assert "AGENTQ_DATABASE_URL=postgresql://agentq:**@10.0.0.5:15432/postgres\n" in text
    assert "AGENTQ_BROKER_URL=redis://:**@10.0.0.5:16379/0\n" in text
    for name in ("postgres_password", "redis_password", "remote.env"):
        assert str(tmp_path / name) in text
    urls = remote_urls(listen, "p/w+", "r@s")
    assert env_text(urls).splitlines() == [f"{name}={url}" for name, url in urls.items()]


def test_redis_binds_loopback_too_unless_covered() -> None:
    assert Listen("10.0.0.5").redis_bind() == "127.0.0.1 10.0.0.5"
    assert Listen("0.0.0.0").redis_bind() == "0.0.0.0"
    assert Listen("127.0.0.1").redis_bind() == "127.0.0.1"


def test_hba_admits_only_the_remote_role_over_tcp_by_scram() -> None:
    rules = [line.split() for line in hba_text().splitlines() if not line.startswith("#")]
    assert ["local", "all", "all", "trust"] in rules
    tcp = [rule for rule in rules if rule[0].startswith("host")]
    assert tcp and all(rule[2] == "agentq" and rule[-1] == "scram-sha-256" for rule in tcp)


def test_transport_options_differ_by_broker() -> None:
    settings = Settings(_env_file=None, broker_url="amqp://guest:guest@127.0.0.1:5672//")
    assert transport_options("amqp://h//", settings) == {"confirm_publish": True}
    redis = transport_options("redis://h:6379/0", settings)
    assert redis["visibility_timeout"] == settings.visibility_timeout_s
    assert celery_config(settings)["broker_transport_options"] == {"confirm_publish": True}
