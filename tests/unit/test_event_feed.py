"""`models.operations.event_feed.EventFeed`: a stream's cursor sends each event once, and a row that
commits after a higher id was read (ids are taken before commit) is still sent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from models.engine.previews import EventShown, Shown
from models.operations.event_feed import CURSOR_IDS_MAX, SETTLE_S, EventFeed

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def event(event_id: int, age_s: float) -> EventShown:
    return EventShown(event_id, None, NOW - timedelta(seconds=age_s), "k", Shown({}, 2, None), 1)


def ids(rows: list[EventShown]) -> list[int]:
    return [r.id for r in rows]


def test_each_event_is_sent_once_and_a_late_commit_with_a_lower_id_still_is() -> None:
    feed = EventFeed()
    assert ids(feed.take([event(1, 1), event(3, 1)], NOW)) == [1, 3]
    assert feed.after == 0  # nothing settled: id 2 may still commit
    assert ids(feed.take([event(1, 1), event(2, 1), event(3, 1)], NOW)) == [2]
    assert feed.newest == 3


def test_the_bound_moves_past_settled_events_only() -> None:
    feed = EventFeed(after=5)
    feed.take([event(6, SETTLE_S + 1), event(7, 1)], NOW)
    assert (feed.after, sorted(feed.sent)) == (6, [7])
    assert ids(feed.take([event(7, 1), event(8, 0)], NOW)) == [8]


def test_a_cursor_resumes_the_feed_exactly_and_bad_ones_are_refused() -> None:
    feed = EventFeed(after=5)
    feed.take([event(6, SETTLE_S + 1), event(8, 1), event(9, 1)], NOW)
    assert feed.cursor() == "6;8,9"
    resumed = EventFeed.resumed(feed.cursor(), NOW)
    assert resumed is not None and (resumed.after, sorted(resumed.sent)) == (6, [8, 9])
    # 7 committed late: the resumed feed sends it, and not 8 or 9 again
    assert ids(resumed.take([event(7, 2), event(8, 1), event(9, 1), event(10, 0)], NOW)) == [7, 10]
    assert EventFeed.resumed("42", NOW) == EventFeed(42)  # a plain event id: a bound
    for bad in ("", "x", "6;5", "6;", "6;8,,9", f"{2**31};1", "-1"):
        assert EventFeed.resumed(bad, NOW) is None, bad


def test_a_cursor_over_its_size_is_the_bound_alone() -> None:
    feed = EventFeed(after=0)
    feed.take([event(i, 1) for i in range(1, CURSOR_IDS_MAX + 2)], NOW)
    assert feed.cursor() == "0"  # the ids above it are sent again on resume: none is missed
