"""docker-compose.yml lets the deployer set every agentq setting, and shares the metrics directory.

Checked without a Docker engine, on the real file, each rule also against a broken copy
(`test_check_can_fail`), as in tests/unit/test_compose.py (whose helpers these use):

- every service that runs agentq code reads `.env` (`env_file`, not required), so each
  `AGENTQ_*` setting of `models.settings.Settings` reaches it, except the few the compose file
  must force, which `.env` cannot move (Compose: `environment:` wins over `env_file`);
- every `AGENTQ_*` key of an `environment:` block is a real setting, and none is left without a
  value (Compose would then remove the same key from `.env`'s: compose-go `OverrideBy`);
- the api, worker and scheduler containers write and read one metrics directory: one named
  volume, a tmpfs (empty when its first container starts, never emptied under a running one).
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from pydantic import AliasChoices

from models.settings import Settings
from tests.unit.test_compose import (
    AGENTQ_SERVICES,
    COMPOSE_FILE,
    DOCKERFILE,
    Compose,
    interpolate,
    load_compose,
    service,
)

AGENTQ_CODE = (*AGENTQ_SERVICES, "api")  # every service that runs agentq code
METRICS_SERVICES = ("api", "worker", "scheduler")  # write (worker, scheduler) or read (api)
# What the compose file sets whatever .env says: the URLs between the services and the metrics
# directory the volume is mounted on.
FORCED = {
    "DATABASE_URL",
    "AGENTQ_DATABASE_URL",
    "BROKER_URL",
    "AGENTQ_BROKER_URL",
    "AGENTQ_METRICS_DIR",
}


def setting_names() -> set[str]:
    """Every environment variable `Settings` reads: `AGENTQ_<FIELD>`, or a field's aliases."""
    names: set[str] = set()
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {choice for choice in alias.choices if isinstance(choice, str)}
        elif isinstance(alias, str):
            names.add(alias)
        else:
            names.add(f"AGENTQ_{field_name.upper()}")
    return names


def reads_dotenv(svc: Mapping[str, Any]) -> bool | None:
    """None when `svc` has no `env_file` entry for ./.env; else whether that entry is required."""
    raw = svc.get("env_file")
    entries = raw if isinstance(raw, list) else [] if raw is None else [raw]
    for entry in entries:
        if isinstance(entry, str):
            path, required = entry, True
        else:
            path, required = entry.get("path"), entry.get("required", True)
        if (
            path is not None
            and (COMPOSE_FILE.parent / path).resolve() == (COMPOSE_FILE.parent / ".env").resolve()
        ):
            return bool(required)
    return None


def container_env(
    svc: Mapping[str, Any], shell: Mapping[str, str], dotenv: Mapping[str, str]
) -> dict[str, str]:
    """The container's environment as Compose makes it: `.env`'s entries (if `svc` reads it),
    then `environment:` over them, interpolated from the shell and `.env` (the shell wins); a
    key without a value takes the shell's or `.env`'s, and when neither has it, it is removed."""
    env = dict(dotenv) if reads_dotenv(svc) is not None else {}
    project = {**dotenv, **shell}
    raw = svc.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, None) for item in raw)
    for key, value in raw.items():
        if value is None:
            if key in project:
                env[key] = project[key]
            else:
                env.pop(key, None)
        else:
            env[key] = interpolate(str(value), project)
    return env


def raw_environment(svc: Mapping[str, Any]) -> dict[str, Any]:
    raw = svc.get("environment") or {}
    if isinstance(raw, list):
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in raw)
    return dict(raw)


# --- the rules -------------------------------------------------------------------------------


def check_agentq_services_read_dotenv(compose: Compose) -> None:
    for name in AGENTQ_CODE:
        required = reads_dotenv(service(compose, name))
        assert required is not None, f"{name} does not read .env (env_file)"
        assert required is False, f"{name}: .env is required; without one, defaults must apply"


def check_every_setting_reaches_the_services(compose: Compose) -> None:
    """A value for every setting in .env reaches every agentq container, unless forced."""
    dotenv = {name: f"from-dotenv-{name}" for name in setting_names()}
    for name in AGENTQ_CODE:
        env = container_env(service(compose, name), {}, dotenv)
        lost = {k for k in setting_names() - FORCED if env.get(k) != dotenv[k]}
        assert not lost, f"{name}: {sorted(lost)} set in .env do not reach it"


