"""Relative time expressions in English text, resolved to calendar dates by plain rules.

Memory is written long before it is read: "I went to a support group yesterday", said on
8 May 2023, means 7 May 2023, and a later question ("When did she go to the support group?")
can only match it by date if the date is stored with it. `resolve` finds the relative time
expressions in a text and the period each names, counted from the date the text was said or
written; `annotate` writes that period into the text after the phrase ("yesterday (7 May 2023)").

The rules are written here and follow no external library (standard library only). Matching
is case-insensitive and on whole words: "weekday" holds no "week", "Todays" and "yesterdays"
are not resolved, but a possessive is the same day, so "yesterday's" resolves to yesterday (the
phrase then includes the "'s", so a label follows it: "yesterday's (7 May 2023) meeting").
Numbers are digits or the words one to twelve; "a"/"an" count 1 and "a couple (of)" counts 2.

Conventions (weeks as in ISO 8601: a week runs Monday to Sunday):

- today, tonight, this morning/afternoon/evening: said_on; last night and yesterday: the day
  before; the day before yesterday: two days before; tomorrow: the day after; the day after
  tomorrow: two days after.
- last <weekday>: the most recent such day strictly before said_on, 1 to 7 days earlier ("last
  Monday" said on a Monday is 7 days earlier; "last Monday" said on a Tuesday is the day before).
- this <weekday>: that day of said_on's week, which may be in the past ("this Monday" said on a
  Friday is four days earlier). next <weekday>: that day of the following week ("next Friday"
  said on Monday 8 May 2023 is Friday 19 May 2023, not 12 May).
- last/this/next week: the Monday-Sunday week before, containing, after said_on's week.
  last/this/next weekend: the Saturday and Sunday of the previous, current, following week
  ("last weekend" said on Monday 8 May 2023 is 6-7 May 2023). last/this/next month and year:
  the calendar month or year before, containing, after said_on.
- N days/weeks/months/years ago, N ... from now, in N days/weeks/months: the day N units
  before or after said_on; the period named is that day (days), the Monday-Sunday week holding
  it (weeks), its calendar month (months) or year (years). Month and year steps keep the day of
  the month, clamped to the month's last day (3 months before 31 May 2023 is 28 Feb 2023; a
  month before 31 Mar 2024 is 29 Feb 2024). "in N ..." is always read as the future, even where
  it names a duration ("read it in a week"): a known limit of rules without parsing.

Deliberately not resolved, as too vague to name a period: "a few days ago", "several weeks
ago", "the other day", "recently", "lately", "soon", "a while ago"; weekday names without
last/this/next ("on Saturday"); months and years without a qualifier. An expression whose date
would fall outside the years 1-9999 is left unresolved.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Final, Literal

Granularity = Literal["day", "week", "weekend", "month", "year"]
Period = tuple[date, date, Granularity]

MONTHS: Final = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBER_WORDS: Final = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
# Day offsets of the expressions that always name one day near said_on.
FIXED_DAYS: Final = {
    "the day before yesterday": -2,
    "the day after tomorrow": 2,
    "yesterday": -1,
    "last night": -1,
    "today": 0,
    "tonight": 0,
    "this morning": 0,
    "this afternoon": 0,
    "this evening": 0,
    "tomorrow": 1,
}
STEPS: Final = {"last": -1, "this": 0, "next": 1}


@dataclass(frozen=True)
class Resolved:
    """One resolved expression: `text[start:end] == phrase`, naming `first`..`last` inclusive."""

    start: int
    end: int
    phrase: str
    first: date
    last: date
    granularity: Granularity

    @property
    def label(self) -> str:
        """The period as people write it: "7 May 2023", "the week of 1 May 2023" (its Monday),
        "the weekend of 6 May 2023" (its Saturday), "April 2023" or "2022"."""
        if self.granularity == "day":
            return _day_label(self.first)
        if self.granularity in ("week", "weekend"):
            return f"the {self.granularity} of {_day_label(self.first)}"
        if self.granularity == "month":
            return f"{MONTHS[self.first.month - 1]} {self.first.year}"
        return str(self.first.year)


def _day_label(day: date) -> str:
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _add_months(day: date, months: int) -> date:
    """`day` moved by whole months, its day of the month clamped to the target month's end."""
    year, month0 = divmod(day.year * 12 + day.month - 1 + months, 12)
    last = calendar.monthrange(year, month0 + 1)[1]
    return date(year, month0 + 1, min(day.day, last))


def _shift(day: date, n: int, unit: str) -> date:
    """`day` moved by `n` units: day, week (or weekend: a week), month or year."""
    if unit == "day":
        return day + timedelta(days=n)
    if unit in ("week", "weekend"):
        return day + timedelta(weeks=n)
    return _add_months(day, n * (1 if unit == "month" else 12))


def _period(day: date, unit: str) -> Period:
    """The day, Monday-Sunday week, weekend of that week, month or year holding `day`."""
    if unit == "day":
        return day, day, "day"
    if unit == "week":
        return _monday(day), _monday(day) + timedelta(days=6), "week"
    if unit == "weekend":
        saturday = _monday(day) + timedelta(days=5)
        return saturday, saturday + timedelta(days=1), "weekend"
    if unit == "month":
        last = calendar.monthrange(day.year, day.month)[1]
        return day.replace(day=1), day.replace(day=last), "month"
    return date(day.year, 1, 1), date(day.year, 12, 31), "year"


