"""Procedural memory in the engine: a procedure saved from a succeeded run is recalled when a
similar goal is planned, the plan follows its template, the plan's `procedures.recalled` event
names it, and the run page shows it as used; another user never gets it. And the CLI's
`agentq procedure ...` commands, in process."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from models.access import api_tokens
from models.db import session_scope
from models.errors import Conflict, InvalidInput, NotAllowed, NotFound
from models.memory import procedure_admin
from models.memory.procedure_recall import Used, used_by_run
from models.memory.procedures import Actor, Procedure
from ops.procedure_commands import procedure_app
from ops.stack import LocalStack
from tests.integration.conftest import run_steps, wait_for_run
from tests.support.console import csrf_of

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
OPERATOR = Actor("cli:tester", "admin")
STEPS = [
    {"name": "tally_receipts", "kind": "tool", "tool": "echo", "args": {"value": "tallied"}},
    {"name": "file_expenses", "kind": "tool", "tool": "noop", "args": {}, "after": []},
]


def _user(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def _plan_v1(run_id: int) -> list[str]:
    return [s.name for s in run_steps(run_id) if s.plan_version == 1]


@pytest.fixture
def console(engine: LocalStack) -> Iterator[Callable[[str, str | None], TestClient]]:
    """`console(role, user)`: the review console in process, signed in with a new token."""
    opened: list[TestClient] = []

    def sign_in(role: str, user: str | None = None) -> TestClient:
        with session_scope() as session:
            name = f"procedures-{uuid.uuid4().hex[:8]}"
            _, raw = api_tokens.create_token(session, name=name, role=role, user_id=user)
        client = TestClient(create_app())
        opened.append(client)
        form = client.get("/ui/login")
        data = {"token": raw, "csrf_token": csrf_of(form.text)}
        assert client.post("/ui/login", data=data, follow_redirects=False).status_code == 303
        return client

    yield sign_in
    for client in opened:
        client.close()


def test_a_saved_run_is_recalled_for_a_similar_goal_and_shown_as_used(
    make_run: MakeRun, console: Callable[[str, str | None], TestClient]
) -> None:
    ana, bob = _user("ana"), _user("bob")
    first = wait_for_run(make_run(STEPS, user=ana, goal="Tally the receipts of my Porto trip"))
    assert first.status == "succeeded"
    saved = procedure_admin.save_from_run(OPERATOR, first.id or 0)
    try:
        assert (saved.scope, saved.user_id, saved.version) == ("user", ana, 1)
        assert [s["name"] for s in (saved.plan_template or {})["steps"]] == _plan_v1(first.id or 0)

        second = wait_for_run(make_run(None, user=ana, goal="Tally the receipts of my Madrid trip"))
        assert second.status == "succeeded"
        assert _plan_v1(second.id or 0) == ["tally_receipts", "file_expenses"]  # its template
        with session_scope() as session:
            used = used_by_run(session, second.id or 0)
        title = "Tally the receipts of my Porto trip"
        # the offline planner adopts the template by reference (worker.phases.adoption)
        assert used == [Used(1, "plan", saved.id or 0, 1, title, "user", adopted=True)]

        page = console("admin", None).get(f"/ui/runs/{second.id}")
        assert page.status_code == 200
        assert f'data-procedure="{saved.id}"' in page.text and title in page.text
        assert "adopted</span>" in page.text
        hidden = console("reviewer", None).get(f"/ui/runs/{second.id}").text
        assert f'data-procedure="{saved.id}"' in hidden and title not in hidden  # the user's own

        other = wait_for_run(make_run(None, user=bob, goal="Tally the receipts of my Madrid trip"))
        assert _plan_v1(other.id or 0) == ["answer"]  # bob never gets ana's procedure
        with session_scope() as session:
            assert used_by_run(session, other.id or 0) == []
    finally:
        procedure_admin.remove(OPERATOR, saved.id or 0)


def test_only_a_succeeded_run_is_saved_and_an_edit_makes_a_new_version(make_run: MakeRun) -> None:
    failing = [{"name": "x", "kind": "tool", "tool": "always_fails"}]
    failed = wait_for_run(make_run(failing, user=_user("cy"), replans=0))
    assert failed.status == "waiting_review"
    with pytest.raises(Conflict, match="only a succeeded run"):
        procedure_admin.save_from_run(OPERATOR, failed.id or 0)
    done = wait_for_run(make_run(STEPS, user=_user("di"), goal="Tally the Lyon receipts"))
    saved = procedure_admin.save_from_run(OPERATOR, done.id or 0, title="Lyon tally")
    try:
        edited = procedure_admin.edit(OPERATOR, saved.id or 0, {"body": "Tally, then file."})
        assert (edited.version, edited.body, edited.title) == (2, "Tally, then file.", "Lyon tally")
        with pytest.raises(Conflict, match="at version 2, not 1"):
            procedure_admin.edit(OPERATOR, saved.id or 0, {"body": "x"}, expected_version=1)
        shown = procedure_admin.show(OPERATOR, saved.id or 0)
        assert [v.version for v in shown.versions] == [1, 2]
        assert shown.versions[0].body.startswith(f"The plan of run {done.id}")
    finally:
        procedure_admin.remove(OPERATOR, saved.id or 0)


def test_the_cli_adds_shows_edits_saves_and_deletes(make_run: MakeRun, tmp_path: Path) -> None:
    cli = CliRunner()
    template = tmp_path / "plan.json"
    template.write_text(json.dumps({"steps": STEPS}))
    user = _user("eve")
    args = ["add", "--title", "Tally", "--when", "receipts", "--template", str(template)]
    added = cli.invoke(procedure_app, [*args, "--user", user])
    assert added.exit_code == 0, added.output
    procedure_id = int(added.output.split()[1])
    try:
        assert "tally_receipts" in cli.invoke(procedure_app, ["show", str(procedure_id)]).output
        listed = cli.invoke(procedure_app, ["list", "--user", user]).output
        assert "Tally" in listed and f"│ {procedure_id} " in listed  # the table wraps the user
        both = ["edit", str(procedure_id), "--clear-template", "--template", str(template)]
        refused = cli.invoke(procedure_app, both)
        assert isinstance(refused.exception, InvalidInput)
        assert "give one of them, not both" in str(refused.exception)
        edited = cli.invoke(procedure_app, ["edit", str(procedure_id), "--clear-template"])
        assert edited.exit_code != 0  # neither a how-to nor a template is left
        assert isinstance(edited.exception, Conflict)
        edited = cli.invoke(procedure_app, ["edit", str(procedure_id), "--body", "Add them."])
        assert edited.exit_code == 0 and "now version 2" in edited.output
    finally:
        gone = cli.invoke(procedure_app, ["delete", str(procedure_id), "--yes"])
        assert gone.exit_code == 0, gone.output
    # a user scope without --user is user local's, as `agentq run submit`'s runs are
    mine = cli.invoke(procedure_app, ["add", "--title", "Tally", "--when", "w", "--body", "b"])
    assert mine.exit_code == 0, mine.output
    with session_scope() as session:
        added_for = session.get(Procedure, int(mine.output.split()[1]))
        assert added_for is not None and (added_for.scope, added_for.user_id) == ("user", "local")
    procedure_admin.remove(OPERATOR, added_for.id or 0)
    run_id = make_run(STEPS, user=user, goal="Tally the Nantes receipts")
    wait_for_run(run_id)
    saved = cli.invoke(procedure_app, ["save", "--from-run", str(run_id)])
    assert saved.exit_code == 0 and "Tally the Nantes receipts" in saved.output, saved.output
    procedure_admin.remove(OPERATOR, int(saved.output.split()[1]))


def test_a_run_saved_is_its_users_own_a_reviewer_may_not_and_forget_takes_every_copy(
    make_run: MakeRun,
) -> None:
    """A run's plan holds its user's values: saved it stays the user's own unless everyone's
    is asked for; a reviewer may not write it into the user's memory, which it can neither read
    nor delete (issue 27); forgetting the user deletes every copy."""
    from models.memory import memory_admin as memory

    user = _user("ed")
    done = wait_for_run(make_run(STEPS, user=user, goal="Tally the Nice receipts"))
    rita = Actor("rita", "reviewer")
    with pytest.raises(NotAllowed, match="scope: a reviewer does not save run"):
        procedure_admin.save_from_run(rita, done.id or 0)
    own = procedure_admin.save_from_run(OPERATOR, done.id or 0)
    shared = procedure_admin.save_from_run(rita, done.id or 0, scope="everyone")
    assert (own.scope, own.user_id) == ("user", user)
    assert shared.scope == "everyone"
    with session_scope() as session:
        counts = memory.forget_user(session, user_id=user)
    assert counts["procedures"] == 2
    for saved in (own, shared):
        with pytest.raises(NotFound):
            procedure_admin.show(OPERATOR, saved.id or 0)