def check_environment_keys_are_settings(compose: Compose) -> None:
    known = setting_names()
    for name, svc in compose["services"].items():
        for key, value in raw_environment(svc).items():
            if key.startswith("AGENTQ_"):
                assert key in known, f"{name}: {key} is not a setting of models.settings"
            if name in AGENTQ_CODE:
                assert value is not None, f"{name}: {key} has no value; it would drop .env's"


def check_forced_values_win_and_are_valid(compose: Compose) -> None:
    """With .env pointing elsewhere, each agentq container's Settings still take the compose
    file's URLs and metrics directory, and those values are valid settings."""
    hostile = {
        "DATABASE_URL": "postgresql://x:y@elsewhere:5432/z",
        "AGENTQ_DATABASE_URL": "postgresql://x:y@elsewhere:5432/z",
        "BROKER_URL": "redis://elsewhere:6379/9",
        "AGENTQ_BROKER_URL": "redis://elsewhere:6379/9",
        "AGENTQ_METRICS_DIR": "/elsewhere",
    }
    for name in AGENTQ_CODE:
        svc = service(compose, name)
        plain = container_env(svc, {}, {})
        env = container_env(svc, {}, hostile)
        with mock.patch.dict(os.environ, env, clear=True):
            settings = Settings(_env_file=None)
        assert settings.database_url == plain.get("DATABASE_URL"), f"{name}: database_url"
        assert "@postgres:" in (settings.database_url or ""), f"{name}: {settings.database_url}"
        assert settings.broker_url == plain.get("BROKER_URL"), f"{name}: broker_url"
        assert "//redis:" in (settings.broker_url or ""), f"{name}: {settings.broker_url}"
        assert str(settings.metrics_dir) == plain.get("AGENTQ_METRICS_DIR"), f"{name}: metrics"


def _mounts(svc: Mapping[str, Any]) -> dict[str, str]:
    """Container path -> named volume (or host path) of `svc`'s `volumes`, short or long form."""
    found: dict[str, str] = {}
    for entry in svc.get("volumes") or []:
        if isinstance(entry, str):
            source, _, rest = entry.partition(":")
            found[rest.split(":")[0]] = source
        else:
            found[str(entry.get("target"))] = str(entry.get("source"))
    return found


def check_metrics_directory_is_shared(compose: Compose) -> None:
    sources = set()
    for name in METRICS_SERVICES:
        svc = service(compose, name)
        directory = container_env(svc, {}, {}).get("AGENTQ_METRICS_DIR")
        assert directory and directory.startswith("/"), f"{name}: AGENTQ_METRICS_DIR {directory}"
        source = _mounts(svc).get(directory)
        assert source, f"{name}: nothing is mounted on its metrics directory {directory}"
        sources.add((source, directory))
    assert len(sources) == 1, f"the metrics services do not share one directory: {sources}"
    ((volume, directory),) = sources
    declared = (compose.get("volumes") or {}).get(volume)
    assert isinstance(declared, dict), f"{volume} is not a named volume of the compose file"
    opts = declared.get("driver_opts") or {}
    assert declared.get("driver", "local") == "local" and opts.get("type") == "tmpfs", (
        f"{volume} is not a tmpfs: it would keep an earlier run's files"
    )
    uid = re.search(r"useradd .*--uid (\d+)", DOCKERFILE.read_text(encoding="utf-8"))
    assert uid and f"uid={uid.group(1)}" in str(opts.get("o", "")).split(","), (
        f"{volume} is not owned by the image's user ({opts.get('o')})"
    )
    for name, svc in compose["services"].items():
        text = " ".join(str(part) for part in svc.get("command") or [])
        assert directory not in text, f"{name} touches the metrics directory itself: {text}"


COMPOSE_SETTINGS_CHECKS: list[Callable[[Compose], None]] = [
    check_agentq_services_read_dotenv,
    check_every_setting_reaches_the_services,
    check_environment_keys_are_settings,
    check_forced_values_win_and_are_valid,
    check_metrics_directory_is_shared,
]


@pytest.mark.parametrize("check", COMPOSE_SETTINGS_CHECKS, ids=lambda c: c.__name__)
def test_compose(check: Callable[[Compose], None]) -> None:
    check(load_compose())


def test_setting_names_are_the_real_ones() -> None:
    names = setting_names()
    for expected in ("AGENTQ_OTLP_ENDPOINT", "AGENTQ_WEBHOOK_SECRET", "OPENAI_API_KEY"):
        assert expected in names
    assert "AGENTQ_OPENAI_API_KEY" in names and "AGENTQ_DATABASE_URL" in names
    assert len(names) > 100, len(names)


