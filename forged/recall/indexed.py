"""Turns ranked through the index beside the store (`forged.index`): the index names the
candidates, the store's rows score them by FTS5's own BM25 times recency decay.

tantivy's BM25 weighs words by another IDF than FTS5's and rounds each turn's length to a
byte, so its order alone would differ from the store's for common words. It only picks the
best few dozen candidates per result; each is scored again from its text by `bm25()` below,
the formula of FTS5's `bm25()`, over the index's counts. Top-10 overlap with exact FTS5
ranking is measured by `make bench` (onescope).
"""

from __future__ import annotations

import heapq
import json
import math
import sqlite3
from collections import Counter
from collections.abc import Mapping
from typing import Any

from forged.index.turns import IndexStats, TurnIndex, terms
from forged.models import MemoryItem
from forged.recall.fulltext import (
    BM25_K1,
    RECENCY_FLOOR,
    SCORE,
    SELECTIVE_MIN_ROWS,
    memory_item,
    recency_decay,
    turn_text,
)
from forged.recall.query import SearchQuery, conditions, searched_words
from forged.store.cjk import cjk_grams
from forged.store.portable import portable

__all__ = ["BM25_B", "CANDIDATES_PER_RESULT", "MAX_DEPTH", "bm25", "ranked"]

BM25_B = 0.75  # FTS5's bm25() length normalisation
# Below this many matches of a query's words (counted by the index), FTS5 on SQLite ranks every
# one, pruned by its bounds (forged.recall.fulltext), faster than the index's candidates are
# read and scored again (make bench, onescope: one rare or two mid-frequency words).
INDEX_MIN_MATCHES = 20_000
CANDIDATES_PER_RESULT = 1  # each age band's best this many per result asked are scored again
MIN_CANDIDATES = 10  # and at least this many
MAX_DEPTH = 4096  # past this many candidates of a band FTS5 answers instead (a selective filter)
DEEPER = 4  # a band is asked again for this many times as many when its rest could still enter
BAND_AGES = (0.5, 1.0, 2.0, 4.0, 8.0)  # the edges of the age bands, in half-lives
# How far tantivy's BM25 under FTS5's weights may fall below FTS5's: tantivy rounds a turn's
# length to one byte (exact to 40 terms, then within an eighth), and counts deleted turns in
# its statistics until a merge.
ROUNDING = 0.15
# The turns the index does not hold yet: they count in BM25's statistics, and those of the
# scope are every one a candidate.
_TAIL = "SELECT seq, scope, messages FROM interactions WHERE seq > :after"
# The candidates that pass the query's filters, with what scores them (`+`: SQLite looks each
# up by its key, not through the scope's index).
_CANDIDATES = """
    SELECT i.seq, i.timestamp, i.messages FROM interactions AS i
    WHERE i.seq {ids} AND {plus}i.scope = :scope {filters}
"""
# The winners' rows, as fulltext.memory_item reads them (a place held for the score).
_ROWS = """
    SELECT i.seq, 'interaction', i.scope, i.session, i.messages, i.received_at, i.received_at,
           i.seq, i.seq, i.timestamp, i.timestamp, NULL, NULL, NULL
    FROM interactions AS i WHERE i.seq {ids}
"""


class _Dialect:
    """How a statement above names a list of seqs on either store, and runs."""

    def __init__(self, conn: Any) -> None:
        self.sqlite = isinstance(conn, sqlite3.Connection)
        self.conn = portable(conn)
        self.ids = "IN (SELECT value FROM json_each(:ids))" if self.sqlite else "= ANY(:ids)"
        self.plus = "+" if self.sqlite else ""

    def seqs(self, seqs: list[int]) -> object:
        return json.dumps(seqs) if self.sqlite else seqs

    def items(self, best: list[tuple[float, int]]) -> list[MemoryItem]:
        """The winners as items, best first, with the scores that ranked them."""
        found = self.conn.execute(
            _ROWS.format(ids=self.ids), {"ids": self.seqs([k for _, k in best])}
        )
        rows = {row[0]: row for row in found}
        return [
            memory_item("interaction", (*rows[k][:SCORE], score, *rows[k][SCORE + 1 :]))
            for score, k in best
            if k in rows
        ]


def bm25(counts: Counter[str], length: int, weights: dict[str, float], stats: IndexStats) -> float:
    """FTS5's bm25() of a turn whose terms are `counts` (`length` in all), for terms of IDF
    `weights`: each term's IDF times its saturated, length-normalised frequency."""
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / max(stats.average_terms, 1e-9))
    return sum(
        w * counts[t] * (BM25_K1 + 1) / (counts[t] + norm) for t, w in weights.items() if counts[t]
    )


def _with_tail(stats: IndexStats, tail: list[list[str]]) -> IndexStats:
    """The statistics of the index and of the turns it does not hold yet, together."""
    turns = stats.turns + len(tail)
    total = stats.average_terms * stats.turns + sum(len(t) for t in tail)
    return IndexStats(turns, total / max(1, turns))


