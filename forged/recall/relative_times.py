"""Relative times in what was said ("yesterday", "last week"), resolved against the day it was
said: the agent reading a block months later sees which day a "yesterday" was."""

from __future__ import annotations

import re
from datetime import date, timedelta

import msgspec

from forged.models import MemoryItem
from forged.text.grounding import MONTHS, WEEKDAYS

__all__ = ["NUMBERS", "resolved", "with_times_resolved"]

# A data table, one row a line: the formatter would reflow its rows.
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
           "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2}  # fmt: skip
_NUMBER = "|".join(sorted(NUMBERS, key=len, reverse=True)) + r"|\d{1,2}"
_WEEKDAY = "|".join(WEEKDAYS)
_RELATIVE = re.compile(
    r"\b(?:(?P<day>the day before yesterday|yesterday|last night|the day after tomorrow|tomorrow)"
    rf"|(?<!the )(?P<way>last|next) (?P<unit>week|weekend|month|year|{_WEEKDAY})(?! of)"
    rf"|(?P<count>{_NUMBER}) (?P<units>day|week|month|year)s? ago)\b(?:['\u2019]s\b)?",
    re.IGNORECASE,
)
_HINTS = ("yesterday", "tomorrow", "last ", "next ", " ago")  # one is in every relative time
# A data table, one row a line: the formatter would reflow its rows.
_DAYS = {"the day before yesterday": -2, "yesterday": -1, "last night": -1, "tomorrow": 1,
         "the day after tomorrow": 2}  # fmt: skip


def _month(on: date, months: int) -> str:
    """The month `months` after (or before) the one holding `on`: "May 2023"."""
    index = on.year * 12 + on.month - 1 + months
    return f"{MONTHS[index % 12].capitalize()} {_year(index // 12)}"


def _year(year: int) -> int:
    """A year a date can hold; ValueError past the calendar (1 to 9999)."""
    if not 1 <= year <= 9999:
        raise ValueError(f"year {year} is out of range")
    return year


def _weekday(on: date, name: str, way: str) -> date:
    """The named weekday last (before `on`) or next (after it)."""
    gap = (on.weekday() - WEEKDAYS.index(name)) % 7 or 7
    return on - timedelta(days=gap) if way == "last" else on + timedelta(days=7 - gap or 7)


def _along(on: date, way: str, unit: str) -> str:
    """What "last week", "next month", "last Friday" said on `on` means."""
    step = -1 if way == "last" else 1
    if unit in WEEKDAYS:
        return _weekday(on, unit, way).isoformat()
    if unit == "month":
        return _month(on, step)
    if unit == "year":
        return str(_year(on.year + step))
    return f"the {unit} {'before' if step < 0 else 'after'} {on.isoformat()}"


def _ago(on: date, count: int, unit: str) -> str:
    """What "two weeks ago" said on `on` means."""
    if unit == "day":
        return (on - timedelta(days=count)).isoformat()
    if unit == "week":
        return f"the week of {(on - timedelta(weeks=count)).isoformat()}"
    if unit == "month":
        return _month(on, -count)
    return str(_year(on.year - count))


def _meaning(match: re.Match[str], on: date) -> str:
    said = {k: v.casefold() for k, v in match.groupdict().items() if v}
    if "day" in said:
        return (on + timedelta(days=_DAYS[said["day"]])).isoformat()
    if "way" in said:
        return _along(on, said["way"], said["unit"])
    count = NUMBERS.get(said["count"]) or int(said["count"])
    return _ago(on, count, said["units"])


def resolved(text: str, on: date) -> str:
    """The text with each relative time it holds followed by what it means, said on `on`:
    "yesterday (2023-05-07)", "last month (April 2023)", "last week (the week before
    2023-05-08)"."""

    if not any(hint in text.casefold() for hint in _HINTS):
        return text  # most lines: no need to run the pattern
    return _RELATIVE.sub(lambda m: _with_meaning(m, on), text)


def _with_meaning(match: re.Match[str], on: date) -> str:
    """A relative time and what it means; alone when that lies outside years 1 to 9999
    ("tomorrow" said on 9999-12-31 names no day a date can hold)."""
    try:
        return f"{match[0]} ({_meaning(match, on)})"
    except (OverflowError, ValueError):
        return match[0]


def with_times_resolved(item: MemoryItem) -> MemoryItem:
    """The item with its relative times resolved, when it is about one day (a turn, or a fact
    or summary of one day's interactions): across days, which one a "yesterday" counts from
    is not known."""
    day = item.first_at[:10]
    if day != item.last_at[:10]:
        return item
    text = resolved(item.text, date.fromisoformat(day))
    return msgspec.structs.replace(item, text=text) if text != item.text else item
