"""Turns ranked through the index beside the store (`forged.index`): tantivy scores the scope's
matches by BM25 under FTS5's weights, each match's decay comes from its time in the index, and
only the winners' rows are read from the store.

tantivy's BM25 is FTS5's once each term weighs FTS5's IDF (turns.IndexView.search), but for a
turn's length: exact to 40 terms, rounded to a byte past that, which `exact_bm25` undoes from
the exact length the index holds beside it. Top-10 overlap with FTS5's exact
ranking is measured by `make bench` (onescope). Recency is no part of tantivy's score: the
index is asked for the best matches by BM25 in a window of time that narrows to the ages where
a match it has not given could still enter (`ranked`).
"""

from __future__ import annotations

import heapq
import json
import math
import sqlite3
from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt

from forged.index.turns import IndexStats, IndexView, Matches, rounded_lengths, terms
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
from forged.timestamps import julian_day

__all__ = [
    "BM25_B",
    "CANDIDATES_PER_RESULT",
    "MAX_DEPTH",
    "MAX_TAIL_BYTES",
    "bm25",
    "exact_bm25",
    "ranked",
]

BM25_B = 0.75  # FTS5's bm25() length normalisation
CANDIDATES_PER_RESULT = 10  # the index is asked for this many best matches per result at first
MIN_CANDIDATES = 100  # and at least this many
MAX_DEPTH = 4096  # past this many of a window's matches the store answers (a selective filter)
DEEPER = 4  # a window that cannot narrow is asked again for this many times as many
MAX_WINDOWS = 12  # windows asked at most, narrower or deeper each (two, at 300,000 turns)
# Days either side of since and until in the index, a minute: it compares moments as floats,
# the store compares timestamps as text (both UTC to the millisecond), and the rows of the
# winners decide.
PERIOD_SLACK = 1 / 1440
# Bytes of stored messages the turns the index does not hold yet may take and still be scored
# at each search (of every scope: a client's burst of long turns made every other client's
# searches a thousand times slower); past it, the store's own index answers.
MAX_TAIL_BYTES = 4_000_000
# The turns the index does not hold yet: they count in BM25's statistics, and those of the
# scope are every one a candidate.
_TAIL = "SELECT seq, scope, timestamp, messages FROM interactions WHERE seq > :after"
# The winners' rows that pass the query's filters, as fulltext.memory_item reads them (a place
# held for the score; `+`: SQLite looks each up by its key, not through the scope's index).
_ROWS = """
    SELECT i.seq, 'interaction', i.scope, i.session, i.messages, i.received_at, i.received_at,
           i.seq, i.seq, i.timestamp, i.timestamp, NULL, NULL, NULL
    FROM interactions AS i WHERE i.seq {ids} AND {plus}i.scope = :scope {filters}
"""


def bm25(counts: Counter[str], length: int, weights: dict[str, float], stats: IndexStats) -> float:
    """FTS5's bm25() of a turn whose terms are `counts` (`length` in all), for terms of IDF
    `weights`: each term's IDF times its saturated, length-normalised frequency."""
    norm: float = _length_norm(length, stats)
    return sum(
        w * counts[t] * (BM25_K1 + 1) / (counts[t] + norm) for t, w in weights.items() if counts[t]
    )


def _length_norm(length: float | npt.NDArray[np.int64], stats: IndexStats) -> Any:
    """BM25's length normalisation of turns of `length` terms (a number or an array):
    k1 (1 - b + b length / avg)."""
    return BM25_K1 * (1 - BM25_B + BM25_B * length / max(stats.average_terms, 1e-9))


def exact_bm25(matches: Matches, stats: IndexStats) -> npt.NDArray[np.float64]:
    """The matches' BM25 over their exact lengths where tantivy read rounded ones (past 40
    terms): each term's share is saturated over tf + the length's norm, so a score scales by
    (1 + rounded norm) / (1 + exact norm), exactly for terms found once in the turn (most) and
    within a hair for the others. Never above tantivy's (a rounded length is never longer)."""
    rounded = _length_norm(rounded_lengths(matches.terms), stats)
    exact: npt.NDArray[np.float64] = (
        matches.bm25 * (1 + rounded) / (1 + _length_norm(matches.terms, stats))
    )
    return exact


