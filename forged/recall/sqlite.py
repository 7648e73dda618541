"""Recall's queries on SQLite: each type ranked by FTS5 (`fulltext`), the lists fused, and the
interactions a fact or summary was distilled from."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

import msgspec

from forged.index.turns import IndexView
from forged.models import MEMORY_TYPES, MemoryItem, MemoryType, Turn
from forged.recall import indexed
from forged.recall.dense import DenseQuery
from forged.recall.fulltext import ranked, shown_turn
from forged.recall.fusion import covered_first, fused_top, hybrid, plain
from forged.recall.neighbours import with_neighbours
from forged.recall.periods import periods
from forged.recall.query import SearchQuery, julian_now, kind_type

__all__ = ["MAX_SOURCES", "search", "searches", "with_sources"]

# A summary condensed from others spans thousands of turns: its first MAX_SOURCES are cited.
MAX_SOURCES = 32
_SOURCES = f"""
    SELECT seq, session, timestamp, messages FROM interactions
    WHERE scope = ? AND seq BETWEEN ? AND ? ORDER BY seq LIMIT {MAX_SOURCES}
"""
_SAID = """
    SELECT seq, messages FROM interactions
    WHERE seq IN (SELECT value FROM json_each(?)) AND scope = ?
"""  # turns by seq, for the facts that may repeat them


def with_sources(conn: sqlite3.Connection, item: MemoryItem) -> MemoryItem:
    """A fact or summary with the interactions it was distilled from (the first MAX_SOURCES)."""
    if item.type == "interaction":
        return item
    rows = conn.execute(_SOURCES, (item.scope, item.first_seq, item.last_seq)).fetchall()
    turns = [Turn(seq, session, at, *shown_turn(messages)) for seq, session, at, messages in rows]
    return msgspec.structs.replace(item, sources=turns)


def searches(
    conn: sqlite3.Connection,
    query: SearchQuery,
    half_life_days: float,
    limits: list[int],
    now: float | None = None,
    index: IndexView | None = None,
    dense: DenseQuery | None = None,
    placed: set[int] | None = None,
) -> list[list[MemoryItem]]:
    """The best items of one scope for each of `limits` (each type ranked by BM25 times recency
    decay, and by meaning with `dense`; the lists merged by reciprocal rank fusion): each the
    answer of a search asking that many, from one ranking of each type (`query.limit` is at
    least the largest). With an `index` up to date, turns are ranked through it. `placed`,
    when given, is told the seqs of the turns the neighbour rule put after the turn they
    answer."""
    now = julian_now() if now is None else now
    wanted = query.types if query.kind is None else (kind_type(query.kind),)
    types = [t for t in MEMORY_TYPES if t in wanted]

    full: dict[tuple[MemoryType, int], list[MemoryItem] | None] = {}
    by_meaning = dense.lists(conn, query) if dense is not None else None
    meant: dict[MemoryType, list[MemoryItem]] = {}  # each type's list by meaning, read once

    def with_meaning(table: MemoryType, found: list[MemoryItem]) -> list[MemoryItem]:
        """The type's list by words fused with its list by meaning (fusion.hybrid)."""
        if by_meaning is None:
            return found
        if table not in meant:
            meant[table] = by_meaning(table)
        return hybrid(found, meant[table], query.q)

    expanded: dict[int, list[MemoryItem]] = {}  # the turns' list for each limit, expanded once

    def final(table: MemoryType, limit: int, found: list[MemoryItem]) -> list[MemoryItem]:
        """A type's list as fusion reads it: by words and meaning, and for turns each of the
        best few followed by its session's next turn (forged.recall.neighbours)."""
        if table != "interaction":
            return with_meaning(table, found)
        if limit not in expanded:
            expanded[limit] = with_neighbours(
                conn, with_meaning(table, found), query, placed=placed
            )
        return expanded[limit]

    def ranking(table: MemoryType, limit: int) -> list[MemoryItem] | None:
        """A type's best `limit` through the turn index, ranked once for the largest: the index's
        best few are the first of its best many, so a search asking fewer sees the same first
        results as a block asking more; None where the store's index answers."""
        if index is None or table != "interaction":
            return None
        if (table, -1) not in full:
            full[table, -1] = indexed.ranked(conn, index, query, half_life_days, now)
        found = full[table, -1]
        return None if found is None else found[:limit]

    def ranker(limit: int) -> Callable[[MemoryType, int], list[MemoryItem]]:
        def rank(table: MemoryType, depth: int) -> list[MemoryItem]:
            """A type's best `depth`: its best `query.limit`, ranked once (each ranking asks
            the index for every match, and fusion may read a list again, deeper)."""
            found = ranking(table, limit)
            if found is None:
                if (table, 0) not in full:
                    full[table, 0] = ranked(conn, table, query, half_life_days, now)
                found = full[table, 0]
            return final(table, limit, found or [])[:depth]

        return rank

    def said(seqs: list[int]) -> dict[int, str]:
        rows = conn.execute(_SAID, (json.dumps(seqs), query.scope))
        return {seq: plain(shown_turn(messages)[1]) for seq, messages in rows}

    return [fused_top(ranker(limit), types, limit, periods(query.q), said) for limit in limits]


def search(
    conn: sqlite3.Connection,
    query: SearchQuery,
    half_life_days: float,
    now: float | None = None,
    index: IndexView | None = None,
    dense: DenseQuery | None = None,
) -> list[MemoryItem]:
    """The best `query.limit` items of one scope, with their sources when asked: fused, then
    weighed by how much of the question each holds (fusion.covered_first), each turn the
    neighbour rule brought kept in its place."""
    placed: set[int] = set()
    (found,) = searches(conn, query, half_life_days, [query.limit], now, index, dense, placed)
    found = covered_first(found, query.q, placed)
    if query.sources:
        found = [with_sources(conn, i) for i in found]
    return found
