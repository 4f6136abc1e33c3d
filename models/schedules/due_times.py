"""When a schedule is due: a cron expression read in an IANA time zone, or a fixed interval.

Pure functions of a schedule's timing and a time; nothing here reads a row or a clock.

- **Cron**: five fields (minute, hour, day of month, month, day of week) or one of croniter's
  aliases (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`), read by the `croniter`
  library in the schedule's time zone (`zoneinfo`, an IANA name such as `Europe/Berlin`). A
  sixth (seconds) field is refused: a schedule is at most once a minute.
- **Interval**: every `every_s` seconds from an anchor (the schedule's creation), so the due
  times are `anchor + k * every_s` for k >= 1 whoever computes them.

Daylight-saving changes follow Vixie cron, as Debian's cron(8) states it: "If the time has moved
forwards, those jobs which would have run in the time that was skipped will be run soon after the
change. Conversely, if the time has moved backwards by less than 3 hours, those jobs that fall
into the repeated time will not be re-run. Only jobs that run at a particular time (not specified
as @hourly, nor with '*' in the hour or minute specifier) are affected." So `30 2 * * *` in
Europe/Berlin is due at 03:00 on the spring-forward day (croniter's own answer) and once, at the
first 02:30, on the fall-back day (`_repeated` drops the second); `*/30 * * * *` is due at every
half hour that really passes, both of the repeated hour's included.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, available_timezones

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from models.errors import InvalidInput

CRON_MAX_CHARS: Final = 200
TIMEZONE_MAX_CHARS: Final = 64  # the longest IANA name is 32 characters
# Due times looked at in one transaction: a schedule due every minute that missed a week (10,080
# due times) is caught up in 11 transactions of some 30 ms each (croniter takes about 25 us a due
# time on this project's machine), so no transaction holds a schedule's lock for long.
SCAN_MAX: Final = 1000
CRON_ALIASES: Final = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly")


@dataclass(frozen=True)
class Timing:
    """A schedule's timing: `cron` read in `timezone`, or every `every_s` seconds after
    `anchor` (timezone-aware). Exactly one of `cron` and `every_s` is set (`timing` checks)."""

    cron: str | None = None
    timezone: str = "UTC"
    every_s: int | None = None
    anchor: datetime = field(default_factory=lambda: datetime.now(UTC))

    def following(self, after: datetime) -> datetime:
        """The first due time strictly after `after` (timezone-aware), in UTC."""
        return next(self.times_after(after))

    def times_after(self, after: datetime) -> Iterator[datetime]:
        """The due times strictly after `after` (timezone-aware), in UTC, in order, without
        end."""
        if self.every_s is None:
            return self._cron_times(after)
        periods = max(math.floor((after - self.anchor).total_seconds() / self.every_s) + 1, 1)
        step = timedelta(seconds=self.every_s)
        return (self.anchor + k * step for k in itertools.count(periods))

    def _cron_times(self, after: datetime) -> Iterator[datetime]:
        zone = ZoneInfo(self.timezone)
        times = croniter(self.cron, after.astimezone(zone))
        fixed = fixed_time(self.cron or "")
        while True:
            due: datetime = times.get_next(datetime)
            if not (fixed and _repeated(due, zone)):
                yield due.astimezone(UTC)


def fixed_time(cron: str) -> bool:
    """Whether `cron` runs at particular times of day: neither its minute nor its hour field
    has a `*` (`@hourly` has; the other aliases are at midnight), Vixie cron's rule for
    daylight-saving changes."""
    if cron.startswith("@"):
        return cron != "@hourly"
    fields = cron.split()
    return len(fields) == 5 and "*" not in fields[0] and "*" not in fields[1]


def _repeated(due: datetime, zone: ZoneInfo) -> bool:
    """Whether the local time `due` is the second of a wall-clock time that happened twice (the
    hour a fall-back repeats)."""
    wall = due.replace(tzinfo=None)
    return wall.replace(tzinfo=zone, fold=0).utcoffset() != due.utcoffset()


def timing(
    *,
    cron: str | None,
    timezone: str | None,
    every_s: int | None,
    anchor: datetime,
    min_interval_s: int,
) -> Timing:
    """A checked `Timing`. Raises `InvalidInput` naming the field: neither or both of `cron` and
    `every_s`; a cron expression croniter does not read, or with a seconds field; a time zone
    that is no IANA name; `timezone` with `every_s` (an interval is the same in every zone); an
    interval under `min_interval_s` (`AGENTQ_SCHEDULE_MIN_INTERVAL_S`)."""
    if (cron is None) == (every_s is None):
        raise InvalidInput("cron, every_s: give exactly one (a cron expression or an interval)")
    if every_s is not None:
        if timezone not in (None, "UTC"):
            raise InvalidInput("timezone: only with cron (an interval is the same in every zone)")
        if every_s < min_interval_s:
            raise InvalidInput(
                f"every_s: at least {min_interval_s} s (AGENTQ_SCHEDULE_MIN_INTERVAL_S; "
                f"got {every_s})"
            )
        return Timing(every_s=every_s, anchor=anchor)
    zone = check_timezone(timezone or "UTC")
    return Timing(cron=check_cron(cron or ""), timezone=zone, anchor=anchor)


def check_cron(cron: str) -> str:
    """`cron` with its spaces normalised; raises `InvalidInput` naming `cron` unless it is five
    fields croniter reads, or an alias."""
    text = " ".join(cron.split())
    allowed = (
        "five fields (minute hour day-of-month month day-of-week, such as '0 9 * * 1-5') or "
        f"one of {', '.join(CRON_ALIASES)}"
    )
    if len(text) > CRON_MAX_CHARS:
        raise InvalidInput(f"cron: at most {CRON_MAX_CHARS} characters (got {len(text)})")
    if text.startswith("@"):
        if text not in CRON_ALIASES:
            raise InvalidInput(f"cron: {text!r} is no alias; {allowed}")
        return text
    if len(text.split()) != 5:
        raise InvalidInput(f"cron: {text!r} has {len(text.split())} fields; {allowed}")
    try:
        croniter(text).get_next(datetime)
    except CroniterBadDateError:
        raise InvalidInput(f"cron: {text!r} is never due (no such date)") from None
    except (CroniterBadCronError, ValueError) as exc:
        raise InvalidInput(f"cron: {text!r} is not a cron expression ({exc}); {allowed}") from exc
    return text


def check_timezone(name: str) -> str:
    """`name` if it is an IANA time zone of the time-zone database (`zoneinfo`: the system's, or
    the `tzdata` package's); else `InvalidInput` naming `timezone`."""
    if name not in _zones():
        raise InvalidInput(
            f"timezone: {name[:TIMEZONE_MAX_CHARS]!r} is no IANA time zone (such as UTC, "
            "Europe/Berlin, America/New_York)"
        )
    return name


@functools.cache
def _zones() -> frozenset[str]:
    return frozenset(available_timezones() | {"UTC"})


@dataclass(frozen=True)
class Owed:
    """What a scheduler owes a schedule whose next due time `first` has come, at `now`: the due
    times to fire (`fire`, oldest first: at most `catch_up`, the latest), those passed over
    (`missed`: how many, the first and the last of them), and the schedule's next due time
    after these (`next_due`)."""

    fire: list[datetime]
    missed: int
    missed_first: datetime | None
    missed_last: datetime | None
    next_due: datetime


def owed(spec: Timing, first: datetime, now: datetime, *, catch_up: int) -> Owed:
    """The due times from `first` (a due time, at most `now`) up to `now`, split by the catch-up
    bound (`catch_up` >= 1): the latest `catch_up` fire, the earlier ones are missed. At most
    `SCAN_MAX` due times are looked at: when more have passed, all looked at are missed and
    `next_due` is the one after them (still due: the caller's next transaction goes on from
    there)."""
    passed, times = [first], spec.times_after(first)
    due = next(times)
    while due <= now:
        if len(passed) == SCAN_MAX:  # more than SCAN_MAX due: the rest in the next transaction
            return Owed([], len(passed), passed[0], passed[-1], due)
        passed.append(due)
        due = next(times)
    fire, missed = passed[-catch_up:], passed[:-catch_up]
    first_missed, last_missed = (missed[0], missed[-1]) if missed else (None, None)
    return Owed(fire, len(missed), first_missed, last_missed, due)
