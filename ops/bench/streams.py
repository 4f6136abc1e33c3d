"""Open event streams and costly reads against a running `agentq up`: what they cost the API.

`python -m ops.bench.streams [--url http://127.0.0.1:8765] [--streams 200] [--seconds 20]`

Issue 27, item 4: 200 streams on one run, each polling the database every 0.2 s, took the API
process to 83% CPU and another user's `GET /api/v1/runs` from 9 ms to 414 ms median, and
`/api/v1/memory/search` cost about 100 ms of CPU a call, with no limit. This measures the same
over HTTP only (and the CLI, for tokens), so it runs against any version of the server:

1. tokens (`agentq token create`, in this process's environment: run it with the stack's
   `AGENTQ_HOME`): an admin that submits the watched run, `--stream-tokens` admins that
   watch it, a submitter of another user that lists its runs, and one of a third user that
   searches its memory;
2. the watched run: a `noop` step, then one that always fails with no replan budget, so the run
   waits for review and its streams stay open (as in the issue);
3. `--seconds` with no stream open, then `--seconds` with `--streams` streams open on that run
   (spread over the watch tokens): the API process's CPU% (user + system, from
   `/proc/<pid>/stat` via psutil; the process is the one listening on the URL's port) while the
   other user sends `GET /api/v1/runs` one after another, with their latency's median and p95;
4. one watch token opening `--cap-probe` streams at once: how many were refused (429);
5. `--searches` calls of `GET /api/v1/memory/search`, one after another (after one that loads
   the embedding model): the API's CPU per call, answered and refused (429, `Retry-After`).

The machine's load average is printed before and after: on a shared machine, compare figures
taken in the same hour and say what else ran.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import psutil
from httpx_sse import aconnect_sse

API = "/api/v1"
OPEN_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 120.0
WATCHED_PLAN = {
    "steps": [
        {"name": "a", "kind": "tool", "tool": "noop", "args": {}},
        {"name": "x", "kind": "tool", "tool": "always_fails", "args": {}},
    ]
}


@dataclass(frozen=True)
class Window:
    """One measured window: the API's CPU% over it and the probe's latencies (s)."""

    label: str
    cpu_percent: float
    latencies: list[float]
    statuses: Counter[int]

    def line(self) -> str:
        ordered = sorted(self.latencies)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else 0.0
        median = statistics.median(ordered) if ordered else 0.0
        return (
            f"{self.label:<22} API CPU {self.cpu_percent:5.1f}%   GET /runs (other user) "
            f"median {median * 1000:6.1f} ms  p95 {p95 * 1000:6.1f} ms  n={len(ordered)}  "
            f"statuses {dict(self.statuses)}"
        )


def token(name: str, role: str, user: str | None = None) -> str:
    """A new token from `agentq token create` (the raw token is the line starting `aq_`)."""
    argv = [sys.executable, "-m", "ops.cli", "token", "create", "--name", name, "--role", role]
    argv += ["--user", user] if user else []
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return next(line.strip() for line in out.splitlines() if line.strip().startswith("aq_"))


def api_process(url: str) -> psutil.Process:
    """The process listening on `url`'s port (the API: uvicorn under `agentq up`)."""
    port = urlsplit(url).port or 80
    for conn in psutil.net_connections(kind="tcp"):
        listening = conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port
        if listening and conn.pid is not None:
            return psutil.Process(conn.pid)
    raise SystemExit(f"no process of yours listens on port {port}: is `agentq up` running?")


def cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def client(url: str, raw: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {raw}"}
    return httpx.Client(base_url=url, headers=headers, timeout=60, trust_env=False)


def watched_run(url: str, admin: str) -> int:
    """Submit the run the streams watch and wait until it waits for review; its id."""
    body = {"goal": "bench: watched", "user": "bench-watched", "plan": WATCHED_PLAN}
    with client(url, admin) as http:
        answer = http.post(f"{API}/runs", json={**body, "budgets": {"replans": 0}})
        answer.raise_for_status()
        run_id = int(answer.json()["run"]["id"])
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while http.get(f"{API}/runs/{run_id}").json()["status"] != "waiting_review":
            if time.monotonic() > deadline:
                raise SystemExit(f"run {run_id} did not come to wait for review")
            time.sleep(0.2)
    return run_id


def measure(label: str, url: str, prober: str, proc: psutil.Process, seconds: float) -> Window:
    """`seconds` of `GET /runs` by `prober`, one after another, and the API's CPU% meanwhile."""
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    with client(url, prober) as http:
        http.get(f"{API}/runs", params={"limit": 20})  # connect first
        cpu0, wall0 = cpu_s(proc), time.monotonic()
        while time.monotonic() - wall0 < seconds:
            sent = time.perf_counter()
            statuses[http.get(f"{API}/runs", params={"limit": 20}).status_code] += 1
            latencies.append(time.perf_counter() - sent)
            time.sleep(0.05)
        cpu1, wall1 = cpu_s(proc), time.monotonic()
    return Window(label, 100 * (cpu1 - cpu0) / (wall1 - wall0), latencies, statuses)


class Streams:
    """`count` streams of one run, spread over `tokens`, held open in a thread of their own."""

    def __init__(self, url: str, run_id: int, tokens: list[str], count: int) -> None:
        self.url, self.run_id, self.tokens, self.count = url, run_id, tokens, count
        self.statuses: Counter[int] = Counter()
        self.opened = 0
        self.messages = 0
        self._stop = threading.Event()
        self._ready = threading.Event()

    @contextmanager
    def held(self) -> Iterator[Streams]:
        """Open them (waiting until each answered), yield, then close them."""
        thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        thread.start()
        if not self._ready.wait(OPEN_TIMEOUT_S):
            raise SystemExit(f"streams did not open within {OPEN_TIMEOUT_S} s")
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(timeout=30)

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=self.count + 10)
        timeout = httpx.Timeout(60, read=None)
        async with httpx.AsyncClient(base_url=self.url, limits=limits, timeout=timeout) as http:
            answered = asyncio.Semaphore(0)
            tasks = [
                asyncio.create_task(self._follow(http, self.tokens[i % len(self.tokens)], answered))
                for i in range(self.count)
            ]
            for _ in range(self.count):
                await asyncio.wait_for(answered.acquire(), OPEN_TIMEOUT_S)
            self._ready.set()
            while not self._stop.is_set():
                await asyncio.sleep(0.1)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, http: httpx.AsyncClient, raw: str, answered: asyncio.Semaphore) -> None:
        path = f"{API}/runs/{self.run_id}/events/stream"
        headers = {"Authorization": f"Bearer {raw}"}
        async with aconnect_sse(http, "GET", path, headers=headers) as source:
            self.statuses[source.response.status_code] += 1
            answered.release()
            if source.response.status_code != 200:
                return
            self.opened += 1
            async for _ in source.aiter_sse():
                self.messages += 1


def searches(url: str, raw: str, proc: psutil.Process, count: int) -> str:
    """`count` memory searches one after another: the API's CPU per call, for the answered
    ones and for the refused ones (429, with their `Retry-After`)."""
    spent: dict[int, list[float]] = {}
    retry_after: set[str] = set()
    with client(url, raw) as http:
        http.get(f"{API}/memory/search", params={"q": "warm up"})  # loads the embedding model
        for i in range(count):
            before = cpu_s(proc)
            answer = http.get(f"{API}/memory/search", params={"q": f"expense policy {i}"})
            spent.setdefault(answer.status_code, []).append(cpu_s(proc) - before)
            if answer.status_code == 429:
                retry_after.add(answer.headers.get("Retry-After", "missing"))
    parts = [
        f"{status}: {len(times)} calls, {1000 * statistics.mean(times):.1f} ms CPU each"
        for status, times in sorted(spent.items())
    ]
    extra = f"  Retry-After {sorted(retry_after)}" if retry_after else ""
    return f"/memory/search x{count} in a row: " + "; ".join(parts) + extra


def cap_probe(url: str, run_id: int, raw: str, count: int) -> str:
    """One token opening `count` streams at once: how many were accepted and refused."""
    probe = Streams(url, run_id, [raw], count)
    with probe.held():
        pass
    return f"one token, {count} streams at once: statuses {dict(probe.statuses)}"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def run(args: argparse.Namespace) -> None:
    url = args.url.rstrip("/").removesuffix(API)
    proc = api_process(url)
    tag = uuid.uuid4().hex[:6]
    print(f"API process {proc.pid} at {url}; {load()}")
    admin = token(f"bench-admin-{tag}", "admin")
    watchers = [token(f"bench-watch{i}-{tag}", "admin") for i in range(args.stream_tokens)]
    prober = token(f"bench-other-{tag}", "submitter", "bench-other")
    searcher = token(f"bench-search-{tag}", "submitter", "bench-search")
    run_id = watched_run(url, admin)
    print(measure("no streams", url, prober, proc, args.seconds).line())
    held = Streams(url, run_id, watchers, args.streams)
    with held.held():
        window = measure(f"{held.opened} streams open", url, prober, proc, args.seconds)
    print(window.line())
    print(f"  {args.streams} streams over {len(watchers)} tokens: statuses {dict(held.statuses)}")
    print(cap_probe(url, run_id, watchers[0], args.cap_probe))
    print(searches(url, searcher, proc, args.searches))
    print(load())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    first_line = (__doc__ or "").splitlines()[0]
    p = argparse.ArgumentParser(description=first_line)
    p.add_argument("--url", default="http://127.0.0.1:8765", help="The API's base URL.")
    p.add_argument("--streams", type=int, default=200, help="Streams held open on one run.")
    p.add_argument("--stream-tokens", type=int, default=10, help="Tokens they are spread over.")
    p.add_argument("--seconds", type=float, default=20.0, help="Length of each window, s.")
    p.add_argument("--cap-probe", type=int, default=40, help="Streams one token opens at once.")
    p.add_argument("--searches", type=int, default=60, help="Memory searches in a row.")
    return p.parse_args(argv)


def main() -> None:
    run(parse_args())


if __name__ == "__main__":
    main()
