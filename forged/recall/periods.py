"""The times a query names ("on October 13, 2023", "in June", "2023-10"), and what falls in them."""

from __future__ import annotations

import calendar
import re
from datetime import date

from forged.text.grounding import MONTHS

__all__ = ["Period", "periods", "within"]

_MONTH = "|".join(MONTHS)
_ORDINAL = r"(?:st|nd|rd|th)?"
_NAMED = re.compile(  # "13 October 2023", "October 13, 2023", "October 2023", "June"
    rf"\b(?:(\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?)?({_MONTH})\b"
    rf"(?:\s+(\d{{1,2}}){_ORDINAL}\b)?(?:,?\s+(\d{{4}})\b)?",
    re.IGNORECASE,
)
_ISO = re.compile(r"\b(\d{4})-(\d\d)(?:-(\d\d))?\b")  # 2023-10-13, 2023-10
_YEAR = re.compile(r"\b(?:in|of|during|since|until|before|after)\s+((?:19|20)\d\d)\b", re.I)


class Period:
    """A day, a month or a year; a month named without a year is that month of any year."""

    def __init__(self, year: int | None, month: int | None = None, day: int | None = None) -> None:
        self.year, self.month, self.day = year, month, day

    def _bounds(self, year: int) -> tuple[date, date] | None:
        if self.month is None:
            return date(year, 1, 1), date(year, 12, 31)
        if self.day is None:
            return date(year, self.month, 1), date(year, self.month, _last_day(year, self.month))
        if self.day > _last_day(year, self.month):
            return None  # "February 30": no such day
        return date(year, self.month, self.day), date(year, self.month, self.day)

    def overlaps(self, first: date, last: date) -> bool:
        """Whether the days from `first` to `last` reach into this period."""
        years = [self.year] if self.year else range(first.year, last.year + 1)
        return any(
            (bounds := self._bounds(year)) is not None and first <= bounds[1] and bounds[0] <= last
            for year in years
        )


def _last_day(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1]


def _named(match: re.Match[str]) -> Period | None:
    before, month, after, year = match.groups()
    day = before or after
    if month.casefold() == "may" and not (day or year):
        return None  # "may" alone is the verb far more often than the month
    number = MONTHS.index(month.casefold()) + 1
    if day and not 1 <= int(day) <= 31:
        return None
    return Period(int(year) if year else None, number, int(day) if day else None)


def periods(text: str) -> list[Period]:
    """The days, months and years a text names: full dates, months with or without a year,
    ISO dates, and years after a preposition ("in 2022")."""
    found = [p for m in _NAMED.finditer(text) if (p := _named(m)) is not None]
    for year, month, day in _ISO.findall(text):
        if 1 <= int(month) <= 12 and (not day or 1 <= int(day) <= 31):
            found.append(Period(int(year), int(month), int(day) if day else None))
    found += [Period(int(year)) for year in _YEAR.findall(text)]
    return found


def within(first_at: str, last_at: str, wanted: list[Period]) -> bool:
    """Whether a time span (ISO timestamps) reaches into any of the periods."""
    first, last = date.fromisoformat(first_at[:10]), date.fromisoformat(last_at[:10])
    return any(p.overlaps(first, last) for p in wanted)
