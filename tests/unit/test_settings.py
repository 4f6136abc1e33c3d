"""Settings: defaults satisfy the timeout ladder; a broken ladder is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from models import settings as settings_module
from models.db import database_url
from models.errors import ConfigurationError
from models.settings import Settings, get_settings, read_settings, use_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only this test's variables: the integration tests export a whole stack's settings."""
    import os

    for key in list(os.environ):
        if key.startswith("AGENTQ_") or key in ("DATABASE_URL", "BROKER_URL"):
            monkeypatch.delenv(key)


def test_defaults_hold_the_ladder(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings()
    assert s.model_request_timeout_s * s.model_max_attempts < s.step_time_limit_s
    assert s.step_time_limit_s < s.soft_time_limit_s < s.hard_time_limit_s
    assert s.hard_time_limit_s < s.visibility_timeout_s
    assert 2 * s.heartbeat_s < s.lease_s < s.visibility_timeout_s


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"AGENTQ_MODEL_REQUEST_TIMEOUT_S": "60"}, "AGENTQ_STEP_TIME_LIMIT_S"),
        ({"AGENTQ_SOFT_TIME_LIMIT_S": "200"}, "AGENTQ_HARD_TIME_LIMIT_S"),
        ({"AGENTQ_VISIBILITY_TIMEOUT_S": "100"}, "AGENTQ_VISIBILITY_TIMEOUT_S"),
        ({"AGENTQ_LEASE_S": "5"}, "AGENTQ_LEASE_S"),  # under two heartbeats
        ({"AGENTQ_HEARTBEAT_S": "6"}, "AGENTQ_HEARTBEAT_S"),
    ],
)
def test_broken_ladder_is_refused_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ConfigurationError, match=named):
        Settings()


def test_a_phase_lease_is_not_a_rung_above_the_hard_time_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A phase's claim has a step's lease, renewed by the worker's heartbeat
    (`models.engine.phases`): a visibility timeout just above the hard time limit holds the ladder,
    though it is below the hard limit plus a lease (the phase's claim before it was renewed, 160
    s)."""
    monkeypatch.setenv("AGENTQ_VISIBILITY_TIMEOUT_S", "155")  # hard 150 < 155 < 150 + lease 10
    s = Settings()
    assert s.hard_time_limit_s < s.visibility_timeout_s < s.hard_time_limit_s + s.lease_s


def test_a_visibility_timeout_under_the_hard_time_limit_names_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTQ_VISIBILITY_TIMEOUT_S", "140")
    with pytest.raises(ConfigurationError) as refused:
        Settings()
    assert str(refused.value) == (
        "timeout ladder broken: AGENTQ_HARD_TIME_LIMIT_S (150 s) must be less than "
        "AGENTQ_VISIBILITY_TIMEOUT_S (140 s)"
    )


def test_a_lease_longer_than_the_hard_time_limit_is_not_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lease ladder alone bounds the lease: 2 x heartbeat < lease < visibility timeout."""
    monkeypatch.setenv("AGENTQ_LEASE_S", "3590")  # hard 150 + 3590 > visibility 3600
    assert Settings().lease_s == 3590
    monkeypatch.setenv("AGENTQ_LEASE_S", "3600")
    with pytest.raises(ConfigurationError, match=r"AGENTQ_LEASE_S .* AGENTQ_VISIBILITY_TIMEOUT_S"):
        Settings()


def test_conventional_urls_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://db/x")
    monkeypatch.setenv("BROKER_URL", "redis://r:6379/0")
    s = Settings()
    assert (s.database_url, s.broker_url) == ("postgresql://db/x", "redis://r:6379/0")


def test_unknown_provider_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQ_PROVIDER", "magic")
    with pytest.raises(ValueError, match="provider"):
        Settings()


def test_errors_name_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from models.settings import get_settings

    monkeypatch.setenv("AGENTQ_CONTEXT_WINDOW_TOKENS", "100")
    get_settings.cache_clear()
    try:
        with pytest.raises(
            ConfigurationError,
            match=r"AGENTQ_CONTEXT_WINDOW_TOKENS: Input should be .* \(got '?100'?\)",
        ):
            get_settings()
    finally:
        get_settings.cache_clear()


