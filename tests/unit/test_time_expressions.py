"""Relative time expressions resolved to dates (`models.memory.time_expressions`).

Every expected date here is worked out by hand from the calendar. Reference weeks (Monday first):
Mon 1 - Sun 7 May 2023, Mon 8 - Sun 14 May 2023; Sun 1 Jan 2023, Mon 2 Jan 2023; Thu 29 Feb 2024.
"""

from __future__ import annotations

import dataclasses
from datetime import date, datetime

import pytest

from models.memory.time_expressions import Resolved, annotate, resolve

MON = date(2023, 5, 8)  # Monday 8 May 2023


def one(text: str, said_on: date) -> tuple[str, date, date, str]:
    """The single expression in `text`: its phrase, first and last day and granularity."""
    found = resolve(text, said_on)
    assert len(found) == 1, found
    r = found[0]
    return r.phrase, r.first, r.last, r.granularity


def day(text: str, said_on: date) -> date:
    _, first, last, granularity = one(text, said_on)
    assert (granularity, last) == ("day", first)
    return first


# --- single days near said_on -------------------------------------------------------------


@pytest.mark.parametrize(
    ("phrase", "expected"),
    [
        ("today", date(2023, 5, 8)),
        ("tonight", date(2023, 5, 8)),
        ("this morning", date(2023, 5, 8)),
        ("this afternoon", date(2023, 5, 8)),
        ("this evening", date(2023, 5, 8)),
        ("last night", date(2023, 5, 7)),
        ("yesterday", date(2023, 5, 7)),
        ("the day before yesterday", date(2023, 5, 6)),
        ("tomorrow", date(2023, 5, 9)),
        ("the day after tomorrow", date(2023, 5, 10)),
    ],
)
def test_fixed_days(phrase: str, expected: date) -> None:
    assert day(f"We met {phrase}.", MON) == expected


def test_the_day_before_yesterday_is_one_phrase_not_yesterday() -> None:
    text = "It rained the day before yesterday."
    assert one(text, MON) == ("the day before yesterday", date(2023, 5, 6), date(2023, 5, 6), "day")
    assert one("the day after tomorrow", MON)[0] == "the day after tomorrow"
    assert one("this weekend", MON)[3] == "weekend"  # not "this week"
    # Two rules overlap on "2 days": "in 2 days" (9 characters) loses to "2 days ago" (10).
    assert one("in 2 days ago", MON) == ("2 days ago", date(2023, 5, 6), date(2023, 5, 6), "day")


# --- last/this/next + weekday, said on each weekday of 8-14 May 2023 ------------------------


@pytest.mark.parametrize(
    ("phrase", "said_on", "expected"),
    [
        ("last Saturday", date(2023, 5, 8), date(2023, 5, 6)),  # said Monday
        ("last Saturday", date(2023, 5, 13), date(2023, 5, 6)),  # said Saturday: a week before
        ("last Saturday", date(2023, 5, 14), date(2023, 5, 13)),  # said Sunday: the day before
        ("last Monday", date(2023, 5, 8), date(2023, 5, 1)),  # said Monday: 7 days earlier
        ("last Monday", date(2023, 5, 9), date(2023, 5, 8)),  # said Tuesday
        ("last Monday", date(2023, 5, 14), date(2023, 5, 8)),  # said Sunday
        ("last Sunday", date(2023, 5, 8), date(2023, 5, 7)),
        ("last Sunday", date(2023, 5, 14), date(2023, 5, 7)),
        ("this Friday", date(2023, 5, 8), date(2023, 5, 12)),
        ("this Friday", date(2023, 5, 12), date(2023, 5, 12)),  # said Friday: that day
        ("this Friday", date(2023, 5, 13), date(2023, 5, 12)),  # said Saturday: the day before
        ("this Friday", date(2023, 5, 14), date(2023, 5, 12)),
        ("this Monday", date(2023, 5, 12), date(2023, 5, 8)),  # may lie in the past
        ("this Sunday", date(2023, 5, 8), date(2023, 5, 14)),
        ("next Friday", date(2023, 5, 8), date(2023, 5, 19)),  # the following week's Friday
        ("next Friday", date(2023, 5, 11), date(2023, 5, 19)),  # said Thursday
        ("next Friday", date(2023, 5, 13), date(2023, 5, 19)),
        ("next Friday", date(2023, 5, 14), date(2023, 5, 19)),
        ("next Monday", date(2023, 5, 8), date(2023, 5, 15)),
        ("next Monday", date(2023, 5, 14), date(2023, 5, 15)),  # said Sunday: the day after
        ("last Tuesday", date(2023, 1, 2), date(2022, 12, 27)),  # across the year end
        ("next Wednesday", date(2024, 2, 29), date(2024, 3, 6)),  # said Thursday 29 Feb 2024
    ],
)
def test_qualified_weekdays(phrase: str, said_on: date, expected: date) -> None:
    assert day(f"See you {phrase}", said_on) == expected


