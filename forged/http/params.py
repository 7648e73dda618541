"""Query-string parameters read into typed values, or a 400 that names the parameter."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from forged.http.connection import HttpError
from forged.models import DEFAULT_SCOPE, NUL
from forged.timestamps import utc_timestamp

__all__ = ["MAX_KEY_CHARS", "MAX_SEQ", "Params", "checked_key"]

MAX_KEY_CHARS = 512  # longest scope or session, as for pushed interactions
DAY_START, DAY_END = "T00:00:00.000Z", "T23:59:59.999Z"  # a bare date spans its whole UTC day
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
MAX_SEQ = 2**63 - 1  # the largest integer SQLite stores: every seq and cursor fits
ALL_SCOPES = "all_scopes"  # `all_scopes=true`: a listing that spans every scope says so
SCOPED = ("scope", ALL_SCOPES)  # the parameters of the scope rule every listing follows


def _invalid(message: str) -> HttpError:
    return HttpError(400, "invalid_parameter", message)


def checked_key(name: str, value: str) -> str:
    """A scope or session a request names: 1 to 512 characters, without NUL (see models.Key)."""
    if not value or len(value) > MAX_KEY_CHARS:
        raise _invalid(f"`{name}` must be 1 to {MAX_KEY_CHARS} characters, got {len(value)}")
    if NUL in value:
        raise _invalid(f"`{name}` must not hold a NUL character (\\u0000)")
    return value


def _natural(raw: str) -> int | None:
    """`raw` as an integer from 0 to MAX_SEQ, or None: ASCII digits only (not `²` or `٣`)."""
    if not (raw.isascii() and raw.isdigit() and len(raw) <= len(str(MAX_SEQ))):
        return None
    value = int(raw)
    return value if value <= MAX_SEQ else None


class Params:
    """The query of one request; each getter checks one parameter."""

    def __init__(self, query: Mapping[str, str], path: str, accepted: Iterable[str]) -> None:
        self.query = query
        accepted = tuple(accepted)
        takes = f"accepts {', '.join(accepted)}" if accepted else "takes no parameters"
        for name in query:
            if name not in accepted:
                raise _invalid(f"unknown parameter `{name}`; {path} {takes}")

    def text(self, name: str) -> str:
        """A required free text that must hold more than whitespace."""
        value = self.query.get(name, "")
        if not value.strip():
            raise _invalid(f"`{name}` must not be empty")
        return value

    def key(self, name: str, default: str | None = None) -> str | None:
        """A scope or session, checked when given."""
        value = self.query.get(name)
        return default if value is None else checked_key(name, value)

    def choice(self, name: str, choices: Iterable[str]) -> str | None:
        value = self.query.get(name)
        choices = tuple(choices)
        if value is not None and value not in choices:
            raise _invalid(f"`{name}` must be one of {', '.join(choices)}; got {value!r}")
        return value

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        """An integer from `low` to `high` inclusive."""
        raw = self.query.get(name)
        if raw is None:
            return default
        value = _natural(raw)
        if value is None or not low <= value <= high:
            raise _invalid(f"`{name}` must be an integer from {low} to {high}; got {raw!r}")
        return value

    def cursor(self, name: str) -> int:
        """A page cursor: the `next` of a previous page, or nothing for the first page."""
        raw = self.query.get(name)
        if raw is None:
            return 0
        if _natural(raw) is None:
            raise _invalid(f"`{name}` must be the `next` cursor of a previous page; got {raw!r}")
        return int(raw)

    def choices(self, name: str, choices: Iterable[str]) -> tuple[str, ...] | None:
        """A comma-separated list of distinct choices, in the order given."""
        raw = self.query.get(name)
        if raw is None:
            return None
        choices = tuple(choices)
        picked = tuple(dict.fromkeys(raw.split(",")))
        if not raw or not set(picked) <= set(choices):
            raise _invalid(
                f"`{name}` must be a comma-separated list of {', '.join(choices)}; got {raw!r}"
            )
        return picked

    def _moment(self, name: str, day_part: str) -> str | None:
        raw = self.query.get(name)
        if raw is None:
            return None
        try:
            return utc_timestamp(raw + day_part if _DATE.match(raw) else raw)
        except ValueError:
            raise _invalid(
                f"`{name}` must be a date (2023-05-07) or a date and time with a"
                f" time zone (2023-05-07T14:00:00Z); got {raw!r}"
            ) from None

    def period(self) -> tuple[str | None, str | None]:
        """`since` and `until`, both inclusive; a bare date covers its whole day (UTC)."""
        since, until = self._moment("since", DAY_START), self._moment("until", DAY_END)
        if since is not None and until is not None and since > until:
            raise _invalid(
                f"`since` ({self.query['since']}) is after `until` ({self.query['until']})"
            )
        return since, until

    def scope(self) -> str | None:
        """The scope rule of every listing and item route: the scope named, `default` when
        none is (as search and context), or every scope (None) only when asked for."""
        every = self.choice(ALL_SCOPES, ("true", "false")) == "true"
        scope = self.key("scope")
        if every and scope is not None:
            raise _invalid(f"give `scope` or `{ALL_SCOPES}=true`, not both")
        return None if every else scope or DEFAULT_SCOPE