def test_a_setting_that_is_not_json_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQ_FACT_TTL_S", "{bad")
    get_settings.cache_clear()
    try:
        with pytest.raises(ConfigurationError, match="AGENTQ_FACT_TTL_S: must be a JSON object"):
            get_settings()
    finally:
        monkeypatch.delenv("AGENTQ_FACT_TTL_S")
        get_settings.cache_clear()


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        (
            "AGENTQ_TOOL_MODULES",
            "worker.tools.builtin,my.tools",
            'AGENTQ_TOOL_MODULES: must be a JSON list, such as ["worker.tools.builtin", '
            '"worker.tools.expenses"]',
        ),
        (
            "AGENTQ_PLAN_SUBMIT_ROLES",
            "admin",
            'AGENTQ_PLAN_SUBMIT_ROLES: must be a JSON list, such as ["submitter", "admin"]',
        ),
        (  # a secret: no example, and never the value
            "AGENTQ_WEBHOOK_SECRETS",
            "ops=hunter2",
            "AGENTQ_WEBHOOK_SECRETS: must be a JSON object, as the settings reference shows",
        ),
    ],
)
def test_a_setting_that_is_not_json_is_one_line_saying_what_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, said: str
) -> None:
    """It said `...; error parsing value for field "tool_modules" from source
    "EnvSettingsSource"`: pydantic-settings' words, not the user's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as refused:
        read_settings()
    assert str(refused.value) == f"invalid settings: {said}"


def test_settings_given_by_the_process_win_over_the_environment_and_survive_a_cache_clear(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`use_settings` (the CLI's channel for the running `agentq up`'s URLs, issue 14)."""
    monkeypatch.setattr(settings_module, "_overrides", {})
    monkeypatch.setenv("AGENTQ_DATABASE_URL", "postgresql://from-env/db")
    get_settings.cache_clear()
    try:
        given = use_settings(database_url="postgresql://given/db", broker_url="redis://given:1/0")
        assert given.database_url == "postgresql://given/db"
        get_settings.cache_clear()
        assert get_settings().broker_url == "redis://given:1/0"
        assert database_url() == "postgresql+psycopg://given/db"
    finally:
        get_settings.cache_clear()


def test_a_value_that_may_hold_a_credential_is_never_echoed() -> None:
    """A bad value is shown to help fix it, except a URL's, a key's or a secret's: the error
    reaches logs and terminals (`models.settings_errors.UNSHOWN`)."""
    from pydantic import BaseModel, Field, ValidationError

    from models.settings_errors import describe_settings_error

    class Shaped(BaseModel):
        broker_url: str = Field(pattern="^redis://")
        lease_s: int = Field(ge=1)

    with pytest.raises(ValidationError) as caught:
        Shaped(broker_url="amqp://user:hunter2@mq", lease_s="0")  # type: ignore[arg-type]
    said = describe_settings_error(caught.value)
    assert "hunter2" not in said and "BROKER_URL: String should match" in said
    assert "AGENTQ_LEASE_S: Input should be greater than or equal to 1 (got '0')" in said


@pytest.mark.parametrize("variable", ["DATABASE_URL", "AGENTQ_DATABASE_URL"])
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://app:hunter2@db/app", "must start with postgresql://, postgres:// or"),
        ("hunter2", "must start with postgresql://"),
        ("postgresql://app:hunter2@db:port/app", "cannot be parsed as a URL like postgresql://"),
        ("postgresql://app:hunter2@db:99999/app", "the port must be a number from 1 to 65535"),
        ("postgresql://app:hunter2@db:0/app", "the port must be a number from 1 to 65535"),
        ("postgresql://app:hunter2@[::1/app", "cannot be parsed"),
    ],
)
def test_a_bad_database_url_is_refused_naming_the_variable_never_the_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, url: str, says: str
) -> None:
    """A bad URL was a traceback where it was first used: in `agentq run submit`, after the
    run's row was committed. Now it is refused when the settings are read, in one line."""
    monkeypatch.chdir(tmp_path)  # no `.env`
    monkeypatch.setenv(variable, url)
    monkeypatch.setenv("BROKER_URL", "redis://r:6379/0")
    with pytest.raises(ConfigurationError) as refused:
        read_settings()
    said = str(refused.value)
    assert said.startswith("invalid settings: AGENTQ_DATABASE_URL or DATABASE_URL: "), said
    assert says in said and "hunter2" not in said and "\n" not in said, said
    assert "BROKER_URL" not in said, said  # the broker's URL is good


@pytest.mark.parametrize("variable", ["BROKER_URL", "AGENTQ_BROKER_URL"])
@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            "sqs://key:hunter2@",
            "must start with redis://, rediss://, amqp://, amqps:// or pyamqp://",
        ),
        ("redis://:hunter2@127.0.0.1:99999/0", "cannot be parsed as a URL like redis://"),
        ("redis://:hunter2@127.0.0.1:six/0", "a port must be a number from 1 to 65535"),
        ("amqp://guest:hunter2@mq:0//", "the port must be a number from 1 to 65535"),
        ("redis://:hunter2#x@127.0.0.1:6379/0", "special characters in a password"),
    ],
)
def test_a_bad_broker_url_is_refused_naming_the_variable_never_the_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, url: str, says: str
) -> None:
    monkeypatch.chdir(tmp_path)  # no `.env`
    monkeypatch.setenv(variable, url)
    with pytest.raises(ConfigurationError) as refused:
        read_settings()
    said = str(refused.value)
    assert said.startswith("invalid settings: AGENTQ_BROKER_URL or BROKER_URL: "), said
    assert says in said and "hunter2" not in said, said


