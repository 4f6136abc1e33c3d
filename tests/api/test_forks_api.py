"""Forking over the API and the client (`POST /api/v1/runs/{id}/fork`, issue 32): a submitter
forks its own run, which shows where it came from and the source its fork; another user's run is a
404; a step it has not is a 409 naming `from_step`, and nothing is written."""

from __future__ import annotations

import pytest

from agentq.client import ApiError, Client
from tests.api.conftest import noop

pytestmark = pytest.mark.integration


def test_a_submitter_forks_its_run_and_both_show_it(api_url: str, tokens: dict[str, str]) -> None:
    with Client(api_url, tokens["alice"]) as agentq:
        plan = {"steps": [noop("a"), noop("b"), noop("c")]}
        source = agentq.submit("three no-ops", facts={"k": "v"}, plan=plan).run.id
        assert agentq.wait(source, timeout_s=60).status == "succeeded"
        forked = agentq.fork(source, "b", facts={"k": "w"})
        assert forked.run.forked_from is not None
        assert (forked.run.forked_from.run_id, forked.run.forked_from.step) == (source, "b")
        assert forked.run.pinned_facts == {"k": "w"}
        done = agentq.wait(forked.run.id, timeout_s=60)
        assert done.status == "succeeded"
        copied = {int(new): old for new, old in forked.run.forked_from.copied.items()}
        (a,) = [s for s in done.steps if s.id in copied]
        assert (a.name, a.status, a.attempt) == ("a", "succeeded", 0)
        assert agentq.get(source).forks == [forked.run.id]


def test_refused_forks_name_what_is_wrong(api_url: str, tokens: dict[str, str]) -> None:
    with Client(api_url, tokens["alice"]) as alice, Client(api_url, tokens["bob"]) as bob:
        source = alice.submit("one no-op", plan={"steps": [noop("a")]}).run.id
        alice.wait(source, timeout_s=60)
        with pytest.raises(ApiError) as missing:
            alice.fork(source, "zz")
        assert missing.value.status == 409 and "from_step" in str(missing.value)
        with pytest.raises(ApiError) as other:
            bob.fork(source, "a")
        assert other.value.status == 404
        assert alice.get(source).forks == []