def test_weekday_names_without_a_qualifier_are_not_resolved() -> None:
    for text in ("on Saturday", "Saturday was fun", "every Monday", "Fridays are long"):
        assert resolve(text, MON) == []


# --- last/this/next week, weekend, month, year ------------------------------------------------


@pytest.mark.parametrize(
    ("phrase", "said_on", "first", "last", "granularity"),
    [
        ("last week", MON, date(2023, 5, 1), date(2023, 5, 7), "week"),
        ("this week", MON, date(2023, 5, 8), date(2023, 5, 14), "week"),
        ("next week", MON, date(2023, 5, 15), date(2023, 5, 21), "week"),
        ("this week", date(2023, 5, 14), date(2023, 5, 8), date(2023, 5, 14), "week"),
        ("last weekend", MON, date(2023, 5, 6), date(2023, 5, 7), "weekend"),
        ("this weekend", MON, date(2023, 5, 13), date(2023, 5, 14), "weekend"),
        ("next weekend", MON, date(2023, 5, 20), date(2023, 5, 21), "weekend"),
        ("last weekend", date(2023, 5, 13), date(2023, 5, 6), date(2023, 5, 7), "weekend"),
        ("last weekend", date(2023, 5, 14), date(2023, 5, 6), date(2023, 5, 7), "weekend"),
        ("this weekend", date(2023, 5, 14), date(2023, 5, 13), date(2023, 5, 14), "weekend"),
        ("last month", date(2023, 1, 15), date(2022, 12, 1), date(2022, 12, 31), "month"),
        ("this month", MON, date(2023, 5, 1), date(2023, 5, 31), "month"),
        ("next month", MON, date(2023, 6, 1), date(2023, 6, 30), "month"),
        ("last year", MON, date(2022, 1, 1), date(2022, 12, 31), "year"),
        ("this year", MON, date(2023, 1, 1), date(2023, 12, 31), "year"),
        ("next year", MON, date(2024, 1, 1), date(2024, 12, 31), "year"),
    ],
)
def test_qualified_periods(
    phrase: str, said_on: date, first: date, last: date, granularity: str
) -> None:
    assert one(f"It was {phrase}.", said_on) == (phrase, first, last, granularity)


def test_year_end_said_on_2_january_2023() -> None:
    said = date(2023, 1, 2)  # a Monday; 1 Jan 2023 was a Sunday
    assert one("last week", said)[1:] == (date(2022, 12, 26), date(2023, 1, 1), "week")
    assert one("last month", said)[1:] == (date(2022, 12, 1), date(2022, 12, 31), "month")
    assert day("yesterday", said) == date(2023, 1, 1)
    assert one("last year", said)[1:] == (date(2022, 1, 1), date(2022, 12, 31), "year")
    assert one("last weekend", said)[1:] == (date(2022, 12, 31), date(2023, 1, 1), "weekend")


def test_year_end_said_on_31_december_2023() -> None:
    said = date(2023, 12, 31)  # a Sunday
    assert day("tomorrow", said) == date(2024, 1, 1)
    assert one("next week", said)[1:] == (date(2024, 1, 1), date(2024, 1, 7), "week")
    assert one("next month", said)[1:] == (date(2024, 1, 1), date(2024, 1, 31), "month")
    assert one("next year", said)[1:3] == (date(2024, 1, 1), date(2024, 12, 31))