def _weights(
    index: TurnIndex, words: list[str], stats: IndexStats, tail: list[list[str]]
) -> dict[str, float]:
    """Each searched term with FTS5's IDF, log((N - n + 0.5) / (n + 0.5)) clamped above zero,
    over the index and its `tail` (each turn's terms); in a large index, terms in more than
    half the turns left out unless all are (as `fulltext` leaves them out: they weigh almost
    nothing, yet make most turns candidates)."""
    asked = dict.fromkeys(t for w in words for t in terms(w))
    documents = {t: index.documents(t) for t in asked}
    for held in map(set, tail):
        for t in held.intersection(asked):
            documents[t] += 1
    n = stats.turns
    kept = documents
    if n >= SELECTIVE_MIN_ROWS:
        kept = {t: d for t, d in documents.items() if d <= n // 2} or documents
    return {t: max(1e-6, math.log((n - d + 0.5) / (d + 0.5))) for t, d in kept.items()}


def _bands(now: float, half_life: float) -> list[tuple[float | None, float | None, float]]:
    """The age bands searched on their own, as (since, until, the largest decay in the band):
    within a band decay varies by a third at most, so the index's order by BM25 is nearly its
    order by BM25 times decay, which across a year it is not."""
    edges = [now - age * half_life for age in BAND_AGES]
    bands: list[tuple[float | None, float | None, float]] = []
    for i, since in enumerate([*edges, None]):
        until = edges[i - 1] if i else None
        youngest = BAND_AGES[i - 1] if i else 0.0
        bands.append((since, until, RECENCY_FLOOR + (1 - RECENCY_FLOOR) * 0.5**youngest))
    return bands


class _Scored:
    """The candidates scored so far, from the store's rows: BM25 times decay, by seq."""

    def __init__(
        self,
        sql: _Dialect,
        query: SearchQuery,
        weights: dict[str, float],
        stats: IndexStats,
        half_life: float,
        now: float,
    ) -> None:
        self.params: dict[str, Any] = {"scope": query.scope}
        filters = conditions("interaction", query, self.params)
        self.statement = _CANDIDATES.format(ids=sql.ids, plus=sql.plus, filters=filters)
        self.sql, self.weights, self.stats = sql, weights, stats
        self.half_life, self.now = half_life, now
        self.bm25: dict[int, float | None] = {}  # None: filtered out
        self.score: dict[int, float] = {}

    def read(self, seqs: list[int], held: Mapping[int, list[str]] | None = None) -> None:
        """Score the candidates not scored yet (`held`: the terms of some, already read)."""
        unread = [seq for seq in seqs if seq not in self.bm25]
        self.bm25 |= dict.fromkeys(unread)
        self.params["ids"] = self.sql.seqs(unread)
        for seq, at, messages in self.sql.conn.execute(self.statement, self.params):
            known = held.get(seq) if held else None
            found = Counter(
                known if known is not None else terms(cjk_grams(turn_text(messages)[1]))
            )
            self.bm25[seq] = value = bm25(found, sum(found.values()), self.weights, self.stats)
            if value > 0:  # a turn of the tail may hold no word asked
                self.score[seq] = value * recency_decay(at, self.now, self.half_life)

    def best(self, limit: int) -> list[tuple[float, int]]:
        return heapq.nlargest(limit, ((score, seq) for seq, score in self.score.items()))


def ranked(
    conn: Any,
    index: TurnIndex,
    query: SearchQuery,
    half_life: float,
    now: float,
) -> list[MemoryItem] | None:
    """The scope's best turns for the query, by BM25 times recency decay; None when the
    store's own index answers better: on SQLite, for a query whose words match few turns,
    and for one whose filters pass too few of the index's candidates.

    The turns the index does not hold yet (keeper.MAX_TAIL at most) are candidates too, and
    every one is scored. A query with few matches has them all scored. Else each age band
    gives its best candidates by the index's BM25 (under FTS5's weights); they are scored from
    their rows. A band is asked again, deeper, while what it has not given could still enter:
    its last candidate's BM25 (give or take ROUNDING) times the band's largest decay beats the
    last result.
    """
    sql = _Dialect(conn)
    rows = sql.conn.execute(_TAIL, {"after": index.watermark})
    tail = [(seq, scope, terms(cjk_grams(turn_text(m)[1]))) for seq, scope, m in rows]
    held = [terms_of for _, _, terms_of in tail]
    stats = _with_tail(index.stats(), held)
    weights = _weights(index, searched_words(query), stats, held)
    if not weights:
        return []
    if sql.sqlite and sum(index.documents(t) for t in weights) < INDEX_MIN_MATCHES:
        return None  # few matches: the store's index ranks them exactly, and sooner
    scored = _Scored(sql, query, weights, stats, half_life, now)
    mine = {seq: terms_of for seq, scope, terms_of in tail if scope == query.scope}
    scored.read(list(mine), mine)  # the tail's terms, read once
    depth = max(MIN_CANDIDATES, CANDIDATES_PER_RESULT * query.limit)
    every = index.search(query.scope, weights, depth, None, None)
    scored.read([m.seq for m in every])
    if len(every) < depth:  # a rare word: every match is scored
        return sql.items(scored.best(query.limit))
    open_bands = [(band, depth) for band in _bands(now, half_life)]
    while open_bands:
        asked = [
            (band, d, index.search(query.scope, weights, d, band[0], band[1]))
            for band, d in open_bands
        ]
        scored.read([m.seq for _, _, matches in asked for m in matches])
        best = scored.best(query.limit)
        last = best[-1][0] if len(best) == query.limit else 0.0
        open_bands = []
        for band, d, matches in asked:
            if len(matches) < d:
                continue  # the band gave every match it has
            bound = matches[-1].bm25 * (1 + ROUNDING) * band[2]
            if bound > last:
                if d * DEEPER > MAX_DEPTH:
                    return None
                open_bands.append((band, d * DEEPER))
    return sql.items(scored.best(query.limit))
