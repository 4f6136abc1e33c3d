"""Approvals before effects over the HTTP API (issue 30, items 1-3): a submitter tightens the
policy for its run, the gated call waits in the review queue like any escalation, and a
reviewer edits its arguments (checked against the tool's schema) before it runs once."""

from __future__ import annotations

from pathlib import Path

from tests.api.conftest import Client, open_escalation
from tests.integration.conftest import run_steps, wait_for_run


def test_a_gated_call_is_reviewed_and_edited_over_the_api(client: Client, tmp_path: Path) -> None:
    effects = tmp_path / "effects.txt"
    args = {"path": str(effects), "marker": "pay 900"}
    step = {"name": "pay", "kind": "tool", "tool": "append_marker", "args": args}
    body = {
        "goal": "pay the invoice",
        "user": "approvals-api",
        "plan": {"steps": [step]},
        "approvals": {"append_marker": {"when": [{"arg": "marker", "startswith": "pay"}]}},
    }
    loosening = client("admin").post(
        "/api/v1/runs", json={**body, "approvals": {"append_marker": "never"}}
    )
    assert loosening.status_code == 400
    assert "approvals.append_marker: a run may only require approval" in loosening.text
    created = client("admin").post("/api/v1/runs", json=body)
    assert created.status_code == 201, created.text
    run_id = created.json()["run"]["id"]
    assert wait_for_run(run_id).status == "waiting_review"
    esc_id = open_escalation(run_id)
    rita = client("reviewer")
    shown = rita.get(f"/api/v1/reviews/{esc_id}").json()["escalation"]
    assert shown["reason"] == "approval_required"
    assert shown["detail"]["arguments"] == args
    both = rita.post(
        f"/api/v1/reviews/{esc_id}/edit", json={"arguments": args, "plan": {"steps": []}}
    )
    assert both.status_code == 422  # either plan or arguments
    wrong = rita.post(f"/api/v1/reviews/{esc_id}/edit", json={"arguments": {"marker": 1}})
    assert wrong.status_code == 400 and "arguments: tool 'append_marker'" in wrong.text
    edited = {"path": str(effects), "marker": "pay 450"}
    decided = rita.post(
        f"/api/v1/reviews/{esc_id}/edit", json={"arguments": edited, "comment": "half"}
    )
    assert decided.status_code == 200, decided.text
    assert wait_for_run(run_id, ("succeeded", "failed")).status == "succeeded"
    assert effects.read_text().splitlines() == ["pay 450"]
    (ran,) = run_steps(run_id)
    assert (ran.status, ran.result) == ("succeeded", {"lines": 1})
