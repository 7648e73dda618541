"""Recall's queries on PostgreSQL: tsvector and GIN in place of FTS5, the same ranking and packing.

Each of the user's words becomes `plainto_tsquery` of a bound parameter, so no character or
keyword of a query is ever read as query syntax; the words are ORed as in FTS5, ranked by
`ts_rank` (text relevance, in place of BM25) times the same recency decay, and the lists are
fused and packed by the functions `recall` uses for SQLite.
"""

from __future__ import annotations

from typing import Any

from forged.index.turns import IndexView
from forged.models import MEMORY_TYPES, FactsPage, MemoryItem, MemoryType, SummariesPage
from forged.recall import indexed, listing
from forged.recall.dense import DenseQuery
from forged.recall.fulltext import RECENCY_FLOOR, memory_item
from forged.recall.fusion import covered_first, fuse, hybrid
from forged.recall.listing import Page
from forged.recall.neighbours import with_neighbours
from forged.recall.periods import periods
from forged.recall.query import SearchQuery, conditions, julian_now, kind_type, query_phrases
from forged.recall.sqlite import with_sources
from forged.store.portable import Portable, to_psycopg
from forged.store.postgres_schema import TEXT_SEARCH

__all__ = ["list_facts", "list_summaries", "ranked", "search"]

# Julian day of a stored ISO 8601 timestamp, the unit `now` and the half-life are given in.
_JULIAN = "(extract(epoch from {at}::timestamptz) / 86400.0 + 2440587.5)"
_DECAY = (
    "(%(floor)s + (1 - %(floor)s) * power(0.5, greatest(0.0, %(now)s - "
    + _JULIAN
    + ") / %(half_life)s))"
)
_SEARCH = {
    "fact": f"""
        SELECT f.id, f.kind, f.scope, f.session, f.text, f.created_at, f.last_seen_at,
               f.first_seq, f.last_seq, f.first_at, f.last_at,
               ts_rank(f.search, q.query) * {_DECAY.format(at="f.last_at")} AS score,
               f.superseded_by, f.invalid_at
        FROM facts AS f, ({{query}}) AS q (query)
        WHERE f.search @@ q.query AND f.scope = %(scope)s {{filters}}
        ORDER BY score DESC, f.id DESC LIMIT %(limit)s
    """,
    "summary": f"""
        SELECT s.id, 'summary', s.scope, s.session, s.text, s.created_at, s.created_at,
               s.first_seq, s.last_seq, s.first_at, s.last_at,
               ts_rank(s.search, q.query) * {_DECAY.format(at="s.last_at")} AS score,
               s.condensed_into, NULL
        FROM summaries AS s, ({{query}}) AS q (query)
        WHERE s.search @@ q.query AND s.scope = %(scope)s {{filters}}
        ORDER BY score DESC, s.id DESC LIMIT %(limit)s
    """,
    "interaction": f"""
        SELECT i.seq, 'interaction', i.scope, i.session, i.messages, i.received_at,
               i.received_at, i.seq, i.seq, i.timestamp, i.timestamp,
               ts_rank(i.search, q.query) * {_DECAY.format(at="i.timestamp")} AS score,
               NULL, NULL
        FROM interactions AS i, ({{query}}) AS q (query)
        WHERE i.search @@ q.query AND i.scope = %(scope)s {{filters}}
        ORDER BY score DESC, i.seq DESC LIMIT %(limit)s
    """,
}


def _words(text: str, max_words: int) -> list[str]:
    """The user's words, as `recall` finds them for FTS5, without FTS5's quoting."""
    return [p[1:-1].replace('""', '"') for p in query_phrases(text, max_words)]


def _tsquery(words: list[str], params: dict[str, Any]) -> str:
    """SQL for the words ORed, each a bound parameter read as plain text."""
    terms = []
    for n, word in enumerate(words):
        params[f"w{n}"] = word
        terms.append(f"plainto_tsquery('{TEXT_SEARCH}', %(w{n})s)")
    return "SELECT " + " || ".join(terms)


