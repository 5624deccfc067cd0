"""The time a query names (`mindflow.recall.timeframe`): calendar phrases to a window of days."""

from __future__ import annotations

from datetime import datetime

import pytest

from mindflow.recall.timeframe import named_window

NOW = datetime(2024, 2, 1, 15, 30)


def days(query: str, now: datetime = NOW) -> tuple[str, str] | None:
    window = named_window(query, now)
    return None if window is None else (window.start.date().isoformat(), window.end.date().isoformat())


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what did she watch on February 7, 2022?", ("2022-02-07", "2022-02-08")),
        ("the talk on 6th of October 2022", ("2022-10-06", "2022-10-07")),
        ("notes from 2022-10-06", ("2022-10-06", "2022-10-07")),
        ("what happened in September 2022", ("2022-09-01", "2022-10-01")),
        ("the cake she made in May 2022", ("2022-05-01", "2022-06-01")),
        ("which state did she visit in summer 2021", ("2021-06-01", "2021-09-01")),
        ("the winter of 2023", ("2022-12-01", "2023-03-01")),
        ("when did he get injured in 2023", ("2023-01-01", "2024-01-01")),
        # the union of every time named; a day without a year takes the query's one year
        ("where was he between August 11 and August 15 2023", ("2023-08-11", "2023-08-16")),
        # without a year: the latest that has begun by now
        ("what deal did he get in December", ("2023-12-01", "2024-01-01")),
        ("the party on March 3", ("2023-03-03", "2023-03-04")),
        ("the party on January 3", ("2024-01-03", "2024-01-04")),
        ("what did we cook last May", ("2023-05-01", "2023-06-01")),
        ("photos from last summer", ("2023-06-01", "2023-09-01")),
        # from now
        ("what did she write yesterday", ("2024-01-31", "2024-02-01")),
        ("what did we decide today", ("2024-02-01", "2024-02-02")),
        ("what did she find last week", ("2024-01-22", "2024-01-29")),
        ("the plan from last month", ("2024-01-01", "2024-02-01")),
        ("February 30, 2023", ("2023-01-01", "2024-01-01")),  # no such day: the year it names
        ("three days ago", ("2024-01-28", "2024-01-31")),
        ("two weeks ago", ("2024-01-11", "2024-01-26")),
    ],
)
def test_named_times(query, expected):
    assert days(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "what did Melanie paint",
        "May I ask what Caroline likes",  # "may" the verb
        "we march in the parade",  # "march" the verb
        "Jan said hello to Oct",  # abbreviations alone are words
        "her summer plans",  # a season alone is a topic
        "an august institution",
    ],
)
def test_no_time_named(query):
    assert named_window(query, NOW) is None


def test_aware_now_is_taken_in_utc():
    from datetime import UTC, timedelta, timezone

    late = datetime(2024, 2, 1, 23, 30, tzinfo=timezone(timedelta(hours=-3)))  # 02:30 UTC on Feb 2
    assert named_window("today", late).start == datetime(2024, 2, 2)
    assert named_window("today", late.astimezone(UTC)).start == datetime(2024, 2, 2)


def test_widened_by_slack():
    window = named_window("on February 7, 2022", NOW).widened(2)
    assert (window.start, window.end) == (datetime(2022, 2, 5), datetime(2022, 2, 10))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # the newest memory (June 20, 2023) is before now: the latest occurrence it allows
        ("what deal did he get in December", ("2022-12-01", "2023-01-01")),
        ("what happened in June", ("2023-06-01", "2023-07-01")),
        ("the party on March 3", ("2023-03-03", "2023-03-04")),
        ("the party on June 21", ("2022-06-21", "2022-06-22")),
        # what counts from now is unchanged, as is a year the query names
        ("what did we cook last May", ("2023-05-01", "2023-06-01")),
        ("what did she find last week", ("2024-01-22", "2024-01-29")),
        ("the party on March 3 2021", ("2021-03-03", "2021-03-04")),
    ],
)
def test_a_date_without_its_year_is_held_by_the_newest_memory(query, expected):
    window = named_window(query, NOW, lambda: datetime(2023, 6, 20, 18, 0))
    assert (window.start.date().isoformat(), window.end.date().isoformat()) == expected


def test_the_newest_memory_is_asked_only_for_a_date_without_its_year():
    def newest():
        raise AssertionError("asked")

    for query in ("on February 7, 2022", "last week", "in May 2022", "what did Melanie paint", "last May"):
        named_window(query, NOW, newest)
    # One question for every date the query names without its year.
    asked = []

    def counted():
        asked.append(1)
        return datetime(2023, 9, 20)

    window = named_window("where was he between August 11 and August 15", NOW, counted)
    assert (window.start, window.end, len(asked)) == (datetime(2023, 8, 11), datetime(2023, 8, 16), 1)
    # none yet, or one after now (a clock behind the writer's): from now, as before
    assert days("in December") == ("2023-12-01", "2024-01-01")
    assert named_window("in December", NOW, lambda: None).start == datetime(2023, 12, 1)
    assert named_window("in December", NOW, lambda: datetime(2025, 1, 1)).start == datetime(2023, 12, 1)
