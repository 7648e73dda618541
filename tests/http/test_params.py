"""The one query-parameter parser: every value in range or a 400 `invalid_parameter`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forged.errors import InvalidRequest
from forged.http.params import MAX_SEQ, Params

PATH = "/v1/facts"


def _refusal(query: dict[str, str], read: str, accepted: tuple[str, ...] = ("after",)) -> str:
    with pytest.raises(InvalidRequest) as info:
        params = Params(query, PATH, accepted)
        getattr(params, read)(*(("after",) if read == "cursor" else ("after", 0, 0, MAX_SEQ)))
    assert (info.value.status, info.value.code) == (400, "invalid_parameter")
    return info.value.message


@pytest.mark.parametrize(
    "raw", [str(MAX_SEQ + 1), "9" * 23, "²", "٣", "-1", "+1", " 1", "1e3", "0x10", ""]
)
def test_integers_past_sqlite_or_not_ascii_digits_are_refused(raw: str) -> None:
    """Huge, Unicode and signed numbers are a 400, never an int SQLite cannot hold."""
    assert _refusal({"after": raw}, "integer") == (
        f"`after` must be an integer from 0 to {MAX_SEQ}; got {raw!r}"
    )
    assert _refusal({"after": raw}, "cursor") == (
        f"`after` must be the `next` cursor of a previous page; got {raw!r}"
    )


def test_unknown_parameters_are_named() -> None:
    """A parameter the route does not take is refused, with what it does take."""
    assert _refusal({"b": ""}, "cursor") == "unknown parameter `b`; /v1/facts accepts after"
    assert (
        _refusal({"b": ""}, "cursor", ()) == "unknown parameter `b`; /v1/facts takes no parameters"
    )


@given(st.integers(min_value=0, max_value=MAX_SEQ))
def test_every_seq_is_read_back(value: int) -> None:
    """Every integer SQLite holds is a valid cursor and integer parameter."""
    params = Params({"after": str(value)}, PATH, ("after",))
    assert params.cursor("after") == params.integer("after", 0, 0, MAX_SEQ) == value
