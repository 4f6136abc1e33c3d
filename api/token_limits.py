"""Per-token limits of the API: event streams open at once, and costly reads a minute.

Issue 27, item 4: one token held 200 streams on one run, and `/memory/search` (about 100 ms of
CPU a call) could be called without end; both took the API from every other user. Now:

- **Streams**: a token holds at most `AGENTQ_STREAM_MAX_PER_TOKEN` event streams at once (the
  API's and the console's, whose streams count for the session's token); one more is refused
  with 429 and `Retry-After: STREAM_RETRY_AFTER_S`. A slot is taken when the stream's request
  is answered and given back when its response ends, however it ends (`StreamSlots`).
- **Costly reads**: `AGENTQ_COSTLY_READS_PER_MINUTE` per token, as a token bucket (`Bucket`):
  that many at once, then one each `60 / n` s; beyond it 429 with `Retry-After` = the whole
  seconds until the next one is allowed. Costly are `GET /memory/search` (an embedding and a
  hybrid recall), `GET /memory/facts` (all of a user's facts, unpaged), and the pages over their
  default size: `GET /runs?limit=` over `RUNS_PAGE_FREE`, `GET /runs/{id}?events_limit=` over
  `EVENTS_PAGE_FREE`, `GET /reviews?limit=` over `REVIEWS_PAGE_FREE` (a page of 450 runs cost
  60 ms of CPU, a fifth of a search on the same loaded machine; a review is three reads). A read
  is charged once its token and parameters were accepted: a malformed request costs nothing.

Both count in the memory of one API process, so they need no round trip. `agentq up` runs one
API process, so its limits are exact; a deployment that runs N API processes (uvicorn
`--workers`, or N machines behind a balancer) lets a token have up to N times as much. A
`TokenLimitExceeded` is answered by `api.errors` (429, the JSON refusal, `Retry-After`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

from api.auth import Principal
from api.errors import TOKEN_LIMIT_REFUSAL
from api.responses import ErrorOut
from models.errors import TokenLimitExceeded
from models.settings import get_settings

# Retry-After of a stream over the cap, s: no row says when a stream ends (a run's ends with
# the run, the review stream never); a client that asks sooner only adds load.
STREAM_RETRY_AFTER_S: Final = 15
RUNS_PAGE_FREE: Final = 100  # `GET /runs` pages up to this many runs are not costly (default 50)
EVENTS_PAGE_FREE: Final = 200  # the run detail's default `events_limit`
REVIEWS_PAGE_FREE: Final = 100  # the review queue's default `limit`
# The `responses` of a route these limits guard: the 429 with its `Retry-After`.
LIMITED: Final[dict[int | str, dict[str, Any]]] = {429: {"model": ErrorOut, **TOKEN_LIMIT_REFUSAL}}


class StreamSlots:
    """How many streams each token holds open in this process (thread-safe)."""

    def __init__(self) -> None:
        self._held: Counter[int] = Counter()
        self._lock = threading.Lock()

    def take(self, token_id: int, most: int) -> None:
        """One more stream for `token_id`, or `TokenLimitExceeded` when it holds `most` (0: no
        limit)."""
        with self._lock:
            if most and self._held[token_id] >= most:
                raise TokenLimitExceeded(
                    f"AGENTQ_STREAM_MAX_PER_TOKEN: this token holds {self._held[token_id]} "
                    f"event streams open, the most allowed ({most}); close one, or resume "
                    "after one has ended",
                    setting="AGENTQ_STREAM_MAX_PER_TOKEN",
                    retry_after_s=STREAM_RETRY_AFTER_S,
                )
            self._held[token_id] += 1

    def give_back(self, token_id: int) -> None:
        """A stream of `token_id` has ended."""
        with self._lock:
            self._held[token_id] -= 1
            if self._held[token_id] <= 0:
                del self._held[token_id]

    def held(self, token_id: int) -> int:
        with self._lock:
            return self._held[token_id]


@dataclass
class Bucket:
    """A token bucket: `level` reads allowed now (at most `capacity`) as of `at` (monotonic s),
    refilled at `capacity / 60` a second."""

    level: float
    at: float

    def take(self, capacity: int, now: float) -> float:
        """Take one read; the seconds until one is allowed when none is now (0.0: taken)."""
        rate = capacity / 60.0
        self.level = min(float(capacity), self.level + (now - self.at) * rate)
        self.at = now
        if self.level >= 1.0:
            self.level -= 1.0
            return 0.0
        return (1.0 - self.level) / rate


class CostlyReads:
    """Each token's `Bucket` of costly reads in this process (thread-safe)."""

    def __init__(self) -> None:
        self._buckets: dict[int, Bucket] = {}
        self._lock = threading.Lock()

    def charge(self, token_id: int, per_minute: int, now: float | None = None) -> None:
        """Count one costly read of `token_id`; `TokenLimitExceeded` (nothing counted) when its
        bucket is empty. `per_minute` 0: no limit."""
        if not per_minute:
            return
        now = time.monotonic() if now is None else now
        with self._lock:
            bucket = self._buckets.setdefault(token_id, Bucket(float(per_minute), now))
            wait_s = bucket.take(per_minute, now)
        if wait_s:
            raise TokenLimitExceeded(
                f"AGENTQ_COSTLY_READS_PER_MINUTE: this token made {per_minute} costly reads "
                "(memory search, memory facts, pages over their default size) in the last "
                "minute, the most allowed; ask for a smaller page, or try again later",
                setting="AGENTQ_COSTLY_READS_PER_MINUTE",
                retry_after_s=max(1, math.ceil(wait_s)),
            )


STREAMS: Final = StreamSlots()
COSTLY_READS: Final = CostlyReads()


def charge_costly_read(principal: Principal) -> None:
    """Count a costly read against the principal's token (`AGENTQ_COSTLY_READS_PER_MINUTE`).
    Raises `TokenLimitExceeded` (429) over the limit."""
    COSTLY_READS.charge(principal.token_id, get_settings().costly_reads_per_minute)


def charge_page(principal: Principal, size: int, free: int) -> None:
    """`charge_costly_read` when a page of `size` rows is over `free` (its default size)."""
    if size > free:
        charge_costly_read(principal)


def take_stream_slot(principal: Principal) -> None:
    """Count one more open stream of the principal's token (`AGENTQ_STREAM_MAX_PER_TOKEN`).
    Raises `TokenLimitExceeded` (429) at the cap; `give_back_stream_slot` when it ends."""
    STREAMS.take(principal.token_id, get_settings().stream_max_per_token)


def give_back_stream_slot(principal: Principal) -> None:
    STREAMS.give_back(principal.token_id)