# --- each rule can fail ----------------------------------------------------------------------


def _edit(name: str, change: Callable[[dict[str, Any]], None]) -> Callable[[Compose], None]:
    def mutate(c: Compose) -> None:
        svc = dict(service(c, name))
        svc["environment"] = raw_environment(svc)
        change(svc)
        c["services"][name] = svc

    return mutate


def _env(name: str, key: str, value: str | None) -> Callable[[Compose], None]:
    return _edit(name, lambda svc: svc["environment"].__setitem__(key, value))


def _drop(name: str, key: str) -> Callable[[Compose], None]:
    return _edit(name, lambda svc: svc.pop(key, None))


def _volume_opts(change: Mapping[str, Any]) -> Callable[[Compose], None]:
    def mutate(c: Compose) -> None:
        c["volumes"]["metrics"] = {**c["volumes"]["metrics"], **change}

    return mutate


BREAKAGES: list[tuple[Callable[[Compose], None], str, Callable[[Compose], None]]] = [
    (check_agentq_services_read_dotenv, "api-no-env-file", _drop("api", "env_file")),
    (
        check_agentq_services_read_dotenv,
        "required",
        _edit("worker", lambda svc: svc.__setitem__("env_file", [".env"])),
    ),
    (check_every_setting_reaches_the_services, "sender-no-env-file", _drop("sender", "env_file")),
    (
        check_every_setting_reaches_the_services,
        "forced-webhook-secret",
        _env("worker", "AGENTQ_WEBHOOK_SECRET", "x"),
    ),
    (
        check_every_setting_reaches_the_services,
        "forced-otlp",
        _env("scheduler", "AGENTQ_OTLP_ENDPOINT", "http://collector:4318"),
    ),
    (check_environment_keys_are_settings, "typo", _env("api", "AGENTQ_UI_COOKIE_SECUR", "true")),
    (check_environment_keys_are_settings, "no-value", _env("api", "AGENTQ_LEASE_S", None)),
    (
        check_environment_keys_are_settings,
        "postgres-typo",
        _env("postgres", "AGENTQ_NOPE", "1"),
    ),
    (
        check_forced_values_win_and_are_valid,
        "agentq-url-not-forced",
        _edit("worker", lambda svc: svc["environment"].pop("AGENTQ_DATABASE_URL")),
    ),
    (
        check_forced_values_win_and_are_valid,
        "broker-not-forced",
        _edit("api", lambda svc: svc["environment"].pop("AGENTQ_BROKER_URL")),
    ),
    (
        check_forced_values_win_and_are_valid,
        "metrics-not-forced",
        _edit("scheduler", lambda svc: svc["environment"].pop("AGENTQ_METRICS_DIR")),
    ),
    (check_metrics_directory_is_shared, "worker-no-volume", _drop("worker", "volumes")),
    (
        check_metrics_directory_is_shared,
        "api-own-dir",
        _env("api", "AGENTQ_METRICS_DIR", "/tmp/metrics"),
    ),
    (
        check_metrics_directory_is_shared,
        "other-volume",
        _edit("scheduler", lambda svc: svc.__setitem__("volumes", ["m2:/var/lib/agentq/metrics"])),
    ),
    (check_metrics_directory_is_shared, "not-tmpfs", _volume_opts({"driver_opts": {}})),
    (
        check_metrics_directory_is_shared,
        "root-owned",
        _volume_opts({"driver_opts": {"type": "tmpfs", "device": "tmpfs", "o": "mode=0700"}}),
    ),
    (
        check_metrics_directory_is_shared,
        "worker-wipes",
        _edit(
            "worker",
            lambda svc: svc.__setitem__(
                "command", ["sh", "-c", "rm -f /var/lib/agentq/metrics/*; agentq worker"]
            ),
        ),
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


def test_every_check_is_shown_to_fail() -> None:
    assert {check for check, _, _ in BREAKAGES} == set(COMPOSE_SETTINGS_CHECKS)


def test_dotenv_is_kept_out_of_the_image() -> None:
    """The .env the containers read at run time is never baked into the image."""
    entries = Path(COMPOSE_FILE.parent / ".dockerignore").read_text(encoding="utf-8").split()
    assert ".env" in entries
