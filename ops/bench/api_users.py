"""Several users submitting runs over the HTTP API, as the engine benchmark's user's path.

Each user has a submitter token of its own (`models.access.api_tokens.create_token`, what
`agentq token create --role submitter --user U` does) and a thread with one keep-alive HTTP
client; a round gives each user its share of the runs, which its thread submits one after the
other (`POST /api/v1/runs` with an explicit plan), all users at once. The round is timed from
its first submit to the newest `runs.finished_at` of its runs, as `ops.bench.agentq_peer` times
the in-process submits. The per-user quotas are the stack's (on by default): a round that meets
one (429) fails, naming it, rather than waiting out `Retry-After`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from models.access.api_tokens import create_token
from models.db import session_scope
from models.plans.plans import PlanSpec
from ops.bench.agentq_peer import wait_for_runs
from ops.bench.harness import BenchError

RUNS_PATH = "/api/v1/runs"
HTTP_TIMEOUT_S = 60.0


@dataclass
class ApiRound:
    """What one round submitted: run ids, each submit's HTTP latency (s), and the round's
    first submit (epoch s)."""

    run_ids: list[int] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    started: float = 0.0


class ApiUsers:
    """`users` submitter tokens on the stack this process's settings name (made once), and
    their rounds against `api_url`."""

    def __init__(self, api_url: str, users: int, *, prefix: str = "bench-user") -> None:
        self.api_url = api_url
        self.tokens: list[str] = []
        with session_scope() as session:
            for i in range(users):
                user = f"{prefix}-{i:02d}"
                _, raw = create_token(session, name=user, role="submitter", user_id=user)
                self.tokens.append(raw)
        self.clients = [
            httpx.Client(
                base_url=api_url,
                headers={"Authorization": f"Bearer {token}"},
                timeout=HTTP_TIMEOUT_S,
            )
            for token in self.tokens
        ]
        self.last: ApiRound = ApiRound()

    def close(self) -> None:
        """Close every user's HTTP client."""
        for client in self.clients:
            client.close()

    def submit_all(self, plans: int, plan: PlanSpec) -> ApiRound:
        """Submit `plans` runs of `plan`, spread over the users as evenly as can be, each user's
        in order on its own thread, all users at once. Raises `BenchError` naming the status
        and the API's message of any submit not answered 201."""
        body = {"goal": "benchmark", "plan": plan.model_dump(mode="json", exclude_none=True)}
        shares = [
            plans // len(self.clients) + (i < plans % len(self.clients))
            for i in range(len(self.clients))
        ]
        found = ApiRound(started=time.time())
        lock = threading.Lock()
        errors: list[str] = []

        def user(client: httpx.Client, runs: int) -> None:
            for _ in range(runs):
                sent = time.perf_counter()
                try:
                    response = client.post(RUNS_PATH, json=body)
                except httpx.HTTPError as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return
                took = time.perf_counter() - sent
                if response.status_code != 201:
                    errors.append(f"{response.status_code} {_message(response)}")
                    return
                with lock:
                    found.run_ids.append(int(response.json()["run"]["id"]))
                    found.latencies_s.append(took)

        threads = [
            threading.Thread(target=user, args=(client, runs), daemon=True)
            for client, runs in zip(self.clients, shares, strict=True)
            if runs
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise BenchError(f"{len(errors)} API submits failed; first: {errors[0]}")
        return found

    def round(self, plans: int, plan: PlanSpec) -> float:
        """Seconds for `plans` runs of `plan` over the API (`submit_all`), from the first submit
        to the newest `runs.finished_at`; the round is kept as `last`."""
        self.last = self.submit_all(plans, plan)
        return wait_for_runs(self.last.run_ids) - self.last.started


def _message(response: httpx.Response) -> str:
    try:
        body: Any = response.json()
    except ValueError:
        return response.text[:200]
    return str(body.get("detail", body) if isinstance(body, dict) else body)[:200]
