"""The README's MCP example, as a new user runs it (issue 30, item 7): its two exports read from
the README itself, `agentq up` with them, then its commands as subprocesses. The effectful tool's
call waits for approval (nothing filed), `agentq review approve` lets it run, and the report is
filed once."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from sqlmodel import select

from models.tables import Escalation
from tests.support.console import running_console, submitted_id, wait_for_status

pytestmark = pytest.mark.acceptance
ROOT = Path(__file__).resolve().parents[2]


def _readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Tools from an MCP server", 1)[1]
    found = re.search(r"```bash\n(.*?)```", section, re.S)
    assert found, "the README's MCP section has no bash block"
    return found.group(1)


def _exports(block: str) -> dict[str, str]:
    """The block's `export NAME='...'` lines as the shell reads them from the repository's root
    (`$PWD` is the one expansion they use)."""
    pairs = [shlex.split(line)[1] for line in block.splitlines() if line.startswith("export ")]
    return dict(pair.replace("$PWD", str(ROOT)).split("=", 1) for pair in pairs)


def _command(block: str, starts: str) -> list[str]:
    line = next(line for line in block.splitlines() if line.startswith(starts))
    return shlex.split(line.split("#", 1)[0])[1:]  # without `agentq` and the comment


def test_the_readme_mcp_example_files_the_report_once_after_approval(tmp_path: Path) -> None:
    block = _readme_block()
    env = _exports(block)
    assert set(env) == {"AGENTQ_MCP_SERVERS", "AGENTQ_TOOL_APPROVALS"}
    effects = Path("/tmp/agentq-reports.txt")
    effects.unlink(missing_ok=True)
    with running_console(env) as console:
        listed = console.agentq(*_command(block, "agentq tools")).stdout
        assert "mcp__reports__file_report" in listed and "mcp__reports__lookup" in listed
        run_id = submitted_id(console.agentq(*_command(block, "agentq run submit")).stdout)
        wait_for_status(console, run_id, ("waiting_review",))
        queue = console.agentq(*_command(block, "agentq review list")).stdout
        assert "approval_required" in queue, console.agentq("run", "show", str(run_id)).stdout
        assert not effects.exists()  # nothing filed before a person approved
        with console.db() as session:
            esc_id = session.exec(select(Escalation.id).where(Escalation.run_id == run_id)).one()
        approve = _command(block, "agentq review approve")
        console.agentq(*approve[:-1], str(esc_id))
        assert wait_for_status(console, run_id, ("succeeded", "failed")).status == "succeeded"
    (filed,) = effects.read_text().splitlines()
    assert filed.endswith("\tLisbon\t473.43")
