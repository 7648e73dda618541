"""How the command line shows answers to people: data on standard output, notes on standard error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from forged.cli import display
from forged.models import (
    DeadLetterInfo,
    DeadLettersAnswer,
    LogStatus,
    ObserverStatus,
    RedistillReport,
    RedistillResult,
    Status,
    StoredFact,
)
from forged.timestamps import utc_text

STAMP = "2026-11-29T17:00:03.120Z"


def _fact(**changes: object) -> StoredFact:
    fields: dict[str, object] = {
        "id": 7,
        "kind": "state",
        "scope": "user:alice",
        "session": None,
        "text": "Alice lives in Berlin.",
        "created_at": STAMP,
        "last_seen_at": STAMP,
        "seen_count": 1,
        "first_seq": 1,
        "last_seq": 1,
        "batch_id": "b1",
        "first_at": STAMP,
        "last_at": STAMP,
        "valid_from": STAMP,
    }
    return StoredFact(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_table_pads_every_column_but_the_last(capsys: pytest.CaptureFixture[str]) -> None:
    """Dead letters print as a table: columns padded to their widest cell, the reason as it is."""
    letters = [
        DeadLetterInfo(1, 12, "a", "too long", None, STAMP),
        DeadLetterInfo(2, 3, "user:bob", "invalid answer", None, STAMP),
    ]
    display.show_dead_letters(DeadLettersAnswer(letters))
    assert capsys.readouterr().out.splitlines() == [
        "SEQ  SCOPE     SINCE (UTC)          REASON",
        "12   a         2026-11-29 17:00:03  too long",
        "3    user:bob  2026-11-29 17:00:03  invalid answer",
    ]


def test_nothing_to_show_is_said_on_standard_error(capsys: pytest.CaptureFixture[str]) -> None:
    """No dead letters: standard output stays empty, so a pipe receives only data."""
    display.show_dead_letters(DeadLettersAnswer([]))
    assert capsys.readouterr() == ("", "no open dead letters\n")


def test_a_retired_fact_says_when_by_what_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    """A superseded fact's line ends with its date, its successor and the reason."""
    display.show_fact(
        _fact(
            seen_count=2,
            invalid_at="2026-12-01T08:00:00.000Z",
            superseded_by=9,
            superseded_reason="moved",
        )
    )
    assert capsys.readouterr().out == (
        "     7  user:alice  state       2026-11-29  Alice lives in Berlin.  (seen 2x)"
        "  [superseded 2026-12-01 by #9: moved]\n"
    )


def test_a_redistill_report_counts_on_standard_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Each re-run dead letter is a row; the totals are a note."""
    report = RedistillReport(1, 0, [RedistillResult(4, 1, "redistilled", facts=2)])
    display.show_redistill(report)
    out, err = capsys.readouterr()
    assert out.splitlines() == ["SEQ  OUTCOME      FACTS  REASON", "4    redistilled  2"]
    assert err == "1 redistilled, 0 still failing\n"


@pytest.mark.parametrize(
    ("ago", "shown"),
    [(timedelta(seconds=42), "42 s"), (timedelta(minutes=5), "5 min"), (timedelta(hours=3), "3 h")],
)
def test_a_wait_for_the_model_says_since_when_and_what_to_do(
    ago: timedelta, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An observer waiting for its model gets a line with the start of the wait, how long ago
    that was, and the fix; the distill observer's names the offline distiller too."""
    since = utc_text(datetime.now(UTC) - ago - timedelta(milliseconds=300))
    waiting = [
        ObserverStatus(name, state="waiting_for_llm", waiting_since=since)
        for name in ("distill", "consolidate")
    ]
    display.show_status(Status("0.1.0", 9.0, True, False, LogStatus(1, 1), waiting))
    day, clock = since[:10], since[11:19]
    lines = [line for line in capsys.readouterr().out.splitlines() if "waiting for" in line]
    assert lines == [
        f"  waiting for its model since {day} {clock} UTC ({shown}); start the model server,"
        " or distil without one: [distiller] offline = true",
        f"  waiting for its model since {day} {clock} UTC ({shown}); start the model server",
    ]
