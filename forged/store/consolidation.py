"""The reads consolidation makes of a store: the scopes due for a run, a scope's current facts,
and its summaries past the newest few; portable SQL, rows as tuples for the caller's types."""

from __future__ import annotations

from typing import Any

from forged.store.portable import portable

__all__ = ["current_facts", "due_scopes", "old_summaries"]

EVERY = 2**62  # a LIMIT no scope reaches (SQLite has no LIMIT ALL)
_CURRENT = """
    SELECT id, kind, text, first_at FROM facts
    WHERE scope = ? AND superseded_by IS NULL ORDER BY norm, id
"""  # by text: facts about the same thing tend to start alike, so they share a chunk
_DUE = """
    SELECT f.scope FROM facts AS f LEFT JOIN consolidation_progress AS p
        ON p.observer = :observer AND p.scope = f.scope
    WHERE f.superseded_by IS NULL AND f.id > coalesce(p.fact_id, 0)
    GROUP BY f.scope, p.run_at
    HAVING count(*) >= :min_new OR coalesce(p.run_at, min(f.created_at)) <= :waited_since
    ORDER BY f.scope
"""  # timestamps are text in one format (forged.timestamps): their order is the time's
_OLD = """
    SELECT id, text, first_at, last_at FROM summaries
    WHERE scope = ? AND condensed_into IS NULL ORDER BY id DESC LIMIT ? OFFSET ?
"""  # all but the newest `keep`


def due_scopes(conn: Any, observer: str, min_new: int, waited_since: str) -> list[str]:
    """The scopes with `min_new` facts since `observer`'s last run there, or with any new fact
    and no run since `waited_since`; in scope order."""
    params = {"observer": observer, "min_new": min_new, "waited_since": waited_since}
    return [scope for (scope,) in portable(conn).execute(_DUE, params)]


def current_facts(conn: Any, scope: str) -> list[tuple[int, str, str, str]]:
    """The scope's current facts as (id, kind, text, first_at), ordered by text."""
    return [tuple(row) for row in portable(conn).execute(_CURRENT, (scope,))]


def old_summaries(conn: Any, scope: str, keep: int) -> list[tuple[int, str, str, str]]:
    """The scope's current summaries but the newest `keep`, as (id, text, first_at, last_at),
    oldest first."""
    rows = portable(conn).execute(_OLD, (scope, EVERY, keep)).fetchall()
    return [tuple(row) for row in reversed(rows)]
