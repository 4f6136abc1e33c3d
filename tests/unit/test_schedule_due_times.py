"""When a schedule is due (`models.schedules.due_times`): cron in a time zone across both
daylight-saving changes, intervals from their anchor, the catch-up split, and the refusals of bad
timing, each naming its field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.errors import InvalidInput
from models.schedules import due_times
from models.schedules.due_times import SCAN_MAX, Timing, owed, timing

BERLIN = "Europe/Berlin"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _cron(cron: str, zone: str = "UTC") -> Timing:
    return timing(cron=cron, timezone=zone, every_s=None, anchor=T0, min_interval_s=60)


def _next(spec: Timing, after: datetime, n: int) -> list[datetime]:
    found = []
    for _ in range(n):
        after = spec.following(after)
        found.append(after)
    return found


def test_cron_is_read_in_its_time_zone() -> None:
    """09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer."""
    spec = _cron("0 9 * * *", BERLIN)
    assert spec.following(datetime(2025, 1, 10, 12, tzinfo=UTC)) == datetime(
        2025, 1, 11, 8, tzinfo=UTC
    )
    assert spec.following(datetime(2025, 7, 10, 12, tzinfo=UTC)) == datetime(
        2025, 7, 11, 7, tzinfo=UTC
    )


def test_a_fixed_time_in_the_skipped_hour_is_due_when_the_hour_ends() -> None:
    """30 March 2025, Berlin: 02:00 jumps to 03:00; 02:30 does not exist that day, and the
    schedule is due at 03:00 local (01:00 UTC), then at 02:30 again from the next day."""
    after = datetime(2025, 3, 29, 12, tzinfo=UTC)
    assert _next(_cron("30 2 * * *", BERLIN), after, 2) == [
        datetime(2025, 3, 30, 1, 0, tzinfo=UTC),
        datetime(2025, 3, 31, 0, 30, tzinfo=UTC),
    ]


def test_a_fixed_time_in_the_repeated_hour_is_due_once() -> None:
    """26 October 2025, Berlin: 03:00 goes back to 02:00, so 02:30 happens twice (00:30 and
    01:30 UTC); a fixed-time schedule is due at the first only (Vixie cron's rule)."""
    after = datetime(2025, 10, 25, 12, tzinfo=UTC)
    assert _next(_cron("30 2 * * *", BERLIN), after, 2) == [
        datetime(2025, 10, 26, 0, 30, tzinfo=UTC),
        datetime(2025, 10, 27, 1, 30, tzinfo=UTC),
    ]


def test_a_wildcard_schedule_is_due_at_every_real_instant_of_the_repeated_hour() -> None:
    """Every 30 minutes through the fall-back: each half hour that passes, four in the two
    real hours that read 02:xx."""
    after = datetime(2025, 10, 25, 23, 50, tzinfo=UTC)  # 01:50 CEST
    found = _next(_cron("*/30 * * * *", BERLIN), after, 5)
    assert found == [
        datetime(2025, 10, 26, 0, 0, tzinfo=UTC) + timedelta(minutes=30 * i) for i in range(5)
    ]


def test_an_interval_is_due_from_its_anchor_whoever_computes_it() -> None:
    spec = timing(cron=None, timezone=None, every_s=3600, anchor=T0, min_interval_s=60)
    assert spec.following(T0 - timedelta(days=1)) == T0 + timedelta(hours=1)
    assert spec.following(T0) == T0 + timedelta(hours=1)
    assert spec.following(T0 + timedelta(minutes=90)) == T0 + timedelta(hours=2)
    assert spec.following(T0 + timedelta(hours=2)) == T0 + timedelta(hours=3)


def test_owed_fires_the_latest_due_times_up_to_the_catch_up_bound() -> None:
    spec = timing(cron=None, timezone=None, every_s=60, anchor=T0, min_interval_s=60)
    first = T0 + timedelta(minutes=1)
    now = T0 + timedelta(minutes=10, seconds=5)  # due times at minutes 1..10 have passed
    one = owed(spec, first, now, catch_up=1)
    assert one.fire == [T0 + timedelta(minutes=10)]
    assert (one.missed, one.missed_first, one.missed_last) == (9, first, T0 + timedelta(minutes=9))
    assert one.next_due == T0 + timedelta(minutes=11)
    three = owed(spec, first, now, catch_up=3)
    assert three.fire == [T0 + timedelta(minutes=m) for m in (8, 9, 10)]
    assert three.missed == 7


def test_owed_on_time_is_one_due_time_and_nothing_missed() -> None:
    spec = _cron("0 * * * *")
    first = datetime(2025, 1, 1, 5, tzinfo=UTC)
    done = owed(spec, first, first + timedelta(seconds=3), catch_up=1)
    assert (done.fire, done.missed, done.next_due) == ([first], 0, first + timedelta(hours=1))


def test_owed_looks_at_scan_max_due_times_a_transaction() -> None:
    """Past `SCAN_MAX` due times, all those looked at are missed and the rest is left for the
    next transaction (the next due time is still due)."""
    spec = timing(cron=None, timezone=None, every_s=60, anchor=T0, min_interval_s=60)
    first = T0 + timedelta(minutes=1)
    now = T0 + timedelta(minutes=SCAN_MAX + 50)
    part = owed(spec, first, now, catch_up=2)
    assert (part.fire, part.missed) == ([], SCAN_MAX)
    assert part.next_due == T0 + timedelta(minutes=SCAN_MAX + 1) <= now
    rest = owed(spec, part.next_due, now, catch_up=2)
    assert rest.fire == [now - timedelta(minutes=1), now]
    assert rest.missed == 48 and rest.next_due > now


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": None, "every_s": None}, "cron, every_s: give exactly one"),
        ({"cron": "0 9 * * *", "every_s": 3600}, "cron, every_s: give exactly one"),
        ({"cron": "61 * * * *"}, "cron: '61 * * * *' is not a cron expression"),
        ({"cron": "* * * *"}, "cron: '* * * *' has 4 fields"),
        ({"cron": "0 0 9 * * *"}, "cron: '0 0 9 * * *' has 6 fields"),
        ({"cron": "@fortnightly"}, "cron: '@fortnightly' is no alias"),
        ({"cron": "0 0 31 2 *"}, "cron: '0 0 31 2 *' is never due"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone: 'Mars/Olympus' is no IANA"),
        (
            {"cron": "0 9 * * *", "timezone": "../etc/passwd"},
            "timezone: '../etc/passwd' is no IANA",
        ),
        ({"every_s": 59}, "every_s: at least 60 s (AGENTQ_SCHEDULE_MIN_INTERVAL_S; got 59)"),
        ({"every_s": 3600, "timezone": BERLIN}, "timezone: only with cron"),
    ],
)
def test_bad_timing_is_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    asked: dict[str, object] = {"cron": None, "timezone": None, "every_s": None, **kwargs}
    with pytest.raises(InvalidInput) as refused:
        timing(**asked, anchor=T0, min_interval_s=60)  # type: ignore[arg-type]
    assert str(refused.value).startswith(field), str(refused.value)


def test_aliases_and_spacing_are_read() -> None:
    assert _cron("@daily").cron == "@daily"
    assert _cron("  0   9 * *  1-5 ").cron == "0 9 * * 1-5"
    assert due_times.fixed_time("@daily") and due_times.fixed_time("0,30 9 * * *")
    assert not due_times.fixed_time("@hourly")
    assert not due_times.fixed_time("*/15 9 * * *")
