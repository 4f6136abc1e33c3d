"""Which stack the CLI talks to: the configured one (`DATABASE_URL`/`BROKER_URL`), or the
`agentq up` running on the data directory (`AGENTQ_HOME`, default `~/.agentq`), whose stack file
gives its URLs. Every `agentq` command that reads or writes rows calls `connect` first."""

from __future__ import annotations

from models.engine import queue
from models.errors import ConfigurationError
from models.settings import get_settings, use_settings
from ops.stack_file import read_stack_file


def connect() -> None:
    """Point this process at the configured stack, or at the running `agentq up` (its stack
    file's URLs become this process's settings: `models.settings.use_settings`).

    Raises `ConfigurationError` when a database URL is set but no broker URL (checked before
    anything is written), or when neither is set and no `agentq up` runs.
    """
    settings = get_settings()
    if settings.database_url:
        queue.broker_url(settings)
        return
    state = read_stack_file(settings.home)
    if state is None:
        raise ConfigurationError(
            f"no agentq stack is running on {settings.home}: start one with `agentq up` in "
            "another terminal, or set DATABASE_URL and BROKER_URL"
        )
    use_settings(database_url=state["database_url"], broker_url=state["broker_url"])