@pytest.mark.parametrize(
    ("database", "broker"),
    [
        (
            "postgresql+psycopg://postgres@/postgres?host=/tmp/agentq%20home/pgdata",
            "redis://:p%40ss@127.0.0.1:6379/0",
        ),
        (
            "postgresql://agentq:p%23w@db.internal:5432/agentq",
            "amqp://guest:guest@127.0.0.1:5672//",
        ),
        ("postgres://db/x", "rediss://:pw@cache.example:6380/0"),
        ("postgresql://db/x?sslmode=require", "pyamqp://mq"),
        ("postgresql:///agentq", "amqps://u:p@mq:5671/vhost"),
    ],
)
def test_the_urls_agentq_runs_on_are_accepted(
    monkeypatch: pytest.MonkeyPatch, database: str, broker: str
) -> None:
    """The embedded stack's URLs (`ops.embedded_postgres`, `ops.embedded_redis`), `agentq up
    --listen`'s, and the schemes SQLAlchemy with psycopg and kombu take."""
    monkeypatch.setenv("DATABASE_URL", database)
    monkeypatch.setenv("BROKER_URL", broker)
    s = Settings(_env_file=None)
    assert (s.database_url, s.broker_url) == (database, broker)


def test_every_settings_class_keeps_its_validators_in_settings() -> None:
    """A validator of a class `Settings` inherits is lost when another base has one of the same
    name (pydantic keeps the first in the MRO): each base's must reach `Settings` whole."""
    kept = Settings.__pydantic_decorators__.field_validators
    for base in Settings.__mro__[1:]:
        own = base.__dict__.get("__pydantic_decorators__")
        for name, validator in own.field_validators.items() if own else ():
            assert kept[name].info.fields == validator.info.fields, (base.__name__, name)


@pytest.mark.parametrize(
    "variable",
    [
        "DATABASE_URL",
        "BROKER_URL",
        "OPENAI_API_KEY",
        "AGENTQ_OPENAI_BASE_URL",
        "AGENTQ_UI_SESSION_SECRET",
        "AGENTQ_OTLP_ENDPOINT",
    ],
)
def test_a_blank_value_is_unset(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    monkeypatch.setenv(variable, "  ")
    s = Settings(_env_file=None)
    assert (s.database_url, s.broker_url, s.openai_api_key, s.openai_base_url) == (None,) * 4
    assert s.ui_session_secret is None and s.otlp_endpoint is None


@pytest.mark.parametrize(
    "endpoint",
    [
        "ftp://collector:4318",
        "collector:4318",
        "http://",
        "http://:4318",
        "https://collector:99999",
        "http://collector:otlp",
        "http://[::1:4318",
    ],
)
def test_the_otlp_endpoint_must_be_an_http_url_with_a_host(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, endpoint: str
) -> None:
    """It was only matched against `^https?://`, so `http://` and a port of 99999 passed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTQ_OTLP_ENDPOINT", endpoint)
    with pytest.raises(ConfigurationError) as refused:
        read_settings()
    must = (
        "invalid settings: AGENTQ_OTLP_ENDPOINT: must be an http:// or https:// URL with a host, "
        "such as http://collector:4318"
    )
    assert str(refused.value) in (must, must + " (a port from 1 to 65535)")  # never the URL


@pytest.mark.parametrize(
    "endpoint", ["http://collector:4318", "https://otel.example/", "http://[::1]:4318"]
)
def test_an_otlp_endpoint_with_a_host_is_taken(
    monkeypatch: pytest.MonkeyPatch, endpoint: str
) -> None:
    monkeypatch.setenv("AGENTQ_OTLP_ENDPOINT", endpoint)
    assert Settings(_env_file=None).otlp_endpoint == endpoint


@pytest.mark.parametrize("secret", ["hunter2", "x" * 31])
def test_a_short_console_secret_is_refused_saying_how_long(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, secret: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTQ_UI_SESSION_SECRET", secret)
    with pytest.raises(ConfigurationError) as refused:
        read_settings()
    said = str(refused.value)
    assert said.startswith(
        "invalid settings: AGENTQ_UI_SESSION_SECRET: must be at least 32 characters"
    ), said
    assert secret not in said and "31" not in said  # neither the secret nor its length


def test_a_console_secret_of_32_characters_or_none_signs_the_console(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Unset, the console's secret is generated into AGENTQ_HOME (43 characters), which the
    setting's minimum never sees; a set one of any characters keys the HMAC (UTF-8)."""
    from api.ui.security import ConsoleConfig

    monkeypatch.setenv("AGENTQ_HOME", str(tmp_path))
    generated = ConsoleConfig.from_settings(Settings(_env_file=None)).login_secret
    assert len(generated) >= 32 and (tmp_path / "ui_session_secret").is_file()
    monkeypatch.setenv("AGENTQ_UI_SESSION_SECRET", "é" * 32)
    given = ConsoleConfig.from_settings(Settings(_env_file=None)).login_secret
    assert given == ("é" * 32).encode()
