"""ops/local.py: the environment of the engine's processes, which run in the data dir and so
cannot read the `.env` of the directory `agentq up` was started from themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.engine.queue import CELERY_BROKER_VARIABLES
from models.settings import Settings, get_settings
from ops.local import dotenv_settings, engine_env, ignored_broker_variables

DOTENV = """\
AGENTQ_PROVIDER=openai
agentq_model=small-model
AGENTQ_OPENAI_API_KEY=from-dotenv
AGENTQ_WORKER_CONCURRENCY=3
BROKER_URL=redis://dotenv:6379/0
PYTHONPATH=/somewhere/else
UNRELATED=1
"""


@pytest.fixture
def in_dir_with_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / ".env").write_text(DOTENV)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.usefixtures("in_dir_with_dotenv")
def test_dotenv_settings_are_passed_on_unless_the_environment_sets_them() -> None:
    environ = {"OPENAI_API_KEY": "from-env", "AGENTQ_WORKER_CONCURRENCY": "1", "PATH": "/bin"}
    assert dotenv_settings(environ) == {
        "AGENTQ_PROVIDER": "openai",
        "AGENTQ_MODEL": "small-model",  # any case, as Settings reads it
        "BROKER_URL": "redis://dotenv:6379/0",  # an alias
    }  # the key: the environment's OPENAI_API_KEY wins over the .env's other name for it


def test_no_dotenv_gives_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert dotenv_settings({}) == {}


@pytest.mark.usefixtures("in_dir_with_dotenv")
def test_engine_env_puts_dotenv_under_the_environment_and_the_stack_on_top(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTQ_PROVIDER", "offline")
    monkeypatch.setenv("AGENTQ_HOME", "relative/home")
    get_settings.cache_clear()
    try:
        env = engine_env("postgresql+psycopg://db", "redis://stack:1/0", {"AGENTQ_MODEL": "x"})
    finally:
        get_settings.cache_clear()
    assert env["AGENTQ_PROVIDER"] == "offline"  # the environment wins, as in Settings
    assert (env["AGENTQ_DATABASE_URL"], env["AGENTQ_BROKER_URL"]) == (
        "postgresql+psycopg://db",
        "redis://stack:1/0",
    )
    assert env["AGENTQ_MODEL"] == "x"
    assert env["AGENTQ_HOME"] == str(Path("relative/home").resolve())  # the child runs elsewhere
    assert "UNRELATED" not in env and env.get("PYTHONPATH") != "/somewhere/else"


def test_engine_env_empties_the_variables_celery_would_take_a_broker_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 11: Celery's command line took `BROKER_URL` (and Celery `CELERY_BROKER_URL`) over
    the app's broker, so the workers joined another broker than the CLI and the API."""
    elsewhere = "redis://elsewhere:6379/0"
    for name in ("BROKER_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        monkeypatch.setenv(name, elsewhere)
    env = engine_env("postgresql+psycopg://db", "redis://stack:1/0")
    assert {name: env[name] for name in CELERY_BROKER_VARIABLES} == dict.fromkeys(
        CELERY_BROKER_VARIABLES, ""
    )  # empty is unset to Celery (`or`) and to click (an empty envvar is ignored)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings(_env_file=None).broker_url == "redis://stack:1/0"  # as the child reads it
    assert ignored_broker_variables({"BROKER_URL": elsewhere, "CELERY_BROKER_URL": ""}) == [
        "BROKER_URL"
    ]
