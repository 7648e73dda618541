"""Neighbour expansion: the turn after a turn found that asks a question, in the same
session, put right after it.

A turn found by a question is often itself a question, and what was asked for is its answer,
the next turn ("What's the toughest part?" → "Paying extra attention to detail."): the answer
shares no word with the question asked of memory, and nothing ranks it but its neighbour. A
turn that asks nothing is seldom answered by the next one: only a turn holding a question mark
brings its neighbour (docs/recall.md has the figures).
"""

from __future__ import annotations

from typing import Any

import msgspec

from forged.models import MemoryItem
from forged.recall.fulltext import item_rows, memory_item
from forged.recall.query import SearchQuery, conditions
from forged.store.portable import portable

__all__ = ["NEIGHBOUR_HITS", "NEIGHBOUR_SCAN", "QUESTION_MARKS", "with_neighbours"]

NEIGHBOUR_HITS = 4  # the best turns of a list whose next turn is put after them, if they ask
QUESTION_MARKS = ("?", "\uff1f")  # a turn holding one asks a question (and CJK full width)
NEIGHBOUR_SCAN = 8  # turns of the scope after a hit looked through for its session's next one
_AFTER = """
    SELECT seq, session FROM interactions WHERE scope = :scope AND seq > :seq
    ORDER BY seq LIMIT :scan
"""


def _next_turn(sql: Any, query: SearchQuery, turn: MemoryItem) -> MemoryItem | None:
    """The turn after `turn` in its session, if it passes the query's filters: None without a
    session, or when the session has no later turn among the scope's next NEIGHBOUR_SCAN."""
    if turn.session is None:
        return None
    params: dict[str, Any] = {"scope": query.scope, "seq": turn.id, "scan": NEIGHBOUR_SCAN}
    after = [seq for seq, session in sql.execute(_AFTER, params) if session == turn.session]
    if not after:
        return None
    select, key = item_rows("interaction")
    params = {"scope": query.scope, "next": after[0]}
    where = f" WHERE {key} = :next AND i.scope = :scope"
    row = sql.execute(select + where + conditions("interaction", query, params), params).fetchone()
    return None if row is None else memory_item("interaction", row)


def with_neighbours(
    conn: Any,
    turns: list[MemoryItem],
    query: SearchQuery,
    hits: int = NEIGHBOUR_HITS,
    placed: set[int] | None = None,
) -> list[MemoryItem]:
    """The turns, best first, with the next turn of each of the first `hits` that asks a question
    put right after it and scored as it (moved up when listed lower; left where it is when
    listed higher). `placed`, when given, is told the seq of each turn so put: search keeps
    those in their places (fusion.covered_first)."""
    sql, out = portable(conn), list(turns)
    for hit in turns[:hits]:
        if not any(mark in hit.text for mark in QUESTION_MARKS):
            continue
        at = next(n for n, t in enumerate(out) if t.id == hit.id)
        listed = {t.id: n for n, t in enumerate(out)}
        following = _next_turn(sql, query, hit)
        if following is None or listed.get(following.id, len(out)) <= at:
            continue
        if following.id in listed:
            following = out.pop(listed[following.id])
        out.insert(at + 1, msgspec.structs.replace(following, score=hit.score))
        if placed is not None:
            placed.add(following.id)
    return out