def test_month_ends_and_leap_years() -> None:
    assert day("yesterday", date(2024, 3, 1)) == date(2024, 2, 29)
    assert day("yesterday", date(2023, 3, 1)) == date(2023, 2, 28)
    assert day("tomorrow", date(2024, 2, 28)) == date(2024, 2, 29)
    assert day("tomorrow", date(2023, 2, 28)) == date(2023, 3, 1)
    assert day("tomorrow", date(2023, 4, 30)) == date(2023, 5, 1)
    assert one("last month", date(2024, 3, 31))[1:3] == (date(2024, 2, 1), date(2024, 2, 29))
    assert one("next month", date(2023, 1, 31))[1:3] == (date(2023, 2, 1), date(2023, 2, 28))
    assert one("this week", date(2024, 2, 29))[1:3] == (date(2024, 2, 26), date(2024, 3, 3))
    assert one("last week", date(2024, 3, 31))[1:3] == (date(2024, 3, 18), date(2024, 3, 24))


# --- N units ago, from now, in N units -----------------------------------------------------


@pytest.mark.parametrize(
    ("phrase", "first", "last", "granularity"),
    [
        ("3 days ago", date(2023, 5, 5), date(2023, 5, 5), "day"),
        ("1 day ago", date(2023, 5, 7), date(2023, 5, 7), "day"),
        ("a day ago", date(2023, 5, 7), date(2023, 5, 7), "day"),
        ("ten days ago", date(2023, 4, 28), date(2023, 4, 28), "day"),
        ("eleven days ago", date(2023, 4, 27), date(2023, 4, 27), "day"),
        ("45 days ago", date(2023, 3, 24), date(2023, 3, 24), "day"),
        ("a couple of days ago", date(2023, 5, 6), date(2023, 5, 6), "day"),
        ("two weeks ago", date(2023, 4, 24), date(2023, 4, 30), "week"),  # 24 Apr, its week
        ("a couple weeks ago", date(2023, 4, 24), date(2023, 4, 30), "week"),
        ("a week ago", date(2023, 5, 1), date(2023, 5, 7), "week"),
        ("an month ago", date(2023, 4, 1), date(2023, 4, 30), "month"),
        ("twelve months ago", date(2022, 5, 1), date(2022, 5, 31), "month"),
        ("two years ago", date(2021, 1, 1), date(2021, 12, 31), "year"),
        ("in two days", date(2023, 5, 10), date(2023, 5, 10), "day"),
        ("in a couple of days", date(2023, 5, 10), date(2023, 5, 10), "day"),
        ("in 3 weeks", date(2023, 5, 29), date(2023, 6, 4), "week"),  # 29 May, a Monday
        ("in a month", date(2023, 6, 1), date(2023, 6, 30), "month"),
        ("five days from now", date(2023, 5, 13), date(2023, 5, 13), "day"),
        ("two weeks from now", date(2023, 5, 22), date(2023, 5, 28), "week"),
        ("a year from now", date(2024, 1, 1), date(2024, 12, 31), "year"),
    ],
)
def test_counted_units(phrase: str, first: date, last: date, granularity: str) -> None:
    assert one(f"It happened {phrase}, I think", MON) == (phrase, first, last, granularity)


def test_month_steps_clamp_to_the_month_end() -> None:
    # 31 Feb does not exist: the day clamps, and the month stays February (not 3 March).
    assert one("3 months ago", date(2023, 5, 31))[1:] == (
        date(2023, 2, 1),
        date(2023, 2, 28),
        "month",
    )
    assert one("1 month ago", date(2024, 3, 31))[1:3] == (date(2024, 2, 1), date(2024, 2, 29))
    assert one("in 1 month", date(2023, 1, 31))[1:3] == (date(2023, 2, 1), date(2023, 2, 28))
    assert one("a year ago", date(2024, 2, 29))[1:3] == (date(2023, 1, 1), date(2023, 12, 31))
    assert one("in twelve months", date(2024, 2, 29))[1:3] == (date(2025, 2, 1), date(2025, 2, 28))


def test_dates_outside_the_calendar_are_left_unresolved() -> None:
    assert resolve("5000 years ago", MON) == []
    assert resolve("in 999999999 days", MON) == []
    assert day("9000 days ago", MON) == date(1998, 9, 16)


# --- what is not resolved ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "I saw her a few days ago.",
        "We spoke the other day.",
        "I moved here recently.",
        "See you soon!",
        "several weeks ago",
        "a while ago",
        "in May",
        "in two years",  # "in N ..." takes days, weeks and months only
        "an hour ago",
        "It was a weekday.",
        "Todays special",
        "all our yesterdays",
        "lastweek and nextyear",
        "this weekday",
    ],
)
def test_vague_or_partial_expressions_are_left_unchanged(text: str) -> None:
    assert resolve(text, MON) == []
    assert annotate(text, MON) == text


