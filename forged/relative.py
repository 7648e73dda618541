"""Relative times in what was said ("yesterday", "last week"), resolved against the day it was
said: the agent reading a block months later sees which day a "yesterday" was."""

from __future__ import annotations

import re
from datetime import date, timedelta

import msgspec

from forged.grounding import MONTHS
from forged.models import MemoryItem

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
           "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2}  # fmt: skip
_NUMBER = "|".join(sorted(NUMBERS, key=len, reverse=True)) + r"|\d{1,2}"
_WEEKDAY = "|".join(WEEKDAYS)
_RELATIVE = re.compile(
    r"\b(?:(?P<day>the day before yesterday|yesterday|last night|the day after tomorrow|tomorrow)"
    rf"|(?<!the )(?P<way>last|next|this) (?P<unit>week|weekend|month|year|{_WEEKDAY})(?! of)"
    rf"|(?P<count>{_NUMBER}) (?P<units>day|week|month|year)s? ago)\b(?:['\u2019]s\b)?",
    re.IGNORECASE,
)
_DAYS = {"the day before yesterday": -2, "yesterday": -1, "last night": -1, "tomorrow": 1,
         "the day after tomorrow": 2}  # fmt: skip


def _month(on: date, months: int) -> str:
    """The month `months` after (or before) the one holding `on`: "May 2023"."""
    index = on.year * 12 + on.month - 1 + months
    return f"{MONTHS[index % 12].capitalize()} {index // 12}"


def _weekday(on: date, name: str, way: str) -> date | None:
    """The named weekday last (before `on`) or next (after it); None for "this Friday"."""
    gap = (on.weekday() - WEEKDAYS.index(name)) % 7 or 7
    if way == "last":
        return on - timedelta(days=gap)
    return on + timedelta(days=7 - gap or 7) if way == "next" else None


def _along(on: date, way: str, unit: str) -> str | None:
    """What "last week", "next month", "this weekend", "last Friday" said on `on` means."""
    step = {"last": -1, "next": 1, "this": 0}[way]
    if unit in WEEKDAYS:
        day = _weekday(on, unit, way)
        return day.isoformat() if day else None
    if unit == "month":
        return _month(on, step) if step else None
    if unit == "year":
        return str(on.year + step) if step else None
    side = {-1: "before", 0: "of", 1: "after"}[step]
    return f"the {unit} {side} {on.isoformat()}"


def _ago(on: date, count: int, unit: str) -> str:
    """What "two weeks ago" said on `on` means."""
    if unit == "day":
        return (on - timedelta(days=count)).isoformat()
    if unit == "week":
        return f"the week of {(on - timedelta(weeks=count)).isoformat()}"
    if unit == "month":
        return _month(on, -count)
    return str(on.year - count)


def _meaning(match: re.Match[str], on: date) -> str | None:
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

    def note(match: re.Match[str]) -> str:
        meaning = _meaning(match, on)
        return f"{match[0]} ({meaning})" if meaning else match[0]

    return _RELATIVE.sub(note, text)


def with_times_resolved(item: MemoryItem) -> MemoryItem:
    """The item with its relative times resolved, when it is about one day (a turn, or a fact
    or summary of one day's interactions): across days, which one a "yesterday" counts from
    is not known."""
    day = item.first_at[:10]
    if day != item.last_at[:10]:
        return item
    text = resolved(item.text, date.fromisoformat(day))
    return msgspec.structs.replace(item, text=text) if text != item.text else item
