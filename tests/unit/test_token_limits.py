"""`api.token_limits`: a token's stream slots and its token bucket of costly reads."""

from __future__ import annotations

import pytest

from api.token_limits import CostlyReads, StreamSlots
from models.errors import TokenLimitExceeded


def test_a_token_holds_at_most_its_cap_of_streams_and_gets_a_slot_back() -> None:
    slots = StreamSlots()
    for _ in range(3):
        slots.take(1, most=3)
    with pytest.raises(TokenLimitExceeded) as refused:
        slots.take(1, most=3)
    assert refused.value.setting == "AGENTQ_STREAM_MAX_PER_TOKEN"
    assert refused.value.retry_after_s >= 1
    slots.take(2, most=3)  # another token's count
    slots.give_back(1)
    slots.take(1, most=3)
    assert slots.held(1) == 3
    for _ in range(10):
        slots.take(1, most=0)  # 0: no cap


def test_costly_reads_come_as_a_burst_then_one_every_60_over_n_seconds() -> None:
    reads = CostlyReads()
    for _ in range(6):
        reads.charge(7, 6, now=100.0)
    with pytest.raises(TokenLimitExceeded) as refused:
        reads.charge(7, 6, now=100.0)
    assert refused.value.setting == "AGENTQ_COSTLY_READS_PER_MINUTE"
    assert refused.value.retry_after_s == 10  # one read a 10 s at 6 a minute
    with pytest.raises(TokenLimitExceeded) as sooner:
        reads.charge(7, 6, now=104.5)
    assert sooner.value.retry_after_s == 6  # 5.5 s to go, in whole seconds
    reads.charge(7, 6, now=110.0)  # refilled one
    reads.charge(8, 6, now=110.0)  # another token's bucket
    reads.charge(7, 0, now=110.0)  # 0: no limit
