"""The times a query names, and whether a span reaches into them."""

from __future__ import annotations

import pytest

from forged.recall.periods import periods, within


def named(text: str) -> list[tuple[int | None, int | None, int | None]]:
    return [(p.year, p.month, p.day) for p in periods(text)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What did she paint on October 13, 2023?", [(2023, 10, 13)]),
        ("What did Gina find on 1 February, 2023?", [(2023, 2, 1)]),
        ("the 3rd of March", [(None, 3, 3)]),
        ("When did Melanie go camping in June?", [(None, 6, None)]),
        ("a workout class in December 2023", [(2023, 12, None)]),
        ("notes from 2023-10-13 and 2023-11", [(2023, 10, 13), (2023, 11, None)]),
        ("How many times in 2023?", [(2023, None, None)]),
        ("What did she say on May 3, 2023?", [(2023, 5, 3)]),
        ("May I ask what she likes?", []),  # the verb, not the month
        ("It may rain in 2023 or 4096 apples", [(2023, None, None)]),
        ("a pin code 2023-13-45", []),
        ("no date here at all", []),
    ],
)
def test_periods_are_the_days_months_and_years_a_text_names(
    text: str, expected: list[tuple[int | None, int | None, int | None]]
) -> None:
    assert named(text) == expected


def test_within_compares_spans_with_days_months_and_years() -> None:
    day = "2023-10-13T09:00:00.000Z"
    assert within(day, day, periods("on 13 October 2023"))
    assert not within(day, day, periods("on 14 October 2023"))
    assert within(day, day, periods("in October"))  # a month of any year
    assert within("2022-09-30T00:00:00Z", "2023-01-02T00:00:00Z", periods("in October"))
    assert not within("2023-11-01T00:00:00Z", "2023-12-31T00:00:00Z", periods("in October"))
    assert within(day, day, periods("in 2023"))
    assert not within(day, day, periods("on February 30, 2023"))  # no such day: matches none
