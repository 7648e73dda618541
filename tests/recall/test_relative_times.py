"""Relative times resolved against the day they were said."""

from __future__ import annotations

from datetime import date

import pytest

from forged.models import MemoryItem
from forged.recall.relative_times import resolved, with_times_resolved

FRIDAY = date(2023, 6, 9)


@pytest.mark.parametrize(
    ("said", "meant"),
    [
        ("We went yesterday.", "We went yesterday (2023-06-08)."),
        ("Last night and tomorrow", "Last night (2023-06-08) and tomorrow (2023-06-10)"),
        ("the day before yesterday", "the day before yesterday (2023-06-07)"),
        ("the day after tomorrow", "the day after tomorrow (2023-06-11)"),
        ("last week I ran", "last week (the week before 2023-06-09) I ran"),
        ("next week", "next week (the week after 2023-06-09)"),
        ("last weekend", "last weekend (the weekend before 2023-06-09)"),
        ("last Friday", "last Friday (2023-06-02)"),  # said on a Friday: the one before
        ("last Monday", "last Monday (2023-06-05)"),
        ("next Friday", "next Friday (2023-06-16)"),
        ("next Sunday", "next Sunday (2023-06-11)"),
        ("last month", "last month (May 2023)"),
        ("next month", "next month (July 2023)"),
        ("last year, next year", "last year (2022), next year (2024)"),
        ("3 days ago", "3 days ago (2023-06-06)"),
        ("a couple of days ago", "a couple of days ago (2023-06-07)"),
        ("two weeks ago", "two weeks ago (the week of 2023-05-26)"),
        ("four months ago", "four months ago (February 2023)"),
        ("a year ago", "a year ago (2022)"),
        ("yesterday's game", "yesterday's (2023-06-08) game"),
    ],
)
def test_a_relative_time_is_followed_by_what_it_means(said: str, meant: str) -> None:
    assert resolved(said, FRIDAY) == meant


@pytest.mark.parametrize(
    "said",
    [
        "the last week of May",
        "over the last year",
        "this Friday",
        "this weekend",
        "lastweek",
        "recently",
    ],
)
def test_what_names_no_other_day_is_left_as_said(said: str) -> None:
    assert resolved(said, FRIDAY) == said


def test_months_and_years_roll_over() -> None:
    assert resolved("last month", date(2023, 1, 5)) == "last month (December 2022)"
    assert resolved("next month", date(2023, 12, 5)) == "next month (January 2024)"
    assert resolved("yesterday", date(2024, 3, 1)) == "yesterday (2024-02-29)"


def item(first_at: str, last_at: str) -> MemoryItem:
    return MemoryItem(
        id=1,
        type="fact",
        kind="event",
        scope="u",
        session=None,
        text="Went hiking yesterday.",
        score=1.0,
        created_at=first_at,
        last_seen_at=first_at,
        first_seq=1,
        last_seq=2,
        first_at=first_at,
        last_at=last_at,
    )


def test_an_item_of_one_day_is_resolved_against_it() -> None:
    one_day = item("2023-06-09T08:00:00.000Z", "2023-06-09T20:00:00.000Z")
    assert with_times_resolved(one_day).text == "Went hiking yesterday (2023-06-08)."


def test_an_item_spanning_days_is_left_as_said() -> None:
    """Which of its days a "yesterday" counts from is not known."""
    two_days = item("2023-06-08T08:00:00.000Z", "2023-06-09T20:00:00.000Z")
    assert with_times_resolved(two_days).text == "Went hiking yesterday."


@pytest.mark.parametrize(
    ("said", "on"),
    [
        ("See you tomorrow.", date(9999, 12, 31)),
        ("the day after tomorrow", date(9999, 12, 30)),
        ("I left yesterday.", date(1, 1, 1)),
        ("ten weeks ago", date(1, 2, 1)),
        ("two years ago", date(1, 6, 1)),
        ("next year", date(9999, 6, 1)),
        ("last month", date(1, 1, 5)),
        ("next Friday", date(9999, 12, 31)),
    ],
)
def test_a_time_past_the_calendar_stays_as_said(said: str, on: date) -> None:
    """Near year 1 or 9999 a relative time that names no representable day is left alone:
    resolving never raises (every recall of such a turn would answer 500)."""
    assert resolved(said, on) == said
