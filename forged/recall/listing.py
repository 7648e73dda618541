"""Listings: facts, summaries and a scope's interactions page by page, the scopes, the edit
trail, and a fact with its audit trail."""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from forged.models import (
    EditRecord,
    FactsPage,
    InteractionsPage,
    LoggedInteraction,
    Message,
    ScopeInfo,
    StoredSummary,
    SummariesPage,
)
from forged.recall.query import CURRENT, UNCONDENSED
from forged.store.audit import FACT_COLUMNS, fact_audit, stored_fact
from forged.store.common import fitting
from forged.store.cursors import past_ids
from forged.store.portable import portable
from forged.store.snapshot import one_state

__all__ = ["PAGE_DEFAULT", "PAGE_MAX", "Page", "fact_audit", "list_facts", "list_summaries"]

PAGE_DEFAULT = 100  # facts or summaries in a listing page when the request gives no limit
PAGE_MAX = 1000  # largest listing page a request may ask for
_SUMMARY_COLUMNS = (
    "id, scope, session, text, created_at, first_seq, last_seq, batch_id, observer, first_at,"
    " last_at, condensed_into"
)


_MESSAGES = msgspec.json.Decoder(list[Message])
EDITS_MAX = 1000  # entries of the edit trail one request returns
# Per scope: what it holds (current memory only) and when it was active.
_SCOPE_COUNTS = (
    (
        "SELECT scope, count(*), min(timestamp), max(timestamp), max(received_at) FROM interactions"
        " GROUP BY scope"
    ),
    f"SELECT scope, count(*) FROM facts WHERE {CURRENT} GROUP BY scope",
    f"SELECT scope, count(*) FROM summaries WHERE {UNCONDENSED} GROUP BY scope",
)
_LOGGED = "seq, scope, session, timestamp, received_at, messages"
_INTERACTIONS = """
    SELECT {columns} FROM interactions
    WHERE scope = ? AND (timestamp > ? OR (timestamp = ? AND seq > ?)) {period}
    ORDER BY timestamp, seq LIMIT ?
"""  # a keyset page by (timestamp, seq): what the interactions are about, in order (their
# sizes first: a page holds what one read of the log may, MAX_READ_BYTES)


class Page(msgspec.Struct, frozen=True):
    """A validated listing request: which rows, from where, how many."""

    scope: str | None = None
    kind: str | None = None
    after: int = 0
    limit: int = PAGE_DEFAULT
    since: str | None = None  # rows whose time span reaches this moment or later
    until: str | None = None  # rows whose time span starts at this moment or earlier
    history: bool = False  # superseded facts and condensed summaries too


def _page_where(page: Page, current: str | None = None) -> tuple[str, list[Any]]:
    clauses: list[str] = ["id > ?"] + ([current] if current and not page.history else [])
    params: list[Any] = [page.after]  # a keyset page: later inserts cannot shift it
    for clause, value in (
        ("scope = ?", page.scope),
        ("kind = ?", page.kind),
        ("last_at >= ?", page.since),
        ("first_at <= ?", page.until),
    ):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return " AND ".join(clauses), params


def list_facts(conn: sqlite3.Connection, page: Page) -> FactsPage:
    """Facts with id greater than `after`, in id order: a keyset page that new facts never shift."""
    where, params = _page_where(page, CURRENT)
    with past_ids(conn):  # no fact of a smaller id commits after the page (PostgreSQL)
        rows = conn.execute(
            f"SELECT {FACT_COLUMNS} FROM facts WHERE {where} ORDER BY id LIMIT ?",
            (*params, page.limit + 1),
        ).fetchall()
    facts = [stored_fact(r) for r in rows[: page.limit]]
    return FactsPage(facts=facts, next=str(facts[-1].id) if len(rows) > page.limit else None)


def list_summaries(conn: sqlite3.Connection, page: Page) -> SummariesPage:
    """Summaries with id greater than `after`, in id order."""
    where, params = _page_where(msgspec.structs.replace(page, kind=None), UNCONDENSED)
    with past_ids(conn):
        rows = conn.execute(
            f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE {where} ORDER BY id LIMIT ?",
            (*params, page.limit + 1),
        ).fetchall()
    summaries = [StoredSummary(*r) for r in rows[: page.limit]]
    next_cursor = str(summaries[-1].id) if len(rows) > page.limit else None
    return SummariesPage(summaries=summaries, next=next_cursor)


def list_scopes(conn: sqlite3.Connection) -> list[ScopeInfo]:
    """Every scope holding anything, most recently active first."""
    with one_state(conn):  # a forget between the counts: a scope with facts and no turns
        logged, facts, summaries = (portable(conn).execute(q).fetchall() for q in _SCOPE_COUNTS)
    spans = {r[0]: r[1:] for r in logged}
    fact_counts, summary_counts = dict(facts), dict(summaries)
    scopes = []
    for scope in {*spans, *fact_counts, *summary_counts}:
        turns, first_at, last_at, received = spans.get(scope, (0, None, None, None))
        scopes.append(
            ScopeInfo(
                scope,
                turns,
                fact_counts.get(scope, 0),
                summary_counts.get(scope, 0),
                first_at,
                last_at,
                received,
            )
        )
    return sorted(scopes, key=lambda s: (s.last_received_at or "", s.scope), reverse=True)


class InteractionPage(msgspec.Struct, frozen=True):
    """A validated request for a scope's interactions by time, after a `(timestamp, seq)`."""

    scope: str
    after_at: str = ""
    after_seq: int = 0
    limit: int = PAGE_DEFAULT
    since: str | None = None
    until: str | None = None


def list_interactions(conn: sqlite3.Connection, page: InteractionPage) -> InteractionsPage:
    """A scope's interactions ordered by their timestamps; `next` is `<seq>@<timestamp>`."""
    period, params = "", []
    for clause, value in (("timestamp >= ?", page.since), ("timestamp <= ?", page.until)):
        if value is not None:
            period += f" AND {clause}"
            params.append(value)
    sql, where = portable(conn), (page.scope, page.after_at, page.after_at, page.after_seq, *params)
    sizes = sql.execute(
        _INTERACTIONS.format(columns="length(messages)", period=period), (*where, page.limit + 1)
    ).fetchall()
    count = fitting(size for (size,) in sizes[: page.limit])
    rows = sql.execute(_INTERACTIONS.format(columns=_LOGGED, period=period), (*where, count))
    found = [
        LoggedInteraction(seq, scope, session, at, received, _MESSAGES.decode(messages))
        for seq, scope, session, at, received, messages in rows.fetchall()
    ]
    last = found[-1] if found and len(sizes) > count else None
    return InteractionsPage(found, None if last is None else f"{last.seq}@{last.timestamp}")


def list_edits(conn: sqlite3.Connection, scope: str | None, limit: int) -> list[EditRecord]:
    """The edit trail, newest first (of one scope, or of all)."""
    where, params = ("WHERE scope = ?", [scope]) if scope is not None else ("", [])
    rows = (
        portable(conn)
        .execute(
            "SELECT id, scope, action, item, item_id, into_id, created_at FROM edits"
            f" {where} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        .fetchall()
    )
    return [EditRecord(*r) for r in rows]
