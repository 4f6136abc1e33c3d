"""Model settings: the retry waits are part of the timeout ladder; prices are configuration."""

from __future__ import annotations

import os

import pytest

from models.engine.budgets import cost_usd
from models.errors import ConfigurationError
from models.settings import (
    ModelPrice,
    Settings,
    model_call_max_s,
    model_retry_delay_s,
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only this test's variables: the integration tests export a whole stack's settings."""
    for key in list(os.environ):
        if key.startswith("AGENTQ_") or key in ("DATABASE_URL", "BROKER_URL"):
            monkeypatch.delenv(key)


def test_retry_waits_double_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQ_MODEL_MAX_ATTEMPTS", "5")
    monkeypatch.setenv("AGENTQ_MODEL_REQUEST_TIMEOUT_S", "10")
    monkeypatch.setenv("AGENTQ_MODEL_RETRY_BACKOFF_S", "1.5")
    monkeypatch.setenv("AGENTQ_MODEL_RETRY_MAX_S", "4")
    s = Settings(_env_file=None)
    assert [model_retry_delay_s(s, n) for n in range(1, 5)] == [1.5, 3.0, 4.0, 4.0]
    assert model_call_max_s(s) == 5 * 10 + 1.5 + 3 + 4 + 4


def test_default_model_call_fits_the_step_time_limit() -> None:
    s = Settings(_env_file=None)
    assert model_call_max_s(s) == 30 * 2 + 1 == 61 < s.step_time_limit_s


def test_retry_waits_can_break_the_ladder(monkeypatch: pytest.MonkeyPatch) -> None:
    # 42 x 2 = 84 s fits the 90 s step time limit; with an 8 s wait between the tries it does not.
    monkeypatch.setenv("AGENTQ_MODEL_REQUEST_TIMEOUT_S", "42")
    assert model_call_max_s(Settings(_env_file=None)) == 85
    monkeypatch.setenv("AGENTQ_MODEL_RETRY_BACKOFF_S", "8")
    with pytest.raises(ConfigurationError, match=r"AGENTQ_MODEL_RETRY_BACKOFF_S.*\(92 s\)"):
        Settings(_env_file=None)


def test_default_prices() -> None:
    s = Settings(_env_file=None)
    assert s.price_of("gpt-4o-mini") == ModelPrice(input=0.15, output=0.60)
    assert s.price_of("offline") == ModelPrice(input=0, output=0)
    mini = s.price_of("gpt-4o-mini")
    assert cost_usd(mini, prompt_tokens=1_000_000, completion_tokens=0) == pytest.approx(0.15)
    assert cost_usd(mini, prompt_tokens=100, completion_tokens=10) == pytest.approx(2.1e-5)


def test_prices_are_read_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AGENTQ_MODEL_PRICES_USD_PER_MTOK", '{"llama3.1": {"input": 0, "output": 0}}'
    )
    monkeypatch.setenv("AGENTQ_PROVIDER", "openai")
    monkeypatch.setenv("AGENTQ_MODEL", "llama3.1")
    s = Settings(_env_file=None)
    assert s.price_of("llama3.1") == ModelPrice(input=0, output=0)
    assert s.price_of("offline") == ModelPrice(input=0, output=0)  # free even when not listed
    with pytest.raises(ConfigurationError, match="no price for model 'gpt-4o-mini'"):
        s.price_of("gpt-4o-mini")


def test_an_openai_model_without_a_price_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQ_PROVIDER", "openai")
    monkeypatch.setenv("AGENTQ_MODEL", "mystery-model")
    with pytest.raises(
        ConfigurationError, match=r"AGENTQ_MODEL_PRICES_USD_PER_MTOK.*mystery-model"
    ):
        Settings(_env_file=None)
    monkeypatch.setenv("AGENTQ_PROVIDER", "offline")
    assert Settings(_env_file=None).model == "mystery-model"  # offline calls are free


@pytest.mark.parametrize(
    "prices",
    ['{"m": {"input": -1, "output": 0}}', '{"m": {"input": 1}}', '{"m": {"in": 1, "out": 2}}'],
)
def test_bad_prices_are_refused(monkeypatch: pytest.MonkeyPatch, prices: str) -> None:
    monkeypatch.setenv("AGENTQ_MODEL_PRICES_USD_PER_MTOK", prices)
    with pytest.raises(ValueError, match="model_prices_usd_per_mtok"):
        Settings(_env_file=None)
