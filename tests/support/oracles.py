"""Exact oracles for tests and benchmarks, kept out of forged: the answer a shortcut must give,
computed the slow, obvious way (every match scored; every content word looked up)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from forged.models import MemoryType
from forged.recall.fulltext import (
    _CONTENT,
    _DECAY,
    _FTS,
    _KEY_AND_TIME,
    RECENCY_FLOOR,
    _Counts,
    _selective,
    searched,
)
from forged.recall.query import SearchQuery, fts_query
from forged.text.grounding import _tokens, claim, stem

_EXACT = """
    SELECT c.{key} FROM {fts} JOIN {table} AS c ON c.{key} = {fts}.rowid
    WHERE {fts} MATCH :match AND c.scope = :scope
    ORDER BY -bm25({fts}, 1.0, 0.0) * {decay} DESC, c.{key} DESC LIMIT :limit
"""  # every match of every scope joined to its row: the ranking `ranked` gives, without shortcut


def exact_ids(
    conn: sqlite3.Connection, table: MemoryType, query: SearchQuery, half_life: float, now: float
) -> list[int]:
    """The ids `ranked` must return for a query without filters, by scoring every match."""
    phrases = searched(query)
    if not phrases:
        return []
    key, at = _KEY_AND_TIME[table]
    sql = _EXACT.format(
        fts=_FTS[table], table=_CONTENT[table], key=key, decay=_DECAY.format(at=f"c.{at}")
    )
    params = {
        "match": f"text : ({fts_query(_selective(_Counts(conn, table), phrases))})",
        "scope": query.scope,
        "limit": query.limit,
        "now": now,
        "half_life": half_life,
        "floor": RECENCY_FLOOR,
    }
    return [k for (k,) in conn.execute(sql, params)]


def content_share(text: str, sources: Iterable[str]) -> float:
    """The share of a text's content words (names included) found in the sources."""
    asserted = claim(text)
    words = asserted.words | asserted.names
    stems = {stem(t) for s in sources for t in _tokens(s)}
    return len(words & stems) / len(words) if words else 0.0