def test_a_possessive_is_the_same_day_and_the_phrase_keeps_it() -> None:
    assert one("yesterday's meeting", MON)[:2] == ("yesterday's", date(2023, 5, 7))
    curly = annotate("last week\u2019s talk", MON)
    assert curly == "last week\u2019s (the week of 1 May 2023) talk"


def test_matching_ignores_case() -> None:
    assert day("YESTERDAY", MON) == date(2023, 5, 7)
    assert day("Last SATURDAY", MON) == date(2023, 5, 6)
    assert one("Two Weeks Ago", MON)[:2] == ("Two Weeks Ago", date(2023, 4, 24))
    assert one("The Day Before Yesterday", MON)[1] == date(2023, 5, 6)


def test_offsets_name_the_phrase_in_text_order() -> None:
    text = "Tomorrow, not last   week: in two days and  two weeks ago, then next Friday."
    found = resolve(text, MON)
    assert [r.phrase for r in found] == [
        "Tomorrow",
        "last   week",
        "in two days",
        "two weeks ago",
        "next Friday",
    ]
    assert all(text[r.start : r.end] == r.phrase for r in found)
    assert [r.start for r in found] == [0, 14, 27, 44, 64]


# --- labels and annotate -------------------------------------------------------------------


def test_labels() -> None:
    def label(first: date, last: date, granularity: str) -> str:
        return Resolved(0, 1, "x", first, last, granularity).label  # type: ignore[arg-type]

    assert label(date(2023, 5, 7), date(2023, 5, 7), "day") == "7 May 2023"
    assert label(date(2023, 5, 1), date(2023, 5, 7), "week") == "the week of 1 May 2023"
    assert label(date(2023, 5, 6), date(2023, 5, 7), "weekend") == "the weekend of 6 May 2023"
    assert label(date(2023, 4, 1), date(2023, 4, 30), "month") == "April 2023"
    assert label(date(2022, 1, 1), date(2022, 12, 31), "year") == "2022"


def test_resolved_is_frozen() -> None:
    r = resolve("yesterday", MON)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.start = 3  # type: ignore[misc]


def test_annotate_inserts_the_label_after_each_phrase() -> None:
    assert annotate("I went yesterday and it was great", MON) == (
        "I went yesterday (7 May 2023) and it was great"
    )
    assert annotate("Last weekend, and two weeks ago; last month? Last year.", MON) == (
        "Last weekend (the weekend of 6 May 2023), and two weeks ago (the week of 24 April 2023);"
        " last month (April 2023)? Last year (2022)."
    )
    assert annotate("No dates here.", MON) == "No dates here."
    assert annotate("", MON) == ""


def test_annotate_is_idempotent() -> None:
    text = "Yesterday and the day after tomorrow, last weekend, in a month and last year."
    once = annotate(text, MON)
    assert once != text
    assert annotate(once, MON) == once
    # A label written on another day is still a label: it is not doubled.
    assert annotate(once, date(2023, 6, 1)) == once
    # A parenthesis that is not a label does not count as one.
    assert annotate("yesterday (sadly)", MON) == "yesterday (7 May 2023) (sadly)"


# --- said_on -------------------------------------------------------------------------------


def test_a_datetime_is_accepted_and_its_date_used() -> None:
    assert day("yesterday", datetime(2023, 5, 8, 23, 59)) == date(2023, 5, 7)
    assert annotate("today", datetime(2023, 5, 8, 0, 1)) == "today (8 May 2023)"


@pytest.mark.parametrize("said_on", ["2023-05-08", None, 20230508, (2023, 5, 8)])
def test_a_said_on_that_is_not_a_date_raises_type_error(said_on: object) -> None:
    with pytest.raises(TypeError, match="said_on"):
        resolve("yesterday", said_on)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="said_on"):
        annotate("no expression at all", said_on)  # type: ignore[arg-type]


def test_text_that_is_not_a_str_raises_type_error() -> None:
    with pytest.raises(TypeError, match="text"):
        resolve(b"yesterday", MON)  # type: ignore[arg-type]
