"""Tools are explicit configuration (issue 9, finding 1): the default set touches no host path and
no network, only `AGENTQ_TOOL_MODULES` tools are offered or run, explicit plans come only from
`AGENTQ_PLAN_SUBMIT_ROLES`, and a tool's internal error never shows its text."""

from __future__ import annotations

import ast
import inspect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from billiard.exceptions import SoftTimeLimitExceeded
from fastapi import HTTPException

from api.auth import Principal
from api.runs import check_plan_role
from models.errors import ConfigurationError, ToolCrashed, ToolError, ToolNotEnabled
from models.plans.tools import (
    DEFAULT_TOOL_MODULES,
    ToolContext,
    catalog,
    configured_tool_names,
    enabled_tool,
    get_tool,
    load_tool_modules,
    tool,
)
from models.settings import get_settings
from models.tables import Step
from worker.execution.attempts import Claimed, Outcome
from worker.execution.steps import failure_outcome, internal_error, perform
from worker.tools import builtin, expenses

SECRET_PATH = "/srv/secret/place/config.toml"

load_tool_modules([*DEFAULT_TOOL_MODULES, "tests.support.tools"])


@tool("t_crashes", description="Raise an OSError naming a host path.")
def _crashes(ctx: ToolContext) -> dict[str, Any]:
    raise FileNotFoundError(2, "No such file or directory", SECRET_PATH)


@tool("t_times_out", description="Hit the soft time limit.")
def _times_out(ctx: ToolContext) -> dict[str, Any]:
    raise SoftTimeLimitExceeded()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """`env(AGENTQ_X="...")`: exactly these settings (the integration tests export their own)."""
    for key in list(os.environ):
        if key.startswith("AGENTQ_"):
            monkeypatch.delenv(key)

    def set_env(**values: str) -> None:
        for key, value in values.items():
            monkeypatch.setenv(key, value)
        get_settings.cache_clear()

    set_env()
    yield set_env
    get_settings.cache_clear()


def ctx() -> ToolContext:
    return ToolContext(run_id=1, step_id=2, step_name="s", attempt=1, tries_of_name=1, facts={})


# -- the default set -----------------------------------------------------------------------


def test_the_default_set_is_the_builtins_and_the_demo_without_append_marker(env: Any) -> None:
    names = configured_tool_names()
    assert "append_marker" not in names and "t_crashes" not in names
    builtins = {"always_fails", "echo", "flaky", "noop", "sleep"}
    demo = {"attach_receipts", "cached_rate", "collect_receipts", "convert_amounts", "live_rate"}
    assert set(names) == builtins | demo | {"submit_report"}
    assert [entry["name"] for entry in catalog()] == names  # what planners are shown


RISKY_IMPORTS = {"os", "pathlib", "shutil", "socket", "subprocess", "urllib", "http", "httpx"}
RISKY_IMPORTS |= {"requests", "openai", "ftplib", "smtplib", "sqlite3", "tempfile", "io"}
# (`cached_rate` reads its package's own `data/rates.json` through `importlib.resources`, a fixed
# name: no argument reaches a path.)


@pytest.mark.parametrize("module", [builtin, expenses])
def test_no_default_tool_module_can_reach_a_host_path_or_the_network(module: Any) -> None:
    tree = ast.parse(inspect.getsource(module))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert not imported & RISKY_IMPORTS, imported & RISKY_IMPORTS
    calls = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert not calls & {"open", "exec", "eval", "__import__", "compile"}


def test_no_default_tool_takes_a_path_or_an_address(env: Any) -> None:
    for entry in catalog():
        params = set(entry["parameters"].get("properties", {}))
        assert not params & {"path", "file", "filename", "url", "host", "address"}, entry["name"]


# -- only the configured set runs ------------------------------------------------------------


def test_a_tool_of_another_module_is_registered_but_not_enabled(env: Any) -> None:
    assert get_tool("append_marker").module == "tests.support.tools"
    with pytest.raises(ToolNotEnabled) as refused:
        enabled_tool("append_marker")
    assert str(refused.value).startswith(
        "tool 'append_marker' is not enabled (AGENTQ_TOOL_MODULES); enabled: always_fails, "
    )
    with pytest.raises(ToolNotEnabled, match="tool 'nope' is not enabled"):
        enabled_tool("nope")
    assert enabled_tool("echo").name == "echo"


