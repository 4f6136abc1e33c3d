"""An `AGENTQ_` variable that is no setting (a misspelling) is warned of on stderr, once, with the
closest setting's name; the names the tests and docs use for something else are not."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from models import settings_variables
from models.settings import Settings, read_settings
from models.settings_variables import unknown_variables, warn_unknown

FIELDS = Settings.model_fields


@pytest.fixture(autouse=True)
def nothing_warned_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings_variables, "_warned", set())


def test_a_misspelt_setting_names_the_closest() -> None:
    found = unknown_variables(
        ["AGENTQ_LEASE", "agentq_provder", "AGENTQ_DATABSE_URL", "AGENTQ_NOTHING_LIKE_IT"], FIELDS
    )
    assert found == [
        ("AGENTQ_DATABSE_URL", "AGENTQ_DATABASE_URL"),
        ("AGENTQ_LEASE", "AGENTQ_LEASE_S"),
        ("AGENTQ_NOTHING_LIKE_IT", None),
        ("agentq_provder", "AGENTQ_PROVIDER"),
    ]


@pytest.mark.parametrize(
    "name",
    [
        "AGENTQ_LEASE_S",
        "agentq_lease_s",  # pydantic-settings reads names in any case
        "AGENTQ_DATABASE_URL",
        "DATABASE_URL",
        "AGENTQ_OPENAI_API_KEY",
        "AGENTQ_HOME",
        "AGENTQ_TEST_AMQP_URL",  # the broker matrix (tests/support/brokers.py)
        "AGENTQ_TEST_REDIS_URL",
        "AGENTQ_TOKEN",  # what earlier docs had people export for the API examples
        "AGENTQ_REVIEWER_TOKEN",
        "PATH",
    ],
)
def test_settings_and_the_names_used_for_something_else_are_not_warned_of(name: str) -> None:
    assert unknown_variables([name], FIELDS) == []


def test_each_unknown_variable_is_one_line_once_per_process_never_its_value() -> None:
    stream = io.StringIO()
    warn_unknown(["AGENTQ_LEASE", "AGENTQ_FOO"], FIELDS, stream)
    warn_unknown(["AGENTQ_LEASE", "AGENTQ_FOO"], FIELDS, stream)
    assert stream.getvalue().splitlines() == [
        "warning: AGENTQ_FOO is no agentq setting, so it is ignored (see the settings reference)",
        "warning: AGENTQ_LEASE is no agentq setting, so it is ignored; did you mean "
        "AGENTQ_LEASE_S?",
    ]


def test_reading_the_settings_warns_of_the_environments_and_the_env_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    lease_s = read_settings().lease_s  # the default, or what this process's environment sets
    capsys.readouterr()
    (tmp_path / ".env").write_text("AGENTQ_WORKER_CONCURENCY=3\n")
    monkeypatch.setenv("AGENTQ_LEASE", "hunter2")
    assert read_settings().lease_s == lease_s  # ignored, as before: only said now
    said = capsys.readouterr().err
    assert "warning: AGENTQ_LEASE is no agentq setting" in said and "hunter2" not in said
    assert "AGENTQ_WORKER_CONCURENCY is no agentq setting, so it is ignored; did you mean " in said
    assert len(said.splitlines()) == 2, said
