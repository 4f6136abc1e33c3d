"""How long one `execute_step` task may go on running steps in a row (`worker.app`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from models.settings import Settings


@dataclass
class Chain:
    """The steps one `execute_step` task runs in a row: the first, then each next step it claims
    itself, at most `max_steps` in all, for at most `max_s` seconds (`AGENTQ_CHAIN_MAX_S`,
    issue 27) and only while more than one step time limit is left before the soft time limit
    (issue 10), so the timeout ladder holds and one run cannot hold a worker for ever; then the
    next step goes back to the fair queue."""

    max_steps: int
    room_s: float  # soft time limit less one step time limit
    max_s: float = float("inf")
    started: float = field(default_factory=time.monotonic)
    done: int = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> Chain:
        """The bounds of `AGENTQ_CHAIN_MAX_STEPS`, `AGENTQ_CHAIN_MAX_S` and the timeout ladder."""
        room = settings.soft_time_limit_s - settings.step_time_limit_s
        return cls(max_steps=settings.chain_max_steps, room_s=room, max_s=settings.chain_max_s)

    def may_continue(self) -> bool:
        """Whether the step being finished may be followed by another in this task."""
        elapsed = time.monotonic() - self.started
        return self.done + 1 < self.max_steps and elapsed < min(self.room_s, self.max_s)