def test_tool_modules_enable_more_tools(env: Callable[..., None]) -> None:
    env(AGENTQ_TOOL_MODULES='["worker.tools.builtin", "tests.support.tools"]')
    assert enabled_tool("append_marker").name == "append_marker"
    assert "cached_rate" not in configured_tool_names()  # the demo's module is not listed
    env(AGENTQ_TOOL_MODULES='["no.such.module"]')
    with pytest.raises(ConfigurationError, match=r"AGENTQ_TOOL_MODULES: cannot import 'no\.such"):
        configured_tool_names()


def test_a_tool_not_enabled_fails_its_step_for_good() -> None:
    step = Step(run_id=1, plan_version=1, position=0, name="w", kind="tool", attempt=1)
    outcome = failure_outcome(ToolNotEnabled("tool 'x' is not enabled"), step, max_deferrals=3)
    assert outcome == Outcome("failed", error="tool 'x' is not enabled")


@pytest.mark.parametrize("kind", ["tool", "model"])
def test_a_worker_never_runs_a_tool_that_is_not_enabled(
    env: Any, tmp_path: Path, kind: str
) -> None:
    """A step row naming the tool (written before the tool was disabled, or by hand) fails
    before anything runs: no file, no model call."""
    target = tmp_path / "x.pth"
    args = {"path": str(target), "marker": "import os"}
    if kind == "tool":
        shape: dict[str, Any] = {"tool": "append_marker", "args": args}
    else:
        shape = {"tools": ["append_marker"], "instruction": "Write it."}
    step = Step(id=7, run_id=1, plan_version=1, position=0, name="w", kind=kind, **shape)
    outcome = perform(Claimed(step=step, facts={}, results={}, tries=1))
    assert outcome.kind == "failed"
    assert outcome.error.startswith("tool 'append_marker' is not enabled (AGENTQ_TOOL_MODULES)")
    assert not target.exists()


# -- internal errors -------------------------------------------------------------------------


def test_a_crash_names_the_tool_and_type_only_and_logs_the_rest(env: Any) -> None:
    with structlog.testing.capture_logs() as logs, pytest.raises(ToolCrashed) as crashed:
        get_tool("t_crashes").invoke(ctx(), {})
    message = str(crashed.value)
    assert message == (
        "tool 't_crashes' failed with an internal error (FileNotFoundError); see the worker log"
    )
    assert SECRET_PATH not in message and "secret" not in message
    assert isinstance(crashed.value, ToolError)  # the step fails, it is not retried
    (logged,) = [entry for entry in logs if entry["event"] == "tool.crashed"]
    assert logged["tool"] == "t_crashes" and logged["log_level"] == "error"
    assert logged["exc_info"] is True  # structlog renders the traceback (with the path)


def test_a_soft_time_limit_is_not_a_crash(env: Any) -> None:
    with pytest.raises(SoftTimeLimitExceeded):
        get_tool("t_times_out").invoke(ctx(), {})


def test_an_unexpected_error_of_a_step_is_worded_without_its_text() -> None:
    step = Step(run_id=1, plan_version=1, position=0, name="w", kind="model")
    said = internal_error(step, KeyError(SECRET_PATH))
    assert said == "step 'w' failed with an internal error (KeyError); see the worker log"


# -- who may submit an explicit plan ---------------------------------------------------------


def principal(role: Any) -> Principal:
    return Principal(token_id=1, name="n", role=role, user_id="u" if role == "submitter" else None)


def test_plan_submit_roles_default_to_submitters_and_admins(env: Any) -> None:
    assert get_settings().plan_submit_roles == ["submitter", "admin"]
    check_plan_role(principal("submitter"))
    check_plan_role(principal("admin"))


def test_a_role_not_listed_is_refused_naming_the_setting(env: Callable[..., None]) -> None:
    env(AGENTQ_PLAN_SUBMIT_ROLES="[]")
    with pytest.raises(HTTPException) as refused:
        check_plan_role(principal("submitter"))
    assert refused.value.status_code == 403
    assert "AGENTQ_PLAN_SUBMIT_ROLES allows admin" in str(refused.value.detail)
    check_plan_role(principal("admin"))  # admin always may


def test_plan_submit_roles_accept_only_submitter_and_admin(env: Callable[..., None]) -> None:
    env(AGENTQ_PLAN_SUBMIT_ROLES='["reviewer"]')
    with pytest.raises(ConfigurationError, match="AGENTQ_PLAN_SUBMIT_ROLES"):
        get_settings()