def _decays(days: npt.NDArray[np.float64], now: float, half_life: float) -> Any:
    """fulltext.day_decay of each moment given as a Julian day."""
    ages = np.maximum(0.0, now - days)
    return RECENCY_FLOOR + (1 - RECENCY_FLOOR) * np.power(0.5, ages / half_life)


def _with_tail(stats: IndexStats, tail: list[list[str]]) -> IndexStats:
    """The statistics of the index and of the turns it does not hold yet, together."""
    turns = stats.turns + len(tail)
    total = stats.average_terms * stats.turns + sum(len(t) for t in tail)
    return IndexStats(turns, total / max(1, turns))


def _weights(
    index: IndexView, words: list[str], stats: IndexStats, tail: list[list[str]]
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
    # a term's turns include those deleted and not merged away yet, which the turns do not
    documents = {t: min(d, n) for t, d in documents.items()}
    kept = documents
    if n >= SELECTIVE_MIN_ROWS:
        kept = {t: d for t, d in documents.items() if d <= n // 2} or documents
    return {t: max(1e-6, math.log((n - d + 0.5) / (d + 0.5))) for t, d in kept.items()}


def _oldest_entering(share: float, now: float, half_life: float) -> float | None:
    """The oldest moment (a Julian day) whose decay exceeds `share`: a match whose BM25 is the
    last result's score over `share` enters only if it is younger. None when every moment's
    decay does (it never falls below RECENCY_FLOOR); infinity when none does."""
    if share <= RECENCY_FLOOR:
        return None
    if share >= 1.0:
        return math.inf
    age = half_life * math.log2((1 - RECENCY_FLOOR) / (share - RECENCY_FLOOR))
    return now - age * (1 + 1e-9) - 1e-9  # a hair older: a tie still enters


def _period(query: SearchQuery) -> tuple[float | None, float | None]:
    """The query's since and until as Julian days, widened by PERIOD_SLACK."""
    since = None if query.since is None else julian_day(query.since) - PERIOD_SLACK
    until = None if query.until is None else julian_day(query.until) + PERIOD_SLACK
    return since, until


class _Ranking:
    """The candidates scored so far, and the rows of the winners: read from the store, which
    applies the query's filters and no longer holds what was erased since the index's last
    commit. A winner turned down is a candidate no more."""

    def __init__(self, conn: Any, query: SearchQuery) -> None:
        self.sqlite = isinstance(conn, sqlite3.Connection)
        self.conn = portable(conn)
        self.params: dict[str, Any] = {"scope": query.scope}
        filters = conditions("interaction", query, self.params)
        ids = "IN (SELECT value FROM json_each(:ids))" if self.sqlite else "= ANY(:ids)"
        self.statement = _ROWS.format(ids=ids, plus="+" if self.sqlite else "", filters=filters)
        self.score: dict[int, float] = {}
        self.rows: dict[int, tuple[Any, ...] | None] = {}  # None: filtered out, or gone

    def add(self, seq: int, score: float) -> None:
        if score > 0:  # a turn of the tail may hold no word asked
            self.score[seq] = score

    def add_best(self, seqs: npt.NDArray[np.int64], scores: Any, limit: int) -> None:
        """Of a window's matches, those that may be among the `limit` best: every match above
        one of them is either turned down or among them, so a window's first `limit` + the
        turned down are enough."""
        keep = limit + self.turned_down
        if len(scores) > keep:
            top = np.argpartition(scores, -keep)[-keep:]
            seqs, scores = seqs[top], scores[top]
        self.score.update(zip(seqs.tolist(), scores.tolist(), strict=True))

    def best(self, limit: int) -> list[tuple[float, int]]:
        """The `limit` best candidates not turned down yet, as (score, seq)."""
        kept = ((s, k) for k, s in self.score.items() if self.rows.get(k, ()) is not None)
        return heapq.nlargest(limit, kept)

    def passed(self, best: list[tuple[float, int]]) -> bool:
        """Whether every one of `best` passes the query's filters, its row read."""
        if unread := [k for _, k in best if k not in self.rows]:
            self.params["ids"] = json.dumps(unread) if self.sqlite else unread
            found = {row[0]: tuple(row) for row in self.conn.execute(self.statement, self.params)}
            self.rows |= {seq: found.get(seq) for seq in unread}
        return all(self.rows[k] is not None for _, k in best)

    @property
    def turned_down(self) -> int:
        return sum(row is None for row in self.rows.values())

    def items(self, best: list[tuple[float, int]]) -> list[MemoryItem]:
        """The winners as items, best first, with the scores that ranked them."""
        out = []
        for score, seq in best:
            row = self.rows[seq]
            assert row is not None  # best() keeps only rows that passed
            out.append(memory_item("interaction", (*row[:SCORE], score, *row[SCORE + 1 :])))
        return out


def _tail(
    conn: Any, index: IndexView, scope: str
) -> tuple[list[list[str]], list[tuple[int, str, list[str]]]] | None:
    """The terms of every turn the index does not hold yet, and the scope's such turns as
    (seq, timestamp, terms); None when they hold more than MAX_TAIL_BYTES."""
    rows = portable(conn).execute(_TAIL, {"after": index.watermark})
    every, mine, held_bytes = [], [], 0
    for seq, in_scope, at, messages in rows:
        held_bytes += len(messages)
        if held_bytes > MAX_TAIL_BYTES:
            return None
        held = terms(cjk_grams(turn_text(messages)[1]))
        every.append(held)
        if in_scope == scope:
            mine.append((seq, at, held))
    return every, mine


def ranked(
    conn: Any,
    index: IndexView,
    query: SearchQuery,
    half_life: float,
    now: float,
) -> list[MemoryItem] | None:
    """The scope's best turns for the query, by BM25 times recency decay; None for a query
    whose winners the store turns down again and again, that asks too many windows, or while
    the turns the index does not hold yet are too long (the store's own index answers).

    The turns the index does not hold yet (keeper.MAX_TAIL at most) are every one scored. The
    index gives the best `depth` matches by BM25 in a window of time (at first the query's
    period) and each is scored with its decay. A match it did not give has a BM25 at most the
    last one's, so it can enter only if its decay exceeds the last result's score over that
    BM25: only if it is younger than some age. The window narrows to that age and is asked
    again; one that cannot narrow is asked deeper. Once a window has given every match it holds,
    or none it holds can enter, the results are found. Then their rows are read: a row the
    store turns down (a filter the index does not apply exactly, a turn erased since the
    index's last commit) takes its turn out of the candidates, and the windows are asked again.
    """
    if (tail := _tail(conn, index, query.scope)) is None:
        return None  # too much text to analyse at every search
    every, mine = tail
    stats = _with_tail(index.stats(), every)
    weights = _weights(index, searched_words(query), stats, every)
    if not weights:
        return []
    ranking = _Ranking(conn, query)
    for seq, at, held in mine:
        found = Counter(held)
        ranking.add(seq, bm25(found, len(held), weights, stats) * recency_decay(at, now, half_life))
    for _ in range(MAX_WINDOWS):
        best = _searched(index, ranking, query, weights, half_life, now)
        if best is None or ranking.passed(best):
            return None if best is None else ranking.items(best)
        if ranking.turned_down > MAX_DEPTH:
            break
    return None  # the store turns down much of what the index finds


def _searched(
    index: IndexView,
    ranking: _Ranking,
    query: SearchQuery,
    weights: dict[str, float],
    half_life: float,
    now: float,
) -> list[tuple[float, int]] | None:
    """The best results among the index's matches and the candidates before them, each
    window asked in turn (see `ranked`); None when a window would be asked too deep, or too
    many were asked."""
    since, until = _period(query)
    depth = max(MIN_CANDIDATES, CANDIDATES_PER_RESULT * query.limit)
    stats = index.stats()  # what tantivy's own lengths are normalised by
    for _ in range(MAX_WINDOWS):
        matches = index.search(query.scope, weights, depth, since, until, query.session)
        scores = exact_bm25(matches, stats) * _decays(matches.at, now, half_life)
        ranking.add_best(matches.seq, scores, query.limit)
        best = ranking.best(query.limit)
        if len(matches) < depth:
            return best  # the window gave every match it holds
        last = best[-1][0] if len(best) == query.limit else 0.0
        ceiling = float(matches.bm25[-1])
        oldest = _oldest_entering(last / ceiling if ceiling > 0 else math.inf, now, half_life)
        if oldest == math.inf:
            return best  # no match the window did not give can enter
        if oldest is not None and (since is None or oldest > since):
            since = oldest
        elif (depth := depth * DEEPER) > MAX_DEPTH:
            return None
    return None  # windows that narrow ever so little: the store's own index ranks the query
