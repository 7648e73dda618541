"""Listings: facts and summaries page by page, and a fact with its audit trail."""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from forged.models import FactAudit, FactChange, FactsPage, StoredFact, StoredSummary, SummariesPage
from forged.portable import portable
from forged.query import CURRENT, UNCONDENSED

PAGE_DEFAULT = 100  # facts or summaries in a listing page when the request gives no limit
PAGE_MAX = 1000  # largest listing page a request may ask for
_FACT_COLUMNS = (
    "id, kind, scope, session, text, created_at, last_seen_at, seen_count, first_seq, last_seq,"
    " batch_id, first_at, last_at, first_at, invalid_at, superseded_by, superseded_reason"
)
_TRAIL = """
    SELECT action, run_id, reason, created_at, {other} FROM consolidation_changes
    WHERE {this} = ? AND action != 'condense' ORDER BY id
"""  # a fact's changes, each with the fact on its other side
_SUMMARY_COLUMNS = (
    "id, scope, session, text, created_at, first_seq, last_seq, batch_id, observer, first_at,"
    " last_at, condensed_into"
)


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
    for clause, value in (("scope = ?", page.scope), ("kind = ?", page.kind),
                          ("last_at >= ?", page.since), ("first_at <= ?", page.until)):  # fmt: skip
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return " AND ".join(clauses), params


def list_facts(conn: sqlite3.Connection, page: Page) -> FactsPage:
    """Facts with id greater than `after`, in id order: a keyset page that new facts never shift."""
    where, params = _page_where(page, CURRENT)
    rows = conn.execute(
        f"SELECT {_FACT_COLUMNS} FROM facts WHERE {where} ORDER BY id LIMIT ?",
        (*params, page.limit + 1),
    ).fetchall()
    facts = [StoredFact(*r) for r in rows[: page.limit]]
    return FactsPage(facts=facts, next=str(facts[-1].id) if len(rows) > page.limit else None)


def list_summaries(conn: sqlite3.Connection, page: Page) -> SummariesPage:
    """Summaries with id greater than `after`, in id order."""
    where, params = _page_where(msgspec.structs.replace(page, kind=None), UNCONDENSED)
    rows = conn.execute(
        f"SELECT {_SUMMARY_COLUMNS} FROM summaries WHERE {where} ORDER BY id LIMIT ?",
        (*params, page.limit + 1),
    ).fetchall()
    summaries = [StoredSummary(*r) for r in rows[: page.limit]]
    next_cursor = str(summaries[-1].id) if len(rows) > page.limit else None
    return SummariesPage(summaries=summaries, next=next_cursor)


def _fact(conn: sqlite3.Connection, fact_id: int) -> StoredFact | None:
    row = conn.execute(f"SELECT {_FACT_COLUMNS} FROM facts WHERE id = ?", (fact_id,)).fetchone()
    return None if row is None else StoredFact(*row)


def _changes(conn: sqlite3.Connection, fact_id: int, this: str, other: str) -> list[FactChange]:
    rows = conn.execute(_TRAIL.format(this=this, other=other), (fact_id,)).fetchall()
    return [
        FactChange(action, run, reason, at, fact)
        for action, run, reason, at, other_id in rows
        if (fact := _fact(conn, other_id)) is not None
    ]


def fact_audit(conn: sqlite3.Connection, fact_id: int) -> FactAudit | None:
    """A fact with its audit trail: the facts it replaced and the change that retired it."""
    conn = portable(conn)
    fact = _fact(conn, fact_id)
    if fact is None:
        return None
    retired = _changes(conn, fact_id, "fact_id", "into_id")
    replaced = _changes(conn, fact_id, "into_id", "fact_id")
    return FactAudit(fact, replaced, retired[-1] if retired else None)
