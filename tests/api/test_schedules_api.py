"""`/api/v1/schedules` over real HTTP, the Python client's schedule methods, `agentq schedule` as
a subprocess and the console's `/ui/schedules` (in process), against the session engine: tokens
scoped as for runs, bad timing refused naming the field, pause and resume guarded, a fired due
time listed with its run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from agentq.client import ApiError
from agentq.client import Client as AgentqClient
from api.responses import ScheduleOut
from models.schedules import fires
from models.settings import get_settings
from tests.api.conftest import Client, noop, user_of
from tests.api.test_procedures import signed_in
from tests.support.console import csrf_of

pytestmark = pytest.mark.integration
AGENTQ = shutil.which("agentq") or "agentq"
PATH = "/api/v1/schedules"


def _body(**more: Any) -> dict[str, Any]:
    return {"name": f"s-{uuid.uuid4().hex[:8]}", "goal": "scheduled", "every_s": 3600, **more}


def test_a_submitter_makes_and_reads_its_own_schedules_only(client: Client) -> None:
    alice = client("alice")
    made = alice.post(PATH, json=_body(cron="0 9 * * 1-5", timezone="Europe/Berlin", every_s=None))
    assert made.status_code == 201, made.text
    schedule = ScheduleOut.model_validate(made.json())
    assert schedule.user_id == user_of(client, "alice") and schedule.overlap == "skip"
    due = schedule.next_due_at.astimezone(ZoneInfo("Europe/Berlin"))  # type: ignore[union-attr]
    assert (due.hour, due.minute) == (9, 0) and due.isoweekday() <= 5
    assert schedule.catch_up == get_settings().schedule_catch_up and schedule.fires == []
    path = f"{PATH}/{schedule.id}"
    assert client("bob").get(path).status_code == 404  # another user's: as if missing
    assert client("bob").post(f"{path}/pause").status_code == 404
    assert schedule.id not in [s["id"] for s in client("bob").get(PATH).json()]
    assert schedule.id in [s["id"] for s in client("reviewer").get(PATH).json()]  # reads all
    assert client("reviewer").post(f"{path}/pause").status_code == 403  # changes none
    other = client("alice").post(PATH, json=_body(user="someone-else"))
    assert other.status_code == 403 and "acts only for its own user" in other.json()["detail"]
    taken = alice.post(PATH, json=_body(name=schedule.name))
    assert taken.status_code == 409 and "has a schedule named" in taken.json()["detail"]
    assert alice.delete(path).status_code == 200
    assert alice.get(path).status_code == 404


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"cron": "61 * * * *", "every_s": None}, "cron: '61 * * * *' is not a cron expression"),
        ({"cron": "0 9 * * *", "timezone": "Nowhere/City", "every_s": None}, "timezone: "),
        ({"every_s": 30}, "every_s: at least 60 s (AGENTQ_SCHEDULE_MIN_INTERVAL_S"),
        ({"cron": "0 9 * * *"}, "cron, every_s: give exactly one"),
        ({"facts": {"k": "v"}, "success_criteria": ["${facts.nope} holds"]}, "nope"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_written(
    client: Client, fields: dict[str, Any], said: str
) -> None:
    admin = client("admin")
    body = _body(user=f"bad-{uuid.uuid4().hex[:6]}", **fields)
    refused = admin.post(PATH, json=body)
    assert refused.status_code == 400, refused.text
    assert said in refused.json()["detail"]
    assert admin.get(PATH, params={"user": body["user"]}).json() == []


def test_a_bad_name_or_overlap_is_a_422_in_words(client: Client) -> None:
    refused = client("alice").post(PATH, json=_body(name="Daily Report", overlap="queue"))
    assert refused.status_code == 422
    messages = {e["loc"][-1]: e["msg"] for e in refused.json()["detail"]}
    assert messages["name"].startswith("must be a lower-case letter or digit")
    assert "'skip' or 'allow'" in messages["overlap"]


def test_the_client_pauses_resumes_and_lists_a_fired_schedule(
    api_url: str, tokens: dict[str, str], client: Client
) -> None:
    """Through `agentq.client.Client`: pause twice is a 409; resumed, a due time fired (by a
    pass with its clock) shows in the list with its run."""
    plan = {"steps": [noop("a")]}
    with AgentqClient(api_url, tokens["admin"]) as agentq:
        user = f"client-{uuid.uuid4().hex[:6]}"
        made = agentq.add_schedule("hourly", "scheduled", user=user, every_s=3600, plan=plan)
        assert agentq.pause_schedule(made.id).paused
        with pytest.raises(ApiError) as twice:
            agentq.pause_schedule(made.id)
        assert twice.value.status == 409
        resumed = agentq.resume_schedule(made.id)
        assert not resumed.paused and resumed.next_due_at is not None
        fires.fire_due(settings=get_settings(), now=resumed.next_due_at)
        (listed,) = agentq.schedules(user=user)
        (fire,) = listed.fires
        assert fire.outcome == "submitted" and fire.run_id is not None
        (shown,) = agentq.schedule(made.id).fires  # its run's status may have moved on
        assert (shown.due_at, shown.run_id) == (resumed.next_due_at, fire.run_id)
        assert shown.fired_at < resumed.next_due_at  # recorded now, by the database's clock
        assert agentq.remove_schedule(made.id).id == made.id


def _agentq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTQ, *args],
        env=dict(os.environ),  # the session engine's AGENTQ_DATABASE_URL and AGENTQ_BROKER_URL
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_the_cli_adds_lists_and_refuses_in_one_line(client: Client) -> None:
    """`agentq schedule add` then `list --json` (the API's shape, the same document); a bad
    time zone exits 2 (bad input) with one line naming the field."""
    user = f"cli-{uuid.uuid4().hex[:6]}"
    args = ["schedule", "add", "weekday-report", "Summarise the week", "--user", user]
    added = _agentq(*args, "--cron", "30 8 * * 1-5", "--timezone", "America/New_York")
    assert added.returncode == 0, added.stderr
    assert "weekday-report" in added.stdout and "next due" in added.stdout
    listed = _agentq("schedule", "list", "--user", user, "--json")
    assert listed.returncode == 0, listed.stderr
    (shown,) = [ScheduleOut.model_validate(s) for s in json.loads(listed.stdout)]
    assert (shown.cron, shown.timezone) == ("30 8 * * 1-5", "America/New_York")
    api = client("admin").get(f"{PATH}/{shown.id}").json()
    assert api["next_due_at"] == json.loads(listed.stdout)[0]["next_due_at"]
    bad = _agentq(*args[:2], "other", "goal", "--cron", "0 9 * * *", "--timezone", "Berlin")
    assert bad.returncode == 2 and bad.stderr.strip().endswith(
        "timezone: 'Berlin' is no IANA time zone (such as UTC, Europe/Berlin, America/New_York)"
    )
    assert _agentq("schedule", "remove", str(shown.id)).returncode == 0


def test_the_console_lists_schedules_and_pauses_and_resumes_them(
    client: Client, tokens: dict[str, str]
) -> None:
    """`/ui/schedules`: alice's schedule with its next due time and a fired due time's run;
    Pause and Resume (CSRF-checked forms) change it; bob sees none of it, a reviewer sees it
    with no buttons."""
    made = client("alice").post(PATH, json=_body(plan={"steps": [noop("a")]})).json()
    fires.fire_due(settings=get_settings(), now=datetime.fromisoformat(made["next_due_at"]))
    run_id = client("alice").get(f"{PATH}/{made['id']}").json()["fires"][0]["run_id"]
    row = f'data-schedule="{made["id"]}"'
    with signed_in(tokens["alice"]) as console:
        page = console.get("/ui/schedules").text
        assert row in page and made["name"] in page and f'href="/ui/runs/{run_id}"' in page
        pause_url = f"/ui/schedules/{made['id']}/pause"
        assert console.post(pause_url, follow_redirects=False).status_code == 403  # no CSRF
        form = {"csrf_token": csrf_of(page)}
        assert console.post(pause_url, data=form, follow_redirects=False).status_code == 303
        paused = console.get("/ui/schedules").text
        assert f"Schedule {made['name']} paused." in paused and "Resume</button>" in paused
        again = console.post(pause_url, data=form, follow_redirects=True).text
        assert f"schedule {made['id']} is paused already; nothing was changed" in again
        resume_url = f"/ui/schedules/{made['id']}/resume"
        resumed = console.post(resume_url, data=form, follow_redirects=True).text
        assert "resumed; it fires from its next due time" in resumed
    with signed_in(tokens["bob"]) as console:
        assert row not in console.get("/ui/schedules").text
    with signed_in(tokens["reviewer"]) as console:
        page = console.get("/ui/schedules").text
        assert row in page and "Pause</button>" not in page
    client("alice").delete(f"{PATH}/{made['id']}")
