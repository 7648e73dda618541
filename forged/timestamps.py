"""Timestamps as forged writes them: ISO 8601 in UTC, to the millisecond, with a `Z`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

FUTURE_SLACK = timedelta(days=1)  # how far past its receipt an interaction may be dated (clocks)
_UNIX_EPOCH = datetime(1970, 1, 1).toordinal()
_UNIX_EPOCH_JULIAN_MS = 210_866_760_000_000  # SQLite's julianday('1970-01-01') in milliseconds
_MS_PER_DAY = 86_400_000

__all__ = ["julian_day", "now", "utc_text", "utc_timestamp"]


def utc_text(moment: datetime) -> str:
    """`moment` in forged's format, e.g. `2026-11-29T17:00:00.000Z`."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now() -> str:
    """The current time in forged's format."""
    return utc_text(datetime.now(UTC))


def utc_timestamp(value: str) -> str:
    """An ISO 8601 date and time with a time zone, in forged's format.

    Raises ValueError saying what is wrong with it.
    """
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("is not an ISO 8601 date and time") from None
    if parsed.tzinfo is None:
        raise ValueError("has no time zone (add Z or an offset)")
    try:
        return utc_text(parsed)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is past year 9999 in UTC
        raise ValueError("is out of range (years 1 to 9999 in UTC)") from None


def latest_timestamp(received_at: str) -> str:
    """The latest time an interaction received at `received_at` may carry, in forged's format
    (so the two compare as text)."""
    received = datetime.fromisoformat(received_at.replace("Z", "+00:00"))
    try:
        return utc_text(received + FUTURE_SLACK)
    except OverflowError:  # received on 9999-12-31: no later time exists
        return received_at


def julian_day(value: str) -> float:
    """SQLite's `julianday(value)` of a timestamp, bit for bit: SQLite rounds to whole
    milliseconds and divides once, and so does this (a float of seconds would round twice).

    Raises ValueError for text that is no ISO 8601 date and time.
    """
    moment = datetime.fromisoformat(value)
    days = moment.toordinal() - _UNIX_EPOCH
    seconds = (days * 24 + moment.hour) * 3600 + moment.minute * 60 + moment.second
    ms = seconds * 1000 + (moment.microsecond + 500) // 1000
    if offset := moment.utcoffset():
        ms -= offset // timedelta(milliseconds=1)
    return (ms + _UNIX_EPOCH_JULIAN_MS) / _MS_PER_DAY