def _words(phrase: str) -> str:
    return " ".join(phrase.lower().split())


def _number(word: str) -> int:
    word = _words(word)
    if word.isdigit():
        return int(word)
    return 2 if word.startswith("a couple") else NUMBER_WORDS[word]


def _fixed(m: re.Match[str], said_on: date) -> Period:
    return _period(said_on + timedelta(days=FIXED_DAYS[_words(m["fixed"])]), "day")


def _weekday(m: re.Match[str], said_on: date) -> Period:
    which, target = m["which"].lower(), WEEKDAYS.index(m["weekday"].lower())
    if which == "last":
        day = said_on - timedelta(days=(said_on.weekday() - target - 1) % 7 + 1)
    else:
        day = _monday(said_on) + timedelta(days=target + 7 * STEPS[which])
    return _period(day, "day")


def _qualified(m: re.Match[str], said_on: date) -> Period:
    unit = m["unit"].lower()
    return _period(_shift(said_on, STEPS[m["which"].lower()], unit), unit)


def _counted(m: re.Match[str], said_on: date) -> Period:
    sign = -1 if (m.groupdict().get("dir") or "").lower() == "ago" else 1
    unit = m["unit"].lower()
    return _period(_shift(said_on, sign * _number(m["n"]), unit), unit)


def _either(words: Iterable[str]) -> str:
    """A regex alternation of `words`, longest first, any run of spaces between words."""
    return "|".join(w.replace(" ", r"\s+") for w in sorted(words, key=len, reverse=True))


Rule = Callable[[re.Match[str], date], Period]
_WHICH = r"\b(?P<which>last|this|next)\s+"
_NUMBER = rf"\b(?P<n>\d+|a\s+couple(?:\s+of)?|{_either(NUMBER_WORDS)})\s+"
_RULES: Final[list[tuple[str, Rule]]] = [
    (rf"\b(?P<fixed>{_either(FIXED_DAYS)})\b", _fixed),
    (rf"{_WHICH}(?P<weekday>{_either(WEEKDAYS)})\b", _weekday),
    (rf"{_WHICH}(?P<unit>weekend|week|month|year)\b", _qualified),
    (rf"{_NUMBER}(?P<unit>day|week|month|year)s?\s+(?P<dir>ago|from\s+now)\b", _counted),
    (rf"\bin\s+{_NUMBER}(?P<unit>day|week|month)s?\b", _counted),
]
_POSSESSIVE = r"(?:['\u2019]s\b)?"  # "yesterday's": the phrase takes its possessive along
_PATTERNS: Final = [(re.compile(p + _POSSESSIVE, re.IGNORECASE), rule) for p, rule in _RULES]
# A label `annotate` wrote, right after the phrase it belongs to.
_LABEL: Final = re.compile(
    rf"\s*\((?:the week(?:end)? of )?(?:(?:\d{{1,2}} )?(?:{_either(MONTHS)}) )?\d+\)"
)


def _candidates(text: str, said_on: date) -> list[Resolved]:
    found = []
    for pattern, rule in _PATTERNS:
        for m in pattern.finditer(text):
            try:
                first, last, granularity = rule(m, said_on)
            except (OverflowError, ValueError):  # outside the years 1-9999
                continue
            found.append(Resolved(m.start(), m.end(), m[0], first, last, granularity))
    return found


def resolve(text: str, said_on: date) -> list[Resolved]:
    """Every relative time expression in `text`, resolved against `said_on`, in text order.

    Matches never overlap: where two do, the longer wins ("the day before yesterday" is one
    phrase, not "yesterday"). A `datetime` is accepted and its date used. Raises `TypeError`
    if `text` is not a `str` or `said_on` is not a `datetime.date`.
    """
    if isinstance(said_on, datetime):
        said_on = said_on.date()
    if not isinstance(said_on, date):
        raise TypeError(f"said_on must be a datetime.date, not {type(said_on).__name__}")
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, not {type(text).__name__}")
    kept: list[Resolved] = []
    for r in sorted(_candidates(text, said_on), key=lambda r: (r.start - r.end, r.start)):
        if all(r.end <= k.start or k.end <= r.start for k in kept):
            kept.append(r)
    return sorted(kept, key=lambda r: r.start)


def annotate(text: str, said_on: date) -> str:
    """`text` with " (<label>)" after each resolved phrase ("yesterday (7 May 2023)").

    Text without expressions comes back unchanged, and a phrase already followed by a label is
    left as it is, so annotating twice adds nothing. Raises `TypeError` as `resolve` does.
    """
    parts: list[str] = []
    done = 0
    for r in resolve(text, said_on):
        parts.append(text[done : r.end])
        if not _LABEL.match(text, r.end):
            parts.append(f" ({r.label})")
        done = r.end
    parts.append(text[done:])
    return "".join(parts)


# A date `annotate` wrote ("(7 May 2023)", "(the week of 1 May 2023)", "(May 2023)", "(2023)"),
# as a regular expression Python's `re` and Postgres' (ARE) read alike: a row holding one says
# when something happened (`models.memory.rerank`'s date boost).
RESOLVED_DATE: Final = (
    rf"\((the week(end)? of )?(([0-9]{{1,2}} )?({'|'.join(MONTHS)}) )?[0-9]{{4}}\)"
)