def ranked(
    conn: Any, table: MemoryType, query: SearchQuery, half_life: float, now: float
) -> list[MemoryItem]:
    """One table's best matches, by text relevance times the decay of when they happened."""
    words = _words(query.q, query.max_words)
    if not words:
        return []
    params: dict[str, Any] = {
        "scope": query.scope,
        "limit": query.limit,
        "now": now,
        "half_life": half_life,
        "floor": RECENCY_FLOOR,
    }
    sql = _SEARCH[table].format(
        query=_tsquery(words, params), filters=to_psycopg(conditions(table, query, params))
    )
    return [memory_item(table, r) for r in conn.execute(sql, params).fetchall()]


def searches(
    conn: Any,
    query: SearchQuery,
    half_life_days: float,
    limits: list[int],
    now: float | None = None,
    index: IndexView | None = None,
    dense: DenseQuery | None = None,
    placed: set[int] | None = None,
) -> list[list[MemoryItem]]:
    """The best items of one scope for each of `limits`, as `recall.sqlite.searches` gives them on
    SQLite: each type ranked once, to `query.limit` (at least the largest); with the turn
    `index`, turns ranked through it (forged.recall.indexed)."""
    now = julian_now() if now is None else now
    wanted = query.types if query.kind is None else (kind_type(query.kind),)
    types = [t for t in MEMORY_TYPES if t in wanted]
    lists = {
        t: ranked(conn, t, query, half_life_days, now)
        for t in types
        if t != "interaction" or index is None
    }

    through_index = indexed.ranked(conn, index, query, half_life_days, now) if index else None

    def turns(limit: int) -> list[MemoryItem]:
        """The best turns, through the index if it answers: ranked once for the largest limit
        (its best few are the first of its best many)."""
        if through_index is not None:
            return through_index[:limit]
        if "interaction" not in lists:
            lists["interaction"] = ranked(conn, "interaction", query, half_life_days, now)
        return lists["interaction"]

    by_meaning = dense.lists(conn, query) if dense is not None else None
    meant = {t: by_meaning(t) for t in types} if by_meaning is not None else {}
    answers = []
    for limit in limits:
        found = [turns(limit) if t == "interaction" else lists[t] for t in types]
        if meant:  # each type's list by words fused with its list by meaning (fusion.hybrid)
            found = [hybrid(f, meant[t], query.q) for t, f in zip(types, found, strict=True)]
        found = [  # each best turn followed by its session's next (forged.recall.neighbours)
            with_neighbours(conn, f, query, placed=placed) if t == "interaction" else f
            for t, f in zip(types, found, strict=True)
        ]
        answers.append(fuse([f[:limit] for f in found], limit, periods(query.q)))
    return answers


def search(
    conn: Any,
    query: SearchQuery,
    half_life_days: float,
    now: float | None = None,
    index: IndexView | None = None,
    dense: DenseQuery | None = None,
) -> list[MemoryItem]:
    """The best `query.limit` items of one scope, as `recall.sqlite.search` ranks them on SQLite."""
    placed: set[int] = set()
    (found,) = searches(conn, query, half_life_days, [query.limit], now, index, dense, placed)
    found = covered_first(found, query.q, placed)
    if query.sources:
        found = [with_sources(Portable(conn), i) for i in found]  # type: ignore[arg-type]
    return found


def list_facts(conn: Any, page: Page) -> FactsPage:
    """Facts with id greater than `after`, in id order."""
    return listing.list_facts(Portable(conn), page)  # type: ignore[arg-type]  # portable SQL


def list_summaries(conn: Any, page: Page) -> SummariesPage:
    """Summaries with id greater than `after`, in id order."""
    return listing.list_summaries(Portable(conn), page)  # type: ignore[arg-type]  # portable SQL
