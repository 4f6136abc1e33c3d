"""The `agentq` CLI as a user runs it: a subprocess, on the embedded default."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import engine_dir
from tests.support.net import free_port

pytestmark = pytest.mark.acceptance
AGENTQ = shutil.which("agentq") or ""


def _env(home: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AGENTQ_", "DATABASE", "BROKER"))
    }
    return {
        **env,
        "AGENTQ_HOME": str(home),
        "COLUMNS": "200",
        "AGENTQ_REVIEWER": "rita",
        "AGENTQ_API_PORT": str(free_port()),  # `agentq up` serves the API; never a fixed port
    }


def agentq(
    home: Path,
    *args: str,
    timeout_s: float = 120,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """`agentq ARGS` with `stdin` as its standard input (none: an empty one)."""
    return subprocess.run(
        [AGENTQ, *args],
        env={**_env(home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        input=stdin or "",
    )


@pytest.fixture
def home() -> Iterator[Path]:
    """AGENTQ_HOME outside pytest's private tmp root (see tests/integration/conftest.py)."""
    yield from engine_dir()


def test_agentq_is_installed() -> None:
    assert AGENTQ, "the agentq console script is not on PATH: pip install -e '.[test]'"


def test_demo_submits_the_right_totals(home: Path) -> None:
    result = agentq(home, "demo", timeout_s=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "offline (deterministic, no model)" in out
    # scenario 1: 514.60 USD at the cached October rate 0.92
    assert re.search(r"total 473\.43 EUR, cost centre CC-4410", out), out
    # scenario 2: escalated, then the reviewer's rate 0.95
    assert "replan_budget_spent" in out
    assert "agentq review respond" in out
    # the second run's planner recalled the first run and the user's facts
    recalled = out.split("memory recalled for planning:")[-1]
    assert "past run" in recalled and "live_rate failed" in recalled
    # facts about what the run pins are left out: the pinned value is the user's word
    assert "The user's cost centre is" not in recalled
    assert re.search(r"total 488\.87 EUR, cost centre CC-4410", out), out
    assert not re.search(r"╯[^\n]", out), out  # nothing runs onto a panel's last line
    assert not (home / "demo" / "stack.json").exists()  # the demo stopped its stack


def test_tools_lists_every_tool_with_its_arguments(home: Path) -> None:
    listed = agentq(home, "tools")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert re.search(r"│ flaky\s+│.*│ fail_times: integer\s+│ ok, tries", listed.stdout)
    assert re.search(r"│ noop\s+│ Do nothing and succeed\.\s+│ none", listed.stdout)


def test_commands_without_a_stack_say_how_to_start_one(home: Path) -> None:
    result = agentq(home, "run", "list")
    assert result.returncode == 2
    assert result.stdout == "" and result.stderr.startswith("error: no agentq stack is running")
    assert "agentq up" in result.stderr and "DATABASE_URL" in result.stderr


def test_a_misspelt_setting_is_warned_of_in_one_line(home: Path) -> None:
    """pydantic-settings ignores a variable that names no setting: `AGENTQ_LEASE=20` changed
    nothing, silently."""
    result = agentq(home, "run", "list", env={"AGENTQ_LEASE": "20", "AGENTQ_TEST_X": "1"})
    assert result.returncode == 2 and "agentq up" in result.stderr  # no stack: as before
    assert result.stderr.startswith(
        "warning: AGENTQ_LEASE is no agentq setting, so it is ignored; did you mean "
        "AGENTQ_LEASE_S?\n"
    )


@pytest.fixture
def up(home: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    proc = subprocess.Popen(
        [AGENTQ, "up"],
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    deadline, seen = time.monotonic() + 120, ""
    assert proc.stdout is not None
    while "agentq is up" not in seen:
        line = proc.stdout.readline()
        if not line or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"agentq up did not start:\n{seen}")
        seen += line
    yield home, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


# About 40 CLI processes and a stop that lets a running step finish: 2 min on a quiet machine, and
# the 300 s default ran out on a loaded one (stop 37's CI, in the stop after SIGINT).
@pytest.mark.timeout(480)
def test_up_submit_watch_review_and_ctrl_c(up: tuple[Path, subprocess.Popen[str]]) -> None:
    home, proc = up
    plan = home / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "steps": [
                    {"name": "a", "kind": "tool", "tool": "noop"},
                    {"name": "x", "kind": "tool", "tool": "flaky", "args": {"fail_times": 1}},
                ]
            }
        )
    )
    submitted = agentq(
        home,
        "run",
        "submit",
        "cli test",
        "--plan",
        str(plan),
        "--replans",
        "0",
        "--fact",
        "currency=EUR",
        "--watch",
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert "waiting_review" in submitted.stdout and "currency=EUR" in submitted.stdout
    assert "╯\nwaiting for review" in submitted.stdout  # not run onto the panel's last line
    queue = agentq(home, "review", "list")
    assert "replan_budget_spent" in queue.stdout
    esc_id = re.search(r"│\s*(\d+)\s*│\s*1\s*│", queue.stdout)
    assert esc_id, queue.stdout
    assert "in 23h" in queue.stdout, queue.stdout  # time left before the escalation's deadline
    why = agentq(home, "run", "show", "1").stdout  # why it waits, and how to decide it
    assert "replan_budget_spent: A step failed and the run has no replans left" in why, why
    assert "failed step" in why and "flaky: try 1 of 1 failing tries" in why, why
    assert f"agentq review show {esc_id.group(1)}" in why, why
    claimed = agentq(home, "review", "claim")
    assert claimed.returncode == 0 and "claimed by" in claimed.stdout, claimed.stdout
    none_open = agentq(home, "review", "claim")
    assert re.search(r"1 claimed by \S+ \(1\)", none_open.stdout), none_open.stdout
    released = agentq(home, "review", "release", esc_id.group(1))
    assert released.returncode == 0 and "released" in released.stdout, released.stdout
    assert re.search(r"│ 2 │\s+2 │ x\s+│ a\s+│ flaky", submitted.stdout), submitted.stdout
    shown = agentq(home, "review", "show", esc_id.group(1))
    assert "flaky" in shown.stdout and "failing tries" in shown.stdout
    drafted = agentq(home, "review", "plan", esc_id.group(1))  # JSON alone on stdout
    assert drafted.returncode == 0 and '"after"' in drafted.stderr, drafted.stderr
    assert [(s["name"], s["after"]) for s in json.loads(drafted.stdout)["steps"]] == [("x", ["a"])]
    approved = agentq(home, "review", "approve", esc_id.group(1), "--comment", "try again")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    watched = agentq(home, "run", "watch", "1")
    assert watched.returncode == 0 and "succeeded" in watched.stdout
    again = agentq(home, "review", "approve", esc_id.group(1))
    assert again.returncode == 2 and "decided" in again.stderr, again.stderr
    runs = agentq(home, "run", "list")
    assert "cli test" in runs.stdout and "succeeded" in runs.stdout
    as_before = agentq(home, "runs", "--json")  # the old name, a hidden alias
    assert as_before.stdout == agentq(home, "run", "list", "--json").stdout != ""
    facts = agentq(home, "memory", "facts", "--user", "local")
    assert "The user's currency is EUR" in facts.stdout, facts.stdout + facts.stderr
    found = agentq(
        home, "memory", "search", "which currency does the user prefer", "--user", "local"
    )
    assert "The user's currency is EUR" in found.stdout, found.stdout
    episode = agentq(home, "memory", "search", "cli test flaky", "--user", "local")
    assert "episode" in episode.stdout and "Goal: cli test" in episode.stdout, episode.stdout
    nobody = agentq(home, "memory", "search", "currency", "--user", "someone-else")
    assert "EUR" not in nobody.stdout
    forgot = agentq(home, "memory", "forget", "--user", "local", "--yes")
    assert forgot.returncode == 0 and re.search(
        r"forgot local: [1-9]\d* facts, 1 episodes", forgot.stdout
    )
    assert "currency" not in agentq(home, "memory", "facts", "--user", "local").stdout
    ended = agentq(home, "run", "cancel", "1")
    assert ended.returncode == 2 and "succeeded" in ended.stderr, ended.stderr  # nothing changed
    slow = home / "slow.json"
    slow.write_text(
        json.dumps(
            {
                "steps": [
                    # long enough to outlast the start-up of the CLI that cancels it
                    {"name": "wait", "kind": "tool", "tool": "sleep", "args": {"seconds": 15}},
                    {"name": "after", "kind": "tool", "tool": "noop"},
                ]
            }
        )
    )
    second = agentq(home, "run", "submit", "slow one", "--plan", str(slow), "--json")
    answer = json.loads(second.stdout)  # the API's answer to a submit, and nothing else
    assert answer["notified"] is True and answer["from_goal"]["pinned"] == {}, answer
    assert answer["run"]["goal"] == "slow one" and answer["run"]["status"] == "running", answer
    assert [s["name"] for s in answer["run"]["steps"]] == ["wait", "after"], answer
    run_id = str(answer["run"]["id"])
    cancelled = agentq(home, "run", "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert f"run {run_id} cancelled" in cancelled.stdout
    assert "cancelled" in agentq(home, "run", "show", run_id).stdout
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    assert not (home / "stack.json").exists()


def _no_runs(home: Path) -> bool:
    listed = agentq(home, "run", "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return re.search(r"│\s*\d+\s*│", listed.stdout) is None


BAD_INPUTS = [
    (("submit", "x", "--wall-time", "inf"), "--wall-time"),
    (("submit", "x", "--json", "--watch"), "--json"),
    (("submit", "x", "--wall-time", "1e12"), "--wall-time"),
    (("submit", "x", "--replans", "99999999999999999999"), "--replans"),
    (("submit", "x", "--tokens", "0"), "--tokens"),
    (("submit", ""), "goal"),
    (("submit", "x", "--user", ""), "--user"),
    (("runs", "--status", "bogus"), "waiting_review"),
    (("review", "show", "99999999999999999999"), "escalation_id"),
    (("review", "reject", "1", "--comment", ""), "--comment"),
    (("review", "respond", "1", "--answer", " "), "--answer"),
]


def test_bad_input_is_refused_and_user_text_is_shown_literally(
    up: tuple[Path, subprocess.Popen[str]],
) -> None:
    home, _proc = up
    for args, named in BAD_INPUTS:
        refused = agentq(home, *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert named in refused.stderr, (args, refused.stderr)
        assert "Traceback" not in refused.stdout + refused.stderr
    latin1 = home / "latin1.json"
    latin1.write_bytes(
        '{"steps": [{"name": "caf\u00e9", "kind": "tool", "tool": "noop"}]}'.encode("latin-1")
    )
    refused = agentq(home, "run", "submit", "x", "--plan", str(latin1))
    assert refused.returncode == 2 and f"--plan {latin1}: not UTF-8" in refused.stderr
    for verb in ("approve", "reject", "respond", "edit", "release"):
        extra = {"reject": ["--comment", "no"], "respond": ["--answer", "1"]}.get(verb, [])
        extra += ["--plan", str(latin1)] if verb == "edit" else []
        missing = agentq(home, "review", verb, "999", *extra)
        assert missing.returncode == 2 and "escalation 999 does not exist" in missing.stderr
    stack = json.loads((home / "stack.json").read_text())
    no_broker = agentq(home, "run", "submit", "x", env={"DATABASE_URL": stack["database_url"]})
    assert no_broker.returncode == 2 and "no broker" in no_broker.stderr, no_broker.stderr
    for variable, url in [
        ("BROKER_URL", "redis://:hunter2@127.0.0.1:99999/0"),  # was committed, then a traceback
        ("DATABASE_URL", "mysql://agentq:hunter2@127.0.0.1/agentq"),
    ]:
        env = {"DATABASE_URL": stack["database_url"], "BROKER_URL": stack["broker_url"]}
        bad = agentq(home, "run", "submit", "x", env={**env, variable: url})
        said = bad.stdout + bad.stderr
        assert bad.returncode == 2 and f"{variable}: " in bad.stderr, said
        assert "Traceback" not in said and "hunter2" not in said, said
        assert bad.stdout == "" and bad.stderr.count("\n") == 1, said
    big = agentq(home, "run", "submit", "x", "--fact", "note=" + "x" * 10_001)  # the API's cap too
    assert big.returncode == 2, big.stdout + big.stderr
    assert "fact 'note': the value is at most 10000 characters (got 10001)" in big.stderr
    assert _no_runs(home)

    plan = home / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "steps": [
                    {"name": "e", "kind": "tool", "tool": "echo", "args": {"value": "[offline]"}}
                ]
            }
        )
    )
    goal = "Fix the [/] bracket [bold]now[/bold]"
    done = agentq(home, "run", "submit", goal, "--user", "[/]", "--plan", str(plan), "--watch")
    assert done.returncode == 0, done.stdout + done.stderr
    for shown in (
        done.stdout,
        agentq(home, "run", "show", "1").stdout,
        agentq(home, "run", "watch", "1").stdout,
    ):
        assert goal in shown and "[/]" in shown and '"[offline]"' in shown, shown
    listed = agentq(home, "run", "list").stdout
    assert "Fix the [/]" in listed and "succeeded" in listed, listed

    broker_down = {"DATABASE_URL": stack["database_url"], "BROKER_URL": "redis://127.0.0.1:1/0"}
    saved = agentq(home, "run", "submit", "later", env=broker_down)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert "run 2 submitted; the broker could not be reached" in saved.stdout
    assert "later" in agentq(home, "run", "list").stdout

    goal = "Submit 473.43 EUR to CC-4410"
    pinned = agentq(
        home,
        "run",
        "submit",
        goal,
        "--plan",
        str(plan),
        "--fact",
        "currency=USD",
        "--pin-from-goal",
        "--watch",
    )
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    assert "pinned from the goal: amount=473.43 cost_centre=CC-4410" in pinned.stdout
    assert "your --fact won over the goal's currency=EUR" in pinned.stdout
    assert "currency=USD, amount=473.43, cost_centre=CC-4410" in pinned.stdout  # the run's facts
    shown = agentq(home, "run", "submit", goal, "--plan", str(plan))
    assert (
        "the goal states amount=473.43 currency=EUR cost_centre=CC-4410; --pin-from-goal pins them"
        in shown.stdout
    ), shown.stdout
    piped = agentq(home, "run", "submit", "piped", "--plan", "-", "--watch", stdin=plan.read_text())
    assert piped.returncode == 0, piped.stdout + piped.stderr  # `--plan -`: the plan on stdin
    assert '"[offline]"' in piped.stdout and "succeeded" in piped.stdout, piped.stdout

    # Ctrl-C on --watch stops the watch, not the run, and says so
    slow = home / "slow.json"
    slow.write_text(
        json.dumps(
            {"steps": [{"name": "s", "kind": "tool", "tool": "sleep", "args": {"seconds": 3}}]}
        )
    )
    # ... and so does `kill -INT` on a watch started with SIGINT ignored (`cmd &` in a script)
    for ignored in (False, True):
        watching = subprocess.Popen(
            [AGENTQ, "run", "submit", "slow", "--plan", str(slow), "--watch"],
            env=_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=functools.partial(
                signal.signal, signal.SIGINT, signal.SIG_IGN if ignored else signal.SIG_DFL
            ),
        )
        assert watching.stdout is not None
        first = watching.stdout.readline()  # "run N submitted": the watch has begun
        run_id = re.search(r"run (\d+) submitted", first)
        assert run_id is not None, first
        watching.send_signal(signal.SIGINT)
        said = watching.communicate(timeout=30)[0]
        assert watching.returncode == 130, (ignored, said)
        assert f"stopped watching; run {run_id.group(1)} goes on" in said, said
        assert "succeeded" in agentq(home, "run", "watch", run_id.group(1)).stdout
